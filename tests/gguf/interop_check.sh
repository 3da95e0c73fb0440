#!/usr/bin/env bash
# Checks that llama.cpp's gguf-py reads what orchard's Writer writes.
#   GGUF_PY=<llama.cpp>/gguf-py tests/gguf/interop_check.sh <build-dir>/tests/gguf/gguf_test
# Skips (exit 0) when GGUF_PY is unset; needs python3 with numpy.
set -euo pipefail
test_binary=${1:?usage: interop_check.sh <path to gguf_test>}
if [[ -z "${GGUF_PY:-}" ]]; then
  echo "interop_check: GGUF_PY not set (path to llama.cpp's gguf-py), skipping"
  exit 0
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
ORCHARD_GGUF_INTEROP_FILE="$dir/interop.gguf" "$test_binary" --gtest_filter=GgufInterop.* > "$dir/log" ||
  { cat "$dir/log"; exit 1; }
PYTHONPATH="$GGUF_PY" "${PYTHON:-python3}" - "$dir/interop.gguf" <<'PY'
import sys
import numpy as np
import gguf

r = gguf.GGUFReader(sys.argv[1])


def f(key):
    field = r.fields[key]
    if hasattr(field, "contents"):
        return field.contents()
    # gguf-py before ReaderField.contents() (early 2025): decode from the field's parts.
    types = field.types
    if types[0] == gguf.GGUFValueType.ARRAY:
        items = [field.parts[i] for i in field.data]
        if types[-1] == gguf.GGUFValueType.STRING:
            return [bytes(p).decode() for p in items]
        return [p.tolist()[0] for p in items]
    part = field.parts[field.data[0]]
    return bytes(part).decode() if types[0] == gguf.GGUFValueType.STRING else part.tolist()[0]


checks = {
    "general.architecture": "llama", "general.name": "orchard-interop", "general.alignment": 64,
    "llama.block_count": 2, "llama.rope.freq_base": 10000.0, "test.i8": -7, "test.u64": 1 << 40,
    "test.f64": 0.25, "test.bool": True, "tokenizer.ggml.tokens": ["<s>", "</s>", "hé"],
    "tokenizer.ggml.scores": [0.0, -1.0, -2.5], "test.empty": [],
}
for key, want in checks.items():
    got = f(key)
    assert got == want, f"{key}: got {got!r}, want {want!r}"
assert r.alignment == 64 and r.data_offset % 64 == 0
tensors = {t.name: t for t in r.tensors}
want = {
    "token_embd.weight": (0, [3, 2], 24), "blk.0.attn_q.weight": (2, [64, 2], 72),
    "blk.0.ffn_down.weight": (14, [256], 210), "output_norm.weight": (1, [5], 10),
    "blk.0.attn_k.weight": (8, [32, 1, 3], 102), "blk.0.ffn_up.weight": (12, [256, 2], 288),
    "blk.0.attn_v.weight": (30, [4], 8),
}
assert list(tensors) == list(want), list(tensors)
for name, (code, shape, n_bytes) in want.items():
    t = tensors[name]
    assert int(t.tensor_type) == code and t.shape.tolist() == shape and t.n_bytes == n_bytes, (name, t)
    assert t.data_offset % 64 == 0, name
assert np.array_equal(tensors["token_embd.weight"].data, np.arange(6, dtype=np.float32).reshape(2, 3) + 0.5)
assert tensors["output_norm.weight"].data.tolist() == [1.0, 2.0, 0.0, -1.0, 1.0]
assert (tensors["blk.0.ffn_up.weight"].data == 0x44).all()
print(f"interop_check: gguf-py read {len(r.fields)} fields and {len(r.tensors)} tensors as written")
PY
