#!/usr/bin/env bash
# bench/scripts/l4.sh: a Gateway TCP listener (TCPRoute) against nginx's `stream` proxy, side by
# side in one run: connections per second (wrk, a new connection per request) and bytes per
# second (wrk, keep-alive, 1 MiB answers) through each, and the proxy's CPU per connection and
# per MiB.
#
#   bench/scripts/l4.sh [SLUICE_BINARY] [rounds]
#
# One nginx HTTP backend on CPU 0 (127.0.2.1:8081: `/` answers `ok`, `/1m` 1 MiB), each proxy
# pinned to CPU 1 in turn (sluice: a Gateway TCP listener on 127.0.0.1:18083 and a TCPRoute;
# nginx: `stream { server { listen 127.0.0.1:18084; proxy_pass 127.0.2.1:8081; } }`), wrk on
# CPU 0 for 4 s after a 1 s warm-up, rounds alternating. Prints every round and the medians.
# Needs nginx with the stream module (Debian: libnginx-mod-stream), wrk and taskset.
set -euo pipefail
binary=${1:-target/release/sluice}
rounds=${2:-3}
work=$(mktemp -d /tmp/bench-l4.XXXXXX)
chmod 755 "$work"
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
head -c 1048576 /dev/zero >"$work/1m"
cat >"$work/backend.conf" <<CONF
worker_processes 1; pid $work/backend.pid; events { worker_connections 10000; }
http { access_log off; keepalive_requests 1000000;
  server { listen 127.0.2.1:8081; root $work;
    location = / { return 200 "ok\n"; }
    location = /1m { default_type application/octet-stream; } } }
CONF
module=/usr/lib/nginx/modules/ngx_stream_module.so
cat >"$work/stream.conf" <<CONF
load_module $module;
worker_processes 1; pid $work/stream.pid; error_log $work/stream.log;
events { worker_connections 10000; }
stream { server { listen 127.0.0.1:18084; proxy_pass 127.0.2.1:8081; } }
CONF
mkdir "$work/manifests"
cat >"$work/manifests/l4.yaml" <<'YAML'
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: sluice}
spec: {controllerName: sluice.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: l4}
spec:
  gatewayClassName: sluice
  addresses: [{type: IPAddress, value: 127.0.0.1}]
  listeners: [{name: tcp, port: 18083, protocol: TCP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TCPRoute
metadata: {name: l4}
spec:
  parentRefs: [{name: l4}]
  rules: [{backendRefs: [{name: backend, port: 8081}]}]
---
apiVersion: v1
kind: Service
metadata: {name: backend}
spec: {ports: [{port: 8081}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: backend-a, labels: {kubernetes.io/service-name: backend}}
addressType: IPv4
ports: [{port: 8081}]
endpoints: [{addresses: [127.0.2.1]}]
YAML
taskset -c 0 nginx -e stderr -c "$work/backend.conf" -g 'daemon off;' &
sleep 0.5

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# proxy-pid url wrk-args...: prints requests/s, transfer MiB/s and CPU ms per second of load
measure() {
  local pid=$1 url=$2
  shift 2
  taskset -c 0 wrk -t1 -d1s "$@" "$url" >/dev/null 2>&1 || true
  local before after out
  before=$(cpu_ticks "$pid")
  out=$(taskset -c 0 wrk -t1 -d4s "$@" "$url" 2>&1)
  after=$(cpu_ticks "$pid")
  local rps mib
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  mib=$(awk '/Transfer\/sec/ {v=$2; if (v ~ /GB/) {sub("GB","",v); v*=1024} else if (v ~ /MB/) {sub("MB","",v)} else if (v ~ /KB/) {sub("KB","",v); v/=1024}; print v}' <<<"$out")
  local ticks=$((after - before)) hz
  hz=$(getconf CLK_TCK)
  echo "$rps $mib $(awk -v t="$ticks" -v hz="$hz" 'BEGIN {print t * 1000 / hz / 4}')"
}

start_sluice() {
  taskset -c 1 "$binary" serve --manifests "$work/manifests" --listen 127.0.0.1:18082 \
    --listen-tls off --admin 127.0.0.1:19093 >"$work/sluice.log" 2>&1 &
  for _ in $(seq 50); do
    curl -s -o /dev/null http://127.0.0.1:18083/ && return
    sleep 0.1
  done
  echo "sluice's TCP listener did not answer" >&2
  exit 1
}
start_stream() {
  taskset -c 1 nginx -e stderr -c "$work/stream.conf" -g 'daemon off;' &
  sleep 0.5
}

declare -A results
for round in $(seq "$rounds"); do
  for proxy in sluice nginx-stream; do
    case $proxy in
      sluice) start_sluice; pid=$(pgrep -f "$work/manifests" | head -1); port=18083 ;;
      nginx-stream) start_stream; pid=$(cat "$work/stream.pid"); port=18084 ;;
    esac
    # nginx's worker does the proxying: its CPU is what counts (the master is stopped below).
    worker=$(pgrep -P "$pid" | head -1 || true)
    measured=${worker:-$pid}
    read -r cps _ conn_cpu < <(measure "$measured" "http://127.0.0.1:$port/" -c50 -H 'Connection: close')
    read -r _ mibs byte_cpu < <(measure "$measured" "http://127.0.0.1:$port/1m" -c10)
    echo "round $round $proxy: $cps connections/s (CPU $conn_cpu ms/s), $mibs MiB/s (CPU $byte_cpu ms/s)"
    results[$proxy]+="$cps $conn_cpu $mibs $byte_cpu;"
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    sleep 0.5
  done
done
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for proxy in sluice nginx-stream; do
  IFS=';' read -ra rows <<<"${results[$proxy]}"
  col() { for row in "${rows[@]}"; do [[ -n $row ]] && awk -v c="$1" '{print $c}' <<<"$row"; done | median; }
  cps=$(col 1) conn_cpu=$(col 2) mibs=$(col 3) byte_cpu=$(col 4)
  echo "$proxy: median $cps connections/s, $(awk -v c="$conn_cpu" -v r="$cps" 'BEGIN {printf "%.1f", c * 1000 / r}') µs CPU per connection; $mibs MiB/s, $(awk -v c="$byte_cpu" -v m="$mibs" 'BEGIN {printf "%.1f", c * 1000 / m}') µs CPU per MiB"
done
