#!/usr/bin/env bash
# Build a wheelhouse: everything an offline GPU node needs to run the notebooks and build
# the report, besides the compute stack it already has (torch, triton, CUDA libraries).
#
#   scripts/wheelhouse.sh --out DIR [--python 3.12] [--platform TAG ...] [--with-base]
#
# Run it where pip reaches an index. DIR receives:
#   - the labkit wheel and the wheels of labkit's `report` extra with all their dependencies (binary wheels only, for the target Python
#     and platform);
#   - pytest (the version the `dev` extra asks for) and its dependencies: the GPU tests
#     run on the node (scripts/gpu_check.sh); they import nothing else the node lacks;
#   - the build backend of pyproject.toml (so `pip install -e .` of a checkout works offline);
#   - MANIFEST.txt: every file with its size, and the total.
# Not included: torch, triton, nvidia-*/cuda-* (the node's own are used) and, unless
# --with-base, numpy and pandas (present wherever torch and a data stack are: on a node
# without them, add --with-base).
#
# --python X.Y    target interpreter (default: the one running this script, $PYTHON or python3)
# --platform TAG  pip platform tag, repeatable (default: this machine when --python is this
#                 interpreter's version, else manylinux x86_64 glibc 2.5 ... 2.28)
# --print-requirements  print what would be downloaded (one requirement a line) and stop
#
# On the node:  LABKIT_WHEELHOUSE=DIR bash scripts/setup_venv.sh   (or make report)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON="${PYTHON:-python3}"
die() { echo "wheelhouse: $*" >&2; exit 2; }
say() { echo "[wheelhouse] $*" >&2; }

out="" target_py="" with_base=0 print_reqs=0
platforms=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || die "--out needs a folder"; out=$2; shift 2 ;;
    --python) [ $# -ge 2 ] || die "--python needs a version like 3.12"; target_py=$2; shift 2 ;;
    --platform) [ $# -ge 2 ] || die "--platform needs a tag like manylinux_2_28_x86_64"; platforms+=("$2"); shift 2 ;;
    --with-base) with_base=1; shift ;;
    --print-requirements) print_reqs=1; shift ;;
    -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done
[ -n "$out" ] || [ "$print_reqs" = 1 ] || die "--out DIR is required (see --help)"
command -v "$PYTHON" >/dev/null 2>&1 || die "no python at PYTHON=$PYTHON"
own_py=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
target_py=${target_py:-$own_py}
[[ "$target_py" =~ ^3\.[0-9]+$ ]] || die "--python must look like 3.12, not '$target_py'"
for p in "${platforms[@]+"${platforms[@]}"}"; do
  [[ "$p" =~ ^[A-Za-z0-9_.]+$ ]] || die "bad --platform tag '$p'"
done
if [ -e "$out" ] && [ ! -d "$out" ]; then die "--out exists and is not a folder: $out"; fi

# pip's target arguments: the native interpreter, or a cross download by tags.
target_args=()
if [ ${#platforms[@]} -eq 0 ] && [ "$target_py" != "$own_py" ]; then
  platforms=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_26_x86_64 manylinux_2_24_x86_64
             manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_12_x86_64 manylinux2010_x86_64
             manylinux_2_5_x86_64 manylinux1_x86_64)
fi
if [ ${#platforms[@]} -gt 0 ]; then
  target_args=(--python-version "$target_py" --implementation cp)
  for p in "${platforms[@]}"; do target_args+=(--platform "$p"); done
fi

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if [ "$print_reqs" = 1 ]; then out=$tmp/out; fi
mkdir -p "$out"
out=$(cd "$out" && pwd)

# 1. The labkit wheel, built from a copy of the sources (no build/ left in the checkout).
say "building the labkit wheel"
mkdir -p "$tmp/src"
cp -r "$ROOT/pyproject.toml" "$ROOT/README.md" "$ROOT/labkit" "$tmp/src/"
[ -f "$ROOT/LICENSE" ] && cp "$ROOT/LICENSE" "$tmp/src/"
find "$tmp/src" -name __pycache__ -prune -exec rm -rf {} +
rm -f "$out"/*.whl "$out/report-assets.tar.gz" "$out/MANIFEST.txt"  # a fresh set each time
"$PYTHON" -m pip wheel --quiet --no-deps -w "$out" "$tmp/src" >&2
wheel=$(ls "$out"/labkit-*.whl)

# 2. What to download: the report extra and the dev extra's pytest (from the wheel's own
#    metadata) + the build backend.
"$PYTHON" - "$wheel" "$ROOT/pyproject.toml" > "$tmp/reqs.txt" <<'EOF'
import re, sys, zipfile
from email.parser import Parser

wheel, pyproject = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    meta = Parser().parsestr(z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode())
reqs, tests = [], []
for line in meta.get_all("Requires-Dist") or []:
    req, _, marker = line.partition(";")
    if re.search(r"""extra\s*==\s*["']report["']""", marker):
        reqs.append(req.strip())
    elif re.search(r"""extra\s*==\s*["']dev["']""", marker) and re.match(r"pytest\s*([<>=!~]|$)", req.strip()):
        tests.append(req.strip())  # the GPU tests' runner (the GPU check runs them on the node)
if not reqs:
    sys.exit("wheelhouse: the labkit wheel declares no 'report' extra")
if not tests:
    sys.exit("wheelhouse: the labkit wheel's 'dev' extra names no pytest")
reqs += tests
text = open(pyproject, encoding="utf-8").read()
m = re.search(r"\[build-system\][^\[]*?requires\s*=\s*\[(.*?)\]", text, re.S)
reqs += re.findall(r"""["']([^"']+)["']""", m.group(1)) if m else []
print("\n".join(reqs))
EOF
if [ "$print_reqs" = 1 ]; then cat "$tmp/reqs.txt"; exit 0; fi

# 3. The wheels, binary only, for the target.
say "downloading for Python $target_py${platforms:+ on ${platforms[0]}...}: $(tr '\n' ' ' < "$tmp/reqs.txt")"
"$PYTHON" -m pip download -qq --only-binary=:all: "${target_args[@]+"${target_args[@]}"}" \
  -d "$out" -r "$tmp/reqs.txt" >&2
if [ "$with_base" = 0 ]; then
  for base in numpy pandas; do rm -f "$out"/"$base"-[0-9]*.whl; done
fi
# Never carry the compute stack (nothing above asks for it; a stale file could linger).
rm -f "$out"/torch-*.whl "$out"/triton-*.whl "$out"/nvidia_*.whl "$out"/cuda_*.whl

# 4. The list, with sizes.
(
  cd "$out"
  echo "# labkit wheelhouse for Python $target_py${platforms:+ (${platforms[*]})}; base packages included: $([ "$with_base" = 1 ] && echo yes || echo 'no (numpy, pandas expected on the node)')"
  # shellcheck disable=SC2012
  ls -1 | grep -v '^MANIFEST.txt$' | while read -r f; do printf '%10d  %s\n' "$(stat -c %s "$f")" "$f"; done
  total=$(ls -1 | grep -v '^MANIFEST.txt$' | while read -r f; do stat -c %s "$f"; done | awk '{s+=$1} END {print s}')
  printf '%10d  total (%s files, %.1f MB)\n' "$total" "$(ls -1 | grep -vc '^MANIFEST.txt$')" "$(echo "$total" | awk '{print $1/1e6}')"
) > "$out/MANIFEST.txt"
cat "$out/MANIFEST.txt"
