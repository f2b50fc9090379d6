#!/usr/bin/env bash
# Install Debian's chromium for the browser tests when it is missing and we are root.
# Playwright drives /usr/bin/chromium directly, so no `playwright install` is needed.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "[setup] installing Debian's chromium" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
else
  echo "[setup] chromium missing and not root: the browser tests will be skipped" >&2
fi
