#!/usr/bin/env bash
# Unpack what scripts/gpu_check.sh wrote (gpu_check.tar.gz) into the repository:
# results -> data/results/<slug>/, traces -> data/traces/<slug>/, the engine's device
# profile -> data/profiles/<slug>.json, logs -> data/results/<slug>/gpu_check_logs/.
# Usage: bash scripts/ingest_gpu_check.sh PATH/gpu_check.tar.gz
set -euo pipefail
tarball=${1:?usage: ingest_gpu_check.sh PATH/gpu_check.tar.gz}
[ -f "$tarball" ] || { echo "ingest_gpu_check: no such file: $tarball" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
tar -C "$tmp" -xzf "$tarball"
for dir in "$tmp"/results/*/; do
  [ -d "$dir" ] || continue
  slug=$(basename "$dir")
  mkdir -p "$ROOT/data/results/$slug"
  cp "$dir"*.json "$ROOT/data/results/$slug/"
  if [ -d "$tmp/traces" ] && [ -n "$(ls -A "$tmp/traces")" ]; then
    mkdir -p "$ROOT/data/traces/$slug"
    cp -r "$tmp/traces/." "$ROOT/data/traces/$slug/"
  fi
  if [ -f "$tmp/profile.json" ]; then
    mkdir -p "$ROOT/data/profiles"
    cp "$tmp/profile.json" "$ROOT/data/profiles/$slug.json"
  fi
  mkdir -p "$ROOT/data/results/$slug/gpu_check_logs"
  cp "$tmp"/logs/*.log "$tmp"/logs/*.txt "$ROOT/data/results/$slug/gpu_check_logs/" 2>/dev/null || true
  echo "ingested $slug"
done
