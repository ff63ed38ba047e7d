#!/usr/bin/env bash
# Runs `sluice drill` for every mode × termination × method and prints one Markdown table row
# per run (the figures in docs/zero-downtime.md). Usage:
#   cargo build --release -p sluice && bench/scripts/drill-matrix.sh [extra drill flags]
# Defaults: 5 pods, 1000 req/s, 2 s endpoint lag, 1 s readiness delay, 3 rollouts.
# METHODS and TERMINATIONS choose a part of the matrix, e.g. TERMINATIONS=crash; extra flags
# such as --response-retry-buffer 0 go to every run.
# Run as root with nft and ip installed for the kernel-DNAT ClusterIP; otherwise the drill uses
# its userspace L4 balancer and says so in the cluster_ip column.
set -euo pipefail
cd "$(dirname "$0")/../.."
sluice=target/release/sluice
[[ -x $sluice ]] || { echo "build first: cargo build --release -p sluice" >&2; exit 1; }

echo "| method | mode | termination | requests | failed | failures | retries | p50 ms | p99 ms | ClusterIP |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for method in ${METHODS:-GET POST}; do
  for mode in endpoints service-upstream fallback; do
    for termination in ${TERMINATIONS:-graceful abrupt crash}; do
      line=$(RUST_LOG=error "$sluice" drill --pods 5 --rps 1000 --endpoint-lag 2s --ready-delay 1s \
        --rollouts 3 --method "$method" --mode "$mode" --termination "$termination" --json "$@" | tail -n 1)
      python3 - "$method" "$line" <<'PY'
import json, sys
method, report = sys.argv[1], json.loads(sys.argv[2])
failures = ", ".join(f"{kind} {count}" for kind, count in sorted(report["failures"].items())) or "–"
print(f"| {method} | {report['mode']} | {report['termination']} | {report['requests']} | "
      f"{report['failed']} | {failures} | {report['retries']} | {report['p50_ms']:.2f} | "
      f"{report['p99_ms']:.2f} | {report['cluster_ip'] or '–'} |")
PY
    done
  done
done
