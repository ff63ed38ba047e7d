#!/usr/bin/env bash
# CPU per proxied request of one or more sluice binaries, side by side in one session.
#   bench/scripts/proxy-cpu.sh target/release/sluice [/path/to/other/sluice ...]
# Backend: nginx answering 200 "ok" on 127.0.2.1:8081 (one worker). Client: wrk, 1 thread,
# 32 keep-alive connections, 10 s per run, each binary run twice in turn. Reports requests/s and
# the sluice process's user+system CPU divided by requests served (from /proc/PID/stat).
set -euo pipefail
command -v nginx >/dev/null && command -v wrk >/dev/null || {
  echo "needs nginx and wrk (apt-get install nginx-light wrk)" >&2; exit 1; }
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
cat > "$work/nginx.conf" <<NGINX
worker_processes 1;
pid $work/nginx.pid;
error_log $work/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  server { listen 127.0.2.1:8081; location / { return 200 "ok\n"; } }
}
NGINX
nginx -c "$work/nginx.conf" -g 'daemon off;' &
mkdir "$work/manifests"
cp "$(dirname "$0")/../manifests/bench.yaml" "$work/manifests/"
ticks=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
echo "| binary | run | requests/s | CPU µs per request |"
echo "|---|---|---|---|"
for run in 1 2; do
  for binary in "$@"; do
    RUST_LOG=error "$binary" serve --manifests "$work/manifests" --listen 127.0.0.1:18080 --admin 127.0.0.1:19000 &
    pid=$!
    until curl -sf -o /dev/null 127.0.0.1:19000/readyz; do sleep 0.05; done
    wrk -t1 -c32 -d2s -H 'Host: bench.test' http://127.0.0.1:18080/ >/dev/null   # warm up
    before=$(cpu_ticks $pid)
    out=$(wrk -t1 -c32 -d10s -H 'Host: bench.test' http://127.0.0.1:18080/)
    after=$(cpu_ticks $pid)
    kill -9 $pid; wait $pid 2>/dev/null || true
    requests=$(echo "$out" | awk '/requests in/ {print $1}')
    rate=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    micros=$(awk -v t=$((after - before)) -v hz="$ticks" -v n="$requests" 'BEGIN {printf "%.1f", t / hz / n * 1e6}')
    echo "| $binary | $run | $rate | $micros |"
  done
done
