#!/usr/bin/env bash
# Set up the lab's Python environment in .venv (idempotent; `make` calls this).
#
#   scripts/setup_venv.sh   venv + torch + labkit[notebook,dev] + npm report assets
#
# torch: the CPU build 2.13.0 where there is no working NVIDIA driver, the default
# (CUDA) build from PyPI where `nvidia-smi` works. An existing torch is kept.
# Environment: PYTHON (interpreter that creates the venv, default python3),
# VENV (default .venv), LABKIT_TORCH_SPEC (override the torch requirement).
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"

say() { echo "[setup] $*" >&2; }

# 1. The virtual environment.
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV with $($PYTHON --version 2>&1)"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi
PY="$VENV/bin/python"

# 2. torch: CPU build without a GPU driver, CUDA build with one.
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  if [ -n "${LABKIT_TORCH_SPEC:-}" ]; then
    spec="$LABKIT_TORCH_SPEC"
  elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
    spec="torch"
  else
    spec="torch==2.13.0"
  fi
  say "installing $spec"
  "$PY" -m pip install --quiet "$spec"
fi

# 3. labkit itself with the notebook and test extras.
say "installing labkit[notebook,dev]"
"$PY" -m pip install --quiet -e ".[notebook,dev]"

# 4. Browser assets for the offline report (widget renderer, require.js).
if [ ! -f node_modules/@jupyter-widgets/html-manager/dist/embed-amd.js ] \
   || [ ! -f node_modules/requirejs/require.js ] \
   || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  if ! command -v npm >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing Debian's npm"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null
  fi
  if command -v npm >/dev/null 2>&1; then
    say "installing report assets with npm"
    npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >/dev/null
  else
    say "WARNING: npm not found: exported widgets will not render offline (install Node.js + npm)"
  fi
fi

say "ready: $("$PY" -c 'import torch, sys; print(f"python {sys.version.split()[0]}, torch {torch.__version__}")')"
