#!/usr/bin/env bash
# Start JupyterLab on 127.0.0.1 with a token, rooted at the notebooks folder.
#
# The committed notebooks are jupytext py:percent files; each gets a paired .ipynb
# (built here, gitignored) and jupytext keeps the two in sync while you edit.
# Environment: VENV (.venv), LAB_ROOT (notebooks), LAB_PORT (8888), LAB_TOKEN (random).
# The token reaches the server through its environment (JUPYTER_TOKEN), never its command
# line: other users can read a process's arguments (ps), not its environment.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
LAB_ROOT="${LAB_ROOT:-notebooks}"
LAB_PORT="${LAB_PORT:-8888}"
LAB_TOKEN="${LAB_TOKEN:-$("$VENV/bin/python" -c 'import secrets; print(secrets.token_hex(24))')}"
export JUPYTER_TOKEN="$LAB_TOKEN"
unset LAB_TOKEN

# Build (or refresh, keeping outputs) the .ipynb next to each .py notebook.
shopt -s nullglob
for py in "$LAB_ROOT"/[0-9][0-9]_*.py; do
  nb="${py%.py}.ipynb"
  if [ ! -f "$nb" ] || [ "$py" -nt "$nb" ]; then
    "$VENV/bin/jupytext" --quiet --to ipynb --update "$py" -o "$nb" 2>/dev/null \
      || "$VENV/bin/jupytext" --quiet --to ipynb "$py" -o "$nb"
  fi
done

extra=()
if [ "$(id -u)" = 0 ]; then
  extra+=(--allow-root)  # containers and CI run as root
fi

echo "JupyterLab: http://127.0.0.1:${LAB_PORT}/lab?token=${JUPYTER_TOKEN}"
exec "$VENV/bin/jupyter" lab \
  --no-browser \
  --ServerApp.ip=127.0.0.1 \
  --ServerApp.port="$LAB_PORT" \
  --ServerApp.port_retries=0 \
  --ServerApp.root_dir="$LAB_ROOT" \
  --ContentsManager.formats="ipynb,py:percent" \
  "${extra[@]}"
