"""Host time measured on vLLM's real code, per A/B variant: the engine step, the scheduler, the next bubble."""
