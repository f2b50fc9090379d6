"""The lab's plotly figures (each returns a ``go.Figure``) and the tables beside them: shared helpers here,
the figures in ``lab``, ``vllm`` and ``machines``.
"""
