#!/usr/bin/env bash
# Run the end-to-end suite: real Linux initiators against rtgt (and the kernel's own targets)
# in a QEMU soft-RoCE guest.
#
#   tests/e2e/run.sh [-k PATTERN]... [--keep] [--no-build] [--dir DIR] [--out DIR]
#                    [--env NAME=VALUE]... [--shell] [-v] [-x] [--list]
#
#   -k PATTERN   run only scenarios whose name (e.g. 01-nvmet-peer) matches the extended regex
#                PATTERN; several -k are or-ed
#   --keep       keep the run directory (initrd, console log, per-scenario logs) even on success
#   --no-build   do not run cargo; use the rtgt binary already built
#   --dir DIR    run the scenarios of DIR instead of tests/e2e/scenarios
#   --out DIR    use DIR as the run directory (created; implies --keep); the guest's artifacts
#                end up in DIR/guest/<scenario>/
#   --env N=V    export N=V to the scenarios in the guest (repeatable)
#   --shell      after the scenarios, open a shell on the guest console (interactive)
#   -v           stream the guest console while it runs
#   -x           trace the scenarios (set -x)
#   --list       print the selected scenarios and exit
#
# Environment: CARGO_TARGET_DIR, RTGT_BIN (use this rtgt binary, no cargo), RTGT_E2E_CACHE,
# RTGT_E2E_OUT (where run directories go), RTGT_E2E_TIMEOUT (whole guest, seconds),
# RTGT_E2E_SCENARIO_TIMEOUT (default per scenario, seconds), RTGT_E2E_BINS (extra guest
# binaries), RTGT_E2E_MEM (MiB, 2048), RTGT_E2E_SMP (2), RTGT_E2E_ACCEL (tcg,thread=multi).
#
# Prints one line per scenario (PASS/FAIL name (seconds)), the logs of each failure, and a last
# line "N passed, N failed". Exits 0 only when every selected scenario passed.
set -euo pipefail

E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$E2E_DIR/../.." && pwd)

# ---------------------------------------------------------------------------------------------
# Result handling (also used by selftest.sh on canned result files)
# ---------------------------------------------------------------------------------------------
declare -gA R_STATUS=()
R_ORDER=()          # selected scenario names, in run order
R_STARTED=""        # the scenario that started last
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

# finish_results WHY: mark scenarios without a result as failed (WHY: the guest's fate when it
# ended early, empty when it completed), print the summary line, return 0 if all passed.
finish_results() {
  local why=$1 n passed=0 failed=0
  for n in "${R_ORDER[@]}"; do
    if [ -z "${R_STATUS[$n]:-}" ]; then
      if [ "$n" = "$R_STARTED" ]; then
        handle_line "FAIL $n - ${why:-no result}"
      else
        R_STATUS[$n]=FAIL
        printf 'FAIL  %s  (not run: %s)\n' "$n" "${why:-no result}"
      fi
    fi
    if [ "${R_STATUS[$n]}" = PASS ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
  done
  echo "$passed passed, $failed failed"
  [ "$failed" = 0 ] && [ "$passed" -gt 0 ]
}

# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------
usage() { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; exit "${1:-2}"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }

main() {
  local patterns=() keep=0 build=1 dir="$E2E_DIR/scenarios" shell=0 verbose=0 trace=0 list=0
  local out="" envs=() e v
  while [ $# -gt 0 ]; do
    case $1 in
      -k) patterns+=("$2"); shift 2 ;;
      -k*) patterns+=("${1#-k}"); shift ;;
      --keep) keep=1; shift ;;
      --no-build) build=0; shift ;;
      --dir) dir=$(cd "$2" && pwd); shift 2 ;;
      --out) out=$2; keep=1; shift 2 ;;
      --env) [[ $2 =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || { echo "e2e: --env wants NAME=VALUE" >&2; exit 2; }
             envs+=("$2"); shift 2 ;;
      --shell) shell=1; shift ;;
      -v|--verbose) verbose=1; shift ;;
      -x|--trace) trace=1; shift ;;
      --list) list=1; shift ;;
      -h|--help) usage 0 ;;
      *) echo "e2e: unknown argument $1" >&2; usage ;;
    esac
  done
  local t_start; t_start=$(now)

  # select scenarios
  local files=() f name stem p default_tmo=${RTGT_E2E_SCENARIO_TIMEOUT:-120} tmo total_tmo=0
  for f in "$dir"/[0-9][0-9]-*.sh; do
    [ -f "$f" ] || continue
    stem=$(basename "$f" .sh)
    if [ ${#patterns[@]} -gt 0 ]; then
      local hit=0
      for p in "${patterns[@]}"; do grep -Eq -- "$p" <<<"$stem" && hit=1; done
      [ $hit = 1 ] || continue
    fi
    files+=("$(basename "$f")")
    R_ORDER+=("$(scenario_name "$f")")
    tmo=$(sed -n 's/^#[[:space:]]*e2e-timeout:[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$f" | head -1)
    total_tmo=$((total_tmo + ${tmo:-$default_tmo}))
  done
  if [ ${#files[@]} = 0 ]; then echo "e2e: no scenario in $dir matches" >&2; exit 2; fi
  if [ $list = 1 ]; then printf '%s\n' "${files[@]}"; exit 0; fi

  # rtgt
  local target=${CARGO_TARGET_DIR:-$ROOT/target} rtgt t0
  if [ -n "${RTGT_BIN:-}" ]; then
    rtgt=$RTGT_BIN
  else
    rtgt=$target/release/rtgt
    if [ $build = 1 ]; then
      t0=$(now)
      echo "e2e: cargo build --release -p rtgt" >&2
      (cd "$ROOT" && cargo build --release -p rtgt) || { echo "e2e: building rtgt failed" >&2; exit 1; }
      echo "e2e: rtgt built in $(since "$t0")s" >&2
    fi
  fi
  [ -x "$rtgt" ] || { echo "e2e: no rtgt binary at $rtgt" >&2; exit 1; }

  # run directory and guest
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
  R_GUEST_OUT=$out/guest
  mkdir -p "$R_GUEST_OUT"
  {
    echo "E2E_SCENARIOS='${files[*]}'"
    echo "E2E_SCENARIO_TIMEOUT=$default_tmo"
    echo "E2E_SHELL=$shell"
    echo "E2E_TRACE=$trace"
    for e in "${envs[@]}"; do   # single-quoted for the guest's busybox sh
      v=${e#*=}; printf "export %s='%s'\n" "${e%%=*}" "${v//\'/\'\\\'\'}"
    done
  } > "$out/config"
  t0=$(now)
  "$E2E_DIR/build-guest.sh" --rtgt "$rtgt" --scenarios "$dir" --config "$out/config" "$out" \
    || { echo "e2e: building the guest failed" >&2; exit 1; }
  echo "e2e: guest image ready in $(since "$t0")s" >&2

  local timeout=${RTGT_E2E_TIMEOUT:-$((120 + total_tmo))}
  local qemu=(qemu-system-x86_64 -accel "${RTGT_E2E_ACCEL:-tcg,thread=multi}" -cpu max
    -m "${RTGT_E2E_MEM:-2048}" -smp "${RTGT_E2E_SMP:-2}" -no-reboot -nic none
    -kernel "$out/vmlinuz" -initrd "$out/initrd.img"
    -append "console=ttyS0 panic=-1 quiet loglevel=4"
    -virtfs "local,path=$R_GUEST_OUT,mount_tag=e2e,security_model=none,id=e2e")

  local t_boot why="" qrc=0
  t_boot=$(now)
  if [ $shell = 1 ]; then
    echo "e2e: booting the guest on this terminal (Ctrl-a x quits QEMU)" >&2
    "${qemu[@]}" -nographic || qrc=$?
    poll_results "$R_GUEST_OUT/results"
    [ $R_DONE = 1 ] || why="guest stopped before the end"
  else
    echo "e2e: booting the guest ($(nproc) host cpus, timeout ${timeout}s)" >&2
    "${qemu[@]}" -display none -monitor none -serial "file:$out/console.log" < /dev/null &
    local qpid=$! tailpid="" deadline booted=0
    if [ $verbose = 1 ]; then
      # --pid: tail (and so the pipeline) ends with QEMU
      tail --pid="$qpid" -n +1 -F "$out/console.log" 2> /dev/null | tr -d '\r' | sed 's/^/  console| /' >&2 &
      tailpid=$!
    fi
    deadline=$(( $(date +%s) + timeout ))
    while :; do
      poll_results "$R_GUEST_OUT/results"
      if [ $booted = 0 ] && [ -n "$R_BOOT" ]; then
        booted=1
        echo "e2e: guest up after $(since "$t_boot")s (guest uptime ${R_BOOT}s); running ${#files[@]} scenario(s)" >&2
      fi
      kill -0 "$qpid" 2> /dev/null || break
      if [ "$(date +%s)" -ge "$deadline" ]; then
        why="guest timed out after ${timeout}s"
        kill "$qpid" 2> /dev/null || true
        break
      fi
      sleep 0.5
    done
    wait "$qpid" || qrc=$?
    [ -z "$tailpid" ] || wait "$tailpid" 2> /dev/null || true
    poll_results "$R_GUEST_OUT/results"
    if [ -z "$why" ] && [ $R_DONE = 0 ]; then why="guest died (qemu exit status $qrc)"; fi
  fi

  if [ -n "$why" ]; then
    echo "e2e: $why" >&2
    [ -s "$out/console.log" ] && { echo "    ---- guest console (last 40 lines) ----"; tr -d '\r' < "$out/console.log" | tail -n 40 | sed 's/^/    | /'; }
  fi
  local rc=0
  finish_results "$why" || rc=1
  echo "e2e: guest ran $(since "$t_boot")s; whole suite $(since "$t_start")s" >&2
  if [ $rc = 0 ] && [ $keep = 0 ]; then
    rm -rf "$out"
  else
    [ $keep = 1 ] || rm -f "$out/initrd.img" "$out/overlay.cpio"   # large and rebuilt anyway
    echo "e2e: logs kept in $out" >&2
  fi
  return $rc
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then main "$@"; fi
