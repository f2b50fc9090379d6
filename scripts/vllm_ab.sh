#!/usr/bin/env bash
# Serving A/B of PRs #40143 and #38794 on a GPU machine with vLLM installed.
#
# For each variant: start `vllm serve MODEL` on 127.0.0.1 with LABKIT_VLLM_AB=<variant>
# (labkit's vLLM plugin patches every vLLM process), run `vllm bench serve` with the
# random-mm dataset at the #40143 shape (128 requests x 32 images of 1024x1536), stop the
# server, and file the result with `python -m labkit.vllm.ab ingest` under
# data/results/<gpu>/vllm_ab.json (source measured-gpu).
#
#   bash scripts/vllm_ab.sh [options] [-- extra `vllm serve` arguments]
#
# Options:
#   --model M          model (default google/gemma-4-E4B-it, the #40143 benchmark's; google/gemma-3-4b-it
#                      always runs the mm-prefix path that #38794 changed)
#   --variants LIST    comma-separated, from baseline,pr40143,pr38794,merged,early-return (default baseline,merged)
#   --num-prompts N    requests (default 128; also the max concurrency)
#   --images N         images per request (default 32)
#   --image-size HxW   image bucket (default 1024x1536)
#   --output-len N     output tokens per request (default 128)
#   --attention-backend B  vLLM attention backend for every variant (default TRITON_ATTN, where
#                      #38794's per-step tensor lives; on Hopper vLLM 0.33 would otherwise pick a
#                      FlashAttention composite for mm-prefix models); "auto" lets vLLM choose
#   --port P           server port (default 8000)
#   --out DIR          where bench JSON, logs and traces go (default $TMPDIR/labkit-vllm-ab;
#                      ingest copies results and traces into data/)
#   --profile          also capture torch profiler traces (--profiler-config + bench --profile)
#   --python PY        Python with vLLM and labkit installed (default .venv-vllm/bin/python, else python3)
#   --dry-run          print the commands, run nothing
#   -h, --help         this text
# The per-layer (pre-#38794) cost only appears where attention runs eagerly: under full
# CUDA graphs a decode step replays the captured kernels. Pass the same compilation
# settings to every variant (e.g. -- --compilation-config '{"cudagraph_mode": "PIECEWISE"}').
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL="google/gemma-4-E4B-it"
VARIANTS="baseline,merged"
NUM_PROMPTS=128
IMAGES=32
IMAGE_SIZE="1024x1536"
OUTPUT_LEN=128
PORT=8000
BACKEND="TRITON_ATTN"
OUT="${TMPDIR:-/tmp}/labkit-vllm-ab"
PROFILE=0
DRY=0
PY=""
SERVE_EXTRA=()

die() { echo "vllm_ab.sh: error: $*" >&2; exit 2; }
usage() { sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; }
need_value() { [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value"; }
is_posint() { [[ "$1" =~ ^[1-9][0-9]*$ ]]; }

while [ $# -gt 0 ]; do
  case "$1" in
    --model) need_value "$@"; MODEL=$2; shift 2 ;;
    --variants) need_value "$@"; VARIANTS=$2; shift 2 ;;
    --num-prompts) need_value "$@"; NUM_PROMPTS=$2; shift 2 ;;
    --images) need_value "$@"; IMAGES=$2; shift 2 ;;
    --image-size) need_value "$@"; IMAGE_SIZE=$2; shift 2 ;;
    --output-len) need_value "$@"; OUTPUT_LEN=$2; shift 2 ;;
    --port) need_value "$@"; PORT=$2; shift 2 ;;
    --attention-backend) need_value "$@"; BACKEND=$2; shift 2 ;;
    --out) need_value "$@"; OUT=$2; shift 2 ;;
    --python) need_value "$@"; PY=$2; shift 2 ;;
    --profile) PROFILE=1; shift ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; SERVE_EXTRA=("$@"); break ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done

is_posint "$NUM_PROMPTS" || die "--num-prompts must be a positive integer, got '$NUM_PROMPTS'"
is_posint "$IMAGES" || die "--images must be a positive integer, got '$IMAGES'"
is_posint "$OUTPUT_LEN" || die "--output-len must be a positive integer, got '$OUTPUT_LEN'"
is_posint "$PORT" && [ "$PORT" -le 65535 ] || die "--port must be 1..65535, got '$PORT'"
[[ "$IMAGE_SIZE" =~ ^([1-9][0-9]*)x([1-9][0-9]*)$ ]] || die "--image-size must look like 1024x1536, got '$IMAGE_SIZE'"
IMG_H=${BASH_REMATCH[1]}; IMG_W=${BASH_REMATCH[2]}
case "$OUT" in /*) ;; *) OUT="$PWD/$OUT" ;; esac
IFS=',' read -r -a VARIANT_LIST <<< "$VARIANTS"
[ ${#VARIANT_LIST[@]} -gt 0 ] || die "--variants is empty"
for v in "${VARIANT_LIST[@]}"; do
  case "$v" in baseline|pr40143|pr38794|merged|early-return) ;; *) die "unknown variant '$v': choose from baseline,pr40143,pr38794,merged,early-return" ;; esac
done
if [ -z "$PY" ]; then
  if [ -x "$ROOT/.venv-vllm/bin/python" ]; then PY="$ROOT/.venv-vllm/bin/python"; else PY=python3; fi
fi
VLLM=("$PY" -m vllm.entrypoints.cli.main)
if [ "$DRY" = 0 ]; then
  "$PY" -c "import vllm, labkit.vllm.ab" 2>/dev/null || die "$PY cannot import vllm and labkit (pip install -e . into vLLM's env)"
  command -v curl >/dev/null || die "curl is needed to wait for the server"
fi

run() {  # print, and run unless --dry-run
  printf '+'; printf ' %q' "$@"; printf '\n'
  [ "$DRY" = 1 ] || "$@"
}

mkdir_out() { [ "$DRY" = 1 ] || mkdir -p "$@"; }
SERVER_PID=""
stop_server() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}
trap stop_server EXIT

for v in "${VARIANT_LIST[@]}"; do
  dir="$OUT/$v"
  mkdir_out "$dir"
  serve=("${VLLM[@]}" serve "$MODEL" --host 127.0.0.1 --port "$PORT"
         --limit-mm-per-prompt "{\"image\": $IMAGES}")
  [ "$BACKEND" = auto ] || serve+=(--attention-backend "$BACKEND")
  bench_profile=()
  if [ "$PROFILE" = 1 ]; then
    mkdir_out "$dir/traces"
    serve+=(--profiler-config "{\"profiler\": \"torch\", \"torch_profiler_dir\": \"$dir/traces\"}")
    bench_profile=(--profile)
  fi
  serve+=("${SERVE_EXTRA[@]}")
  echo "== variant $v" >&2
  printf '+ LABKIT_VLLM_AB=%s' "$v"; printf ' %q' "${serve[@]}"; printf ' > %q 2>&1 &\n' "$dir/server.log"
  if [ "$DRY" = 0 ]; then
    LABKIT_VLLM_AB="$v" VLLM_RPC_TIMEOUT=1800000 "${serve[@]}" > "$dir/server.log" 2>&1 &
    SERVER_PID=$!
    echo "waiting for the server (log: $dir/server.log)" >&2
    for _ in $(seq 1 1800); do
      curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
      kill -0 "$SERVER_PID" 2>/dev/null || die "vllm serve exited early; see $dir/server.log"
      sleep 1
    done
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 || die "server not healthy after 30 min; see $dir/server.log"
    if [ "$v" != merged ] && ! grep -q "labkit vllm_ab: variant $v applied" "$dir/server.log"; then
      die "the labkit vLLM plugin did not load in the server (pip install -e . into vLLM's env); see $dir/server.log"
    fi
  fi
  run "${VLLM[@]}" bench serve --backend openai-chat --endpoint /v1/chat/completions \
      --base-url "http://127.0.0.1:$PORT" --model "$MODEL" --dataset-name random-mm \
      --num-prompts "$NUM_PROMPTS" --max-concurrency "$NUM_PROMPTS" \
      --random-mm-base-items-per-request "$IMAGES" --random-mm-num-mm-items-range-ratio 0 \
      --random-mm-limit-mm-per-prompt "{\"image\": $IMAGES, \"video\": 0}" \
      --random-mm-bucket-config "{($IMG_H, $IMG_W, 1): 1.0}" \
      --random-output-len "$OUTPUT_LEN" --ignore-eos --seed 0 \
      --save-result --result-dir "$dir" --result-filename bench.json "${bench_profile[@]}"
  [ "$DRY" = 1 ] || stop_server
  ingest=("$PY" -m labkit.vllm.ab ingest --variant "$v" --bench-json "$dir/bench.json"
          --images "$IMAGES" --model "$MODEL")
  if [ "$PROFILE" = 1 ]; then ingest+=(--trace-dir "$dir/traces"); fi
  (cd "$ROOT" && run "${ingest[@]}")
done
