#!/usr/bin/env bash
# Issue-4 benchmark: two one-core "machines" on this host. Each rank runs in its own network
# namespace, joined by a veth pair (so traffic crosses a real network stack, over the TCP ring
# backend), pinned to its own core. TinyLlama-shaped Q4_0, measured against one rank on one
# core and one rank with 2 threads on the same two cores (what perfect splitting reaches here,
# since both "machines" share one memory bus), with a link-latency sweep (0, 50, 300 µs).
#
#   sudo bench/parallel.sh [BUILD_DIR]    (needs root for ip netns; models in $ORCHARD_BENCH_MODELS)
set -euo pipefail
build=$(realpath "${1:-build}")
here=$(cd "$(dirname "$0")" && pwd)
models=${ORCHARD_BENCH_MODELS:-/tmp/orchard-bench}
model=${ORCHARD_BENCH_MODEL:-$models/tinyllama-1.1b-q4_0.gguf}
prompt=${ORCHARD_BENCH_PROMPT:-2048}
gen=${ORCHARD_BENCH_GEN:-64}
latencies=${ORCHARD_BENCH_LATENCIES:-"0 50 300"}
mkdir -p "$models"
[ -f "$model" ] || "$build/orchard" make-model --arch llama --shape tinyllama-1.1b --type q4_0 --seed 1 -o "$model"

a=orchard-bench-a b=orchard-bench-b
cleanup() { ip netns del $a 2>/dev/null || true; ip netns del $b 2>/dev/null || true; rm -f "$hostfile"; }
hostfile=$(mktemp --suffix=.json)
trap cleanup EXIT
cleanup
ip netns add $a && ip netns add $b
ip link add veth-oa netns $a type veth peer name veth-ob netns $b
ip -n $a addr add 10.77.0.1/24 dev veth-oa && ip -n $a link set veth-oa up && ip -n $a link set lo up
ip -n $b addr add 10.77.0.2/24 dev veth-ob && ip -n $b link set veth-ob up && ip -n $b link set lo up
echo '[{"ssh": "'$a'", "ips": ["10.77.0.1"]}, {"ssh": "'$b'", "ips": ["10.77.0.2"]}]' > "$hostfile"

bench() {  # strategy ranks cpus latency
  local strategy=$1 ranks=$2 cpus=$3 latency=$4
  if [ "$ranks" = 1 ]; then
    taskset -c "$cpus" "$build/orchard" bench -m "$model" -p "$prompt" -n "$gen" -r 1 -b ${ORCHARD_BENCH_BATCH:-256} -t "$(echo "$cpus" | tr ',' '\n' | wc -l)" --json
  else
    "$build/orchard" launch --hostfile "$hostfile" --ssh "$here/netns-ssh.sh" --backend ring \
      --link-latency-us "$latency" -- sh -c \
      "exec taskset -c \$ORCHARD_RANK '$build/orchard' bench -m '$model' -p $prompt -n $gen -r 1 -b ${ORCHARD_BENCH_BATCH:-256} -t 1 --strategy $strategy --json"
  fi
}

results=$(mktemp)
{
  echo "single-1core 0 $(bench single 1 0 0)"
  echo "single-2threads 0 $(bench single 1 0,1 0)"
  for latency in $latencies; do
    echo "pipeline $latency $(bench pipeline 2 - "$latency")"
    echo "tensor $latency $(bench tensor 2 - "$latency")"
  done
} > "$results"
python3 - "$results" "$prompt" "$gen" <<'PY'
import json, sys
rows = []
for line in open(sys.argv[1]):
    name, latency, payload = line.split(" ", 2)
    rows.append((name, int(latency), json.loads(payload)))
base = next(r for n, _, r in rows if n == "single-1core")
two = next(r for n, _, r in rows if n == "single-2threads")
print(f"TinyLlama-1.1B Q4_0, pp{sys.argv[2]} / tg{sys.argv[3]}, ranks in 2 network namespaces over veth (TCP ring), one core each")
print(f"{'run':<16} {'link µs':>8} {'pp tok/s':>9} {'tg tok/s':>9} {'pp ×1core':>10} {'tg ×1core':>10} {'tg ×2thr':>9}")
for name, latency, r in rows:
    print(f"{name:<16} {latency:>8} {r['prompt_tok_s']:>9.1f} {r['gen_tok_s']:>9.1f} "
          f"{r['prompt_tok_s'] / base['prompt_tok_s']:>10.2f} {r['gen_tok_s'] / base['gen_tok_s']:>10.2f} "
          f"{r['gen_tok_s'] / two['gen_tok_s']:>9.2f}")
PY
rm -f "$results"
