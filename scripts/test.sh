#!/usr/bin/env bash
# Runs every rtgt test: formatting and lints, the Rust unit and integration tests (simulated
# fabric, fault injection included), the soaks, a bounded fuzzing run of every fuzz target,
# the fabric conformance suite on soft-RoCE in a QEMU guest, the SPDK-client compatibility
# suite, and the end-to-end suite against the Linux kernel initiators.
#
# Usage: scripts/test.sh [STAGE...]     (default: every stage; `scripts/test.sh --list` lists them)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}

stage_deps()      { scripts/install-deps.sh; }
stage_fmt()       { cargo fmt --all -- --check && cargo fmt --manifest-path fuzz/Cargo.toml -- --check; }
stage_clippy()    { cargo clippy --workspace --all-targets -- -D warnings \
                      && cargo clippy --manifest-path fuzz/Cargo.toml --all-targets -- -D warnings; }
# Includes the fault-injection tests (tests/tests/faults_*.rs) and the access-control tests.
stage_unit()      { cargo test --workspace; }
# The soaks (docs/hardening.md): 1,000 connect/disconnect, login/logout and subsystem
# create/delete cycles with open fds, live heap and RSS stable; 100 pause/resume cycles under
# verified I/O. Their figures are the `soak ...` lines.
stage_soak()      { cargo test -p rtgt-tests --test soak -- --ignored --nocapture --test-threads=1 2>&1 \
                      | grep -E '^soak [a-z/ ]+:|^test |test result|panicked|error' ; return "${PIPESTATUS[0]}"; }
# Every fuzz target for FUZZ_SECONDS (default 15) each: fuzz/run.sh (cargo-fuzz; the deps stage
# installs it). A crash fails the stage and leaves its input in fuzz/artifacts/<target>/.
stage_fuzz()      { fuzz/run.sh "${FUZZ_SECONDS:-15}"; }
# The SPDK-client compatibility suite: rtgt serve --fabric sim driven by spdk-rpc.
stage_python()    { cargo build -p rtgt && python3 -m pytest -q tests/python; }
# The rtgt Python package, rtgt-rpc, and the Ansible collection (sanity + live playbooks).
stage_pyclient()  { cargo build -p rtgt && python/tests/run.sh; }
# The guest suite includes the fabric conformance tests on soft-RoCE (40-fabric-conformance).
stage_e2e()       { tests/e2e/selftest.sh && tests/e2e/run.sh; }

STAGES="deps fmt clippy unit soak fuzz python pyclient e2e"
if [ "${1:-}" = "--list" ]; then echo "$STAGES"; exit 0; fi
[ $# -gt 0 ] && STAGES="$*"

declare -a RESULTS
failed=0
for s in $STAGES; do
  echo
  echo "==================== stage: $s ===================="
  start=$(date +%s)
  if "stage_$s"; then r=PASS; else r=FAIL; failed=$((failed + 1)); fi
  RESULTS+=("$(printf '%-5s %-12s %5ss' "$r" "$s" $(( $(date +%s) - start )))")
  echo "==================== $r: $s ===================="
done
echo
echo "==================== summary ===================="
printf '%s\n' "${RESULTS[@]}"
total=${#RESULTS[@]}
echo "$((total - failed)) stages passed, $failed failed"
[ "$failed" -eq 0 ]
