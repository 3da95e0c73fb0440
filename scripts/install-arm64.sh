#!/usr/bin/env bash
# Installs what scripts/test-arm64-all.sh needs to cross-build Orchard for arm64 and test it under
# qemu-user on an x86-64 Debian 12: the aarch64 cross compiler, qemu-user, and the arm64 builds
# of the libraries Orchard links, from Debian's multiarch :arm64 packages (they install beside
# the host's, in /usr/lib/aarch64-linux-gnu). Not part of scripts/install-deps.sh: the main CI
# does not need them. Root; idempotent.
# Multiarch wants the host's copy of each shared library at the same version as the arm64 one,
# so apt may upgrade a few host packages (libssl3, zlib1g) to the archive's current version.
set -euo pipefail
source "$(dirname "$0")/lib/apt.sh"
# Header-only libraries (CLI11, nlohmann-json) and the web pages' node/npm are the host's
# (scripts/install-deps.sh). PostgreSQL and MPI are left out of the arm64 build.
packages=(
  g++-aarch64-linux-gnu qemu-user
  libfmt-dev:arm64 libspdlog-dev:arm64 libsqlite3-dev:arm64 libsodium-dev:arm64 libssl-dev:arm64
  libcpp-httplib-dev:arm64 libbrotli-dev:arm64 zlib1g-dev:arm64 libgtest-dev:arm64 libgmock-dev:arm64 libbenchmark-dev:arm64
)
dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
apt_install_missing "${packages[@]}"
