#!/usr/bin/env bash
# Installs every Debian package Orchard needs to build, run and test. Idempotent.
set -euo pipefail
source "$(dirname "$0")/lib/apt.sh"
packages=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libcpp-httplib-dev libbrotli-dev zlib1g-dev libspdlog-dev libfmt-dev
  libopenmpi-dev openmpi-bin
  libsodium-dev libsqlite3-dev libpq-dev postgresql libssl-dev
  iproute2 util-linux procps
  chromium wrk python3 curl
)
# The World page is built with npm and tested with playwright-core, which needs Node.js 20 or
# later; Debian 12's own nodejs (18) builds the page, and the browser test then skips itself.
command -v node >/dev/null 2>&1 || packages+=(nodejs npm)
apt_install_missing "${packages[@]}"
