"""What-if replay: what a cheaper host call, a copy that does not synchronize or one not made would buy.

``dependency_graph`` (a trace as host spans, device ops and the constraints between them),
``changes`` (the changes and the work each touches), ``replay`` (the graph replayed with changes),
``predict`` (measured vs predicted for one trace), ``suggest`` (what to change, with the argument
for each), ``ab_pairs`` (predictions checked against the engine's measured A/B pairs),
``sim_pairs`` (those pairs recorded on the simulated device), ``html`` (the page) and ``cli``
(``labkit whatif``).
"""
