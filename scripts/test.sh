#!/usr/bin/env bash
# Runs every rtgt test: formatting and lints, the Rust unit and integration tests (simulated
# fabric), the fabric conformance suite on soft-RoCE in a QEMU guest, the SPDK-client
# compatibility suite, and the end-to-end suite against the Linux kernel initiators.
#
# Usage: scripts/test.sh [STAGE...]     (default: every stage; `scripts/test.sh --list` lists them)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}

stage_deps()      { scripts/install-deps.sh; }
stage_fmt()       { cargo fmt --all -- --check; }
stage_clippy()    { cargo clippy --workspace --all-targets -- -D warnings; }
stage_unit()      { cargo test --workspace; }
# The SPDK-client compatibility suite: rtgt serve --fabric sim driven by spdk-rpc.
stage_python()    { cargo build -p rtgt && python3 -m pytest -q tests/python; }
# The rtgt Python package, rtgt-rpc, and the Ansible collection (sanity + live playbooks).
stage_pyclient()  { cargo build -p rtgt && python/tests/run.sh; }
# The guest suite includes the fabric conformance tests on soft-RoCE (40-fabric-conformance).
stage_e2e()       { tests/e2e/selftest.sh && tests/e2e/run.sh; }

STAGES="deps fmt clippy unit python pyclient e2e"
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
