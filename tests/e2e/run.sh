#!/usr/bin/env bash
# Run the end-to-end suite: real Linux initiators against rtgt (and the kernel's own targets)
# in QEMU soft-RoCE guests, one guest per kernel the selected scenarios need.
#
#   tests/e2e/run.sh [-k PATTERN]... [--keep] [--no-build] [--dir DIR] [--out DIR]
#                    [--env NAME=VALUE]... [--kernel KERNEL] [--netns] [--netns-setup SCRIPT]
#                    [--shell] [-v] [-x] [--list]
#
#   -k PATTERN   run only scenarios whose name (e.g. 01-nvmet-peer) matches the extended regex
#                PATTERN; several -k are or-ed
#   --keep       keep the run directory (initrd, console log, per-scenario logs) even on success
#   --no-build   do not run cargo; use the rtgt binary already built
#   --dir DIR    run the scenarios of DIR instead of tests/e2e/scenarios
#   --out DIR    use DIR as the run directory (created; implies --keep); the guest's artifacts
#                end up in DIR/guest/<scenario>/
#   --env N=V    export N=V to the scenarios in the guest (repeatable)
#   --kernel K   boot kernel K (6.1, 6.12, or a linux-image-* package) for every scenario of the
#                run; scenarios that need a newer kernel are reported as not run (failed)
#   --netns      boot every guest inside a host network namespace (see the README)
#   --netns-setup SCRIPT
#                the namespace hook for every guest of the run, instead of the scenarios' own
#                (implies --netns)
#   --shell      after the scenarios, open a shell on the guest console (interactive; the
#                selected scenarios must all run in one guest)
#   -v           stream the guest console while it runs
#   -x           trace the scenarios (set -x)
#   --list       print the selected scenarios with their guest (kernel, namespace) and exit
#
# Scenario headers: "# e2e-timeout: SECONDS", "# e2e-kernel: MAJOR.MINOR" (the oldest kernel
# the scenario runs on; default 6.1), "# e2e-netns: HOOK" (the guest runs in a host network
# namespace; HOOK, relative to the scenario directory, starts and stops host-side services in
# it; "none" for no hook). Scenarios are grouped by kernel and namespace hook, one guest each.
#
# Environment: CARGO_TARGET_DIR, RTGT_BIN (use this rtgt binary, no cargo), RTGT_E2E_CACHE,
# RTGT_E2E_OUT (where run directories go), RTGT_E2E_TIMEOUT (each guest, seconds),
# RTGT_E2E_SCENARIO_TIMEOUT (default per scenario, seconds), RTGT_E2E_BINS (extra guest
# binaries), RTGT_E2E_MEM (MiB, 2048), RTGT_E2E_SMP (2), RTGT_E2E_ACCEL (tcg,thread=multi),
# RTGT_E2E_APPEND (more guest kernel parameters, e.g. "clocksource=tsc tsc=reliable"),
# RTGT_E2E_KERNEL (as --kernel), RTGT_E2E_NETNS_SETUP (as --netns-setup).
#
# Prints one line per scenario (PASS/FAIL name (seconds)), the logs of each failure, one line
# of stage times per guest, and a last line "N passed, N failed". Exits 0 only when every
# selected scenario passed.
set -euo pipefail

E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$E2E_DIR/../.." && pwd)
E2E_DEFAULT_KERNEL=6.1
# The host network namespace of a guest (--netns, "# e2e-netns:"): the namespace's end of the
# link, the guest's address on its virtio-net NIC, and that NIC's MAC.
NETNS_HOST_IP=10.78.0.1
NETNS_GUEST_IP=10.78.0.2
NETNS_PREFIXLEN=24
NETNS_TAP=tap0
NETNS_GUEST_MAC=52:54:00:4e:00:02

# ---------------------------------------------------------------------------------------------
# Result handling (also used by selftest.sh on canned result files)
# ---------------------------------------------------------------------------------------------
declare -gA R_STATUS=()
R_ORDER=()          # selected scenario names, in file order
R_STARTED=""        # the scenario that started last (in the current guest)
R_BOOT=""           # guest uptime when scenarios began
R_DONE=0
R_LINES=0           # result lines already handled

# scenario_name FILE -> name shown in results: the file name without NN- and .sh
scenario_name() { local b=${1##*/}; b=${b%.sh}; echo "${b#[0-9][0-9]-}"; }

tail_block() { # tail_block TITLE FILE LINES
  [ -s "$2" ] || return 0
  echo "    ---- $1 (last $3 lines of $2) ----"
  tail -n "$3" "$2" | sed 's/^/    | /'
}

# show_failure NAME: the logs of a failed scenario from the run directory $R_GUEST_OUT.
show_failure() {
  local d="$R_GUEST_OUT/$1"
  tail_block "scenario output" "$d/output.log" 40
  if [ -s "$d/rtgt.log" ]; then tail_block "rtgt log" "$d/rtgt.log" 80
  else echo "    ---- (no rtgt log) ----"; fi
  tail_block "rpc calls" "$d/rpc.log" 20
  tail_block "guest dmesg" "$d/dmesg.log" 40
}

# handle_line LINE: one line of the guest's results file.
handle_line() {
  local kind name secs reason
  read -r kind name secs reason <<<"$1" || true
  case $kind in
    BOOT) R_BOOT=$name ;;
    START) R_STARTED=$name ;;
    PASS|FAIL)
      R_STATUS[$name]=$kind
      R_STARTED=""
      [ "$secs" = - ] && secs="-" || secs="${secs}s"
      if [ "$kind" = PASS ]; then
        printf 'PASS  %s  (%s)\n' "$name" "$secs"
      else
        printf 'FAIL  %s  (%s)  %s\n' "$name" "$secs" "$reason"
        show_failure "$name"
      fi ;;
    DONE) R_DONE=1 ;;
    '') ;;
    *) echo "e2e: unexpected result line: $1" >&2 ;;
  esac
}

# poll_results FILE: handle the lines added since the last call (complete lines only).
poll_results() {
  local f=$1 lines i
  [ -f "$f" ] || return 0
  mapfile -t lines < "$f"
  # a last line without its newline may still be being written
  if [ "${#lines[@]}" -gt 0 ] && [ -n "$(tail -c1 "$f")" ]; then unset 'lines[-1]'; fi
  for ((i = R_LINES; i < ${#lines[@]}; i++)); do handle_line "${lines[i]}"; done
  R_LINES=${#lines[@]}
}

# reset_guest_results: before the results of the next guest.
reset_guest_results() { R_STARTED="" R_BOOT="" R_DONE=0 R_LINES=0; }

# finish_guest WHY NAME...: the scenarios NAME... of one guest that have no result fail: the one
# running when the guest ended with WHY (its fate, empty when it completed), the others as not
# run.
finish_guest() {
  local why=$1 n; shift
  for n in "$@"; do
    [ -z "${R_STATUS[$n]:-}" ] || continue
    if [ "$n" = "$R_STARTED" ]; then
      handle_line "FAIL $n - ${why:-no result}"
    else
      R_STATUS[$n]=FAIL
      printf 'FAIL  %s  (not run: %s)\n' "$n" "${why:-no result}"
    fi
  done
}

# finish_results WHY: mark scenarios without a result as failed (WHY: the guest's fate when it
# ended early, empty when it completed), print the summary line, return 0 if all passed.
finish_results() {
  local why=$1 n passed=0 failed=0
  finish_guest "$why" "${R_ORDER[@]}"
  for n in "${R_ORDER[@]}"; do
    if [ "${R_STATUS[$n]}" = PASS ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
  done
  echo "$passed passed, $failed failed"
  [ "$failed" = 0 ] && [ "$passed" -gt 0 ]
}

# ---------------------------------------------------------------------------------------------
# Scenario selection and grouping (also used by selftest.sh)
# ---------------------------------------------------------------------------------------------
# header_value FILE KEY: the value of the first "# KEY: value" line of FILE's leading comments.
header_value() {
  awk -v k="$2" '!/^#/ && NF {exit} $0 ~ "^#[[:space:]]*" k ":" {sub("^#[[:space:]]*" k ":[[:space:]]*", ""); sub("[[:space:]]+$", ""); print; exit}' "$1"
}

# kernel_version KERNEL: MAJOR.MINOR[.PATCH] of a kernel given as 6.12 or as a package name.
kernel_version() { grep -oE '[0-9]+\.[0-9]+(\.[0-9]+)?' <<<"${1#linux-image-}" | head -1; }

# kernel_older A B: true if kernel A is older than B.
kernel_older() {
  local a b
  a=$(kernel_version "$1") b=$(kernel_version "$2")
  [ "$a" != "$b" ] && [ "$(printf '%s\n%s\n' "$a" "$b" | sort -V | head -1)" = "$a" ]
}

# Groups of scenarios that share a guest, in order of their first scenario. A group's key is
# "KERNEL|NETNS": NETNS is empty (no namespace), "none" (a namespace without a hook) or the
# absolute path of its hook.
G_KEYS=()
declare -gA G_FILES=() G_NAMES=() G_TMO=()
declare -gA R_NOTRUN=()   # name -> why it cannot run in this run

# select_scenario FILE FORCED_KERNEL NETNS_ALL NETNS_HOOK DEFAULT_TIMEOUT: put FILE in its group
# (or in R_NOTRUN). Fails (status 2, message on stderr) on a bad header.
select_scenario() {
  local f=$1 forced=$2 ns_all=$3 ns_hook=$4 default_tmo=$5 tmo name kern ns key
  name=$(scenario_name "$f")
  R_ORDER+=("$name")
  tmo=$(header_value "$f" e2e-timeout)
  [[ ${tmo:-0} =~ ^[0-9]+$ ]] || { echo "e2e: $f: bad e2e-timeout '$tmo'" >&2; return 2; }
  kern=$(header_value "$f" e2e-kernel)
  [[ -z $kern || $kern =~ ^[0-9]+\.[0-9]+$ ]] || { echo "e2e: $f: bad e2e-kernel '$kern' (want MAJOR.MINOR)" >&2; return 2; }
  kern=${kern:-$E2E_DEFAULT_KERNEL}
  if [ -n "$forced" ]; then
    if kernel_older "$forced" "$kern"; then
      R_NOTRUN[$name]="needs kernel $kern, the run is forced to $forced"
      return 0
    fi
    kern=$forced
  fi
  ns=$(header_value "$f" e2e-netns)
  case $ns in
    ''|none) ;;
    /*) ;;
    *) ns=$(cd "$(dirname "$f")" && realpath -m "$ns") ;;
  esac
  if [ -n "$ns_hook" ]; then ns=$ns_hook
  elif [ "$ns_all" = 1 ] && [ -z "$ns" ]; then ns=none; fi
  if [ -n "$ns" ] && [ "$ns" != none ] && [ ! -x "$ns" ]; then
    echo "e2e: $f: the namespace hook $ns is not an executable file" >&2; return 2
  fi
  key="$kern|$ns"
  [ -n "${G_FILES[$key]+x}" ] || { G_KEYS+=("$key"); G_FILES[$key]="" G_NAMES[$key]="" G_TMO[$key]=0; }
  G_FILES[$key]+="${G_FILES[$key]:+ }${f##*/}"
  G_NAMES[$key]+="${G_NAMES[$key]:+ }$name"
  G_TMO[$key]=$(( G_TMO[$key] + ${tmo:-$default_tmo} ))
}

# group_label KEY: "kernel 6.12" or "kernel 6.12, netns (hook)".
group_label() {
  local k=${1%%|*} ns=${1#*|}
  case $ns in
    '') echo "kernel $k" ;;
    none) echo "kernel $k, netns" ;;
    *) echo "kernel $k, netns ${ns##*/}" ;;
  esac
}

# ---------------------------------------------------------------------------------------------
# Host network namespace of a guest
# ---------------------------------------------------------------------------------------------
NETNS_LIVE=()             # namespaces to remove on exit
declare -gA NETNS_DIR=()  # namespace -> its directory (hook.log, env, the hook's path)
CUR_QPID=""               # the QEMU running now, killed on exit

# netns_hook NS HOOK DIR ACTION: run HOOK ACTION inside NS, in DIR; output appended to
# DIR/hook.log.
netns_hook() {
  local ns=$1 hook=$2 dir=$3
  echo "=== $hook $4 ($(date +%T))" >> "$dir/hook.log"
  (cd "$dir" && ip netns exec "$ns" env E2E_NETNS="$ns" E2E_NETNS_HOST_IP=$NETNS_HOST_IP \
    E2E_NETNS_GUEST_IP=$NETNS_GUEST_IP E2E_NETNS_PREFIXLEN=$NETNS_PREFIXLEN \
    E2E_NETNS_TAP=$NETNS_TAP E2E_NETNS_DIR="$dir" E2E_NETNS_ENV="$dir/env" \
    "$hook" "$4" >> "$dir/hook.log" 2>&1 < /dev/null)
}

# netns_check NS: nothing can leave the namespace: its only links are lo and the tap, and it
# has no default route. Prints what is wrong.
netns_check() {
  local links
  links=$(ip -n "$1" -o link show | awk -F': ' '{sub("@.*", "", $2); print $2}' | sort | tr '\n' ' ')
  [ "$links" = "lo $NETNS_TAP " ] || { echo "the namespace has links other than lo and $NETNS_TAP: $links"; return 1; }
  if [ -n "$(ip -n "$1" route show default; ip -n "$1" -6 route show default)" ]; then
    echo "the namespace has a default route"; return 1
  fi
}

# netns_up NS HOOK DIR: create NS with the tap and its address, start HOOK (unless "none").
# Prints the reason on failure. The caller has put NS in NETNS_LIVE and NETNS_DIR first (this
# runs in a subshell), so that every exit path removes it.
netns_up() {
  local ns=$1 hook=$2 dir=$3 why
  [ "$(id -u)" = 0 ] || { echo "a network namespace needs root"; return 1; }
  mkdir -p "$dir"; : > "$dir/env"
  echo "$hook" > "$dir/hook"
  ip netns add "$ns" || { echo "ip netns add $ns failed"; return 1; }
  { ip -n "$ns" link set lo up &&
    ip -n "$ns" tuntap add dev "$NETNS_TAP" mode tap &&
    ip -n "$ns" addr add "$NETNS_HOST_IP/$NETNS_PREFIXLEN" dev "$NETNS_TAP" &&
    ip -n "$ns" link set "$NETNS_TAP" up; } >> "$dir/hook.log" 2>&1 \
    || { echo "creating $NETNS_TAP in $ns failed (see $dir/hook.log)"; return 1; }
  if [ "$hook" != none ]; then
    netns_hook "$ns" "$hook" "$dir" start \
      || { echo "the namespace hook failed: '${hook##*/} start' (see $dir/hook.log)"; return 1; }
  fi
  why=$(netns_check "$ns") || { echo "$why"; return 1; }
}

# netns_down NS: stop the hook (if it was started), end what still runs in NS, delete it.
# Idempotent; every exit path calls it.
netns_down() {
  local ns=$1 dir hook pids i
  ip netns list 2> /dev/null | grep -q "^$ns\b" || return 0
  dir=${NETNS_DIR[$ns]}
  hook=$(cat "$dir/hook" 2> /dev/null || echo none)
  if [ "$hook" != none ]; then
    netns_hook "$ns" "$hook" "$dir" stop || echo "e2e: '${hook##*/} stop' failed (see $dir/hook.log)" >&2
  fi
  for i in 1 2 3 4 5 6 7 8 9 10 11; do
    pids=$(ip netns pids "$ns" 2> /dev/null | tr '\n' ' ')
    [ -n "${pids// }" ] || break
    if [ "$i" = 1 ]; then
      echo "=== still running in $ns after the hook stopped: $(ps -o pid=,args= -p "${pids// /,}" 2> /dev/null | tr -s ' ' | tr '\n' ';')" >> "$dir/hook.log"
    fi
    # shellcheck disable=SC2086
    if [ "$i" -lt 11 ]; then kill -TERM $pids 2> /dev/null; else kill -KILL $pids 2> /dev/null; fi
    sleep 0.5
  done
  ip netns del "$ns" || echo "e2e: ip netns del $ns failed" >&2
  echo "=== namespace $ns deleted ($(date +%T))" >> "$dir/hook.log"
}

e2e_exit_cleanup() {
  local ns
  if [ -n "$CUR_QPID" ]; then kill "$CUR_QPID" 2> /dev/null || true; fi
  for ns in "${NETNS_LIVE[@]}"; do netns_down "$ns"; done
  NETNS_LIVE=()
}

# install_exit_traps: QEMU and the namespaces go on every exit path (Ctrl-C, SIGTERM, errors).
install_exit_traps() {
  trap e2e_exit_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------
usage() { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; exit "${1:-2}"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }

# run_guest GI KEY: build, boot and watch the guest of group KEY (number GI); results are
# printed as they come. Appends its stage times to G_TIMES.
G_TIMES=()
run_guest() {
  local gi=$1 key=$2 kern=${2%%|*} ns_hook=${2#*|} gid gdir bootdir names files ns=""
  read -ra names <<<"${G_NAMES[$key]}"
  files=${G_FILES[$key]}
  gid=$kern${ns_hook:+-netns}
  [ ! -e "$OUT/$gid" ] || gid=$gid-$gi
  gdir=$OUT/$gid
  bootdir=boot-$gid
  mkdir -p "$gdir" "$R_GUEST_OUT/$bootdir"
  reset_guest_results
  echo "== guest $gid: $(group_label "$key"): ${#names[@]} scenario(s)"

  local t0 t_image="-" t_boot="-" t_up="-" t_run="-" why=""
  # host network namespace and its services first: the hook's variables go into the guest
  if [ -n "$ns_hook" ]; then
    ns=rtgt-e2e-$$-$gi
    NETNS_LIVE+=("$ns") NETNS_DIR[$ns]=$gdir/netns
    t0=$(now)
    why=$(netns_up "$ns" "$ns_hook" "$gdir/netns") \
      && echo "e2e: namespace $ns up in $(since "$t0")s (tap $NETNS_TAP $NETNS_HOST_IP/$NETNS_PREFIXLEN, logs in $gdir/netns)" >&2 \
      || why="network namespace: $why"
  fi
  if [ -z "$why" ]; then
    local e v
    {
      echo "E2E_SCENARIOS='$files'"
      echo "E2E_SCENARIO_TIMEOUT=$DEFAULT_TMO"
      echo "E2E_SHELL=$SHELL_MODE"
      echo "E2E_TRACE=$TRACE"
      echo "E2E_BOOT_DIR=/out/$bootdir"
      if [ -n "$ns" ]; then
        echo "export E2E_NETNS_HOST_IP=$NETNS_HOST_IP E2E_NETNS_GUEST_IP=$NETNS_GUEST_IP"
        echo "export E2E_NETNS_PREFIXLEN=$NETNS_PREFIXLEN E2E_NETNS_MAC=$NETNS_GUEST_MAC E2E_NETNS_DEV=ns0"
        while IFS= read -r e || [ -n "$e" ]; do
          [ -n "$e" ] || continue
          [[ $e =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || { echo "e2e: ignoring a line of the hook's env file: $e" >&2; continue; }
          v=${e#*=}; printf "export %s='%s'\n" "${e%%=*}" "${v//\'/\'\\\'\'}"
        done < "$gdir/netns/env"
      fi
      for e in "${ENVS[@]}"; do   # single-quoted for the guest's busybox sh
        v=${e#*=}; printf "export %s='%s'\n" "${e%%=*}" "${v//\'/\'\\\'\'}"
      done
    } > "$gdir/config"
    t0=$(now)
    if "$E2E_DIR/build-guest.sh" --kernel "$kern" --rtgt "$RTGT_PATH" --scenarios "$SCEN_DIR" \
        --config "$gdir/config" "$gdir"; then
      t_image=$(since "$t0")
      echo "e2e: guest image ($(cat "$gdir/kver")) ready in ${t_image}s" >&2
    else
      why="building the guest for kernel $kern failed"
    fi
  fi

  local qrc=0 timeout=${RTGT_E2E_TIMEOUT:-$((120 + G_TMO[$key]))} tb results=$R_GUEST_OUT/$bootdir/results
  if [ -z "$why" ]; then
    local qemu=(qemu-system-x86_64 -accel "${RTGT_E2E_ACCEL:-tcg,thread=multi}" -cpu max
      -m "${RTGT_E2E_MEM:-2048}" -smp "${RTGT_E2E_SMP:-2}" -no-reboot -nic none
      -kernel "$gdir/vmlinuz" -initrd "$gdir/initrd.img"
      -append "console=ttyS0 panic=-1 quiet loglevel=4${RTGT_E2E_APPEND:+ $RTGT_E2E_APPEND}"
      -virtfs "local,path=$R_GUEST_OUT,mount_tag=e2e,security_model=none,id=e2e")
    if [ -n "$ns" ]; then
      qemu=(ip netns exec "$ns" "${qemu[@]}"
        -netdev "tap,id=ns0,ifname=$NETNS_TAP,script=no,downscript=no"
        -device "virtio-net-pci,netdev=ns0,mac=$NETNS_GUEST_MAC")
    fi
    tb=$(now)
    if [ "$SHELL_MODE" = 1 ]; then
      echo "e2e: booting the guest on this terminal (Ctrl-a x quits QEMU)" >&2
      "${qemu[@]}" -nographic || qrc=$?
      poll_results "$results"
      [ $R_DONE = 1 ] || why="guest stopped before the end"
    else
      echo "e2e: booting the guest ($(nproc) host cpus, timeout ${timeout}s)" >&2
      "${qemu[@]}" -display none -monitor none -serial "file:$gdir/console.log" < /dev/null &
      CUR_QPID=$!
      local tailpid="" deadline booted=0 tu=""
      if [ "$VERBOSE" = 1 ]; then
        # --pid: tail (and so the pipeline) ends with QEMU
        tail --pid="$CUR_QPID" -n +1 -F "$gdir/console.log" 2> /dev/null | tr -d '\r' | sed 's/^/  console| /' >&2 &
        tailpid=$!
      fi
      deadline=$(( $(date +%s) + timeout ))
      while :; do
        poll_results "$results"
        if [ $booted = 0 ] && [ -n "$R_BOOT" ]; then
          booted=1 t_boot=$(since "$tb") t_up=$R_BOOT tu=$(now)
          echo "e2e: guest up after ${t_boot}s (guest uptime ${R_BOOT}s); running ${#names[@]} scenario(s)" >&2
        fi
        kill -0 "$CUR_QPID" 2> /dev/null || break
        if [ "$(date +%s)" -ge "$deadline" ]; then
          why="guest timed out after ${timeout}s"
          kill "$CUR_QPID" 2> /dev/null || true
          break
        fi
        sleep 0.5
      done
      wait "$CUR_QPID" || qrc=$?
      CUR_QPID=""
      [ -z "$tailpid" ] || wait "$tailpid" 2> /dev/null || true
      poll_results "$results"
      [ -z "$tu" ] || t_run=$(since "$tu")
      if [ -z "$why" ] && [ $R_DONE = 0 ]; then why="guest died (qemu exit status $qrc)"; fi
      if [ -z "$why" ] && [ -z "$R_BOOT" ]; then why="the guest did not come up (see $R_GUEST_OUT/$bootdir/boot.log)"; fi
    fi
    if [ -n "$why" ]; then
      echo "e2e: $why" >&2
      [ -s "$gdir/console.log" ] && { echo "    ---- guest console (last 40 lines) ----"; tr -d '\r' < "$gdir/console.log" | tail -n 40 | sed 's/^/    | /'; }
    fi
    echo "e2e: guest $gid ran $(since "$tb")s" >&2
  else
    echo "e2e: $why" >&2
  fi
  [ -z "$ns" ] || netns_down "$ns"
  finish_guest "$why" "${names[@]}"
  local n p=0 f=0
  for n in "${names[@]}"; do
    if [ "${R_STATUS[$n]}" = PASS ]; then p=$((p + 1)); else f=$((f + 1)); fi
  done
  G_TIMES+=("$(printf 'TIME  %s (%s): image %ss, boot %ss (guest uptime %ss), scenarios %ss: %d passed, %d failed' \
    "$(group_label "$key")" "$(cat "$gdir/kver" 2> /dev/null || echo "?")" "$t_image" "$t_boot" "${t_up:--}" "$t_run" "$p" "$f")")
}

main() {
  local patterns=() keep=0 build=1 list=0 out="" netns_all=0 netns_hook="" kernel=""
  SCEN_DIR="$E2E_DIR/scenarios" SHELL_MODE=0 VERBOSE=0 TRACE=0 ENVS=()
  while [ $# -gt 0 ]; do
    case $1 in
      -k) patterns+=("$2"); shift 2 ;;
      -k*) patterns+=("${1#-k}"); shift ;;
      --keep) keep=1; shift ;;
      --no-build) build=0; shift ;;
      --dir) SCEN_DIR=$(cd "$2" && pwd); shift 2 ;;
      --out) out=$2; keep=1; shift 2 ;;
      --env) [[ $2 =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || { echo "e2e: --env wants NAME=VALUE" >&2; exit 2; }
             ENVS+=("$2"); shift 2 ;;
      --kernel) kernel=$2; shift 2 ;;
      --netns) netns_all=1; shift ;;
      --netns-setup) netns_hook=$2; shift 2 ;;
      --shell) SHELL_MODE=1; shift ;;
      -v|--verbose) VERBOSE=1; shift ;;
      -x|--trace) TRACE=1; shift ;;
      --list) list=1; shift ;;
      -h|--help) usage 0 ;;
      *) echo "e2e: unknown argument $1" >&2; usage ;;
    esac
  done
  local t_start; t_start=$(now)
  kernel=${kernel:-${RTGT_E2E_KERNEL:-}}
  if [ -n "$kernel" ] && [ -z "$(kernel_version "$kernel")" ]; then
    echo "e2e: --kernel wants MAJOR.MINOR (6.1, 6.12) or a linux-image-* package, not '$kernel'" >&2; exit 2
  fi
  netns_hook=${netns_hook:-${RTGT_E2E_NETNS_SETUP:-}}
  if [ -n "$netns_hook" ]; then
    [ -x "$netns_hook" ] || { echo "e2e: the namespace hook $netns_hook is not an executable file" >&2; exit 2; }
    netns_hook=$(realpath "$netns_hook") netns_all=1
  fi

  # select and group scenarios
  local f stem p hit
  DEFAULT_TMO=${RTGT_E2E_SCENARIO_TIMEOUT:-120}
  for f in "$SCEN_DIR"/[0-9][0-9]-*.sh; do
    [ -f "$f" ] || continue
    stem=$(basename "$f" .sh)
    if [ ${#patterns[@]} -gt 0 ]; then
      hit=0
      for p in "${patterns[@]}"; do grep -Eq -- "$p" <<<"$stem" && hit=1; done
      [ $hit = 1 ] || continue
    fi
    select_scenario "$f" "$kernel" "$netns_all" "$netns_hook" "$DEFAULT_TMO" || exit 2
  done
  if [ ${#R_ORDER[@]} = 0 ]; then echo "e2e: no scenario in $SCEN_DIR matches" >&2; exit 2; fi
  if [ $list = 1 ]; then
    local key n
    for key in "${G_KEYS[@]}"; do
      for f in ${G_FILES[$key]}; do printf '%s\t%s\n' "$f" "$(group_label "$key")"; done
    done
    for n in "${R_ORDER[@]}"; do [ -z "${R_NOTRUN[$n]:-}" ] || printf '%s\tnot run: %s\n' "$n" "${R_NOTRUN[$n]}"; done
    exit 0
  fi
  if [ "$SHELL_MODE" = 1 ] && [ ${#G_KEYS[@]} -gt 1 ]; then
    echo "e2e: --shell needs the selected scenarios in one guest; these need ${#G_KEYS[@]} (use -k or --kernel)" >&2; exit 2
  fi

  # rtgt
  local target=${CARGO_TARGET_DIR:-$ROOT/target} t0
  if [ -n "${RTGT_BIN:-}" ]; then
    RTGT_PATH=$RTGT_BIN
  else
    RTGT_PATH=$target/release/rtgt
    if [ $build = 1 ]; then
      t0=$(now)
      echo "e2e: cargo build --release -p rtgt" >&2
      (cd "$ROOT" && cargo build --release -p rtgt) || { echo "e2e: building rtgt failed" >&2; exit 1; }
      echo "e2e: rtgt built in $(since "$t0")s" >&2
    fi
  fi
  [ -x "$RTGT_PATH" ] || { echo "e2e: no rtgt binary at $RTGT_PATH" >&2; exit 1; }

  # run directory
  local outroot=${RTGT_E2E_OUT:-$target/e2e}
  if [ -n "$out" ]; then
    rm -rf "$out/guest"; mkdir -p "$out"; out=$(cd "$out" && pwd)
  else
    mkdir -p "$outroot"
    # keep the ten most recent run directories
    find "$outroot" -maxdepth 1 -name 'run-*' -printf '%T@ %p\n' | sort -rn | tail -n +10 \
      | cut -d' ' -f2- | xargs -r rm -rf
    out=$(mktemp -d "$outroot/run-$(date +%Y%m%d-%H%M%S)-XXXX")
  fi
  OUT=$out R_GUEST_OUT=$out/guest
  mkdir -p "$R_GUEST_OUT"

  install_exit_traps
  local n gi=0 key
  for n in "${R_ORDER[@]}"; do
    if [ -n "${R_NOTRUN[$n]:-}" ]; then
      R_STATUS[$n]=FAIL
      printf 'FAIL  %s  (not run: %s)\n' "$n" "${R_NOTRUN[$n]}"
    fi
  done
  for key in "${G_KEYS[@]}"; do
    gi=$((gi + 1))
    run_guest "$gi" "$key"
  done

  local rc=0
  printf '%s\n' "${G_TIMES[@]}"
  finish_results "" || rc=1
  echo "e2e: whole suite $(since "$t_start")s" >&2
  if [ $rc = 0 ] && [ $keep = 0 ]; then
    rm -rf "$out"
  else
    [ $keep = 1 ] || rm -f "$out"/*/initrd.img "$out"/*/overlay.cpio   # large and rebuilt anyway
    echo "e2e: logs kept in $out" >&2
  fi
  return $rc
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then main "$@"; fi
