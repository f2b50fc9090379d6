#!/usr/bin/env bash
# The one GPU run: the GPU tests, every GPU path of the lab (full size), then the report executed
# on the GPU, in one call with a time budget that holds, however the run goes.
#
#   OUT=/some/dir [LABKIT_COMMIT=abc123] [LABKIT_WHEELHOUSE=DIR] bash scripts/gpu_check.sh
#
# The machine it is planned for: one NVIDIA H200 (141 GB HBM3e, 4.8 TB/s, dense bf16 about 990
# TFLOP/s on the datasheet), 16 CPU cores, Python 3.12 with torch 2.11 (CUDA 13.0), triton 3.6,
# numpy and pandas, and nothing else: no pytest, no Jupyter, no network. The rest comes in the
# wheelhouse built beside the checkout (scripts/wheelhouse.sh --python 3.12 --out wheelhouse);
# checkout and wheelhouse together stay under 64 MiB. The call that runs this script ends after
# 600 s, so the default budget (540 s) covers everything from the first line: Python and CUDA
# start-up, the venv, every step, the kill of a step that overruns, and the packing.
#
# The plan at the default budget (estimated H200 seconds; a step's limit comes from what is left
# when it starts: its planned seconds, scaled up by the time earlier steps did not use, and the
# last step gets all that remains, so the limits add up to the budget; steps in order of value,
# the cheapest to lose last, so a short budget cuts or skips the later ones first):
#
#   step          H200 s  why
#   start             10  python, torch import and CUDA init for `labkit env`, nvidia-smi
#   setup             25  offline venv from the wheelhouse (report extra + pytest, ~45 wheels, pip --no-index)
#   gpu-tests         40  pytest -m gpu on the GPU: graph replay vs the eager forward, calibration and
#                         H2D profiles within physical bounds, ledger vs profiler (collection ~10 s)
#   kernel-tests      30  tests/test_prefix_attention.py on the GPU: ~10 Triton compiles of 1-3 s
#                         (first_call_s in data/results/h200/attn_bench_quick.json)
#   engine           115  7 variants x none/piecewise/full, 39 steps each (30 measured, 5 warm-up, 1 drain,
#                         3 profiled); per_layer ~467 ms a step (logs/calibrate_engine.log): ~20 s for eager
#                         and ~20 s piecewise, its full row is that piecewise run (not run twice); the
#                         others 25-45 ms a step; piecewise captures 19 sizes once; traces; the profile
#   calibrate         25  CPU loops, then 3 copy sizes x 2 kinds and 2 launch kinds, 100 repeats, each
#                         with one profiler pass
#   h2d               55  h2d_step, the 48-point sweep and 12 profiled h2d_gpu_idle points: 26 s + 20 s
#                         for sweep and idle in the recorded full run (created times of h200/h2d_*.json)
#   attn              65  4 cases (mixed at full size) x kernel, FlexAttention, SDPA; 66.7 s cold for the
#                         3 quick cases with every config (logs/attn_bench_run1.log), compiles dominate;
#                         TRIMMED: the config sweep on prefill_global and decode only (prefill_local and
#                         mixed run the default config and both peers: ~8 s saved each)
#   ranges            10  ranges_step only (builders, pipelines with real H2D copies); TRIMMED: the
#                         host-only builder sweep is CPU machines' work (40 s at full on cpu-epyc-2c)
#   mm                20  scheduler host costs of this machine's CPU, sweep included (23 s at full on
#                         cpu-epyc-2c, created times of its mm_*.json)
#   report            70  every notebook at quick size on the GPU, reading this run's results instead
#                         of measuring again (each page says so); the last step gets all that is left
#   pack              15  report pages as one xz stream, results, logs and traces into the tarball
#   (per step)         6  kill-after 4 s and rewriting the tarball 2 s, inside each step's share
#                    ---
#                    540
#
# OUT holds at most a handful of files, whichever way the call ends:
#   OUT/summary.txt      each step's exit code, seconds and limit as it ends (rewritten step by step),
#                        then what was cut, skipped or failed, and the end of each step's log;
#   OUT/gpu_check.tar.gz rewritten after every step with everything finished so far (results of the
#                        finished steps, the rows the cut step had written with "complete": false,
#                        logs, profile, traces that fit), and once more at the end with the report's
#                        pages (report.tar.xz) and traces trimmed to fit. At most GPU_CHECK_MAX_MB
#                        (16); MANIFEST.txt inside lists every file and what was trimmed, left out,
#                        or skipped as unreadable. File it with scripts/ingest_gpu_check.sh.
# The working folder (GPU_CHECK_WORK, default a temporary folder) is removed after a good final
# pack and kept, named in the summary, when packing fails.
#
# Needs python3 (PYTHON) with torch, triton and numpy. The GPU tests need pytest and the report
# Jupyter's stack: PYTHON's own, else a venv with PYTHON's packages set up from LABKIT_WHEELHOUSE
# (default ./wheelhouse) without network. A missing pytest fails the run (the GPU tests are its
# first purpose); without Jupyter's stack the report is skipped and the summary says so.
# Every result records LABKIT_COMMIT: from git here, or pass it where the tree is a copy without
# .git (LABKIT_COMMIT=$(git rev-parse --short=12 HEAD) on the machine you copy from).
#
# Knobs: GPU_CHECK_BUDGET (seconds for everything, default 540), GPU_CHECK_SIZE (full; quick for
# dry runs), GPU_CHECK_ALLOW_CPU=1 (dry run without a GPU: CPU and simulated devices, weighted by
# the DRY column below), GPU_CHECK_STEPS="engine mm" (only these steps), GPU_CHECK_REPORT_ONLY=
# "00 06" (only these pages), GPU_CHECK_EXTRA_<STEP>="--flag ..." (more arguments for a step, e.g.
# GPU_CHECK_EXTRA_ENGINE), GPU_CHECK_PLAN=1 (print each step's limit at this budget and exit).
# Exit 0 when every step ran and passed, 1 otherwise, 2 on bad input.
set -u
START=$(date +%s)  # the clock starts here: start-up, set-up and packing all count

#      step          H200  DRY (seconds on a loaded 2-core CPU, dry run at quick size)
PLAN=("setup          25    60"
      "gpu-tests      40    20"
      "kernel-tests   30    15"
      "engine        115    40"
      "calibrate      25    15"
      "h2d            55    25"
      "attn           65    12"
      "ranges         10    12"
      "mm             20    22"
      "report         70   150")
START_EST=10    # seconds the start-up is planned to take (measured: the clock runs from the top)
PACK_RESERVE=15  # seconds kept for the final pack
KILL_AFTER=4     # seconds a step gets between SIGTERM and SIGKILL
PROGRESS=2       # seconds to rewrite the tarball after a step
MIN_LIMIT=3      # a step with less than this is skipped

die() { echo "gpu_check: $*" >&2; exit 2; }
BUDGET=${GPU_CHECK_BUDGET:-540}
SIZE=${GPU_CHECK_SIZE:-full}
MAX_MB=${GPU_CHECK_MAX_MB:-16}
[[ "$BUDGET" =~ ^[0-9]+$ ]] || die "GPU_CHECK_BUDGET must be whole seconds"
[[ "$MAX_MB" =~ ^[0-9]+$ ]] || die "GPU_CHECK_MAX_MB must be whole megabytes"
case "$SIZE" in quick|full) ;; *) die "GPU_CHECK_SIZE must be quick or full, not '$SIZE'" ;; esac
ALL_STEPS=(); for p in "${PLAN[@]}"; do read -r n _ <<< "$p"; ALL_STEPS+=("$n"); done
read -r -a WANTED <<< "${GPU_CHECK_STEPS:-${ALL_STEPS[*]}}"
for w in "${WANTED[@]}"; do
  [[ " ${ALL_STEPS[*]} " == *" $w "* ]] || die "GPU_CHECK_STEPS: unknown step '$w' (steps: ${ALL_STEPS[*]})"
done
COLUMN=2; [ "${GPU_CHECK_ALLOW_CPU:-0}" = 1 ] && COLUMN=3
weight() { for p in "${PLAN[@]}"; do read -r -a f <<< "$p"; [ "${f[0]}" = "$1" ] && { echo "${f[$((COLUMN - 1))]}"; return; }; done; echo 0; }

# -- the budget: a step's share of what is left ------------------------------------------------------
PENDING=()  # steps still to run, in order
window_of() {  # window_of STEP ELAPSED: seconds STEP may take, kill and tarball included
  # its planned seconds, scaled up when more is left than the steps still to run plan to take (time
  # an earlier step did not use goes to the later ones, and the last step gets all that is left,
  # so the windows add up to the budget); never more than is left. Short of time, the steps run
  # in order of value with their planned seconds, and the last ones get what remains, or nothing.
  local step=$1 elapsed=$2 total=0 s w
  for s in "${PENDING[@]}"; do total=$(( total + $(weight "$s") + KILL_AFTER + PROGRESS )); done
  local left=$(( BUDGET - elapsed - PACK_RESERVE ))
  [ "$total" -gt 0 ] && [ "$left" -gt 0 ] || { echo 0; return; }
  w=$(( $(weight "$step") + KILL_AFTER + PROGRESS ))
  [ "$left" -gt "$total" ] && w=$(( left * w / total ))
  [ "$w" -gt "$left" ] && w=$left
  echo "$w"
}
limit_of() { echo $(( $1 - KILL_AFTER - PROGRESS )); }  # a window less the kill and the tarball rewrite
drop_pending() { local keep=() s; for s in "${PENDING[@]}"; do [ "$s" != "$1" ] && keep+=("$s"); done; PENDING=("${keep[@]+"${keep[@]}"}"); }

if [ "${GPU_CHECK_PLAN:-0}" = 1 ]; then  # what each step would get if each used its whole window
  PENDING=("${WANTED[@]}")
  elapsed=$START_EST sum=0
  printf '%-13s %6s %8s %8s\n' step weight window limit
  printf '%-13s %6s %8s %8s\n' start - "$START_EST" -
  for s in "${WANTED[@]}"; do
    w=$(window_of "$s" "$elapsed"); lim=$(limit_of "$w"); drop_pending "$s"
    if [ "$lim" -lt "$MIN_LIMIT" ]; then printf '%-13s %6s %8s %8s\n' "$s" "$(weight "$s")" 0 skipped; continue; fi
    printf '%-13s %6s %8s %8s\n' "$s" "$(weight "$s")" "$w" "$lim"
    elapsed=$(( elapsed + w )); sum=$(( sum + w ))
  done
  printf '%-13s %6s %8s %8s\n' pack - $(( BUDGET - elapsed )) -
  echo "total: $(( START_EST + sum + BUDGET - elapsed ))s of a ${BUDGET}s budget"
  exit 0
fi

[ -n "${OUT:-}" ] || die "set OUT to an output folder (OUT=/tmp/out bash scripts/gpu_check.sh)"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null 2>&1 || die "no python at PYTHON=$PY"
mkdir -p "$OUT" 2>/dev/null || die "cannot create OUT=$OUT"
OUT=$(cd "$OUT" && pwd)
if [ -n "${GPU_CHECK_WORK:-}" ]; then
  case "$(realpath -m "$GPU_CHECK_WORK")/" in "$OUT"/*) die "GPU_CHECK_WORK must lie outside OUT (OUT holds a handful of files)";; esac
  [ -z "$(ls -A "$GPU_CHECK_WORK" 2>/dev/null)" ] || die "GPU_CHECK_WORK=$GPU_CHECK_WORK is not empty (each run starts from an empty folder)"
fi
WORK=${GPU_CHECK_WORK:-$(mktemp -d)}
mkdir -p "$WORK/results" "$WORK/traces" "$WORK/logs" || die "cannot create the working folder $WORK"
WORK=$(cd "$WORK" && pwd)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
SUMMARY="$OUT/summary.txt"
rm -f "$SUMMARY" "$OUT/gpu_check.tar.gz"

now() { echo $(( $(date +%s) - START )); }
note() { echo "$*" | tee -a "$SUMMARY"; }
repack() {  # the tarball in OUT, with everything so far (fast: no pages, no trimming)
  cp "$SUMMARY" "$WORK/summary.txt" 2>/dev/null
  timeout "$PROGRESS" "$PY" scripts/pack_gpu_check.py "$WORK" "$OUT/gpu_check.tar.gz" --max-mb "$MAX_MB" \
    --progress > "$WORK/logs/repack.log" 2>&1 || echo "repack after $1 failed or ran out of time (logs/repack.log)" >> "$WORK/logs/repack.log"
  rm -f "$OUT"/.gpu_check.tar.gz.*.part  # a pack stopped by its time limit leaves its part behind
}
CURRENT=""  # pid of the running step
on_signal() {
  [ -n "$CURRENT" ] && kill -TERM "$CURRENT" 2>/dev/null && wait "$CURRENT" 2>/dev/null
  note "INTERRUPTED after $(now)s: steps not finished: ${PENDING[*]:-none}"
  repack interrupt
  exit 143
}
trap on_signal TERM INT

# -- start: the machine as the lab describes it (its device decides the run, its slug names results)
timeout 60 "$PY" -m labkit env --json > "$WORK/logs/env.json" 2> "$WORK/logs/env.log"
env_field() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$WORK/logs/env.json" "$1" 2>/dev/null; }
found=$(env_field device)
if [ -z "$found" ]; then  # labkit env failed (logs/env.log says why): ask torch itself
  if ! timeout 60 "$PY" -c 'import torch' 2>/dev/null; then
    rm -rf "$WORK"
    die "$PY cannot import torch: set PYTHON to the interpreter that has torch, triton and numpy"
  fi
  timeout 60 "$PY" -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null && found=cuda
fi
if [ "$found" = cuda ]; then
  DEVICE=cuda ENGINE_DEVICE=cuda COLUMN=2
elif [ "${GPU_CHECK_ALLOW_CPU:-0}" = 1 ]; then
  DEVICE=cpu ENGINE_DEVICE=sim
  export TRITON_INTERPRET=1  # the kernels' CPU path (set before any kernel is defined)
else
  rm -rf "$WORK"
  die "no CUDA GPU visible to $PY (set GPU_CHECK_ALLOW_CPU=1 to dry-run on CPU)"
fi
if [ -z "${LABKIT_COMMIT:-}" ]; then  # the commit every result records, as labkit_commit() forms it
  if LABKIT_COMMIT=$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null); then
    [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no -- labkit 2>/dev/null)" ] && LABKIT_COMMIT="$LABKIT_COMMIT+dirty"
  else
    LABKIT_COMMIT=unknown
  fi
fi
export LABKIT_COMMIT
export LABKIT_RESULTS="$WORK/results"
SLUG=$(env_field slug); SLUG=${SLUG:-unknown}
nvidia-smi > "$WORK/logs/nvidia-smi.txt" 2>&1 || true
{
  echo "gpu_check: $(date -u +%Y-%m-%dT%H:%M:%SZ)  device=$DEVICE  size=$SIZE  budget=${BUDGET}s  commit=$LABKIT_COMMIT"
  [ "$LABKIT_COMMIT" = unknown ] && echo "WARNING: no git here and no LABKIT_COMMIT given: results record commit 'unknown'"
  echo "machine: $SLUG"
  echo "start: $(now)s (python, torch and device start-up)"
} > "$SUMMARY"

# -- one step: its limit from what is left, run, log, rewrite the tarball ---------------------------
CUT=() FAILED=() SKIPPED=()
step() {  # step NAME CMD...
  local name=$1; shift
  local w limit t0 rc dt extra_var extra=()
  w=$(window_of "$name" "$(now)")
  limit=$(limit_of "$w")
  drop_pending "$name"
  if [ "$limit" -lt "$MIN_LIMIT" ]; then
    printf '%-12s SKIPPED       budget spent (%ss left of %ss)\n' "$name" "$(( BUDGET - $(now) ))" "$BUDGET" | tee -a "$SUMMARY"
    SKIPPED+=("$name"); return 1
  fi
  extra_var="GPU_CHECK_EXTRA_${name^^}"; extra_var=${extra_var//-/_}
  [ -n "${!extra_var:-}" ] && read -r -a extra <<< "${!extra_var}"
  t0=$(date +%s)
  timeout --kill-after="$KILL_AFTER" "$limit" "$@" "${extra[@]+"${extra[@]}"}" > "$WORK/logs/$name.log" 2>&1 &
  CURRENT=$!
  wait "$CURRENT"; rc=$?
  CURRENT=""
  dt=$(( $(date +%s) - t0 ))
  local status="rc=$rc" why=""
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    why=" CUT at its time limit (${limit}s): what it finished is kept, a result it was writing says complete: false"
    CUT+=("$name")
  elif [ "$rc" != 0 ]; then
    FAILED+=("$name")
  fi
  local cmd="$*"; cmd=${cmd//$'\n'/; }  # one line in the summary
  printf '%-12s %-7s %4ss of %-5s %s%s\n' "$name" "$status" "$dt" "${limit}s" "$cmd" "$why" | tee -a "$SUMMARY"
  tail -n 25 "$WORK/logs/$name.log" | sed "s/^/    [$name] /" >> "$WORK/logs/tails.txt"
  repack "$name"
  return "$rc"
}
fail() { printf '%-12s FAILED        %s\n' "$1" "$2" | tee -a "$SUMMARY"; FAILED+=("$1"); drop_pending "$1"; }
skip() { printf '%-12s SKIPPED       %s\n' "$1" "$2" | tee -a "$SUMMARY"; SKIPPED+=("$1"); drop_pending "$1"; }
wanted() { [[ " ${WANTED[*]} " == *" $1 "* ]]; }
PENDING=()
for s in "${ALL_STEPS[@]}"; do wanted "$s" && PENDING+=("$s"); done

# -- setup: pytest and Jupyter's stack, PYTHON's own or a venv from the wheelhouse (offline) ---------
report_mods="from labkit.report import skip_unused_imports; skip_unused_imports()
import nbclient, nbconvert, nbformat, jupytext, ipykernel, ipywidgets, plotly, pandas"
has_stack() { "$1" -c "$report_mods" >/dev/null 2>&1; }
has_pytest() { "$1" -c "import pytest" >/dev/null 2>&1; }
WHEELHOUSE=${LABKIT_WHEELHOUSE:-$ROOT/wheelhouse}
BPY=$PY REPORT_PY=""
has_stack "$PY" && REPORT_PY=$PY
if has_pytest "$PY" && [ -n "$REPORT_PY" ]; then
  drop_pending setup
elif [ -d "$WHEELHOUSE" ] && wanted setup; then
  venv_setup='set -e
PYTHON="$1" VENV="$2" LABKIT_WHEELHOUSE="$3" PIP_NO_INDEX=1 bash scripts/setup_venv.sh
if "$2/bin/python" -m pip --version >/dev/null 2>&1; then pip=("$2/bin/python" -m pip); else pip=("$1" -m pip --python "$2/bin/python"); fi
PIP_NO_INDEX=1 "${pip[@]}" install --quiet --no-index --find-links "$3" pytest'
  step setup bash -c "$venv_setup" setup "$PY" "$WORK/venv" "$WHEELHOUSE"
  has_stack "$WORK/venv/bin/python" && REPORT_PY=$WORK/venv/bin/python
  has_pytest "$WORK/venv/bin/python" && BPY=$WORK/venv/bin/python
else
  wanted setup && skip setup "$PY lacks pytest or Jupyter's stack and there is no wheelhouse at $WHEELHOUSE (scripts/wheelhouse.sh)"
  drop_pending setup
fi
[ -z "$REPORT_PY" ] && wanted report && skip report "no Jupyter stack for $PY (see setup above)"
echo "python: $BPY (benchmarks and tests), ${REPORT_PY:-none} (report)" >> "$SUMMARY"

# -- the GPU tests: a missing pytest fails the run ----------------------------------------------------
mapfile -t gpu_tests < <(grep -l 'mark\.gpu' tests/test_*.py)
if wanted gpu-tests; then
  if has_pytest "$BPY"; then
    step gpu-tests "$BPY" -m pytest -q -rs -m gpu -p no:cacheprovider "${gpu_tests[@]}"
  else
    fail gpu-tests "no pytest in $BPY: the wheelhouse carries it (scripts/wheelhouse.sh), or install it"
  fi
fi
if wanted kernel-tests; then
  # on a dry run only collected: on a CPU they are the test suite's own run under the Triton interpreter
  kernel_mode=(); [ "$DEVICE" = cpu ] && kernel_mode=(--collect-only)
  if has_pytest "$BPY"; then
    step kernel-tests "$BPY" -m pytest -q -rs -p no:cacheprovider "${kernel_mode[@]+"${kernel_mode[@]}"}" \
      tests/test_prefix_attention.py
  else
    fail kernel-tests "no pytest in $BPY"
  fi
fi

# -- the benchmarks, in order of value -----------------------------------------------------------------
if wanted engine; then
  engine=(env TEARDOWN_CUPTI=0 "$BPY" -m labkit bench engine --device "$ENGINE_DEVICE" --size "$SIZE"
          --model gemma4-e4b-like --workload pr40143 --cudagraph none,piecewise,full --trace-dir "$WORK/traces/engine")
  [ "$ENGINE_DEVICE" = cuda ] && engine+=(--write-profile "$WORK/profile.json")
  step engine "${engine[@]}"
fi
wanted calibrate && step calibrate "$BPY" -m labkit calibrate --device "$DEVICE" --size "$SIZE"
wanted h2d && step h2d "$BPY" -m labkit bench h2d --device "$DEVICE" --size "$SIZE" --trace-dir "$WORK/traces/h2d"
if wanted attn; then
  attn=("$BPY" -m labkit bench attn --device "$DEVICE" --size "$SIZE" --sweep --repeats 20)
  [ "$DEVICE" = cuda ] && attn+=(--sweep-cases prefill_global,decode)
  step attn "${attn[@]}"
fi
wanted ranges && step ranges "$BPY" -m labkit bench ranges --device "$DEVICE" --size "$SIZE" --no-sweep
wanted mm && step mm "$BPY" -m labkit bench mm --size "$SIZE" --sweep

# -- the report on this device, reading this run's results (quick size: what it measures itself) -----
if wanted report && [ -n "$REPORT_PY" ]; then
  view=$WORK/view
  rm -rf "$view"; cp -r "$ROOT/data" "$view"
  rm -f "$view/results/$SLUG"/report*.json  # never file an earlier run's record as this one's
  cp -r "$WORK/results/." "$view/results/"
  if [ -n "$(ls -A "$WORK/traces/engine" 2>/dev/null)" ]; then
    rm -rf "${view:?}/traces/$SLUG"; mkdir -p "$view/traces/$SLUG"
    cp -r "$WORK/traces/engine/." "$view/traces/$SLUG/"
  fi
  only=(); [ -n "${GPU_CHECK_REPORT_ONLY:-}" ] && read -r -a only_names <<< "$GPU_CHECK_REPORT_ONLY" && only=(--only "${only_names[@]}")
  step report env -u LABKIT_RESULTS LABKIT_DATA="$view" LABKIT_REUSE_RESULTS="$WORK/results" \
    "$REPORT_PY" -m labkit report --device "$DEVICE" --size quick --out "$WORK/report" "${only[@]+"${only[@]}"}"
  recorded=$(ls "$view/results/$SLUG"/report_quick.json 2>/dev/null)
  if [ -n "$recorded" ]; then
    mkdir -p "$WORK/results/$SLUG" && cp "$recorded" "$WORK/results/$SLUG/"
  else
    note "NOTE: the report recorded no results/$SLUG/report_quick.json (see logs/report.log)"
  fi
fi

# -- the end: what happened, then the tarball with the pages and trimmed traces -----------------------
{
  echo "total: $(now)s of a ${BUDGET}s budget before the final pack"
  echo "cut by their time limit: ${CUT[*]:-none}"
  echo "skipped: ${SKIPPED[*]:-none}"
  echo "failed: ${FAILED[*]:-none}"
} | tee -a "$SUMMARY"
cat "$WORK/logs/tails.txt" >> "$SUMMARY" 2>/dev/null
cp "$SUMMARY" "$WORK/summary.txt"
pack_left=$(( BUDGET - $(now) )); [ "$pack_left" -lt 5 ] && pack_left=5
if timeout "$pack_left" "$PY" scripts/pack_gpu_check.py "$WORK" "$OUT/gpu_check.tar.gz" --max-mb "$MAX_MB" \
     > "$WORK/logs/pack.log" 2>&1; then
  cat "$WORK/logs/pack.log" >> "$SUMMARY"
  rm -rf "$WORK"
else
  cat "$WORK/logs/pack.log" >> "$SUMMARY"
  rm -f "$OUT"/.gpu_check.tar.gz.*.part
  note "PACK FAILED or ran out of time: $OUT/gpu_check.tar.gz is the one written after the last step; the working files stay in $WORK"
fi
note "end: $(now)s of a ${BUDGET}s budget"
ls -la "$OUT" >> "$SUMMARY"
cat "$SUMMARY"
[ ${#CUT[@]} -eq 0 ] && [ ${#FAILED[@]} -eq 0 ] && [ ${#SKIPPED[@]} -eq 0 ]
