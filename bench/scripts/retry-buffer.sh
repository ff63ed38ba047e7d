#!/usr/bin/env bash
# What the response retry buffer costs: one sluice binary with --response-retry-buffer at its
# default (64k, "on") and at 0 ("off"), side by side on the same backend, alternating rounds.
#
#   bench/scripts/retry-buffer.sh [SLUICE_BINARY] [rounds]
#
# Backend: nginx, one worker on CPU 0, at 127.0.2.1:8081, serving files of 3 B, 16 KiB and
# 60 KiB with Content-Length (all three are held when the buffer is on). Each sluice runs
# pinned to CPU 1, one at a time. Per round, response size and side:
# - time to first byte: curl, 1000 sequential GETs on one keep-alive connection,
#   %{time_starttransfer}, p50 and p99;
# - under load: wrk, one thread on CPU 0, 50 connections, 1 s warm-up then 4 s measured: req/s,
#   latency p50 and p99, and the proxy's CPU µs per request (user + system from /proc/PID/stat).
# Prints one Markdown row per size and side with the median of the rounds. Needs nginx, wrk,
# curl and taskset (bench/run installs them).
set -euo pipefail
cd "$(dirname "$0")/../.."
sluice=${1:-target/release/sluice}
rounds=${2:-3}
[[ -x $sluice ]] || { echo "build first: cargo build --release -p sluice" >&2; exit 1; }
work=$(mktemp -d /tmp/bench-retry-buffer.XXXXXX)
chmod 755 "$work"
mkdir "$work/manifests" "$work/www"
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
printf 'ok\n' >"$work/www/3b"
head -c 16384 /dev/zero | tr '\0' 'x' >"$work/www/16k"
head -c 61440 /dev/zero | tr '\0' 'x' >"$work/www/60k"
chmod -R a+r "$work/www"
cat >"$work/backend.conf" <<CONF
worker_processes 1; pid $work/backend.pid; events { worker_connections 10000; }
http { access_log off; keepalive_requests 1000000; sendfile on;
  server { listen 127.0.2.1:8081; root $work/www; } }
CONF
cp bench/manifests/bench.yaml "$work/manifests/"
cat >"$work/latency.lua" <<'EOF'
done = function(summary, latency, requests)
  io.write(string.format("result %d %d %d %d\n", summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99)))
end
EOF
taskset -c 0 nginx -e stderr -c "$work/backend.conf" -g 'daemon off;' &
sleep 0.5

percentile() { # q: the q-quantile of the numbers on stdin
  sort -n | awk -v q="$1" '{v[NR] = $1} END {i = int(q * NR); if (i < q * NR) i++; print v[i < 1 ? 1 : i]}'
}

median() { tr ' ' '\n' | grep . | percentile 0.5; }

# side size: prints "ttfb_p50_us ttfb_p99_us rps p50_us p99_us cpu_us_per_request"
measure() {
  local buffer=$1 size=$2 pid i ttfb before after result
  taskset -c 1 env RUST_LOG=error "$sluice" serve --manifests "$work/manifests" --listen-tls off \
    --listen 127.0.0.1:18080 --admin 127.0.0.1:19000 --response-retry-buffer "$buffer" &
  pid=$!
  for ((i = 0; i < 100; i++)); do curl -sf -o /dev/null http://127.0.0.1:19000/readyz && break; sleep 0.1; done
  ttfb=$(taskset -c 0 curl -s -H 'Host: bench.test' -o /dev/null -w '%{time_starttransfer}\n' \
    "http://127.0.0.1:18080/$size?n=[1-1000]" | awk '{printf "%d\n", $1 * 1e6}')
  taskset -c 0 wrk -t1 -c50 -d1s -H 'Host: bench.test' "http://127.0.0.1:18080/$size" >/dev/null
  before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  result=$(taskset -c 0 wrk -t1 -c50 -d4s -H 'Host: bench.test' -s "$work/latency.lua" \
    "http://127.0.0.1:18080/$size" | awk '/^result / {print $2, $3, $4, $5}')
  after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  read -r requests duration p50 p99 <<<"$result"
  awk -v t50="$(percentile 0.5 <<<"$ttfb")" -v t99="$(percentile 0.99 <<<"$ttfb")" \
    -v n="$requests" -v d="$duration" -v p50="$p50" -v p99="$p99" -v t=$((after - before)) \
    -v hz="$(getconf CLK_TCK)" \
    'BEGIN {printf "%d %d %d %d %d %.2f\n", t50, t99, n / (d / 1e6), p50, p99, t / hz / n * 1e6}'
}

declare -A results=()
for ((round = 1; round <= rounds; round++)); do
  for size in 3b 16k 60k; do
    for side in on off; do
      buffer=64k
      [[ $side == off ]] && buffer=0
      read -r -a values <<<"$(measure "$buffer" "$size")"
      echo "round $round $size $side: ttfb p50 ${values[0]} µs p99 ${values[1]} µs, ${values[2]} req/s, p50 ${values[3]} µs p99 ${values[4]} µs, ${values[5]} µs CPU/req" >&2
      for i in 0 1 2 3 4 5; do results[$size $side $i]+=" ${values[$i]}"; done
    done
  done
done
echo "| response | buffer | TTFB p50 µs | TTFB p99 µs | req/s (50 conns) | p50 µs | p99 µs | CPU µs/req |"
echo "|---|---|---|---|---|---|---|---|"
for size in 3b 16k 60k; do
  for side in on off; do
    row="| $size | $side"
    for i in 0 1 2 3 4 5; do row+=" | $(median <<<"${results[$size $side $i]}")"; done
    echo "$row |"
  done
done
