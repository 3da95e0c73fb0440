#!/usr/bin/env bash
# Gets a web page's browser test ready (web/world, web/chat), doing only what is missing:
#   npm ci in the page's folder when node_modules is missing; Debian's chromium when /usr/bin/chromium is
#   missing (needs root; scripts/install-deps.sh installs it too). Never downloads browsers
#   through playwright.
set -euo pipefail
web="${1:?usage: setup.sh <web/PAGE dir>}"
label="[$(basename "$web")]"
if [[ ! -d "$web/node_modules/playwright-core" ]]; then
  echo "$label npm ci in $web"
  (cd "$web" && npm ci --no-audit --no-fund)
fi
if [[ ! -x /usr/bin/chromium ]]; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "$label /usr/bin/chromium is missing: run 'apt-get install chromium' as root (or scripts/install-deps.sh)" >&2
    exit 1
  fi
  echo "$label installing Debian's chromium"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends chromium
fi
echo "$label browser test ready: $(/usr/bin/chromium --version 2>/dev/null || echo chromium)"
