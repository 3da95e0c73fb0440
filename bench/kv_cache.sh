#!/usr/bin/env bash
# KV cache types and prompt caching (issue 15) on a TinyLlama-shaped Q4_0 model, beside llama.cpp:
#  1. decode (tg64) from depth 0 and from DEPTH tokens already in the cache, for f32, f16 and
#     q8_0 caches (`orchard bench -d`), and llama-bench -d with the same cache types;
#  2. prompts: pp512 and pp$DEPTH (f16 cache, both engines);
#  3. time to first token of a request that shares a PREFIX-token prefix with the one before it,
#     against that first request (`orchard serve`, max_tokens 1, whole requests timed).
# Usage: [LLAMA_BENCH=path/to/llama-bench] [DEPTH=4096] [PREFIX=2000] [THREADS=2] [GEN=64]
#        [TYPES="f32 f16 q8_0"] [LLAMA_TYPES="$TYPES"] [PROMPTS=1] bash bench/kv_cache.sh [build dir]
# (PROMPTS=0 skips the prompt section: on a loaded host pp$DEPTH alone takes minutes.)
set -euo pipefail
build=${1:-build}
orchard="$build/orchard"
depth=${DEPTH:-4096}
prefix=${PREFIX:-2000}
threads=${THREADS:-2}
gen=${GEN:-64}
types=${TYPES:-"f32 f16 q8_0"}
llama_types=${LLAMA_TYPES:-"f16 q8_0"}  # llama-bench refuses an f32 cache (-ctk f32)
models=${ORCHARD_BENCH_MODELS:-/tmp/orchard-bench}
model="$models/llama-tinyllama-1.1b-q4_0.gguf"
mkdir -p "$models"
[ -f "$model" ] || "$orchard" make-model --arch llama --shape tinyllama-1.1b --type q4_0 --seed 1 -o "$model" >/dev/null

echo "== decode tg$gen at depth 0 and $depth ($threads threads)"
for type in $types; do
  "$orchard" bench -m "$model" -p 0 -n "$gen" -d "0,$depth" -r 1 -t "$threads" --cache-type "$type" --json |
    python3 -c 'import json,sys
for l in sys.stdin: print("orchard   {cache_type:5} d{depth:<5} tg{gen_tokens} {gen_tok_s:.2f} tok/s".format(**json.loads(l)))'
done
if [ -n "${LLAMA_BENCH:-}" ]; then
  for type in $llama_types; do
    fa=0; [ "$type" = q8_0 ] && fa=1  # llama.cpp quantizes the V cache only with flash attention
    "$LLAMA_BENCH" -m "$model" -p 0 -n "$gen" -d "0,$depth" -r 1 -t "$threads" -ctk "$type" -ctv "$type" -fa "$fa" -o json |
      python3 -c 'import json,sys
for j in json.load(sys.stdin): print("llama.cpp {type_k:5} d{n_depth:<5} tg{n_gen} {avg_ts:.2f} tok/s".format(**j))'
  done
fi

[ "${PROMPTS:-1}" = 0 ] || {
echo "== prompts pp512 and pp$depth (f16 cache)"
"$orchard" bench -m "$model" -p 512 -n 0 -r 1 -t "$threads" --json | python3 -c 'import json,sys; print("orchard   pp{prompt_tokens} {prompt_tok_s:.2f} tok/s".format(**json.load(sys.stdin)))'
"$orchard" bench -m "$model" -p "$depth" -n 0 -r 1 -t "$threads" --json | python3 -c 'import json,sys; print("orchard   pp{prompt_tokens} {prompt_tok_s:.2f} tok/s".format(**json.load(sys.stdin)))'
if [ -n "${LLAMA_BENCH:-}" ]; then
  "$LLAMA_BENCH" -m "$model" -p "512,$depth" -n 0 -r 1 -t "$threads" -o json |
    python3 -c 'import json,sys
for j in json.load(sys.stdin): print("llama.cpp pp{n_prompt} {avg_ts:.2f} tok/s".format(**j))'
fi
}

echo "== time to first token, a second request sharing a $prefix-token prefix"
log=$(mktemp)
"$orchard" serve -m "$model" --port 0 --parallel 2 -c $((prefix + 64)) -t "$threads" >"$log" 2>/dev/null &
server=$!
trap 'kill $server 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 300); do grep -q listening "$log" && break; sleep 0.2; done
url=$(sed -n 's/^listening on //p' "$log")
python3 - "$url" "$prefix" <<'EOF'
import json, random, sys, time, urllib.request
url, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(7)
shared = [rng.randrange(100, 32000) for _ in range(n)]
def ask(tail):
    body = json.dumps({"prompt": shared + tail, "max_tokens": 1, "temperature": 0}).encode()
    start = time.monotonic()
    with urllib.request.urlopen(urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})) as r:
        answer = json.load(r)
    return time.monotonic() - start, answer["usage"]["prompt_tokens_details"]["cached_tokens"]
first, c1 = ask([rng.randrange(100, 32000) for _ in range(16)])
second, c2 = ask([rng.randrange(100, 32000) for _ in range(16)])
print(f"first request  {first:.3f} s (cached {c1} of {n + 16})")
print(f"second request {second:.3f} s (cached {c2} of {n + 16}): {second / first:.3f}x the first")
EOF
