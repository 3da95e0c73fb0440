#!/usr/bin/env bash
# Installs what scripts/test-arm64-all.sh needs to cross-build Orchard for arm64 and test it under
# qemu-user on an x86-64 Debian 12: the aarch64 cross compiler, qemu-user, and the arm64 builds
# of the libraries Orchard links, from Debian's multiarch :arm64 packages (they install beside
# the host's, in /usr/lib/aarch64-linux-gnu). Not part of scripts/install-deps.sh: the main CI
# does not need them. Root; idempotent.
# Multiarch wants the host's copy of each shared library at the same version as the arm64 one,
# so apt may upgrade a few host packages (libssl3, zlib1g) to the archive's current version.
# --quick: only what scripts/test-arm64.sh needs (the cross compiler with its own arm64 libc and
# libstdc++, qemu-user, googletest's sources): no multiarch, so the host's packages stay as they
# are. .ci/run uses it.
set -euo pipefail
source "$(dirname "$0")/lib/apt.sh"
if [[ ${1:-} == --quick ]]; then
  apt_install_missing g++-aarch64-linux-gnu qemu-user googletest
  exit 0
fi
# Header-only libraries (CLI11, nlohmann-json) and the web pages' node/npm are the host's
# (scripts/install-deps.sh), and so is the PostgreSQL server the store's tests start (an x86-64
# program, run natively). MPI is left out of the arm64 build (docs/arm64.md).
packages=(
  g++-aarch64-linux-gnu qemu-user
  libfmt-dev:arm64 libspdlog-dev:arm64 libsqlite3-dev:arm64 libsodium-dev:arm64 libssl-dev:arm64
  libcpp-httplib-dev:arm64 libbrotli-dev:arm64 zlib1g-dev:arm64 libgtest-dev:arm64 libgmock-dev:arm64 libbenchmark-dev:arm64
  libpq-dev  # the host's: its headers serve the arm64 build too (below)
)
dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
apt_install_missing "${packages[@]}"
# libpq: the arm64 library only. Debian 12's libpq-dev cannot be installed for two architectures
# at once (installing libpq-dev:arm64 removes the host's), so the build takes the host's headers
# (the same on both: LP64) and links the arm64 libpq.so.5 through a pkg-config file of its own
# (cmake/aarch64-linux-gnu.cmake). At the host's version when it has one, so that apt upgrades
# nothing of the host's PostgreSQL.
if ! dpkg -s libpq5:arm64 >/dev/null 2>&1; then
  host_pq=$(dpkg-query -W -f='${Version}' libpq5:amd64 2>/dev/null || true)
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "libpq5:arm64${host_pq:+=$host_pq}"
fi
