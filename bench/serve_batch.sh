#!/usr/bin/env bash
# Concurrent completion requests through HTTP: aggregate generated tok/s of N requests at once against
# `orchard serve --parallel N` and, side by side in the same run, `llama-server -np N` on the same
# file, beside the engine's rate on the same work (bench_batch_decode with PROMPT: N sequences,
# prompts of the server's prompt length in one batched pass, then TOKENS tokens each), so the
# server's overhead reads as the ratio orchard/engine, and, with ORCHARD_BENCH_SPLIT=1, a 2-rank
# split server (--world 2) at 1 and 8 requests.
#
# Every request asks /v1/completions for exactly TOKENS tokens (ignore_eos; temperature 1, no
# top-k/top-p/min-p, a seed each) after a short prompt; the rate is all completion tokens over the
# wall time from the first request sent to the last answer, so it includes the prompts, as the
# engine's does. Each figure is the best of ROUNDS rounds. Servers run one at a time with THREADS threads, each slot with a context of 512.
#
#   bench/serve_batch.sh [BUILD_DIR]     (default: build)
#   env: ORCHARD_BENCH_MODEL (default: the TinyLlama-shaped Q4_0 synthetic file, made on first use
#        in ORCHARD_BENCH_MODELS, default /tmp/orchard-bench), ORCHARD_BENCH_THREADS (2),
#        ORCHARD_BENCH_CONCURRENCY ("1 2 4 8 16"), ORCHARD_BENCH_TOKENS (64), ORCHARD_BENCH_ROUNDS (2),
#        ORCHARD_BENCH_SPLIT (1; 0 skips the split server), ORCHARD_BENCH_SPLIT_STRATEGY (tensor),
#        ORCHARD_BENCH_ENGINE (1; 0 skips bench_batch_decode),
#        LLAMA_SERVER (default /work/llama-src/build/bin/llama-server when it exists; empty: skip),
#        ORCHARD_BENCH_BASELINE (another build directory: its orchard serves each N just before this
#        build's, so a change reads as a ratio from alternated runs on a loaded host; empty: skip).
# llama-server (2026-12 sources) answers 500 "The model produced output that does not match the
# expected Content-only format" to most requests on the synthetic file (its random text), chat or
# not, --no-jinja or not: its column needs a real model's file (ORCHARD_BENCH_MODEL).
set -euo pipefail
build=${1:-build}
models=${ORCHARD_BENCH_MODELS:-/tmp/orchard-bench}
threads=${ORCHARD_BENCH_THREADS:-2}
concurrency=${ORCHARD_BENCH_CONCURRENCY:-"1 2 4 8 16"}
tokens=${ORCHARD_BENCH_TOKENS:-64}
rounds=${ORCHARD_BENCH_ROUNDS:-2}
split=${ORCHARD_BENCH_SPLIT:-1}
engine=${ORCHARD_BENCH_ENGINE:-1}
split_strategy=${ORCHARD_BENCH_SPLIT_STRATEGY:-tensor}
baseline=${ORCHARD_BENCH_BASELINE:-}
default_llama=/work/llama-src/build/bin/llama-server
llama=${LLAMA_SERVER-$([ -x "$default_llama" ] && echo "$default_llama" || true)}
ctx=512
mkdir -p "$models"
model=${ORCHARD_BENCH_MODEL:-$models/llama-tinyllama-1.1b-q4_0.gguf}
[ -f "$model" ] || "$build/orchard" make-model --arch llama --shape tinyllama-1.1b --type q4_0 --seed 1 -o "$model"

port=$((20000 + RANDOM % 20000))
server_pid=""
log=$(mktemp)
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -f "$log"
}
trap cleanup EXIT

wait_ready() {  # url
  for _ in $(seq 600); do
    curl -sf "$1/health" >/dev/null 2>&1 && return 0
    kill -0 "$server_pid" 2>/dev/null || { cat "$log" >&2; return 1; }
    sleep 0.1
  done
  echo "server at $1 did not become ready" >&2
  return 1
}

stop_server() {
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}

# Prints "tok/s completion_tokens prompt_tokens other% mean_batch": N concurrent completions
# against the server at $1, best of rounds; prompt_tokens is the mean prompt length the server
# counted (usage), so that the engine's figure can be taken on prompts of the same length. The
# last two come from the server's /metrics over the measured rounds alone (the warm-up request's
# rounds of one sequence left out): the share of the rounds' time spent outside the engine's
# pass, and the mean sequences per round; "- -" where the server has no such metrics.
load() {  # url n
  python3 - "$1" "$2" "$tokens" "$rounds" <<'EOF'
import json, sys, threading, time, urllib.request
url, n, tokens, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
topics = ["apples", "rivers", "the moon", "bread", "trains", "winter", "music", "bees"]
def ask(i, out, topic=None):
    # ignore_eos (llama-server's, and orchard's) makes every request generate `tokens` tokens, as
    # the engine's figure does: a request that ended early would leave the batch short.
    body = {"prompt": f"Here is a short story about {topic or topics[i % len(topics)]}. Once upon a time,",
            "max_tokens": tokens, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "seed": 1000 + i,
            "ignore_eos": True}
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=1800) as r:
        usage = json.load(r)["usage"]
        out[i] = (usage["completion_tokens"], usage["prompt_tokens"])
def metrics():
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            text = r.read().decode()
    except Exception:
        return None
    v = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        key, value = line.rsplit(" ", 1)
        v[key] = float(value)
    return v
def round_():
    out = [(0, 0)] * n
    threads = [threading.Thread(target=ask, args=(i, out)) for i in range(n)]
    start = time.monotonic()
    for t in threads: t.start()
    for t in threads: t.join()
    completion = sum(c for c, _ in out)
    return completion / (time.monotonic() - start), completion, sum(p for _, p in out) / n
# Warm-up (the first request pays page faults) on a topic of its own, so that no measured
# request finds its whole prompt in a server's prompt cache: the engine computes every prompt.
ask(0, [0], "a lighthouse")
before = metrics()
best = max((round_() for _ in range(rounds)), key=lambda r: r[0])
after = metrics()
split = "- -"
if before is not None and "orchard_steps_total" in before:
    d = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    forward = d.get('orchard_step_seconds_total{part="forward"}', 0)
    other = d.get('orchard_step_seconds_total{part="other"}', 0)
    split = "%.1f %.2f" % (100 * other / max(forward + other, 1e-9),
                           d.get("orchard_step_sequences_total", 0) / max(d.get("orchard_steps_total", 0), 1))
print(f"{best[0]:.2f} {best[1]} {best[2]:.1f} {split}")
EOF
}

run_orchard() {  # n threads [extra flags...]   (env orchard_dir: the build to run, default $build)
  local n=$1 t=$2; shift 2
  "${orchard_dir:-$build}/orchard" serve -m "$model" --port "$port" --parallel "$n" -c "$ctx" -t "$t" "$@" >"$log" 2>&1 &
  server_pid=$!
  wait_ready "http://127.0.0.1:$port"
  local result
  result=$(load "http://127.0.0.1:$port" "$n")
  stop_server
  echo "$result"
}

run_llama() {  # n
  local n=$1
  "$llama" -m "$model" --port "$port" -np "$n" -c $((ctx * n)) -t "$threads" -tb "$threads" --no-webui >"$log" 2>&1 &
  server_pid=$!
  wait_ready "http://127.0.0.1:$port"
  local result
  result=$(load "http://127.0.0.1:$port" "$n")
  stop_server
  echo "$result"
}

echo "# HTTP: $tokens tokens per request, $threads threads, best of $rounds rounds (load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?'))"
echo "# engine: the same N sequences, prompts of the server's prompt length in one batched pass, then $tokens tokens each (bench_batch_decode)"
for n in $concurrency; do
  base=-
  if [ -n "$baseline" ]; then read -r base _ <<<"$(orchard_dir=$baseline run_orchard "$n" "$threads")"; fi
  read -r ours _ prompt_tokens other mean_batch <<<"$(run_orchard "$n" "$threads")"
  alone=-
  if [ "$engine" = 1 ]; then
    alone=$("$build/bench/bench_batch_decode" "$model" "$threads" "$tokens" "$rounds" "$n" "$(printf '%.0f' "$prompt_tokens")")
  fi
  theirs=-
  if [ -n "$llama" ]; then read -r theirs _ <<<"$(run_llama "$n")"; fi
  echo "$n $ours $alone $theirs $other $mean_batch $base"
done | python3 -c '
import sys
print("%-9s %14s %7s %13s %7s %15s %16s %7s %14s %8s %11s %14s %11s" % (
    "requests", "orchard tok/s", "x one", "engine tok/s", "x one", "orchard/engine", "llama.cpp tok/s", "x one",
    "orchard/llama", "other %", "mean batch", "baseline tok/s", "x baseline"))
first = None
def number(text):
    return None if text == "-" else float(text)
for line in sys.stdin:
    n, ours, alone, theirs, other, batch, base = line.split()
    ours, alone, theirs, base = float(ours), number(alone), number(theirs), number(base)
    first = first or (ours, alone, theirs)
    e = "%13.2f %6.2fx %14.2fx" % (alone, alone / first[1], ours / alone) if alone else "%13s %7s %15s" % ("-", "-", "-")
    t = "%16.2f %6.2fx %13.2fx" % (theirs, theirs / first[2], ours / theirs) if theirs else "%16s %7s %14s" % ("-", "-", "-")
    b = "%14.2f %10.2fx" % (base, ours / base) if base else "%14s %11s" % ("-", "-")
    print("%-9s %14.2f %6.2fx %s %s %8s %11s %s" % (n, ours, ours / first[0], e, t, other, batch, b))
    sys.stdout.flush()'

if [ "$split" = 1 ]; then
  echo
  echo "# split server: --world 2 --strategy $split_strategy, one thread per rank"
  for n in 1 8; do
    read -r rate _ _ other mean_batch <<<"$(run_orchard "$n" 1 --world 2 --strategy "$split_strategy")"
    echo "$n $rate $other $mean_batch"
  done | python3 -c '
import sys
first = None
for line in sys.stdin:
    n, rate, other, batch = line.split()
    rate = float(rate)
    first = first or rate
    print("%-9s %14.2f %6.2fx   other %s%%, mean batch %s" % (n, rate, rate / first, other, batch))'
fi
