"""vLLM's own tests, stock and under each A/B variant: what `make test-vllm-own` runs.

    .venv-vllm-cpu/bin/python scripts/test_vllm_own.py [--variants merged,early-return] [--files core]

Run it with the venv of the vLLM under test (see labkit/vllm/conformance/own_tests_run.py for the steps and
labkit/vllm/conformance/own_tests.py for what is compared). Exit 0: no test that passes stock fails under a
variant without an explanation; 1: some do (listed); 2: bad input or a failed step (one line).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from labkit.vllm.conformance.own_tests_run import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
