#!/usr/bin/env bash
# The one GPU run: every GPU path of the lab at full size, then the whole report executed on
# the GPU, in one call (planned for 9 minutes on an H200), each step with its own time limit.
#
#   OUT=/some/dir [LABKIT_COMMIT=abc123] [LABKIT_WHEELHOUSE=DIR] bash scripts/gpu_check.sh
#
# Steps: set-up of the report environment (when needed), the GPU tests, the engine at the
# #40143 shape (gemma4-e4b-like, 128 requests x 32 images) in eager and CUDA-graph modes with
# traces and its device profile, calibration, the prefix-attention kernel sweep, the #38794
# H2D strategies with profiler idle time, the range builders, the scheduler benchmarks,
# and `labkit report --device cuda --size full` (every notebook on the GPU; the notebooks see
# this run's results and engine traces on top of the recorded ones).
#
# Writes OUT/gpu_check.tar.gz (at most GPU_CHECK_MAX_MB, default 16: results/<slug>/*.json incl.
# report.json, traces (trimmed to fit), profile.json, logs/, report.tar.xz with the pages,
# MANIFEST.txt) and OUT/summary.txt. File it with scripts/ingest_gpu_check.sh.
#
# Needs python3 (PYTHON) with torch, triton and numpy. The report needs jupyter's stack: if
# PYTHON lacks it, a venv with PYTHON's packages is set up from LABKIT_WHEELHOUSE (default:
# ./wheelhouse; build it with scripts/wheelhouse.sh), with no network; without either the
# report step is skipped, and the summary says so.
#
# Every result records LABKIT_COMMIT: taken from git here, or pass it where the tree is a
# copy without .git (LABKIT_COMMIT=$(git rev-parse --short=12 HEAD) on the machine you copy from).
#
# Other knobs: GPU_CHECK_BUDGET (seconds for all steps, default 540), GPU_CHECK_SIZE (full;
# quick for dry runs), GPU_CHECK_REPORT_RESERVE (seconds of the budget the benchmarks leave
# to the report, default 180), GPU_CHECK_ALLOW_CPU=1 (dry run without a GPU: cpu / simulated
# devices), GPU_CHECK_REPORT_ONLY="00 06" (report only these notebooks).
set -u
[ -n "${OUT:-}" ] || { echo "gpu_check: set OUT to an output folder (OUT=/tmp/out bash scripts/gpu_check.sh)" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
mkdir -p "$OUT" || { echo "gpu_check: cannot create OUT=$OUT" >&2; exit 2; }
OUT=$(cd "$OUT" && pwd)
PY=${PYTHON:-python3}
SIZE=${GPU_CHECK_SIZE:-full}
BUDGET=${GPU_CHECK_BUDGET:-540}
MAX_MB=${GPU_CHECK_MAX_MB:-16}
case "$SIZE" in quick|full) ;; *) echo "gpu_check: GPU_CHECK_SIZE must be quick or full, not '$SIZE'" >&2; exit 2 ;; esac
[[ "$BUDGET" =~ ^[0-9]+$ ]] || { echo "gpu_check: GPU_CHECK_BUDGET must be whole seconds" >&2; exit 2; }
[[ "$MAX_MB" =~ ^[0-9]+$ ]] || { echo "gpu_check: GPU_CHECK_MAX_MB must be whole megabytes" >&2; exit 2; }
[[ "${GPU_CHECK_REPORT_RESERVE:-0}" =~ ^[0-9]+$ ]] || { echo "gpu_check: GPU_CHECK_REPORT_RESERVE must be whole seconds" >&2; exit 2; }
command -v "$PY" >/dev/null 2>&1 || { echo "gpu_check: no python at PYTHON=$PY" >&2; exit 2; }

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/results" "$WORK/traces" "$WORK/logs"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
# The machine as the lab describes it: its device decides the run, its slug names the results.
"$PY" -m labkit env --json > "$WORK/logs/env.json" 2> "$WORK/logs/env.log"
env_field() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$WORK/logs/env.json" "$1" 2>/dev/null; }
found=$(env_field device)
if [ -z "$found" ]; then  # labkit env failed (logs/env.log says why): ask torch itself
  "$PY" -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null && found=cuda
fi
if [ "$found" = cuda ]; then
  DEVICE=cuda ENGINE_DEVICE=cuda
elif [ "${GPU_CHECK_ALLOW_CPU:-0}" = 1 ]; then
  DEVICE=cpu ENGINE_DEVICE=sim
else
  echo "gpu_check: no CUDA GPU visible to $PY (set GPU_CHECK_ALLOW_CPU=1 to dry-run on CPU)" >&2
  exit 2
fi

# The commit every result records (labkit.results reads LABKIT_COMMIT), as labkit_commit() forms it.
if [ -z "${LABKIT_COMMIT:-}" ]; then
  if LABKIT_COMMIT=$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null); then
    [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no -- labkit 2>/dev/null)" ] && LABKIT_COMMIT="$LABKIT_COMMIT+dirty"
  else
    LABKIT_COMMIT=unknown
  fi
fi
export LABKIT_COMMIT

export LABKIT_RESULTS="$WORK/results"
SUMMARY="$OUT/summary.txt"
START=$(date +%s)
RESERVE=45          # seconds kept for packing (xz of the pages: about 4 s per 10 MB on a 2-core CPU)
REPORT_RESERVE=0    # seconds the steps before the report leave to it (set once a report can run)
{
  echo "gpu_check: $(date -u +%Y-%m-%dT%H:%M:%SZ)  device=$DEVICE  size=$SIZE  budget=${BUDGET}s  commit=$LABKIT_COMMIT"
  [ "$LABKIT_COMMIT" = unknown ] && echo "WARNING: no git here and no LABKIT_COMMIT given: results record commit 'unknown'"
} > "$SUMMARY"

step() {  # step NAME SECONDS CMD...: run with its own limit (capped by the budget left), log, go on
  local name=$1 limit=$2; shift 2
  local left=$(( BUDGET - ($(date +%s) - START) - RESERVE ))
  [ "$name" != report ] && left=$(( left - REPORT_RESERVE ))
  if [ "$left" -lt 5 ]; then
    printf '%-12s SKIPPED       budget of %ss spent\n' "$name" "$BUDGET" | tee -a "$SUMMARY"
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local t0 rc dt
  t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" > "$WORK/logs/$name.log" 2>&1
  rc=$?
  dt=$(( $(date +%s) - t0 ))
  local note=""; [ "$rc" = 124 ] || [ "$rc" = 137 ] && note=" (time limit ${limit}s)"
  printf '%-12s rc=%-3s %4ss of %-4s %s%s\n' "$name" "$rc" "$dt" "${limit}s" "$*" "$note" | tee -a "$SUMMARY"
  tail -n 25 "$WORK/logs/$name.log" | sed "s/^/    [$name] /" >> "$WORK/logs/tails.txt"
  return "$rc"
}
skip() { printf '%-12s SKIPPED       %s\n' "$1" "$2" | tee -a "$SUMMARY"; }

nvidia-smi > "$WORK/logs/nvidia-smi.txt" 2>&1 || true
SLUG=$(env_field slug); SLUG=${SLUG:-unknown}
echo "machine: $SLUG" >> "$SUMMARY"

# 0. Jupyter's stack for the report: PYTHON's own, else a venv from the wheelhouse (offline).
REPORT_PY=""
WHEELHOUSE=${LABKIT_WHEELHOUSE:-$ROOT/wheelhouse}
# the modules the report imports, loaded as a report process loads them (labkit/report/startup.py)
report_mods="from labkit.report.startup import skip_unused_imports; skip_unused_imports()
import nbclient, nbconvert, nbformat, jupytext, ipykernel, ipywidgets, plotly, pandas"
if "$PY" -c "$report_mods" 2>/dev/null; then
  REPORT_PY=$PY
elif [ -d "$WHEELHOUSE" ]; then
  if step setup 120 env PYTHON="$PY" VENV="$WORK/venv" LABKIT_WHEELHOUSE="$WHEELHOUSE" PIP_NO_INDEX=1 \
       bash scripts/setup_venv.sh && "$WORK/venv/bin/python" -c "$report_mods" 2>/dev/null; then
    REPORT_PY=$WORK/venv/bin/python
  fi
else
  skip setup "$PY lacks jupyter's stack and there is no wheelhouse at $WHEELHOUSE (scripts/wheelhouse.sh): no report"
fi
[ -n "$REPORT_PY" ] && REPORT_RESERVE=${GPU_CHECK_REPORT_RESERVE:-180}
# The benchmarks run on PYTHON's packages (the venv sees the same torch, and the test modules' imports).
BPY=${REPORT_PY:-$PY}

# 1. GPU paths, each with its own limit (seconds).
have_pytest=0
"$BPY" -c "import pytest" 2>/dev/null && have_pytest=1
if [ "$have_pytest" = 1 ]; then
  mapfile -t gpu_tests < <(grep -l 'mark\.gpu' tests/test_*.py)
  step gpu-tests    90 "$BPY" -m pytest -q -m gpu -p no:cacheprovider "${gpu_tests[@]}"
else
  skip gpu-tests "$BPY has no pytest"
fi
# The engine (CUDA-graph capture and replay, traces, the device profile) runs right after the
# GPU tests: the limits below add up to more than the budget, so the later steps get what is left.
engine=("$BPY" -m labkit bench engine --device "$ENGINE_DEVICE" --size "$SIZE" --model gemma4-e4b-like
        --workload pr40143 --trace-dir "$WORK/traces/engine")
if "$BPY" -m labkit bench engine --help 2>/dev/null | grep -q -- '--cudagraph'; then
  engine+=(--cudagraph none,piecewise,full)
else
  echo "NOTE: this labkit's bench engine has no --cudagraph: eager mode only" | tee -a "$SUMMARY"
fi
[ "$ENGINE_DEVICE" = cuda ] && engine+=(--write-profile "$WORK/profile.json")
step engine      180 "${engine[@]}"
# On a dry run the kernel tests are only collected: on CPU they are the test suite's own run
# under the Triton interpreter.
kernel_mode=(); [ "$DEVICE" = cpu ] && kernel_mode=(--collect-only)
[ "$have_pytest" = 1 ] && step kernel-tests 60 "$BPY" -m pytest -q -p no:cacheprovider "${kernel_mode[@]+"${kernel_mode[@]}"}" \
  tests/test_prefix_attention.py
step calibrate    45 "$BPY" -m labkit calibrate --device "$DEVICE" --size "$SIZE"
step attn         75 "$BPY" -m labkit bench attn --device "$DEVICE" --size "$SIZE" --sweep --repeats 20
step h2d          60 "$BPY" -m labkit bench h2d --device "$DEVICE" --size "$SIZE" --trace-dir "$WORK/traces/h2d"
step ranges       45 "$BPY" -m labkit bench ranges --device "$DEVICE" --size "$SIZE"
step mm           45 "$BPY" -m labkit bench mm --size "$SIZE" --sweep

# 2. The whole report on this device. The notebooks read a copy of data/ with this run's
# results and engine traces laid over the recorded ones.
if [ -n "$REPORT_PY" ]; then
  view=$WORK/view
  cp -r "$ROOT/data" "$view"
  cp -r "$WORK/results/." "$view/results/"
  if [ -d "$WORK/traces/engine" ] && [ -n "$(ls -A "$WORK/traces/engine" 2>/dev/null)" ]; then
    rm -rf "${view:?}/traces/$SLUG"; mkdir -p "$view/traces/$SLUG"
    cp -r "$WORK/traces/engine/." "$view/traces/$SLUG/"
  fi
  only=(); [ -n "${GPU_CHECK_REPORT_ONLY:-}" ] && read -r -a only_names <<< "$GPU_CHECK_REPORT_ONLY" && only=(--only "${only_names[@]}")
  step report 240 env -u LABKIT_RESULTS LABKIT_DATA="$view" "$REPORT_PY" -m labkit report --device "$DEVICE" --size "$SIZE" \
    --out "$WORK/report" "${only[@]+"${only[@]}"}"
  # the report's own record of where each notebook ran (report.json, or report_quick.json
  # in quick size): into this run's results
  recorded=$(ls "$view/results/$SLUG"/report.json "$view/results/$SLUG"/report_quick.json 2>/dev/null)
  if [ -n "$recorded" ]; then
    mkdir -p "$WORK/results/$SLUG" && cp $recorded "$WORK/results/$SLUG/"
  else
    echo "NOTE: the report recorded no results/$SLUG/report.json; its index's report.json is in report.tar.xz" | tee -a "$SUMMARY"
  fi
else
  skip report "no jupyter stack (see setup above)"
fi

# 3. One tarball within the size cap, and the summary.
echo "total: $(( $(date +%s) - START ))s of a ${BUDGET}s budget" | tee -a "$SUMMARY"
cat "$WORK/logs/tails.txt" >> "$SUMMARY" 2>/dev/null
cp "$SUMMARY" "$WORK/summary.txt"
"$PY" scripts/pack_gpu_check.py "$WORK" "$OUT/gpu_check.tar.gz" --max-mb "$MAX_MB" | tee -a "$SUMMARY"
ls -la "$OUT" >> "$SUMMARY"
cat "$SUMMARY"
