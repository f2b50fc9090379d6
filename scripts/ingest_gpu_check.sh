#!/usr/bin/env bash
# File what scripts/gpu_check.sh wrote (gpu_check.tar.gz) where the lab reads it:
#   results/<slug>/*.json        -> data/results/<slug>/ (report_quick.json included); a result
#                                   that says "complete": false (its step was cut) is not filed;
#                                   a full result replaces that machine's quick run of it, and a
#                                   quick run is not filed over a full recording
#   traces/engine/<run>/*        -> data/traces/<slug>/<run>/ (replacing that machine's runs:
#                                   labkit.engine.recorded reads data/traces/<slug>/<run>/)
#   profile.json                 -> data/profiles/<slug>.json
#   logs/, summary.txt, MANIFEST -> data/results/<slug>/gpu_check_logs/
#   report.tar.xz                -> reports/gpu_check-<slug>/ (the pages; not committed)
# The H2D traces stay in the tarball: no notebook reads them.
#
# Usage: bash scripts/ingest_gpu_check.sh PATH/gpu_check.tar.gz [--into DIR]
#        (--into: file into another checkout or folder instead of this repository)
set -euo pipefail
die() { echo "ingest_gpu_check: $*" >&2; exit 2; }
tarball="" dest=$(cd "$(dirname "$0")/.." && pwd)
while [ $# -gt 0 ]; do
  case "$1" in
    --into) [ $# -ge 2 ] || die "--into needs a folder"; [ -d "$2" ] || die "no such folder: $2"; dest=$(cd "$2" && pwd); shift 2 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option: $1" ;;
    *) [ -z "$tarball" ] || die "one tarball at a time"; tarball=$1; shift ;;
  esac
done
[ -n "$tarball" ] || die "usage: ingest_gpu_check.sh PATH/gpu_check.tar.gz [--into DIR]"
[ -f "$tarball" ] || die "no such file: $tarball"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
tar -C "$tmp" -xzf "$tarball" 2>/dev/null || die "not a gzip'ed tar file: $tarball"
slugs=()
for dir in "$tmp"/results/*/; do [ -d "$dir" ] && slugs+=("$(basename "$dir")"); done
[ ${#slugs[@]} -gt 0 ] || die "no results/<machine>/ folder in $tarball"
[ ${#slugs[@]} -eq 1 ] || die "results for several machines in one tarball: ${slugs[*]}"
slug=${slugs[0]}
[[ "$slug" =~ ^[a-z0-9][a-z0-9._-]*$ ]] || die "odd machine folder name: $slug"

mkdir -p "$dest/data/results/$slug"
n=0
for f in "$tmp/results/$slug"/*.json; do
  [ -f "$f" ] || continue
  name=$(basename "$f" .json) into="$dest/data/results/$slug"
  if [ "$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("complete", True))' "$f" 2>/dev/null)" = False ]; then
    echo "not filed: results/$slug/$name.json is the partial result of a cut step (it stays in the tarball)"
  elif [[ "$name" == *_quick ]] && [ -f "$into/${name%_quick}.json" ]; then
    echo "not filed: results/$slug/$name.json (a quick run; data/results/$slug/${name%_quick}.json is a full recording)"
  else
    cp "$f" "$into/" && n=$((n + 1))
    if [[ "$name" != *_quick ]] && [ -f "$into/${name}_quick.json" ]; then
      rm -f "$into/${name}_quick.json"
      echo "removed data/results/$slug/${name}_quick.json: the full recording replaces it"
    fi
  fi
done
echo "ingested $n results -> data/results/$slug/"

if [ -d "$tmp/traces/engine" ] && [ -n "$(ls -A "$tmp/traces/engine")" ]; then
  rm -rf "${dest:?}/data/traces/$slug"
  mkdir -p "$dest/data/traces/$slug"
  cp -r "$tmp/traces/engine/." "$dest/data/traces/$slug/"
  echo "ingested $(find "$dest/data/traces/$slug" -mindepth 1 -maxdepth 1 -type d | wc -l) engine trace runs -> data/traces/$slug/"
fi
if [ -f "$tmp/profile.json" ]; then
  mkdir -p "$dest/data/profiles"
  cp "$tmp/profile.json" "$dest/data/profiles/$slug.json"
  echo "ingested the device profile -> data/profiles/$slug.json"
fi
logs="$dest/data/results/$slug/gpu_check_logs"
rm -rf "$logs"; mkdir -p "$logs"
cp "$tmp"/logs/* "$logs/" 2>/dev/null || true
for f in summary.txt MANIFEST.txt; do [ -f "$tmp/$f" ] && cp "$tmp/$f" "$logs/"; done
echo "ingested logs -> data/results/$slug/gpu_check_logs/"
if [ -f "$tmp/report.tar.xz" ]; then
  pages="$dest/reports/gpu_check-$slug"
  rm -rf "$pages"; mkdir -p "$pages"
  tar -C "$pages" --strip-components=1 -xJf "$tmp/report.tar.xz"
  echo "unpacked the report -> reports/gpu_check-$slug/index.html"
fi
