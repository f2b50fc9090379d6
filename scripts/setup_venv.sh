#!/usr/bin/env bash
# Set up the lab's Python environment in .venv (idempotent; `make` calls this).
#
#   scripts/setup_venv.sh   venv + torch + labkit[notebook,dev]
#
# torch: the CPU build 2.13.0 where there is no working NVIDIA driver, the default
# (CUDA) build from PyPI where `nvidia-smi` works. An existing torch is kept.
# Environment: PYTHON (interpreter that creates the venv, default python3),
# VENV (default .venv), LABKIT_TORCH_SPEC (override the torch requirement).
#
# Offline (a GPU node without internet access): LABKIT_WHEELHOUSE=DIR, a folder made by
# scripts/wheelhouse.sh on a machine with network. Then nothing is downloaded: the venv
# sees PYTHON's own packages (--system-site-packages, and PYTHON's venv when it is one),
# so the node's torch, triton and numpy are used; labkit[$LABKIT_EXTRAS] (default: report)
# installs with `pip --no-index --find-links DIR`.
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"
WHEELHOUSE="${LABKIT_WHEELHOUSE:-}"

say() { echo "[setup] $*" >&2; }
die() { echo "setup_venv: $*" >&2; exit 2; }

if [ -n "$WHEELHOUSE" ]; then
  # ---- offline: everything from the wheelhouse, the compute stack from PYTHON ----
  [ -d "$WHEELHOUSE" ] || die "LABKIT_WHEELHOUSE is not a folder: $WHEELHOUSE"
  WHEELHOUSE=$(cd "$WHEELHOUSE" && pwd)
  ls "$WHEELHOUSE"/labkit-*.whl >/dev/null 2>&1 || die "no labkit wheel in $WHEELHOUSE (build it with scripts/wheelhouse.sh)"
  command -v "$PYTHON" >/dev/null 2>&1 || die "no python at PYTHON=$PYTHON"
  "$PYTHON" -c "import torch" >/dev/null 2>&1 || die "$PYTHON has no torch: an offline set-up keeps the node's own torch"
  pip_of_venv=("$VENV/bin/python" -m pip)
  if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV with $("$PYTHON" --version 2>&1), system site packages, no network"
    if ! "$PYTHON" -m venv --system-site-packages "$VENV" >/dev/null 2>&1; then
      # no ensurepip on this interpreter: a venv without pip, driven by PYTHON's pip
      rm -rf "$VENV"
      "$PYTHON" -m venv --system-site-packages --without-pip "$VENV"
    fi
    # A venv made from a venv sees only the base interpreter's site packages: add
    # PYTHON's own (where its torch lives) after the new venv's, .pth files included.
    site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    "$PYTHON" -c 'import site, sys
if sys.prefix != sys.base_prefix:
    for p in site.getsitepackages():
        print(f"import site; site.addsitedir({p!r})")' > "$site/_labkit_base_site.pth"
  fi
  "$VENV/bin/python" -c "import torch" >/dev/null 2>&1 || die "$VENV does not see $PYTHON's torch"
  "$VENV/bin/python" -m pip --version >/dev/null 2>&1 || pip_of_venv=("$PYTHON" -m pip --python "$VENV/bin/python")
  extras="${LABKIT_EXTRAS:-report}"
  say "installing labkit[$extras] from $WHEELHOUSE (no index)"
  # PIP_NO_INDEX as well: a build-isolation environment must not reach out either.
  PIP_NO_INDEX=1 "${pip_of_venv[@]}" install --quiet --no-index --find-links "$WHEELHOUSE" -e ".[$extras]" \
    || die "offline install failed: the wheelhouse misses a package (built for another Python or platform? a node without numpy/pandas needs wheelhouse.sh --with-base)"
  say "ready (offline): $("$VENV/bin/python" -c 'import torch, sys; import os; print(f"python {sys.version.split()[0]}, torch {torch.__version__} from {os.path.dirname(os.path.dirname(torch.__file__))}")')"
  exit 0
fi

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

say "ready: $("$PY" -c 'import torch, sys; print(f"python {sys.version.split()[0]}, torch {torch.__version__}")')"
