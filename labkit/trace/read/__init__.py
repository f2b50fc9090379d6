"""Reading a trace: Kineto JSON (plain or gzip'ed) streamed into column tables.

``load`` (``load_trace``, ``as_trace``, the ``Trace`` tables and the bad-input policy), ``reader``
(the chunked JSON reader), ``streams`` (file and gunzip streams, the progress bar), ``columns``
(the column store and category groups), ``structs`` (msgspec's typed batches, optional) and
``trim`` (cut a trace file to its first profiled steps).
"""
