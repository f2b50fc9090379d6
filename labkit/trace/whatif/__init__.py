"""What-if replay: what a cheaper host call, a copy that does not synchronize or one not made would buy.

``dependency_graph`` -> ``changes`` -> ``replay``; ``steps`` (step times), ``predict`` (the facade),
``reads`` and ``suggest`` (what to change), ``host_only`` (vLLM's CPU traces), ``cli`` (``labkit whatif``).
"""
