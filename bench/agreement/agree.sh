#!/usr/bin/env bash
# Agreement with llama.cpp on files Orchard did not write (issue 12): Orchard writes a float
# model, llama.cpp's llama-quantize makes each quantized file, then both engines run the same
# token ids and the full-vocabulary log-probabilities at the last position are compared: their
# correlation r, the largest difference, and whether the greedy token is the same (with
# llama.cpp's own top-2 margin, so a near-tie reads as one).
#
#   LLAMA_CPP_DIR=<a built llama.cpp checkout> bench/agreement/agree.sh [BUILD_DIR] ARCH SHAPE TYPE...
#   e.g. ... agree.sh build qwen3moe tiny F32 Q8_0 Q4_K_M IQ4_XS MXFP4_MOE
# TYPE is llama-quantize's name (F32 runs the float file itself). Needs python3 with numpy.
# ORCHARD_AGREE_EVERY_EXPERT=1 rewrites a mixture of experts' float file so that every token
# chooses every expert (expert_used_count = expert_count, no expert groups) before quantizing:
# the routing then has no top-k left to tip at a near-tie, so what remains of a disagreement is
# the kernels' and the mixing weights', not a route chosen differently (uses LLAMA_CPP_DIR's gguf-py).
# Builds only the small reader next to this script (against LLAMA_CPP_DIR's headers and
# libllama), never llama.cpp itself.
set -euo pipefail
: "${LLAMA_CPP_DIR:?set LLAMA_CPP_DIR to a built llama.cpp checkout (include/, build/bin/)}"
build=${1:?usage: agree.sh BUILD_DIR ARCH SHAPE TYPE...}; arch=${2:?}; shape=${3:?}; shift 3
here=$(cd "$(dirname "$0")" && pwd)
work=${ORCHARD_AGREE_DIR:-/tmp/orchard-agree}
mkdir -p "$work"
reader="$work/llama_logits"
if [[ ! -x "$reader" || "$here/llama_logits.cpp" -nt "$reader" ]]; then
  "${CXX:-g++}" -O2 -std=c++17 "$here/llama_logits.cpp" -I"$LLAMA_CPP_DIR/include" -I"$LLAMA_CPP_DIR/ggml/include" \
    -L"$LLAMA_CPP_DIR/build/bin" -lllama -Wl,-rpath,"$LLAMA_CPP_DIR/build/bin" -o "$reader"
fi
variant=$shape
[[ "${ORCHARD_AGREE_EVERY_EXPERT:-0}" == 1 ]] && variant=$shape-every-expert
base="$work/$arch-$variant-F32.gguf"
if [[ ! -f "$base" ]]; then
  "$build/orchard" make-model --arch "$arch" --shape "$shape" --type f32 -o "$base.tmp" > /dev/null
  if [[ "$variant" != "$shape" ]]; then
    PYTHONPATH="$LLAMA_CPP_DIR/gguf-py" "${PYTHON:-python3}" - "$base.tmp" <<'PY'
import sys
import gguf

reader = gguf.GGUFReader(sys.argv[1], "r+")
arch = reader.fields["general.architecture"].contents()
def set_key(key, value):
    field = reader.fields.get(f"{arch}.{key}")
    if field is not None:
        field.parts[field.data[0]][0] = value
if f"{arch}.expert_count" not in reader.fields:
    sys.exit(f"{sys.argv[1]}: {arch} has no experts to choose")
set_key("expert_used_count", reader.fields[f"{arch}.expert_count"].contents())
set_key("expert_group_count", 1)  # llama.cpp wants fewer groups used than there are
set_key("expert_group_used_count", 1)
PY
  fi
  mv "$base.tmp" "$base"
fi
prompt=${ORCHARD_AGREE_PROMPT:-"Once upon a time there was a little robot who wanted to see the sea"}
ids=$("$build/orchard" tokenize -m "$base" "$prompt" | tr -cs '0-9' ' ')
for type in "$@"; do
  file="$work/$arch-$variant-$type.gguf"
  [[ -f "$file" ]] || "$LLAMA_CPP_DIR/build/bin/llama-quantize" "$base" "$file" "$type" > /dev/null 2>&1 ||
    { echo "$arch $variant $type: llama-quantize refused"; continue; }
  "$build/orchard" run -m "$file" -p "$prompt" -n 1 -t 2 --logits "$work/orchard.bin" > /dev/null 2>&1 ||
    { echo "$arch $variant $type: orchard failed"; continue; }
  # shellcheck disable=SC2086  # ids are words on purpose
  "$reader" "$file" "$work/llama.bin" $ids > /dev/null 2>&1 || { echo "$arch $variant $type: llama.cpp failed"; continue; }
  "${PYTHON:-python3}" - "$arch $variant $type" "$work/orchard.bin" "$work/llama.bin" <<'PY'
import sys
import numpy as np

label, ours, theirs = sys.argv[1], np.fromfile(sys.argv[2], np.float32), np.fromfile(sys.argv[3], np.float32)
def log_softmax(x):
    x = x.astype(np.float64)
    return x - x.max() - np.log(np.exp(x - x.max()).sum())
a, b = log_softmax(ours), log_softmax(theirs)
top2 = np.argsort(-b)[:2]
print(f"{label:24s} r={np.corrcoef(a, b)[0, 1]:.6f} max|Δ|={np.abs(a - b).max():.4f} "
      f"greedy same={a.argmax() == top2[0]} llama.cpp top-2 margin={b[top2[0]] - b[top2[1]]:.4f}")
PY
done
