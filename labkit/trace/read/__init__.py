"""Reading a trace: ``load`` (``load_trace``, ``EventTables``, the bad-input policy), ``reader`` (batches, byte
ranges), ``scan`` (the compiled scanner), ``columns`` (column store), ``streams`` (files, gunzip), ``trim``.
"""
