#!/usr/bin/env bash
# Check the offline install path end to end, on CPU (CI runs this after `make test`):
#
#   1. build a wheelhouse for this machine's Python (scripts/wheelhouse.sh; needs an index);
#   2. make a "node": a fresh venv that has only the compute stack (torch, triton, numpy,
#      pandas and what they need), like a GPU node's own Python, or NODE_PYTHON=...;
#   3. copy the checkout (no .venv) and, with pip's network off
#      (PIP_NO_INDEX, no config, an unreachable proxy), run scripts/setup_venv.sh with
#      LABKIT_WHEELHOUSE in the copy;
#   4. in the new venv: `labkit env` and the report of one notebook (06_compare_gpus), then
#      check that labkit came from the copy and torch from the node.
#
# Usage: bash scripts/offline_check.sh [WORKDIR]   (default: a temporary folder, removed)
# Environment: PYTHON (builds the wheelhouse; default .venv/bin/python), DONOR_PYTHON (whose
# compute stack the node links to; default .venv/bin/python), NODE_PYTHON (use this
# interpreter as the node instead), ONLY (notebook to build, default 06).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
fail() { echo "offline_check: FAILED: $*" >&2; exit 1; }
say() { echo "[offline_check] $*" >&2; }

if [ $# -gt 0 ]; then
  WORK=$1; mkdir -p "$WORK"; WORK=$(cd "$WORK" && pwd)
else
  WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
fi
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
DONOR=${DONOR_PYTHON:-$ROOT/.venv/bin/python}
ONLY=${ONLY:-06}
t0=$(date +%s)

# 1. The wheelhouse (with network).
say "1/4 wheelhouse for $("$PYTHON" --version 2>&1)"
PYTHON=$PYTHON bash scripts/wheelhouse.sh --out "$WORK/wheelhouse" | tail -n 1

# 2. The node's Python: a venv whose only packages are the donor's compute stack (linked).
if [ -n "${NODE_PYTHON:-}" ]; then
  node_py=$NODE_PYTHON
else
  say "2/4 node: a venv with only torch, triton, numpy, pandas (+ their dependencies)"
  base_py=$("$DONOR" -c 'import sys; print(sys._base_executable)')
  rm -rf "$WORK/node" "$WORK/node-site"
  "$base_py" -m venv --without-pip "$WORK/node"
  "$DONOR" - "$WORK/node-site" <<'EOF'
import os, re, sys
from importlib import metadata

dest = sys.argv[1]
os.makedirs(dest)
todo, seen = ["torch", "triton", "numpy", "pandas"], set()
while todo:
    name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
    if name in seen:
        continue
    seen.add(name)
    dist = metadata.distribution(name)
    for req in dist.requires or []:
        if "extra ==" in req:
            continue
        req_name = re.match(r"[A-Za-z0-9_.\-]+", req).group(0)
        try:
            metadata.distribution(req_name)
        except metadata.PackageNotFoundError:
            continue  # an optional or platform-specific requirement not installed here
        todo.append(req_name)
    site = str(dist.locate_file(""))
    for top in {str(f).split("/")[0] for f in dist.files or [] if not str(f).startswith("..")}:
        src = os.path.join(site, top)
        if os.path.exists(src) and not os.path.exists(os.path.join(dest, top)):
            os.symlink(src, os.path.join(dest, top))
print(f"node: {len(seen)} distributions: {', '.join(sorted(seen))}", file=sys.stderr)
EOF
  node_site=$("$WORK/node/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$WORK/node-site" > "$node_site/_node_compute_stack.pth"
  node_py=$WORK/node/bin/python
fi
"$node_py" -c "import torch, numpy" || fail "the node's Python has no torch/numpy"
if "$node_py" -c "import nbclient" 2>/dev/null; then fail "the node already has nbclient: the check would prove nothing"; fi

# 3. A copy of the checkout, set up with pip's network off.
say "3/4 offline set-up in a copy of the checkout"
rm -rf "$WORK/tree"; mkdir -p "$WORK/tree"
tar -C "$ROOT" -cf - --exclude=./.git --exclude=./.venv --exclude=./.venv-vllm \
    --exclude=./reports --exclude=./wheelhouse --exclude=./build --exclude='*.egg-info' --exclude=__pycache__ . \
  | tar -C "$WORK/tree" -xf -
offline=(env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL -u PIP_CONSTRAINT
         PIP_CONFIG_FILE=/dev/null PIP_NO_INDEX=1
         http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9
         HTTPS_PROXY=http://127.0.0.1:9 ALL_PROXY=http://127.0.0.1:9 no_proxy= NO_PROXY=)
(cd "$WORK/tree" && "${offline[@]}" PYTHON="$node_py" VENV=venv LABKIT_WHEELHOUSE="$WORK/wheelhouse" \
  bash scripts/setup_venv.sh) || fail "offline set-up"

# 4. Something real in it.
say "4/4 labkit env and the report of notebook $ONLY, offline"
VPY=$WORK/tree/venv/bin/python
(cd "$WORK/tree" && "${offline[@]}" "$VPY" -m labkit env) || fail "labkit env"
(cd / && "$VPY" - "$WORK/tree") <<'EOF' || fail "packages come from the wrong place"
import sys
from pathlib import Path
import labkit, nbclient, torch
tree = Path(sys.argv[1]).resolve()
assert Path(labkit.__file__).resolve().is_relative_to(tree), labkit.__file__
assert Path(nbclient.__file__).resolve().is_relative_to(tree / "venv"), nbclient.__file__
assert not Path(torch.__file__).resolve().is_relative_to(tree), f"torch was installed into the venv: {torch.__file__}"
print(f"labkit from the copy, nbclient from the venv, torch {torch.__version__} from the node", file=sys.stderr)
EOF
(cd "$WORK/tree" && "${offline[@]}" "$VPY" -m labkit report --only "$ONLY" --size quick --device cpu --out "$WORK/report") \
  || fail "labkit report --only $ONLY"
[ -f "$WORK/report/index.html" ] || fail "no index.html"
ls "$WORK/report"/"$ONLY"*.html >/dev/null 2>&1 || fail "no page for notebook $ONLY"
[ -f "$WORK/report/_static/plotly.min.js" ] || fail "plotly.js was not written into the report"
say "ok: offline set-up and report in $(( $(date +%s) - t0 )) s (wheelhouse $(tail -n 1 "$WORK/wheelhouse/MANIFEST.txt" | sed 's/^ *[0-9]*  total //'))"
