#!/usr/bin/env bash
# Runs every rtgt fuzz target for a bounded time: the CI smoke (default 15 s per target) or a
# longer campaign. Each target starts from its committed seeds (fuzz/seeds/<target>) plus
# what earlier runs found (fuzz/corpus/<target>, not committed); a crash stops with the
# reproducer in fuzz/artifacts/<target>/ and the exit status 1.
#
# Usage: fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]
#   fuzz/run.sh            # CI smoke: 15 s each
#   fuzz/run.sh 3600       # an hour each (see docs/hardening.md for longer runs)
#   fuzz/run.sh 60 srp_iu  # one target
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`) and a nightly toolchain, or stable with
# RUSTC_BOOTSTRAP=1 (set here). CARGO_TARGET_DIR is honoured (the fuzz build goes to
# $CARGO_TARGET_DIR/fuzz). FUZZ_SANITIZER=none builds without AddressSanitizer (faster build).
set -uo pipefail
cd "$(dirname "$0")"
SECS=${1:-15}
[ $# -gt 0 ] && shift
TARGETS="$*"
export RUSTC_BOOTSTRAP=1
# The fuzz targets are the crate's [[bin]]s (not its examples, such as gen_seeds).
[ -n "$TARGETS" ] || TARGETS="$(cargo fuzz list)"
TDIR=${CARGO_TARGET_DIR:-$PWD/../target}/fuzz
SAN=${FUZZ_SANITIZER:-address}
# Large, legitimate allocations (a transport's buffer pools) must fail gracefully, not abort.
export ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1:detect_leaks=0}

if ! command -v cargo-fuzz >/dev/null; then
  echo "fuzz: cargo-fuzz is not installed (cargo install cargo-fuzz)" >&2
  exit 2
fi
start=$(date +%s)
echo "fuzz: building $(echo $TARGETS | wc -w) targets (sanitizer: $SAN)"
if ! cargo fuzz build -s "$SAN" --target-dir "$TDIR" >build.log 2>&1; then
  tail -30 build.log >&2
  echo "fuzz: build failed" >&2
  exit 1
fi
echo "fuzz: built in $(( $(date +%s) - start ))s"
failed=0
summary=()
for t in $TARGETS; do
  mkdir -p "corpus/$t" "seeds/$t" "artifacts/$t"
  log="artifacts/$t/last-run.log"
  # The live targets (a target on the simulated fabric, the RPC server) keep state across
  # inputs and run reactor threads: no leak checks per input, longer per-input timeouts.
  cargo fuzz run -s "$SAN" --target-dir "$TDIR" "$t" "corpus/$t" "seeds/$t" -- \
    -max_total_time="$SECS" -timeout=60 -rss_limit_mb=4096 -malloc_limit_mb=65536 \
    -print_final_stats=1 >"$log" 2>&1
  rc=$?
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(echo "$done_line" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
  corp=$(echo "$done_line" | sed -n 's/.*corp: \([0-9]*\/[0-9a-zA-Z]*\).*/\1/p')
  if [ $rc -eq 0 ]; then
    r=ok
  else
    r=CRASH
    failed=$((failed + 1))
    echo "---- $t (exit $rc): ----"
    grep -E 'panicked|ERROR|SUMMARY|Test unit written|Reproduce with' "$log" | head -20
  fi
  line=$(printf '%-16s %-5s execs %-9s cov %-6s corpus %s' "$t" "$r" "${execs:-?}" "${cov:-?}" "${corp:-?}")
  echo "fuzz: $line"
  summary+=("$line")
done
echo "fuzz: ---- summary (${SECS}s per target, $(( $(date +%s) - start ))s in all) ----"
printf 'fuzz: %s\n' "${summary[@]}"
[ $failed -eq 0 ]
