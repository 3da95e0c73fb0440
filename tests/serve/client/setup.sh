#!/bin/sh
# Prepares the client tests in a build folder: copies the npm project there and installs its
# packages with `npm ci` when the lock file changed since the last install (or never ran), so the
# source tree gets no node_modules and a fresh machine needs only node, npm and the registry.
#   setup.sh DEST_DIR
set -eu
src=$(cd "$(dirname "$0")" && pwd)
dest=$1
mkdir -p "$dest"
cp "$src"/package.json "$src"/package-lock.json "$src"/*.mjs "$dest"/
if ! cmp -s "$src/package-lock.json" "$dest/node_modules/.installed-lock.json" 2>/dev/null; then
  (cd "$dest" && npm ci --no-audit --no-fund)
  cp "$src/package-lock.json" "$dest/node_modules/.installed-lock.json"
fi
