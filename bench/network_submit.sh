#!/usr/bin/env bash
# Job submissions per second the coordinator sustains over HTTP, with SQLite, with PostgreSQL,
# and with two coordinator replicas sharing one PostgreSQL database (each taking half the
# connections), measured side by side by wrk (Debian's package). One node registers the model
# and withdraws, so the jobs queue and nothing else uses the CPU. Everything (wrk, coordinators,
# the database) shares this machine's cores. ROUNDS runs the three in turn that many times (on a
# loaded host each round sees the same load across the three) and ends with each one's median.
#   bash bench/network_submit.sh [BUILD_DIR] [SECONDS] [CONNECTIONS] [ROUNDS]
set -euo pipefail
build=$(realpath "${1:-build}")
seconds=${2:-10}
connections=${3:-16}
rounds=${4:-1}
orchard=$build/orchard
work=$(mktemp -d /tmp/orchard-submit-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [[ -n "${pgbin:-}" ]]; then ${runas:-} "$pgbin/pg_ctl" -D "$work/pg" -m immediate -w stop >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

mkdir -p "$work/models"
"$orchard" make-model --arch llama --shape tiny --type q8_0 -o "$work/models/tiny.gguf" >/dev/null

cat >"$work/submit.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("ORCHARD_KEY")
wrk.body = '{"model": "tiny", "prompt": "the orchard", "max_tokens": 16}'
local created, refused = 0, 0
function response(status, headers, body)
  if status == 201 then created = created + 1 else refused = refused + 1 end
end
done = function(summary, latency, requests)
  io.write(string.format("RESULT requests=%d seconds=%.2f p50_ms=%.2f p99_ms=%.2f errors=%d\n",
    summary.requests, summary.duration / 1e6, latency:percentile(50) / 1e3, latency:percentile(99) / 1e3,
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
LUA

# $1: database URL, $2: coordinator replicas (1 or 2; 2 on PostgreSQL only). Prints one line of
# figures: submissions a second over all replicas.
measure() {
  local db=$1 replicas=${2:-1} ports=() coordinators=() i
  for ((i = 0; i < replicas; i++)); do
    ports+=("$(free_port)")
    "$orchard" network --db "$db" --host 127.0.0.1 --port "${ports[i]}" >"$work/coordinator$i.log" 2>&1 &
    coordinators+=($!)
    pids+=($!)
  done
  for port in "${ports[@]}"; do
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
  done
  export ORCHARD_KEY
  ORCHARD_KEY=$("$orchard" network add-key --db "$db" --name bench)
  # Told of the first replica; a follower sends it on to the leader.
  "$orchard" node --network "http://127.0.0.1:${ports[0]}" --dedicated --models "$work/models" --threads 1 \
    --key-file "$work/node.key" --name bench-node >"$work/node.log" 2>&1 &
  local node=$!
  for port in "${ports[@]}"; do
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/v1/models" -H "Authorization: Bearer $ORCHARD_KEY" | grep -q tiny && break; sleep 0.1; done
  done
  kill -TERM "$node"; wait "$node" 2>/dev/null || true
  local wrks=()
  for ((i = 0; i < replicas; i++)); do
    wrk -t $((2 / replicas)) -c $((connections / replicas)) -d "${seconds}s" -s "$work/submit.lua" \
      "http://127.0.0.1:${ports[i]}/v1/jobs" >"$work/wrk$i.out" 2>&1 &
    wrks+=($!)
  done
  wait "${wrks[@]}"
  local rate=0 lines=""
  for ((i = 0; i < replicas; i++)); do
    local line requests elapsed
    line=$(grep RESULT "$work/wrk$i.out")
    requests=$(sed -E 's/.*requests=([0-9]+).*/\1/' <<<"$line")
    elapsed=$(sed -E 's/.*seconds=([0-9.]+).*/\1/' <<<"$line")
    rate=$(awk -v t="$rate" -v r="$requests" -v s="$elapsed" 'BEGIN { print t + r / s }')
    lines+="${lines:+; }${line#RESULT }"
  done
  local audit; audit=$("$orchard" network audit --db "$db" 2>/dev/null | tr -d '\n' | cut -c1-160)
  printf '%-10s x%d %8.0f submissions/s  (%s)\n' "${db%%:*}" "$replicas" "$rate" "$lines"
  echo "${db%%:*}x$replicas $rate" >>"$work/rates"
  echo "              audit: $audit"
  for c in "${coordinators[@]}"; do kill -TERM "$c"; wait "$c" 2>/dev/null || true; done
}

echo "wrk: ${seconds}s, $connections connections, 2 threads, POST /v1/jobs (model tiny, 16 tokens), $rounds round(s)"

# PostgreSQL: a throw-away server in $work (as the 'postgres' user when running as root).
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
if [[ -z "$pgbin" ]] && command -v pg_ctl >/dev/null; then pgbin=$(dirname "$(command -v pg_ctl)"); fi
if [[ -n "$pgbin" ]]; then
  runas=""
  if [[ $(id -u) == 0 ]]; then runas="runuser -u postgres --"; chown postgres "$work"; chmod 755 "$work"; fi
  $runas "$pgbin/initdb" -D "$work/pg" -U postgres --auth=trust -E UTF8 >/dev/null
  pgport=$(free_port)
  $runas "$pgbin/pg_ctl" -D "$work/pg" -l "$work/pg.log" -w -o "-p $pgport -k $work -c listen_addresses=127.0.0.1" start >/dev/null
  pgurl="postgresql://postgres@127.0.0.1:$pgport"
else
  echo "postgresql: not installed (scripts/install-deps.sh installs it)"
fi

for ((round = 1; round <= rounds; round++)); do
  measure "sqlite://$work/network$round.db"
  [[ -n "$pgbin" ]] || continue
  for replicas in 1 2; do
    $runas "$pgbin/createdb" -h 127.0.0.1 -p "$pgport" -U postgres "r${round}x$replicas"
    measure "$pgurl/r${round}x$replicas" "$replicas"
  done
done
if ((rounds > 1)); then
  echo "median of $rounds rounds:"
  for config in sqlitex1 postgresqlx1 postgresqlx2; do
    grep "^$config " "$work/rates" | awk '{print $2}' | sort -n |
      awk -v c="$config" '{v[NR] = $1} END { if (NR) printf "  %-13s %6.0f submissions/s\n", c, (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
  done
fi
