#!/usr/bin/env bash
# Self-test of the e2e harness: proves that failures are reported.
#
#   tests/e2e/selftest.sh [--unit | --guest]
#
#   --unit   (default part, ~5 s, no guest) feeds canned guest result files to run.sh's result
#            handling: pass/fail lines, failure logs, the summary line and exit status, a guest
#            that died or timed out in the middle, partially written lines, two guests; checks
#            how scenario headers and --kernel/--netns group scenarios into guests; and (as
#            root) creates real network namespaces with hooks: set up, torn down, leftovers
#            ended, a link out refused, removed on SIGTERM.
#   --guest  boots the guest with the scenarios of tests/e2e/selftest/ (an assertion failure,
#            a failing command, a per-scenario timeout, the rtgt helpers and the smoke scenario
#            against tools/fake-rtgt.rs, an rtgt that exits early, a kernel crash) and checks
#            what run.sh prints and that it exits non-zero (~25 s).
# Without an option both parts run.
set -euo pipefail
E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FAILS=0
NETNS_HOST_IP_CHECK=10.78.0.1
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

  # two guests: the second dies; the first one's results stand
  out=$(
    source "$E2E_DIR/run.sh"
    R_GUEST_OUT=$TMP/guest R_ORDER=(a b c)
    printf 'BOOT 1\nSTART a\nPASS a 1.0\nDONE 1 0\n' > "$TMP/g1"
    poll_results "$TMP/g1"; finish_guest "" a
    reset_guest_results
    printf 'BOOT 1\nSTART b\n' > "$TMP/g2"
    poll_results "$TMP/g2"; finish_guest "guest died" b c
    rc=0; finish_results "" || rc=$?; echo "rc=$rc"
  )
  check "two guests: first guest's pass kept" has_line "$out" "PASS  a  (1.0s)"
  check "two guests: second guest's running scenario fails" has "$out" "FAIL  b  (-)  guest died"
  check "two guests: its next scenario not run" has_line "$out" "FAIL  c  (not run: guest died)"
  check "two guests: summary" has_line "$out" "1 passed, 2 failed"
  check "two guests: exit status 1" has_line "$out" "rc=1"

  grouping
  netns
}

# grouping: scenario headers choose the guest (kernel, network namespace); --kernel forces one.
grouping() {
  local d out rc
  d=$(mktemp -d)
  printf '# plain\necho a\n' > "$d/01-a.sh"
  printf '# needs 6.12\n# e2e-kernel: 6.12\n# e2e-timeout: 30\n' > "$d/02-b.sh"
  printf '# in a namespace\n# e2e-netns: hooks/h.sh\n' > "$d/03-c.sh"
  printf '# needs 6.12 too\n# e2e-kernel: 6.12\n' > "$d/04-d.sh"
  printf '# namespace, no hook\n# e2e-netns: none\n' > "$d/05-e.sh"
  printf '# not a header once the comments end\necho\n# e2e-kernel: 9.9\n' > "$d/06-f.sh"
  mkdir "$d/hooks"; printf '#!/bin/sh\n' > "$d/hooks/h.sh"; chmod +x "$d/hooks/h.sh"
  out=$("$E2E_DIR/run.sh" --dir "$d" --list 2>&1)
  check "grouping: default kernel 6.1" has_line "$out" "01-a.sh	kernel 6.1"
  check "grouping: e2e-kernel 6.12" has_line "$out" "02-b.sh	kernel 6.12"
  check "grouping: same kernel, same guest, file order" \
    test "$(grep -n 'kernel 6.12$' <<<"$out" | cut -d: -f2 | tr '\n' ' ')" = "02-b.sh	kernel 6.12 04-d.sh	kernel 6.12 "
  check "grouping: e2e-netns hook" has_line "$out" "03-c.sh	kernel 6.1, netns h.sh"
  check "grouping: e2e-netns none" has_line "$out" "05-e.sh	kernel 6.1, netns"
  check "grouping: headers end with the leading comments" has_line "$out" "06-f.sh	kernel 6.1"
  out=$("$E2E_DIR/run.sh" --dir "$d" --list --kernel 6.12 2>&1)
  check "--kernel 6.12: every scenario on 6.12" test "$(grep -c 'kernel 6.12' <<<"$out")" = 6
  out=$(RTGT_E2E_KERNEL=6.1 "$E2E_DIR/run.sh" --dir "$d" --list 2>&1)
  check "RTGT_E2E_KERNEL=6.1: a 6.12 scenario is not run, and says why" \
    has_line "$out" "b	not run: needs kernel 6.12, the run is forced to 6.1"
  check "RTGT_E2E_KERNEL=6.1: others on 6.1" has_line "$out" "01-a.sh	kernel 6.1"
  out=$("$E2E_DIR/run.sh" --dir "$d" --list --netns -k 01 2>&1)
  check "--netns: a namespace for every guest" has_line "$out" "01-a.sh	kernel 6.1, netns"
  out=$("$E2E_DIR/run.sh" --dir "$d" --list --netns-setup "$d/hooks/h.sh" -k 05 2>&1)
  check "--netns-setup: replaces the scenarios' hooks" has_line "$out" "05-e.sh	kernel 6.1, netns h.sh"
  out=$(
    source "$E2E_DIR/run.sh"
    for f in "$d"/0[1-5]-*.sh; do select_scenario "$f" "" 0 "" 100; done
    for k in "${G_KEYS[@]}"; do echo "${k##*/}=${G_TMO[$k]}:${G_NAMES[$k]}"; done
  )
  check "grouping: a guest's timeout is the sum of its scenarios'" has_line "$out" "6.12|=130:b d"
  check "grouping: hook path resolved from the scenario directory" has_line "$out" "h.sh=100:c"
  printf '# e2e-kernel: six\n' > "$d/07-g.sh"
  rc=0; out=$("$E2E_DIR/run.sh" --dir "$d" --list -k 07 2>&1) || rc=$?
  check "grouping: a bad e2e-kernel is refused" test "$rc" = 2
  check "grouping: ... with a message" has "$out" "bad e2e-kernel 'six'"
  printf '# e2e-netns: no-such-hook.sh\n' > "$d/07-g.sh"
  rc=0; out=$("$E2E_DIR/run.sh" --dir "$d" --list -k 07 2>&1) || rc=$?
  check "grouping: a missing hook is refused" test "$rc" = 2
  out=$(source "$E2E_DIR/run.sh"
    for p in "6.1 6.12" "6.12 6.1" "6.1 6.1" "linux-image-6.12.117+deb12-amd64 6.12" "6.9 6.12"; do
      kernel_older $p && echo "$p: older" || echo "$p: not older"; done)
  check "kernel_older 6.1 6.12" has_line "$out" "6.1 6.12: older"
  check "kernel_older 6.12 6.1" has_line "$out" "6.12 6.1: not older"
  check "kernel_older 6.1 6.1" has_line "$out" "6.1 6.1: not older"
  check "kernel_older package 6.12" has_line "$out" "linux-image-6.12.117+deb12-amd64 6.12: not older"
  check "kernel_older 6.9 6.12 (not by string)" has_line "$out" "6.9 6.12: older"
  rm -rf "$d"
}

# netns: a guest's host network namespace comes and goes with its hook; nothing may leave it;
# every exit path removes it. Creates real namespaces (root).
netns() {
  if [ "$(id -u)" != 0 ]; then echo "SKIP  netns: creating network namespaces needs root"; return; fi
  local d out ns=rtgt-e2e-selftest-$$
  d=$(mktemp -d)
  # a hook that starts a service it does not stop: the runner must end it
  cat > "$d/hook.sh" <<'HOOK'
#!/bin/bash
case $1 in
  start) setsid sleep 300 > /dev/null 2>&1 < /dev/null & echo $! > "$E2E_NETNS_DIR/sleep.pid"
         echo "SELFTEST_IP=$E2E_NETNS_HOST_IP" >> "$E2E_NETNS_ENV"
         ip -o addr show dev "$E2E_NETNS_TAP"; echo "started in $PWD" ;;
  stop) echo "stop called" ;;
esac
HOOK
  chmod +x "$d/hook.sh"
  out=$(
    source "$E2E_DIR/run.sh"
    NETNS_LIVE=("$ns") NETNS_DIR[$ns]=$d/ns
    netns_up "$ns" "$d/hook.sh" "$d/ns" && echo "up ok"
    ip netns list | grep -q "^$ns\b" && echo "namespace exists"
    ip netns pids "$ns" | grep -qx "$(cat "$d/ns/sleep.pid")" && echo "service runs in the namespace"
    netns_down "$ns"
    ip netns list | grep -q "^$ns\b" || echo "namespace gone"
    pid_gone "$(cat "$d/ns/sleep.pid")" && echo "service ended"
    true
  )
  check "netns: up" has_line "$out" "up ok"
  check "netns: namespace created" has_line "$out" "namespace exists"
  check "netns: the hook's service runs inside it" has_line "$out" "service runs in the namespace"
  check "netns: hook runs in its directory, sees the tap with its address" \
    grep -q "inet $NETNS_HOST_IP_CHECK/24" "$d/ns/hook.log"
  check "netns: hook's variables for the guest" grep -qx "SELFTEST_IP=10.78.0.1" "$d/ns/env"
  check "netns: hook stopped" grep -qx "stop called" "$d/ns/hook.log"
  check "netns: leftover service ended" has_line "$out" "service ended"
  check "netns: leftover reported in hook.log" grep -q "still running in $ns" "$d/ns/hook.log"
  check "netns: namespace deleted" has_line "$out" "namespace gone"

  # a hook that adds a link: refused (only lo and the tap, nothing can leave)
  out=$(netns_try ns2 '[ "$1" = start ] && ip tuntap add dev extra0 mode tap')
  check "netns: a link besides lo and the tap is refused" has "$out" "links other than lo and tap0: extra0 lo tap0"
  check "netns: ... and the namespace is removed" has_line "$out" "namespace gone"
  out=$(netns_try ns3 '[ "$1" = start ] && { echo "cannot start"; exit 3; }')
  check "netns: a failing hook fails the setup" has "$out" "the namespace hook failed: 'hook.sh start'"
  check "netns: ... and the namespace is removed" has_line "$out" "namespace gone"

  # SIGTERM while QEMU runs: the exit traps end QEMU (here a sleep) and remove the namespace
  printf '#!/bin/bash\nexit 0\n' > "$d/hook.sh"
  (
    source "$E2E_DIR/run.sh"
    install_exit_traps
    NETNS_LIVE=("$ns") NETNS_DIR[$ns]=$d/ns4
    netns_up "$ns" "$d/hook.sh" "$d/ns4" > /dev/null
    ip netns exec "$ns" sleep 300 & CUR_QPID=$!
    echo "$CUR_QPID" > "$d/qpid"
    me=$BASHPID
    (sleep 0.5; kill -TERM "$me") &
    wait "$CUR_QPID"
    echo "not interrupted" > "$d/qpid"
  ) || true
  check "netns: SIGTERM removes the namespace" bash -c "! ip netns list | grep -q '^$ns\b'"
  check "netns: SIGTERM ends QEMU" pid_gone "$(cat "$d/qpid")"
  rm -rf "$d"
}

# netns_try SUBDIR HOOK_LINE: netns_up and netns_down (in $d/SUBDIR, namespace $ns of netns())
# with a hook made of HOOK_LINE; prints netns_up's message, "up ok", "namespace gone".
netns_try() {
  printf '#!/bin/bash\n%s\nexit 0\n' "$2" > "$d/hook.sh"
  (
    source "$E2E_DIR/run.sh"
    NETNS_LIVE=("$ns") NETNS_DIR[$ns]=$d/$1
    netns_up "$ns" "$d/hook.sh" "$d/$1" && echo "up ok"
    netns_down "$ns"
    ip netns list | grep -q "^$ns\b" || echo "namespace gone"
    true
  )
}

# pid_gone PID: the process has exited (a zombie counts as gone: PID 1 may not reap it).
pid_gone() {
  local st
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    st=$(cat "/proc/$1/stat" 2> /dev/null) || return 0
    st=${st##*) }
    [[ $st == [ZX]* ]] && return 0
    sleep 0.2
  done
  return 1
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
