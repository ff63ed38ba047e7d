#!/usr/bin/env bash
# What tracing costs per request: one sluice binary without tracing against the same binary
# exporting to a collector at --tracing-sample-ratio 1.0, then at 0.01, with bench/ab
# (keep-alive, 50 connections, alternating rounds, CPU µs per request from /proc).
#
#   bench/scripts/tracing-cost.sh [SLUICE_BINARY] [rounds]
#
# The collector is nginx on CPU 0 at 127.0.2.9:4318 answering every POST /v1/traces with 200
# (it reads and discards the protobuf body), so sluice's side of the export (encoding, the
# HTTP client) is what is measured; it shares CPU 0 with wrk and the backend. After the
# comparisons, one more traced run (ratio 1.0) scrapes sluice_tracing_spans_dropped_total and
# the collector's request count, to show that the spans were exported and not dropped. Needs
# nginx, wrk, curl and taskset (bench/run installs them).
set -euo pipefail
cd "$(dirname "$0")/../.."
sluice=${1:-target/release/sluice}
rounds=${2:-6}
[[ -x $sluice ]] || { echo "build first: cargo build --release -p sluice" >&2; exit 1; }
work=$(mktemp -d /tmp/bench-tracing.XXXXXX)
chmod 755 "$work"
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
cat >"$work/collector.conf" <<CONF
worker_processes 1; pid $work/collector.pid; events { worker_connections 1000; }
http { access_log off; client_max_body_size 64m; client_body_buffer_size 1m;
  server { listen 127.0.2.9:4318; location = /v1/traces { return 200; } }
  server { listen 127.0.2.9:4319; location / { stub_status; } } }
CONF
taskset -c 0 nginx -e stderr -c "$work/collector.conf" -g 'daemon off;' &
sleep 0.5
collector=http://127.0.2.9:4318
echo "## tracing off (A) vs on at ratio 1.0 (B)"
B_FLAGS="--tracing-otlp-endpoint $collector --tracing-sample-ratio 1" \
  bench/ab "$sluice" "$sluice" "$rounds"
echo "## tracing off (A) vs on at ratio 0.01 (B)"
B_FLAGS="--tracing-otlp-endpoint $collector --tracing-sample-ratio 0.01" \
  bench/ab "$sluice" "$sluice" "$rounds"

# One traced run at ratio 1.0: were the spans exported?
mkdir "$work/manifests"
cp bench/manifests/bench.yaml "$work/manifests/"
cat >"$work/backend.conf" <<CONF
worker_processes 1; pid $work/backend.pid; events { worker_connections 10000; }
http { access_log off; keepalive_requests 1000000;
  server { listen 127.0.2.1:8081; location = / { return 200 "ok\n"; } } }
CONF
taskset -c 0 nginx -e stderr -c "$work/backend.conf" -g 'daemon off;' &
posts_before=$(curl -sf http://127.0.2.9:4319/ | awk 'NR == 3 {print $3}')
taskset -c 1 env RUST_LOG=error "$sluice" serve --manifests "$work/manifests" --listen-tls off \
  --listen 127.0.0.1:18080 --admin 127.0.0.1:19000 \
  --tracing-otlp-endpoint "$collector" --tracing-sample-ratio 1 &
pid=$!
for ((i = 0; i < 100; i++)); do curl -sf -o /dev/null http://127.0.0.1:19000/readyz && break; sleep 0.1; done
requests=$(taskset -c 0 wrk -t1 -c50 -d4s -H 'Host: bench.test' http://127.0.0.1:18080/ |
  awk '/requests in/ {print $1}')
sleep 2 # the last batch goes out within a second
dropped=$(curl -sf http://127.0.0.1:19000/metrics | awk '/^sluice_tracing_spans_dropped_total / {print $2}')
posts=$(($(curl -sf http://127.0.2.9:4319/ | awk 'NR == 3 {print $3}') - posts_before - 1))
kill "$pid"
echo "## one traced run (ratio 1.0): $requests requests, $((2 * requests)) spans, $posts exports, $dropped dropped"
