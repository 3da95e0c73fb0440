#!/usr/bin/env bash
# Gets the World page's browser test ready, doing only what is missing:
#   npm ci in web/world when node_modules is missing; Debian's chromium when /usr/bin/chromium is
#   missing (needs root; scripts/install-deps.sh installs it too). Never downloads browsers
#   through playwright.
set -euo pipefail
web="${1:?usage: setup.sh <web/world dir>}"
if [[ ! -d "$web/node_modules/playwright-core" ]]; then
  echo "[world] npm ci in $web"
  (cd "$web" && npm ci --no-audit --no-fund)
fi
if [[ ! -x /usr/bin/chromium ]]; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "[world] /usr/bin/chromium is missing: run 'apt-get install chromium' as root (or scripts/install-deps.sh)" >&2
    exit 1
  fi
  echo "[world] installing Debian's chromium"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends chromium
fi
echo "[world] browser test ready: $(/usr/bin/chromium --version 2>/dev/null || echo chromium)"
