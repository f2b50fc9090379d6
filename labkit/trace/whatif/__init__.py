"""What-if replay: what a cheaper host call, a copy that does not synchronize or one not made would buy.

``dependency_graph`` (a trace as host spans, device ops and the constraints between them),
``changes`` (the changes and the work each touches: scaled spans, non-blocking syncs, dropped
copies with the nested pad of a build whose copies all go), ``replay`` (the graph replayed with
changes), ``steps`` (the step spans, step times measured or replayed, the idle a change can close),
``predict`` (measured vs predicted for one trace), ``reads`` (the scheduler's placeholder
reads, #40143's pattern, and the change that removes them), ``suggest`` (what to change, with the
argument for each), ``host_only`` (vLLM's CPU traces, without a device: ``predict_host_only``),
``ab_cases`` (the engine's A/B pairs), ``ab_pairs`` (predictions checked against the engine's measured
A/B pairs), ``sim_pairs`` (those pairs recorded on the simulated device), ``html`` (the page) and
``cli`` (``labkit whatif``).
"""
