#!/usr/bin/env bash
# Issue-14 benchmark: expert parallelism against tensor and pipeline splits of a mixture of
# experts, on two one-core "machines" of this host. Each rank runs in its own network namespace,
# joined by a veth pair (TCP ring backend), pinned to its own core; moe-3b (Qwen3-30B-A3B's
# layer, 16 layers, 32 experts of which 4 per token) at Q4_K_M. Each split is measured against
# one rank on one core and one rank with 2 threads on the same two cores, and beside the
# planner's prediction for it (machine figures from `orchard plan`'s probe with one thread: the
# model's weight types, its attention).
#
#   sudo bench/expert.sh [BUILD_DIR]    (needs root for ip netns; models in $ORCHARD_BENCH_MODELS)
#
# ORCHARD_BENCH_SPLITS (default "expert tensor pipeline") lists the 2-rank runs; the expert
# split runs with the replicated experts its plan chose (`orchard plan`'s expert_replicas, shown
# as expert/rN); "expertN" is the expert split with N replicas (expert0: none, expert32: every
# expert of moe-3b on both ranks, so each step's choices split evenly); "expert+busy"
# is the expert split with ORCHARD_BUSY_POLL=1 (each rank spins on its socket instead of
# sleeping in poll() while it waits for the other). ORCHARD_BENCH_ROUNDS repeats the whole set,
# one round after another, so that the ratios of each round are measured side by side.
# ORCHARD_BENCH_OTHER=/path/to/another/orchard runs each split again with that build right after
# this one's (rows NAME@other), e.g. the build before a comm change.
# Each row shows measured ÷ predicted (the issue asks for 0.75-1.25) and, for the splits,
# measured ÷ one rank with 2 threads (the issue asks for ≥ 0.95 from the expert split's decode).
# ORCHARD_BENCH_CPUS (default "0 1") names the two CPUs: rank r and the single runs' threads
# on them, e.g. "2 3" on a host whose CPU 0 takes the interrupts.
# About 6 minutes on a quiet 2-core host (one round: 5 runs, each loading the 1.9 GB model).
set -euo pipefail
build=$(realpath "${1:-build}")
here=$(cd "$(dirname "$0")" && pwd)
models=${ORCHARD_BENCH_MODELS:-/tmp/orchard-bench}
type=${ORCHARD_BENCH_TYPE:-q4_k_m}
model=${ORCHARD_BENCH_MODEL:-$models/qwen3moe-moe-3b-$type.gguf}
prompt=${ORCHARD_BENCH_PROMPT:-256}
gen=${ORCHARD_BENCH_GEN:-32}
batch=${ORCHARD_BENCH_BATCH:-256}
read -r cpu0 cpu1 <<<"${ORCHARD_BENCH_CPUS:-0 1}"
mkdir -p "$models"
[ -f "$model" ] || "$build/orchard" make-model --arch qwen3moe --shape moe-3b --type "$type" --seed 1 -o "$model"

a=orchard-expert-a b=orchard-expert-b
cleanup() { ip netns del $a 2>/dev/null || true; ip netns del $b 2>/dev/null || true; rm -f "$hostfile"; }
hostfile=$(mktemp --suffix=.json)
trap cleanup EXIT
cleanup
ip netns add $a && ip netns add $b
ip link add veth-ea netns $a type veth peer name veth-eb netns $b
ip -n $a addr add 10.78.0.1/24 dev veth-ea && ip -n $a link set veth-ea up && ip -n $a link set lo up
ip -n $b addr add 10.78.0.2/24 dev veth-eb && ip -n $b link set veth-eb up && ip -n $b link set lo up
echo '[{"ssh": "'$a'", "ips": ["10.78.0.1"]}, {"ssh": "'$b'", "ips": ["10.78.0.2"]}]' > "$hostfile"

bench() {  # strategy[+busy] ranks cpus [replicas] [orchard binary]
  local strategy=${1%+busy} ranks=$2 cpus=$3 replicas=${4:-0} poll=0 orchard=${5:-$build/orchard}
  [ "$strategy" = "$1" ] || poll=1
  strategy=${strategy%%[0-9]*}
  if [ "$ranks" = 1 ]; then
    taskset -c "$cpus" "$build/orchard" bench -m "$model" -p "$prompt" -n "$gen" -r 1 -b "$batch" -t "$(echo "$cpus" | tr ',' '\n' | wc -l)" --json
  else
    "$orchard" launch --hostfile "$hostfile" --ssh "$here/netns-ssh.sh" --backend ring -- sh -c \
      "set -- $cpu0 $cpu1; shift \$ORCHARD_RANK; ORCHARD_BUSY_POLL=$poll exec taskset -c \$1 '$orchard' bench -m '$model' -p $prompt -n $gen -r 1 -b $batch -t 1 --strategy $strategy --expert-replicas $replicas --json"
  fi
}

# The planner's figures: this machine probed with one thread, two of them, links as measured by
# a ping over the veth pair (one way: half the round trip), unlimited bandwidth.
# The probe runs on the runs' two CPUs: a host's cores need not all stream alike.
probe=$(taskset -c "$cpu0,$cpu1" "$build/orchard" plan -m "$model" --machines 2 --threads 1 --json)
bw=$(jq .machines[0].memory_bw_gb_s <<<"$probe")
# One rank's core streaming while the other waits (a pipeline stage in decode; one rank on one core).
solo_bw=$(jq .machines[0].solo_memory_bw_gb_s <<<"$probe")
gflops=$(jq .machines[0].compute_gflops <<<"$probe")
# How one expert's products over 1, 2, 4 ... 64 tokens fare against that rate (the plan below
# measures it again: a ratio, which the rates given to it scale).
efficiency=$(jq -c '[.machines[0].expert_efficiency[] * 100 | round / 100]' <<<"$probe")
# The prompt's attention against that rate (measured again by each plan below, likewise).
attention=$(jq '.machines[0].attention_efficiency * 100 | round / 100' <<<"$probe")
# (without ping: $ORCHARD_BENCH_LINK_US, default 30 µs, a veth pair's typical one-way time.)
if command -v ping >/dev/null; then
  rtt_ms=$(ip netns exec $a ping -c 20 -i 0.05 -q 10.78.0.2 | awk -F/ '/rtt|round-trip/ {print $5}')
  latency_us=$(jq -n "$rtt_ms * 500")
else
  latency_us=${ORCHARD_BENCH_LINK_US:-30}
fi
predict() {  # strategy world [scale: machine figures × this, for one rank with 2 threads] [plan flags]
  # One rank with both threads streams what the two-thread probe streams, whole (bw × 2);
  # one with one thread alone, the solo figure.
  local solo=$solo_bw
  [ "${3:-1}" = 1 ] || solo=$(jq -n "$bw * $3")
  "$build/orchard" plan -m "$model" --machines "$2" --world "$2" --strategy "$1" "${@:4}" \
    --memory-bw-gb-s "$(jq -n "$bw * ${3:-1}")" --solo-memory-bw-gb-s "$solo" --compute-gflops "$(jq -n "$gflops * ${3:-1}")" \
    --link-latency-us "$latency_us" --link-gbit-s 0 --prompt-tokens "$prompt" \
    --position $((prompt + gen / 2)) -c $((prompt + gen)) -b "$batch" --json
}

splits=${ORCHARD_BENCH_SPLITS:-expert tensor pipeline}
declare -A predicted
predicted[single]=$(predict single 1 | jq -c .)
predicted[single2]=$(predict single 1 2 | jq -c .)
declare -A replicas
for split in $splits; do
  strategy=${split%+busy}
  if [[ $strategy =~ ^expert([0-9]+)$ ]]; then
    predicted[$split]=$(predict expert 2 1 --expert-replicas "${BASH_REMATCH[1]}" | jq -c .)
    replicas[$split]=${BASH_REMATCH[1]}
  else
    predicted[$split]=$(predict "$strategy" 2 | jq -c .)
    replicas[$split]=$(jq -r '.expert_replicas // 0' <<<"${predicted[$split]}")
  fi
done
for round in $(seq "${ORCHARD_BENCH_ROUNDS:-1}"); do
results=$(mktemp)
{
  echo "single-1core $(bench single 1 "$cpu0") ${predicted[single]}"
  echo "single-2threads $(bench single 1 "$cpu0,$cpu1") ${predicted[single2]}"
  for split in $splits; do
    label=$split
    [ "${replicas[$split]}" -gt 0 ] && label="$split/r${replicas[$split]}"
    echo "$label $(bench "$split" 2 - "${replicas[$split]}") ${predicted[$split]}"
    # The same split run by another build, right after (its comm, same plan): old against new.
    [ -z "${ORCHARD_BENCH_OTHER:-}" ] ||
      echo "$label@other $(bench "$split" 2 - "${replicas[$split]}" "$ORCHARD_BENCH_OTHER") ${predicted[$split]}"
  done
} > "$results"
python3 - "$results" "$prompt" "$gen" "$type" "$bw" "$gflops" "$latency_us" "$efficiency" "$round" "$solo_bw" "$attention" <<'PY'
import json, sys
dec = json.JSONDecoder()
rows = []
for line in open(sys.argv[1]):
    name, rest = line.strip().split(" ", 1)
    measured, end = dec.raw_decode(rest)
    predicted, _ = dec.raw_decode(rest[end:].strip())
    rows.append((name, measured, predicted))
base = next(m for n, m, _ in rows if n == "single-1core")
two = next(m for n, m, _ in rows if n == "single-2threads")
print(f"round {sys.argv[9]}")
print(f"moe-3b {sys.argv[4].upper()}, pp{sys.argv[2]} / tg{sys.argv[3]}, ranks in 2 network namespaces over veth (TCP ring), "
      f"one core each; plan from {float(sys.argv[5]):.1f} GB/s (one core alone {float(sys.argv[10]):.1f}), "
      f"{float(sys.argv[6]):.0f} GFLOP/s per rank, "
      f"{float(sys.argv[7]):.0f} µs links; expert products over 1..64 tokens at {sys.argv[8]} of that rate, "
      f"attention at {sys.argv[11]}")
print(f"{'run':<16} {'pp tok/s':>9} {'tg tok/s':>9} {'pp ×1core':>10} {'tg ×1core':>10} {'pp ×2thr':>9} {'tg ×2thr':>9} "
      f"{'pp pred':>8} {'tg pred':>8} {'pp m/p':>7} {'tg m/p':>7} {'KB/token':>9}")
for name, m, p in rows:
    pred = p["predicted"] if p else None
    print(f"{name:<16} {m['prompt_tok_s']:>9.1f} {m['gen_tok_s']:>9.2f} "
          f"{m['prompt_tok_s'] / base['prompt_tok_s']:>10.2f} {m['gen_tok_s'] / base['gen_tok_s']:>10.2f} "
          f"{m['prompt_tok_s'] / two['prompt_tok_s']:>9.2f} {m['gen_tok_s'] / two['gen_tok_s']:>9.2f} "
          + (f"{pred['prompt_tok_s']:>8.1f} {pred['gen_tok_s']:>8.2f} {m['prompt_tok_s'] / pred['prompt_tok_s']:>7.2f} "
             f"{m['gen_tok_s'] / pred['gen_tok_s']:>7.2f} {pred.get('wire_bytes_per_token', 0) / 1e3:>9.1f}"
             if pred else f"{'':>8} {'':>8} {'':>7} {'':>7} {'':>9}"))
expert = [(n, m) for n, m, _ in rows if n.startswith("expert") and "+busy" not in n]
for n, m in expert:
    print(f"{n}: decode {m['gen_tok_s'] / two['gen_tok_s']:.2f}× one rank with 2 threads (issue 14: ≥ 0.95), "
          f"prompt {m['prompt_tok_s'] / two['prompt_tok_s']:.2f}×")
off = [n for n, m, p in rows if p and not all(0.75 <= m[k] / p["predicted"][k] <= 1.25 for k in ("prompt_tok_s", "gen_tok_s"))]
print("predictions within 25%: " + ("all" if not off else "not " + ", ".join(off)))
PY
rm -f "$results"
done
