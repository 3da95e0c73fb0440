#!/usr/bin/env bash
# Installs what Orchard needs, builds it with its tests and runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh -DORCHARD_BUILD_TESTS=ON
cd build
ctest --output-on-failure -j "$(nproc)" --timeout 600
