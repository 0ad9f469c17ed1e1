#!/usr/bin/env bash
# Self-test of the e2e harness: proves that failures are reported.
#
#   tests/e2e/selftest.sh [--unit | --guest]
#
#   --unit   (default part, ~1 s, no guest) feeds canned guest result files to run.sh's result
#            handling: pass/fail lines, failure logs, the summary line and exit status, a guest
#            that died or timed out in the middle, partially written lines.
#   --guest  boots the guest with the scenarios of tests/e2e/selftest/ (an assertion failure,
#            a failing command, a per-scenario timeout, the rtgt helpers and the smoke scenario
#            against tools/fake-rtgt.rs, an rtgt that exits early, a kernel crash) and checks
#            what run.sh prints and that it exits non-zero (~25 s).
# Without an option both parts run.
set -euo pipefail
E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FAILS=0
check() { # check DESCRIPTION CMD...
  if "${@:2}"; then echo "ok    $1"; else echo "FAIL  $1"; FAILS=$((FAILS + 1)); fi
}
has() { grep -qF -- "$2" <<<"$1"; }
has_line() { grep -qxF -- "$2" <<<"$1"; }

# run_report WHY ORDER... <<< RESULTS: run.sh's result handling in a subshell; prints its
# output followed by "rc=N".
run_report() {
  local why=$1; shift
  (
    # shellcheck source=run.sh
    source "$E2E_DIR/run.sh"
    R_GUEST_OUT=$TMP/guest
    R_ORDER=("$@")
    cat > "$TMP/guest/results"
    poll_results "$TMP/guest/results"
    rc=0; finish_results "$why" || rc=$?
    echo "rc=$rc"
  ) 2>&1
}

unit() {
  TMP=$(mktemp -d); trap 'rm -rf "$TMP"' RETURN
  mkdir -p "$TMP/guest/b"
  local out

  out=$(run_report "" a b <<'EOF'
BOOT 5.1
START a
PASS a 1.5
START b
PASS b 2.0
DONE 2 0
EOF
)
  check "all pass: one line per scenario" has_line "$out" "PASS  a  (1.5s)"
  check "all pass: summary" has_line "$out" "2 passed, 0 failed"
  check "all pass: exit status 0" has_line "$out" "rc=0"

  echo "rtgt said something" > "$TMP/guest/b/rtgt.log"
  echo "[1.0] step" > "$TMP/guest/b/output.log"
  echo "kernel said something" > "$TMP/guest/b/dmesg.log"
  out=$(run_report "" a b <<'EOF'
BOOT 5.1
START a
PASS a 1.5
START b
FAIL b 2.0 size of /dev/sda: expected '1', got '2'
DONE 1 1
EOF
)
  check "failure: FAIL line with reason" has_line "$out" "FAIL  b  (2.0s)  size of /dev/sda: expected '1', got '2'"
  check "failure: prints the rtgt log" has "$out" "| rtgt said something"
  check "failure: prints the dmesg tail" has "$out" "| kernel said something"
  check "failure: prints the scenario output" has "$out" "| [1.0] step"
  check "failure: summary" has_line "$out" "1 passed, 1 failed"
  check "failure: exit status 1" has_line "$out" "rc=1"

  out=$(run_report "guest died (qemu exit status 0)" a b c <<'EOF'
BOOT 5.1
START a
PASS a 1.5
START b
EOF
)
  check "guest died: running scenario fails" has "$out" "FAIL  b  (-)  guest died (qemu exit status 0)"
  check "guest died: later scenario not run" has_line "$out" "FAIL  c  (not run: guest died (qemu exit status 0))"
  check "guest died: summary" has_line "$out" "1 passed, 2 failed"
  check "guest died: exit status 1" has_line "$out" "rc=1"

  out=$(run_report "guest timed out after 60s" a <<'EOF'
EOF
)
  check "no boot: scenario not run" has_line "$out" "FAIL  a  (not run: guest timed out after 60s)"
  check "no boot: exit status 1" has_line "$out" "rc=1"

  out=$(run_report "" <<'EOF'
EOF
)
  check "nothing selected: not a success" has_line "$out" "rc=1"

  out=$(printf 'BOOT 1\nSTART a\nPASS a 1.0\nSTART b\nPASS b' | run_report "guest died" a b)
  check "partial last line is not read" has "$out" "FAIL  b  (-)  guest died"
  check "partial last line: summary" has_line "$out" "1 passed, 1 failed"
}

guest() {
  local out rc=0 kept fake
  fake=$(mktemp /tmp/fake-rtgt.XXXXXX)
  "${RUSTC:-rustc}" --edition 2021 -O -o "$fake" "$E2E_DIR/tools/fake-rtgt.rs"
  out=$(RTGT_BIN=$fake "$E2E_DIR/run.sh" --dir "$E2E_DIR/selftest" 2>&1) || rc=$?
  rm -f "$fake"
  printf '%s\n' "$out" | sed 's/^/  | /'
  check "guest: run.sh exits non-zero" test "$rc" != 0
  check "guest: passing scenario" has_line "$out" "PASS  pass  ($(sed -n 's/^PASS  pass  (\(.*\))$/\1/p' <<<"$out"))"
  check "guest: assertion message" has "$out" "selftest value: expected 'expected', got 'actual'"
  check "guest: rtgt log printed" has "$out" "| selftest rtgt log line"
  check "guest: failing command named" has "$out" "03-fail-status.sh:3: 'false' failed with status 1 (last step: the step before the failure)"
  check "guest: per-scenario timeout" has "$out" "timed out after 4s (e2e-timeout)"
  check "guest: timed-out scenario's processes killed" grep -q '^PASS  after-timeout' <<<"$out"
  check "guest: rtgt helpers against fake-rtgt" grep -q '^PASS  rtgt-helpers' <<<"$out"
  check "guest: smoke scenario against fake-rtgt" grep -q '^PASS  rtgt-smoke' <<<"$out"
  check "guest: rtgt exiting early is explained" has "$out" "rtgt exited with status 3 before creating /var/tmp/spdk.sock: fake-rtgt: failing on purpose"
  check "guest: kernel crash reported" has "$out" "FAIL  guest-dies  (-)  guest died"
  check "guest: scenario after the crash not run" has "$out" "FAIL  not-run  (not run: guest died"
  check "guest: summary" has_line "$out" "4 passed, 6 failed"
  kept=$(sed -n 's/^e2e: logs kept in //p' <<<"$out")
  check "guest: artifacts reach the host" test -f "$kept/guest/pass/artifact.txt"
  [ -z "$kept" ] || rm -rf "$kept"
}

case ${1:-all} in
  --unit) unit ;;
  --guest) guest ;;
  all) unit; guest ;;
  *) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; exit 2 ;;
esac
if [ "$FAILS" = 0 ]; then echo "selftest: all checks passed"; else echo "selftest: $FAILS check(s) failed"; exit 1; fi
