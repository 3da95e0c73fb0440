#!/usr/bin/env bash
# Predicted (`orchard plan`) against measured (`orchard run`) prompt and generation speed for
# each strategy, with ranks as local processes (shm backend, one thread and one pinned CPU each)
# and an emulated per-message link latency. The plan's machine figures come from its built-in
# probe with the same thread count (best of REPEATS probes, then passed to every plan as
# --memory-bw-gb-s / --compute-gflops so all predictions share them); each measurement is the
# best of REPEATS runs, which filters out other programs' load.
#
#   bench/plan_vs_measured.sh                      # build/orchard, /tmp/tl.gguf, 50 and 300 µs
#   ORCHARD=build-x/orchard LATENCIES="0 50 300 1000" TOKENS=64 bench/plan_vs_measured.sh
#
# Prints one row per strategy and latency: predicted, measured and measured ÷ predicted, for
# prompt and generation tok/s, then which strategy the planner picks and which measured fastest.
set -euo pipefail

ORCHARD=${ORCHARD:-build/orchard}
MODEL=${MODEL:-/tmp/tl.gguf}
LATENCIES=${LATENCIES:-"50 300"}
TOKENS=${TOKENS:-48}
BACKEND=${BACKEND:-shm}
REPEATS=${REPEATS:-3}
PROMPT=${PROMPT:-"The orchard keeps its apples in rows, and every row is counted twice before the harvest begins so that no tree is forgotten when the carts arrive"}

command -v jq >/dev/null || { echo "needs jq" >&2; exit 1; }
[ -x "$ORCHARD" ] || { echo "no $ORCHARD: build it first" >&2; exit 1; }
[ -f "$MODEL" ] || "$ORCHARD" make-model --shape tinyllama-1.1b --type q4_0 -o "$MODEL"

max() { jq -n "[$1, $2] | max"; }
# Per rank, for one rank alone and for two ranks sharing this machine's memory bandwidth.
# solo: one rank streaming while the others wait (a pipeline's stages take turns in decode).
declare -A bw solo gflops
for world in 1 2; do
  bw[$world]=0 solo[$world]=0 gflops[$world]=0
  for _ in $(seq "$REPEATS"); do
    probe=$("$ORCHARD" plan -m "$MODEL" --machines "$world" --threads 1 --json)
    bw[$world]=$(max "${bw[$world]}" "$(jq .machines[0].memory_bw_gb_s <<<"$probe")")
    solo[$world]=$(max "${solo[$world]}" "$(jq .machines[0].solo_memory_bw_gb_s <<<"$probe")")
    gflops[$world]=$(max "${gflops[$world]}" "$(jq .machines[0].compute_gflops <<<"$probe")")
  done
  printf 'per rank, %d rank(s) on this machine: decode %.1f GB/s (alone %.1f), matmul %.0f GFLOP/s (best of %d probes)\n' \
    "$world" "${bw[$world]}" "${solo[$world]}" "${gflops[$world]}" "$REPEATS"
done

printf '%-8s %-9s | %9s %9s %6s | %9s %9s %6s\n' "lat µs" strategy "pp pred" "pp meas" ratio "tg pred" "tg meas" ratio
for lat in $LATENCIES; do
  best_measured="" best_rate=0 pick="" pick_rate=0 single_rate=0
  for strategy in single pipeline tensor; do
    world=2
    [ "$strategy" = single ] && world=1
    run_flags=(--threads 1 --pin-cpus --json -n "$TOKENS" --temp 0)
    [ "$world" -gt 1 ] && run_flags+=(--world "$world" --strategy "$strategy" --backend "$BACKEND" --link-latency-us "$lat")
    pp_meas=0 tg_meas=0
    for _ in $(seq "$REPEATS"); do
      measured=$("$ORCHARD" run -m "$MODEL" -p "$PROMPT" "${run_flags[@]}" 2>/dev/null)
      pp_meas=$(max "$pp_meas" "$(jq .prompt_tok_s <<<"$measured")")
      tg_meas=$(max "$tg_meas" "$(jq .gen_tok_s <<<"$measured")")
    done
    prompt_tokens=$(jq -r .prompt_tokens <<<"$measured")
    gen_tokens=$(jq -r .gen_tokens <<<"$measured")
    predicted=$("$ORCHARD" plan -m "$MODEL" --machines "$world" --world "$world" --strategy "$strategy" \
      --memory-bw-gb-s "${bw[$world]}" --solo-memory-bw-gb-s "${solo[$world]}" --compute-gflops "${gflops[$world]}" \
      --link-latency-us "$lat" --link-gbit-s 0 --prompt-tokens "$prompt_tokens" \
      --position $((prompt_tokens + gen_tokens / 2)) --json)
    pp_pred=$(jq -r .predicted.prompt_tok_s <<<"$predicted")
    tg_pred=$(jq -r .predicted.gen_tok_s <<<"$predicted")
    printf '%-8s %-9s | %9.1f %9.1f %6.2f | %9.1f %9.1f %6.2f\n' "$lat" "$strategy" "$pp_pred" "$pp_meas" \
      "$(jq -n "$pp_meas / $pp_pred")" "$tg_pred" "$tg_meas" "$(jq -n "$tg_meas / $tg_pred")"
    if jq -e "$tg_meas > $best_rate" >/dev/null <<<null; then best_rate=$tg_meas best_measured=$strategy; fi
    if jq -e "$tg_pred > $pick_rate" >/dev/null <<<null; then pick_rate=$tg_pred pick=$strategy; fi
    [ "$strategy" = single ] && single_rate=$tg_pred
  done
  # The planner's rule: the fastest prediction, unless one machine is within 5% of it. (One
  # `plan` call cannot express it here: its machines would be the shares of this one.)
  if jq -e "$single_rate * 1.05 >= $pick_rate" >/dev/null <<<null; then pick=single; fi
  echo "  ${lat} µs: planner picks ${pick}; fastest measured: ${best_measured}"
done
