#!/usr/bin/env bash
# Job submissions per second the coordinator sustains over HTTP, with SQLite and with
# PostgreSQL, measured side by side by wrk (Debian's package). One node registers the model
# and withdraws, so the jobs queue and nothing else uses the CPU.
#   bash bench/network_submit.sh [BUILD_DIR] [SECONDS] [CONNECTIONS]
set -euo pipefail
build=$(realpath "${1:-build}")
seconds=${2:-10}
connections=${3:-16}
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

# $1: database URL. Prints one line of figures.
measure() {
  local db=$1 port
  port=$(free_port)
  "$orchard" network --db "$db" --host 127.0.0.1 --port "$port" >"$work/coordinator.log" 2>&1 &
  local coordinator=$!
  pids+=("$coordinator")
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
  export ORCHARD_KEY
  ORCHARD_KEY=$("$orchard" network add-key --db "$db" --name bench)
  "$orchard" node --network "http://127.0.0.1:$port" --dedicated --models "$work/models" --threads 1 \
    --key-file "$work/node.key" --name bench-node >"$work/node.log" 2>&1 &
  local node=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/v1/models" -H "Authorization: Bearer $ORCHARD_KEY" | grep -q tiny && break; sleep 0.1; done
  kill -TERM "$node"; wait "$node" 2>/dev/null || true
  wrk -t 2 -c "$connections" -d "${seconds}s" -s "$work/submit.lua" "http://127.0.0.1:$port/v1/jobs" >"$work/wrk.out" 2>&1
  local line; line=$(grep RESULT "$work/wrk.out")
  local requests elapsed
  requests=$(sed -E 's/.*requests=([0-9]+).*/\1/' <<<"$line")
  elapsed=$(sed -E 's/.*seconds=([0-9.]+).*/\1/' <<<"$line")
  local audit; audit=$("$orchard" network audit --db "$db" 2>/dev/null | tr -d '\n' | cut -c1-160)
  printf '%-10s %8.0f submissions/s  (%s)\n' "${db%%:*}" "$(awk -v r="$requests" -v s="$elapsed" 'BEGIN { print r / s }')" "${line#RESULT }"
  echo "           audit: $audit"
  kill -TERM "$coordinator"; wait "$coordinator" 2>/dev/null || true
}

echo "wrk: ${seconds}s, $connections connections, 2 threads, POST /v1/jobs (model tiny, 16 tokens)"
measure "sqlite://$work/network.db"

# PostgreSQL: a throw-away server in $work (as the 'postgres' user when running as root).
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
if [[ -z "$pgbin" ]]; then echo "postgresql: not installed (scripts/install-deps.sh installs it)"; exit 0; fi
runas=""
if [[ $(id -u) == 0 ]]; then runas="runuser -u postgres --"; chown postgres "$work"; chmod 755 "$work"; fi
$runas "$pgbin/initdb" -D "$work/pg" -U postgres --auth=trust -E UTF8 >/dev/null
pgport=$(free_port)
$runas "$pgbin/pg_ctl" -D "$work/pg" -l "$work/pg.log" -w -o "-p $pgport -k $work -c listen_addresses=127.0.0.1" start >/dev/null
measure "postgresql://postgres@127.0.0.1:$pgport/postgres"
