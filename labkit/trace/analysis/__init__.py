"""Analysing a trace: ``trace`` (``Trace``: each table on first use), ``diff``, ``many`` (``TraceSet``: many
traces, a profile folder), ``cli`` (``labkit analyze``), ``bench_trace`` (``labkit bench trace``); ``device`` and
``host`` tables.
"""
