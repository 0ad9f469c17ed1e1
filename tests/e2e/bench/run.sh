#!/bin/bash
# The guest benchmarks: rtgt beside the Linux kernel targets (01-side-by-side) and the idle
# cost of a connected target (02-idle), in one QEMU soft-RoCE guest, one run.
#
#   tests/e2e/bench/run.sh [-k PATTERN] [--env BENCH_RUNTIME=20] [other tests/e2e/run.sh options]
#
# Prints every figure and the ratios rtgt/kernel, and leaves the JSON in
# $OUT/guest/<scenario>/*.json (OUT: the run directory printed at the end; set it with --out).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${RTGT_BENCH_OUT:-${CARGO_TARGET_DIR:-$here/../../../target}/e2e/bench-$(date +%Y%m%d-%H%M%S)}
rc=0
"$here/../run.sh" --dir "$here" --out "$out" "$@" || rc=$?
for f in "$out"/guest/*/side-by-side.json; do
  [ -f "$f" ] || continue
  echo "== side by side ($f)"
  jq -r 'to_entries[] | select(.key | test("^(rtgt|kernel)-")) | .key as $t
         | .value | to_entries[] | "\($t | .+ " " * (14 - length)) \(.key | .+ " " * (20 - length)) \(.value.iops | floor) IOPS (\(.value.runs // [] | map(.iops | floor | tostring) | join("/")))  \(.value.mib_s | floor) MiB/s  mean \(.value.lat_us_mean | floor) us  p99 \(.value.lat_us_p99 | floor) us  guest CPU \(.value.guest_cpu_percent)%  rtgt CPU \(.value.rtgt_cpu_percent)%\(if .value.rtgt_cpu_us_per_io > 0 then " (\(.value.rtgt_cpu_us_per_io | floor) us/IO)" else "" end)"' "$f"
  jq -r '(.ratios // {}) | to_entries[] | .key as $p | .value | to_entries[]
         | "ratio rtgt/kernel \($p) \(.key): IOPS \(.value.iops * 100 | round / 100), MiB/s \(.value.mib_s * 100 | round / 100)"' "$f"
done
for f in "$out"/guest/*/idle.json; do
  [ -f "$f" ] || continue
  echo "== idle ($f)"
  jq -r '"idle: \(.qpairs) queue pairs, 2 reactors: \(.idle_cpu_percent * 1000 | round / 1000)% CPU over \(.idle_seconds) s; busy: \(.busy_cpu_percent | floor)% CPU at \(.busy_iops) IOPS"' "$f"
done
echo "run directory: $out"
exit $rc
