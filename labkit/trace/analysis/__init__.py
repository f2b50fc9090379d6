"""Analysing a trace: ``analyze`` (every table at once), ``diff``, ``many`` (many traces, a profile folder),
``cli`` (``labkit analyze``), ``bench_trace`` (``labkit bench trace``), ``notebook``; ``device`` and ``host`` tables.
"""
