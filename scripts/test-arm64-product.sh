#!/usr/bin/env bash
# The product as a user runs it, on arm64 under qemu (after scripts/test-arm64-all.sh --build-only):
# orchard make-model, orchard run, a 2-rank split (pipeline, then tensor) that must give the single
# process's greedy tokens, orchard serve answered by curl with the tokens orchard run gave, and
# the official openai npm client's chat (whole and streamed) and tool-call round trip.
# With an x86-64 orchard at hand (ORCHARD_X86, default build/orchard), its greedy tokens on the
# same file are the reference for the arm64 ones too.
# Usage: scripts/test-arm64-product.sh   (ORCHARD_ARM64_BUILD: build folder, default build-arm64-all)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${ORCHARD_ARM64_BUILD:-$root/build-arm64-all}
orchard=$build/orchard
x86=${ORCHARD_X86:-$root/build/orchard}
source "$root/scripts/lib/arm64-binfmt.sh"

if [[ -z ${ORCHARD_ARM64_NAMESPACE:-} ]]; then
  file "$orchard" | grep -q 'ARM aarch64' || { echo "[arm64] $orchard is not an arm64 binary: build it first" >&2; exit 2; }
  arm64_binfmt_check
  ORCHARD_ARM64_NAMESPACE=1 arm64_binfmt_run bash "$0" "$@"
  exit
fi

work=$(mktemp -d)
server=
cleanup() {
  [[ -n $server ]] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "[arm64] FAIL: $*" >&2; exit 1; }
step() { echo "[arm64] \$ $*" >&2; }
tokens() { sed -n 's/.*"tokens":\(\[[0-9,]*\]\).*/\1/p'; }

model=$work/tiny.gguf
prompt="The orchard in spring"
step orchard make-model --arch llama --shape tiny --type q8_0 -o "$model"
"$orchard" make-model --arch llama --shape tiny --type q8_0 -o "$model"

run=(run -m "$model" -p "$prompt" -n 16 --json -t 2)
step orchard "${run[@]}"
single=$("$orchard" "${run[@]}" | tokens)
[[ -n $single ]] || fail "orchard run printed no tokens"
echo "[arm64] single process: $single"

if [[ -x $x86 ]] && file "$x86" | grep -q 'x86-64'; then
  reference=$("$x86" "${run[@]}" | tokens)
  echo "[arm64] x86-64 reference: $reference"
  [[ $single == "$reference" ]] || fail "arm64 tokens $single differ from x86-64's $reference"
fi

for strategy in pipeline tensor; do
  step orchard "${run[@]}" --world 2 --strategy $strategy
  split=$("$orchard" "${run[@]}" --world 2 --strategy $strategy | tokens)
  echo "[arm64] 2 ranks, $strategy: $split"
  [[ $split == "$single" ]] || fail "the $strategy split gave $split, the single process $single"
done

port_file=$work/port
step orchard serve -m "$model" --port 0 -t 2
"$orchard" serve -m "$model" --port 0 -t 2 >"$work/serve.log" 2>&1 &
server=$!
port=
for _ in $(seq 600); do
  port=$(sed -n 's/.*listening on [^ ]*:\([0-9][0-9]*\).*/\1/p' "$work/serve.log" | head -1)
  [[ -n $port ]] && break
  kill -0 "$server" 2>/dev/null || { cat "$work/serve.log" >&2; fail "orchard serve exited"; }
  sleep 0.1
done
[[ -n $port ]] || { cat "$work/serve.log" >&2; fail "orchard serve did not say its port within a minute"; }
request='{"model":"tiny","prompt":"'"$prompt"'","max_tokens":16,"temperature":0}'
step curl -s http://127.0.0.1:$port/v1/completions -d "$request"
reply=$(curl -sS --max-time 120 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' -d "$request")
echo "[arm64] serve answered: $reply"
text=$(printf '%s' "$reply" | python3 -c 'import json, sys; print(json.load(sys.stdin)["choices"][0]["text"], end="")')
expected=$("$orchard" "${run[@]}" | python3 -c 'import json, sys; print(json.load(sys.stdin)["text"], end="")')
[[ $text == "$expected" ]] || fail "serve's completion '$text' is not orchard run's '$expected'"

# The official openai npm client against the arm64 server, with the suite's own client tests
# (tests/serve/client; each starts its own server): a chat completion whole and streamed (they
# must agree), and a tool call answered by a tool result fed back. Their packages come from the
# build folder's copy (the suite's serve_client_setup, or setup.sh here: npm ci needs the registry).
client=$build/tests/serve/client
if command -v node >/dev/null && { [[ -d $client/node_modules/openai ]] || sh "$root/tests/serve/client/setup.sh" "$client" >&2; }; then
  for check in "api_test.mjs|chat completion, whole and streamed, agree" \
               "structured_test.mjs|a tool result fed back is rendered into the prompt and answered"; do
    script=${check%%|*} name=${check#*|}
    step node --test-name-pattern "'$name'" "$script" orchard
    out=$(cd "$client" && node --test-name-pattern "$name" "$script" "$orchard" 2>&1) || { echo "$out" >&2; fail "openai client: $name"; }
    grep -q '^# pass [1-9]' <<<"$out" && grep -q '^# fail 0' <<<"$out" || { echo "$out" >&2; fail "openai client: '$name' did not run and pass"; }
    echo "[arm64] openai client, $name: $(grep -E '^# (pass|skipped|duration_ms) ' <<<"$out" | sed 's/^# //' | paste -sd' ')"
  done
else
  fail "node or the openai npm client is missing: the client checks cannot run"
fi
echo "[arm64] all product checks passed"
