#!/usr/bin/env bash
# One prepared run of every GPU path of the lab: the GPU unit tests, calibration, the
# prefix-attention kernel benchmark, the #38794 H2D strategies with profiler idle time, the
# range builders, the engine with traces and its device profile, and the scheduler on this host.
#
# Usage:  OUT=/some/dir bash scripts/gpu_check.sh
# Needs only python3 with torch, triton and numpy (pandas optional); installs nothing.
# Writes OUT/gpu_check.tar.gz (results/<slug>/*.json, traces/<slug>/..., logs) and
# OUT/summary.txt. Unpack it with scripts/ingest_gpu_check.sh.
set -u
OUT=${OUT:?set OUT to an output folder}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
WORK=$(mktemp -d)
mkdir -p "$WORK/results" "$WORK/traces" "$WORK/logs"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export LABKIT_RESULTS="$WORK/results"
PY=${PYTHON:-python3}
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"

if [ "${GPU_CHECK_ALLOW_CPU:-0}" != 1 ] && ! "$PY" -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "gpu_check: no CUDA GPU visible to $PY (set GPU_CHECK_ALLOW_CPU=1 to dry-run on CPU)" >&2
  exit 2
fi

step() {  # step NAME SECONDS CMD...: run with a time limit, log, never abort the whole check
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" > "$WORK/logs/$name.log" 2>&1
  local rc=$?
  local dt=$(( $(date +%s) - t0 ))
  printf '%-14s rc=%-3s %4ss  %s\n' "$name" "$rc" "$dt" "$*" | tee -a "$SUMMARY"
  tail -n 25 "$WORK/logs/$name.log" | sed "s/^/    [$name] /" >> "$WORK/logs/tails.txt"
}

nvidia-smi > "$WORK/logs/nvidia-smi.txt" 2>&1 || true
# Budget: about 8 minutes in all on an H200 (each step's own limit in seconds).
step env        60 "$PY" -m labkit env --json
step gpu-tests 180 "$PY" -m pytest -q -m gpu -p no:cacheprovider tests/test_prefix_attention.py \
                     tests/test_ledger.py tests/test_h2d_bench.py tests/test_prefix_ranges.py tests/test_calibrate.py
step calibrate  90 "$PY" -m labkit calibrate --device cuda --full
step attn      180 "$PY" -m labkit bench attn --sweep --repeats 20
step h2d       150 "$PY" -m labkit bench h2d --device cuda --size full --trace-dir "$WORK/traces/h2d"
step ranges    120 "$PY" -m labkit bench ranges --device cuda --size full
step engine    180 "$PY" -m labkit bench engine --quick --trace-dir "$WORK/traces/engine" --write-profile "$WORK/profile.json"
step mm         90 "$PY" -m labkit bench mm --sweep

cat "$WORK/logs/tails.txt" >> "$SUMMARY"
tar -C "$WORK" -czf "$OUT/gpu_check.tar.gz" results traces logs $( [ -f "$WORK/profile.json" ] && echo profile.json )
ls -la "$OUT" >> "$SUMMARY"
cat "$SUMMARY"
