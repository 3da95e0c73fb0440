#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install what Orchard needs, build it, write the
# built-in default model (no download) and generate text with it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
mkdir -p models
# The default model is synthetic: its weights are written from the built-in corpus (make-model
# --fit-corpus), so it strings together phrases in words without a download; Q8_0 keeps its codes.
[ -f models/default.gguf ] || build/orchard make-model --arch llama --shape small --type q8_0 --fit-corpus --seed 1 -o models/default.gguf
build/orchard run -m models/default.gguf -p "Once upon a time" -n 48 --temp 0.8 --seed 42
