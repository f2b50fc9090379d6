"""Reading a trace: ``load`` (``load_trace``, ``EventTables``, the bad-input policy), ``reader`` (batches, byte
ranges), ``structs`` (msgspec), ``columns`` (column store), ``streams`` (files, gunzip), ``trim``.
"""
