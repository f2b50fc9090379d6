"""What-if replay: what a cheaper host call, or a copy that does not synchronize, would buy.

``dependency_graph`` (a trace as host spans, device ops and the constraints between them),
``replay`` (the graph replayed with changes), ``predict`` (measured vs predicted for one trace),
``ab_pairs`` (predictions checked against the engine's measured A/B pairs), ``html`` (the page)
and ``cli`` (``labkit whatif``).
"""
