#!/usr/bin/env bash
# Check labkit against a real vLLM: set up .venv-vllm (idempotent) and run tests/vllm_conformance/.
#
#   bash scripts/test_vllm.sh [PYTEST_ARGS...]        (what `make test-vllm` runs)
#
# Environment:
#   PYTHON             interpreter that creates the venv (default python3)
#   VLLM_VENV          the vLLM environment (default .venv-vllm)
#   LABKIT_VLLM_SPEC   vLLM requirement (default vllm==0.33.0; ~9.4 GB with its CUDA torch)
#   LABKIT_VLLM020=0   skip fetching vLLM 0.20.0's scheduler + encoder cache sources
#                      (pip download of the 0.20.0 wheel, ~250 MB, once; tests needing
#                      them are then skipped)
# Runs on a CPU-only machine: the suite hides the GPU and puts Triton in interpreter mode.
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${VLLM_VENV:-.venv-vllm}"
SPEC="${LABKIT_VLLM_SPEC:-vllm==0.33.0}"
REF_DIR="$VENV/share/labkit/vllm-0.20.0"

say() { echo "[test-vllm] $*" >&2; }

# 1. The environment: vLLM (brings torch, triton, numpy), labkit without deps, pytest.
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV with $($PYTHON --version 2>&1)"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
ROOT_PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")"
if ! "$PY" -c "import vllm" >/dev/null 2>&1; then
  say "installing $SPEC (large: several GB, takes a while)"
  "$PY" -m pip install --quiet "$SPEC"
fi
# editable labkit: also registers the vllm.general_plugins entry point (labkit.vllm.ab:load_plugin)
# and the `labkit` command; checked from outside the checkout, where the repository root's
# labkit/ and labkit.egg-info/ are not on the path
if ! (cd / && "$ROOT_PY" -c "import labkit, importlib.metadata as m, sys; \
sys.exit(0 if any(e.name == 'labkit_vllm_ab' for e in m.entry_points(group='vllm.general_plugins')) else 1)") \
    >/dev/null 2>&1; then
  say "installing labkit (editable, no deps)"
  "$PY" -m pip install --quiet --no-deps -e .
fi
if ! "$PY" -c "import pytest, hypothesis" >/dev/null 2>&1; then
  say "installing pytest + hypothesis"
  "$PY" -m pip install --quiet pytest hypothesis
fi

# 2. vLLM 0.20.0's scheduler method and encoder cache: the lab's reference semantics.
if [ "${LABKIT_VLLM020:-1}" != 0 ] && [ ! -f "$REF_DIR/scheduler.py" -o ! -f "$REF_DIR/encoder_cache_manager.py" ]; then
  tmp=$(mktemp -d)
  say "fetching vllm==0.20.0 (wheel only, no deps) for its scheduler sources"
  if "$PY" -m pip download --quiet --no-deps --dest "$tmp" vllm==0.20.0 >/dev/null 2>&1; then
    mkdir -p "$REF_DIR"
    "$PY" - "$tmp" "$REF_DIR" <<'EOF'
import glob, sys, zipfile
wheel = glob.glob(f"{sys.argv[1]}/vllm-0.20.0-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    for name in ("scheduler.py", "encoder_cache_manager.py"):
        member = "vllm/v1/core/sched/scheduler.py" if name == "scheduler.py" else "vllm/v1/core/encoder_cache_manager.py"
        with open(f"{sys.argv[2]}/{name}", "wb") as f:
            f.write(z.read(member))
EOF
  else
    say "could not fetch vllm==0.20.0: the 0.20.0 comparison is skipped"
  fi
  rm -rf "$tmp"
fi

# 3. The suite.
say "vLLM $("$PY" -c 'import importlib.metadata as m; print(m.version("vllm"))' 2>/dev/null), running tests/vllm_conformance"
export LABKIT_VLLM_CONFORMANCE=1 CUDA_VISIBLE_DEVICES="" TRITON_INTERPRET=1
exec "$PY" -m pytest tests/vllm_conformance -q -p no:cacheprovider -W ignore::RuntimeWarning "$@"
