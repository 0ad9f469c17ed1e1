# shellcheck shell=bash
# Helper library of the e2e guest. Scenarios are bash scripts, sourced by e2e_scenario_main with
# this file loaded, under `set -eEuo pipefail`. Helpers that check something fail the scenario
# themselves (through `fail`) with a message saying what went wrong; helpers documented as
# "returns status" leave the decision to the caller.
#
# Scenarios run under bash, not busybox sh: Debian's static busybox runs its own applets in
# preference to the real tools on PATH (its `ip` instead of iproute2's, and so on).
#
# tests/e2e/README.md documents every variable and function; keep both in step.

# --- environment --------------------------------------------------------------------------
: "${E2E_HOME:=/opt/rtgt/e2e}"                # lib.sh, scenarios/ (also the scenarios' cwd)
: "${E2E_IP:=10.77.0.1}"                      # the guest's address on the soft-RoCE netdev
: "${E2E_PREFIXLEN:=24}"
: "${E2E_NETDEV:=d0}"                         # dummy netdev under rxe
: "${E2E_RDMA_DEV:=rxe0}"                     # soft-RoCE device
: "${E2E_SRP_HOST:=srp-${E2E_RDMA_DEV}-1}"    # ib_srp's directory in /sys/class/infiniband_srp
: "${E2E_HOSTID:=5d4e2b6c-7a1f-4e0b-9c3d-2f8a6b1e0c7d}"
: "${E2E_HOSTNQN:=nqn.2014-08.org.nvmexpress:uuid:$E2E_HOSTID}"   # in /etc/nvme/hostnqn
: "${E2E_BIN:=/opt/rtgt/bin}"                 # extra binaries from guest-bins.txt
: "${E2E_SCENARIO:=manual}"
: "${E2E_LOGDIR:=/tmp/e2e-$E2E_SCENARIO}"     # this scenario's artifacts (host-visible)
: "${E2E_TRACE:=0}"
: "${RTGT:=/bin/rtgt}"
: "${RTGT_SOCK:=/var/tmp/spdk.sock}"
: "${RTGT_LOG:=$E2E_LOGDIR/rtgt.log}"
: "${RTGT_START_TIMEOUT:=30}"
: "${RTGT_STOP_TIMEOUT:=20}"
: "${RTGT_RPC_TIMEOUT:=60}"
: "${RTGT_NVME_PORT:=4420}"                   # the port rtgt scenarios listen on by convention
: "${NVMET_PEER_NQN:=nqn.2014-08.org.rtgt:kernel-nvmet}"
: "${NVMET_PEER_PORT:=4421}"                  # kernel peers have ports of their own, so that
: "${SRPT_PEER_PORT:=5555}"                   # rtgt can run beside them
: "${RTGT_SRP_PORT:=5556}"                    # the port rtgt's SRP scenarios listen on
: "${NVME_CTRL_LOSS_TMO:=20}"
# Set by run.sh when the guest's virtio-net NIC leads to a host network namespace (--netns,
# "# e2e-netns:"); empty otherwise.
: "${E2E_NETNS_HOST_IP:=}"                    # the namespace's end (10.78.0.1)
: "${E2E_NETNS_GUEST_IP:=}"                   # this guest's address on that NIC (10.78.0.2)
: "${E2E_NETNS_PREFIXLEN:=}"
: "${E2E_NETNS_DEV:=}"                        # the NIC (ns0)
export E2E_HOME E2E_IP E2E_PREFIXLEN E2E_NETDEV E2E_RDMA_DEV E2E_SRP_HOST E2E_HOSTID E2E_HOSTNQN \
  E2E_BIN E2E_SCENARIO E2E_LOGDIR E2E_TRACE RTGT RTGT_SOCK RTGT_LOG RTGT_NVME_PORT \
  NVMET_PEER_NQN NVMET_PEER_PORT SRPT_PEER_PORT RTGT_SRP_PORT E2E_NETNS_HOST_IP E2E_NETNS_GUEST_IP \
  E2E_NETNS_PREFIXLEN E2E_NETNS_DEV
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"

# Loaded by /init at boot, in this order (crc32_generic before rdma_rxe). The kernel targets
# (nvmet_rdma, ib_srpt) and null_blk are loaded by the peer helpers when needed.
# shellcheck disable=SC2034
E2E_BOOT_MODULES="configfs crc32_generic dummy veth rdma_rxe rdma_ucm ib_uverbs ib_umad
  nvme_rdma ib_srp sd_mod sg"

E2E_RUN=/run/rtgt-e2e/$E2E_SCENARIO
mkdir -p "$E2E_RUN" "$E2E_LOGDIR" 2> /dev/null || true

uptime_s() { local u _; read -r u _ < /proc/uptime; echo "$u"; }

# --- logging and assertions ---------------------------------------------------------------
# log MSG...: a timestamped line on the scenario's output; also remembered as the current step.
log() {
  E2E_STEP="$*"
  echo "[$(uptime_s)] $*" >&2
}

# fail MSG...: fail the scenario. The first reason given is the one reported to the host.
fail() {
  [ -s "$E2E_LOGDIR/reason" ] || echo "$*" > "$E2E_LOGDIR/reason"
  echo "FAIL: $*" >&2
  exit 1
}

# assert CMD...: run CMD; fail if it fails.
assert() {
  local rc=0
  "$@" || rc=$?
  [ "$rc" = 0 ] || fail "assertion failed (status $rc): $*"
}

# expect_fail CMD...: run CMD; fail if it succeeds. (CMD must return a status: helpers that
# call `fail` end the scenario instead.)
expect_fail() {
  if "$@"; then fail "expected to fail but succeeded: $*"; fi
}

# assert_eq ACTUAL EXPECTED [WHAT]
assert_eq() {
  [ "$1" = "$2" ] || fail "${3:-value}: expected '$2', got '$1'"
}

# assert_contains HAYSTACK NEEDLE [WHAT]
assert_contains() {
  [[ $1 == *"$2"* ]] || fail "${3:-output} does not contain '$2': ${1:0:400}"
}

# assert_match STRING ERE [WHAT]
assert_match() {
  [[ $1 =~ $2 ]] || fail "${3:-value} does not match /$2/: ${1:0:400}"
}

# poll_until SECONDS CMD...: retry CMD (output discarded) every 0.2 s until it succeeds;
# returns 1 on timeout.
poll_until() {
  local end=$(( ${EPOCHSECONDS:-$(date +%s)} + $1 )); shift
  until "$@" > /dev/null 2>&1; do
    [ "${EPOCHSECONDS:-$(date +%s)}" -lt "$end" ] || return 1
    sleep 0.2
  done
}

# wait_for SECONDS CMD...: like poll_until, but fails the scenario on timeout.
wait_for() {
  local t=$1; shift
  poll_until "$t" "$@" || fail "timed out after ${t}s waiting for: $*"
}

# pid_alive PID: true while PID runs (a zombie counts as gone).
pid_alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2> /dev/null) || return 1
  stat=${stat##*) }
  [[ $stat != [ZX]* ]]
}

# e2e_next NAME: 1, 2, 3... per NAME within the scenario (shared with background subshells).
e2e_next() {
  local n=0
  [ -f "$E2E_RUN/n.$1" ] && n=$(< "$E2E_RUN/n.$1")
  echo $((n + 1)) > "$E2E_RUN/n.$1"
  echo $((n + 1))
}

# --- scenario runner (called by /init) -------------------------------------------------------
e2e__on_err() {
  [ -s "$E2E_LOGDIR/reason" ] ||
    echo "$3: '$2' failed with status $1${E2E_STEP:+ (last step: $E2E_STEP)}" > "$E2E_LOGDIR/reason"
}
e2e__on_exit() {
  if [ "$1" != 0 ] && [ ! -s "$E2E_LOGDIR/reason" ]; then
    echo "exit status $1 during: ${E2E_STEP:-start of scenario}" > "$E2E_LOGDIR/reason"
  fi
}

# e2e_scenario_main FILE: run one scenario (the runner starts it in a new session).
e2e_scenario_main() {
  set -eEuo pipefail
  [ "$E2E_TRACE" = 1 ] && set -x
  trap 'e2e__on_err $? "$BASH_COMMAND" "${BASH_SOURCE[0]##*/}:$LINENO"' ERR
  trap 'e2e__on_exit $?' EXIT
  cd "$E2E_HOME/scenarios"
  log "scenario $E2E_SCENARIO: $1"
  # shellcheck disable=SC1090
  source "$1"
  log "scenario $E2E_SCENARIO done"
}

# --- rtgt -----------------------------------------------------------------------------------
# rtgt_has_serve: true if the binary has a `serve` subcommand (its --help prints a usage).
rtgt_has_serve() {
  [ -x "$RTGT" ] && "$RTGT" serve --help 2>&1 | grep -qi usage
}

# start_rtgt [ARGS...]: `rtgt serve -r $RTGT_SOCK ARGS...` in the background, output appended
# to $RTGT_LOG; waits until the RPC socket exists. Sets RTGT_PID. Call it directly (not in
# $(...)) so that stop_rtgt can collect the exit status.
start_rtgt() {
  [ -x "$RTGT" ] || fail "no rtgt binary at $RTGT"
  if ! rtgt_has_serve; then
    fail "the rtgt binary has no 'serve' subcommand ('rtgt serve --help' printed no usage: '$("$RTGT" serve --help 2>&1 | head -1)')"
  fi
  if pidof rtgt > /dev/null; then fail "an rtgt is already running (pid $(pidof rtgt))"; fi
  log "start: rtgt serve -r $RTGT_SOCK $*"
  echo "=== rtgt serve -r $RTGT_SOCK $* (uptime $(uptime_s))" >> "$RTGT_LOG"
  "$RTGT" serve -r "$RTGT_SOCK" "$@" >> "$RTGT_LOG" 2>&1 &
  RTGT_PID=$!
  echo "$RTGT_PID" > "$E2E_RUN/rtgt.pid"
  local end=$(( EPOCHSECONDS + RTGT_START_TIMEOUT )) rc
  while [ ! -S "$RTGT_SOCK" ]; do
    if ! pid_alive "$RTGT_PID"; then
      rc=0; wait "$RTGT_PID" || rc=$?
      fail "rtgt exited with status $rc before creating $RTGT_SOCK: $(grep -v '^===' "$RTGT_LOG" | tail -n 3 | tr '\n' ' ' | head -c 300)"
    fi
    [ "$EPOCHSECONDS" -lt "$end" ] || fail "rtgt did not create $RTGT_SOCK within ${RTGT_START_TIMEOUT}s"
    sleep 0.1
  done
  log "rtgt running (pid $RTGT_PID)"
}

# rtgt_alive: true while the rtgt started by start_rtgt runs.
rtgt_alive() {
  [ -n "${RTGT_PID:-}" ] && pid_alive "$RTGT_PID"
}

# stop_rtgt: SIGTERM, then wait up to $RTGT_STOP_TIMEOUT s. Fails the scenario if rtgt does not
# exit in time (it is then killed) or exits with a non-zero status.
stop_rtgt() {
  [ -n "${RTGT_PID:-}" ] || fail "stop_rtgt: no rtgt was started by this scenario"
  log "stop rtgt (pid $RTGT_PID)"
  kill -TERM "$RTGT_PID" 2> /dev/null || true
  if ! poll_until "$RTGT_STOP_TIMEOUT" e2e__rtgt_gone; then
    kill -KILL "$RTGT_PID" 2> /dev/null || true
    fail "rtgt did not exit within ${RTGT_STOP_TIMEOUT}s of SIGTERM"
  fi
  local rc=0
  wait "$RTGT_PID" || rc=$?
  RTGT_PID=
  rm -f "$E2E_RUN/rtgt.pid"
  echo "=== rtgt exited with status $rc" >> "$RTGT_LOG"
  [ "$rc" = 0 ] || fail "rtgt exited with status $rc after SIGTERM"
}
e2e__rtgt_gone() { ! pid_alive "$RTGT_PID"; }

# rtgt_rpc METHOD [PARAMS_JSON]: one JSON-RPC call on $RTGT_SOCK through the shipped e2e-rpc
# client (independent of the rtgt CLI). Prints the `result` as compact JSON. Returns status: 1
# on an error response (printed to stderr), 2 when no response came. Calls go to rpc.log.
rtgt_rpc() {
  local rc=0 out
  out=$(e2e-rpc -s "$RTGT_SOCK" -t "$RTGT_RPC_TIMEOUT" "$@" 2>&1) || rc=$?
  printf '>> %s %s\n<< %s\n' "$1" "${2:-}" "$out" >> "$E2E_LOGDIR/rpc.log"
  case $rc in
    0) jq -c '.result' <<< "$out" ;;
    1) echo "rtgt_rpc $*: error $(jq -c '.error // .' <<< "$out" 2> /dev/null || echo "$out")" >&2
       return 1 ;;
    *) echo "rtgt_rpc $*: $out" >&2; return 2 ;;
  esac
}

# rtgt_rpc_ok METHOD [PARAMS_JSON]: rtgt_rpc that fails the scenario on an error.
rtgt_rpc_ok() {
  local rc=0 out
  out=$(rtgt_rpc "$@" 2> "$E2E_RUN/rpc.err") || rc=$?
  [ "$rc" = 0 ] || fail "$(cat "$E2E_RUN/rpc.err")"
  printf '%s\n' "$out"
}

# rtgt_rpc_error METHOD PARAMS_JSON [CODE]: expects an error response (with CODE if given);
# prints the error object.
rtgt_rpc_error() {
  local rc=0 out err
  out=$(e2e-rpc -s "$RTGT_SOCK" -t "$RTGT_RPC_TIMEOUT" "$1" "$2" 2>&1) || rc=$?
  printf '>> %s %s\n<< %s\n' "$1" "$2" "$out" >> "$E2E_LOGDIR/rpc.log"
  [ "$rc" != 0 ] || fail "rtgt_rpc $1 $2: expected an error, got $out"
  [ "$rc" = 1 ] || fail "rtgt_rpc $1: no JSON-RPC response: $out"
  err=$(jq -c '.error' <<< "$out" 2> /dev/null) || fail "rtgt_rpc $1: not JSON: $out"
  if [ -z "$err" ] || [ "$err" = null ]; then fail "rtgt_rpc $1: no error member: $out"; fi
  if [ $# -ge 3 ]; then assert_eq "$(jq '.code' <<< "$err")" "$3" "error code of $1"; fi
  printf '%s\n' "$err"
}

# --- block devices for backing ---------------------------------------------------------------
# nullb_create NAME SIZE_MIB [MEMORY_BACKED(1|0)] [BLOCKSIZE]: a null_blk device through
# configfs. memory_backed=1 keeps data (verification works); 0 discards it (benchmarks).
# Prints its /dev path.
nullb_create() {
  local dir=/sys/kernel/config/nullb/$1 dev
  modprobe null_blk nr_devices=0 || fail "modprobe null_blk failed"
  mkdir "$dir" || fail "cannot create null_blk device $1"
  echo "$2" > "$dir/size"
  echo "${3:-1}" > "$dir/memory_backed"
  echo "${4:-512}" > "$dir/blocksize"
  echo 1 > "$dir/power" || fail "cannot power on null_blk device $1"
  dev=/dev/nullb$(< "$dir/index")
  [ -b "/dev/$1" ] && dev=/dev/$1
  wait_for 10 test -b "$dev"
  echo "$dev"
}

# nullb_destroy NAME (no error if it does not exist)
nullb_destroy() {
  [ -d "/sys/kernel/config/nullb/$1" ] || return 0
  echo 0 > "/sys/kernel/config/nullb/$1/power" 2> /dev/null || true
  rmdir "/sys/kernel/config/nullb/$1"
}

# --- kernel NVMe-oF target peer (nvmet through configfs) -------------------------------------
# nvmet_peer_setup [-n NQN] [-s SIZE_MIB] [-b ram|null|/dev/X] [-a ADDR] [-p PORT] [-t rdma|tcp]
# One namespace (nsid 1) on null_blk (ram: memory backed, the default; null: data discarded)
# or on the given block device; any host allowed. Defaults: $NVMET_PEER_NQN, 64 MiB, ram,
# $E2E_IP, $NVMET_PEER_PORT, rdma. Sets NVMET_PEER_NQN, NVMET_PEER_PORT, NVMET_PEER_BDEV.
nvmet_peer_setup() {
  local nqn=$NVMET_PEER_NQN size=64 back=ram addr=$E2E_IP port=$NVMET_PEER_PORT tr=rdma o id
  local OPTIND=1 OPTARG
  while getopts n:s:b:a:p:t: o; do
    case $o in
      n) nqn=$OPTARG ;; s) size=$OPTARG ;; b) back=$OPTARG ;;
      a) addr=$OPTARG ;; p) port=$OPTARG ;; t) tr=$OPTARG ;;
      *) fail "nvmet_peer_setup: bad option" ;;
    esac
  done
  log "nvmet peer: $nqn on $tr $addr:$port, $back ${size} MiB"
  modprobe "nvmet_$tr" || fail "modprobe nvmet_$tr failed"
  case $back in
    ram) NVMET_PEER_BDEV=$(nullb_create nvmet_peer "$size" 1) ;;
    null) NVMET_PEER_BDEV=$(nullb_create nvmet_peer "$size" 0) ;;
    /dev/*) NVMET_PEER_BDEV=$back ;;
    *) fail "nvmet_peer_setup: unknown backing '$back'" ;;
  esac
  local s=/sys/kernel/config/nvmet
  [ -d $s ] || fail "no $s (configfs or nvmet missing)"
  mkdir "$s/subsystems/$nqn" || fail "cannot create nvmet subsystem $nqn"
  echo 1 > "$s/subsystems/$nqn/attr_allow_any_host"
  mkdir "$s/subsystems/$nqn/namespaces/1"
  echo "$NVMET_PEER_BDEV" > "$s/subsystems/$nqn/namespaces/1/device_path"
  echo 1 > "$s/subsystems/$nqn/namespaces/1/enable" \
    || fail "cannot enable the nvmet namespace on $NVMET_PEER_BDEV"
  id=1
  while [ -d "$s/ports/$id" ]; do id=$((id + 1)); done
  mkdir "$s/ports/$id"
  echo "$tr" > "$s/ports/$id/addr_trtype"
  echo ipv4 > "$s/ports/$id/addr_adrfam"
  echo "$addr" > "$s/ports/$id/addr_traddr"
  echo "$port" > "$s/ports/$id/addr_trsvcid"
  ln -s "$s/subsystems/$nqn" "$s/ports/$id/subsystems/$nqn" \
    || fail "nvmet could not listen on $tr $addr:$port (see dmesg)"
  NVMET_PEER_NQN=$nqn NVMET_PEER_PORT=$port
  export NVMET_PEER_NQN NVMET_PEER_PORT NVMET_PEER_BDEV
}

# nvmet_peer_teardown: removes every nvmet port, subsystem and host, the peer's null_blk, and
# unloads nvmet. Idempotent; the runner calls it after every scenario.
nvmet_peer_teardown() {
  local s=/sys/kernel/config/nvmet l p sub ns h m
  if [ -d $s ]; then
    for l in "$s"/ports/*/subsystems/*; do [ -L "$l" ] && rm -f "$l"; done
    for l in "$s"/ports/*/referrals/*; do [ -d "$l" ] && rmdir "$l"; done
    for p in "$s"/ports/*; do [ -d "$p" ] && rmdir "$p"; done
    for sub in "$s"/subsystems/*; do
      [ -d "$sub" ] || continue
      rm -f "$sub"/allowed_hosts/*
      for ns in "$sub"/namespaces/*; do
        [ -d "$ns" ] || continue
        echo 0 > "$ns/enable"
        rmdir "$ns"
      done
      rmdir "$sub"
    done
    for h in "$s"/hosts/*; do [ -d "$h" ] && rmdir "$h"; done
  fi
  nullb_destroy nvmet_peer
  for m in nvmet_rdma nvmet_tcp nvmet; do
    if grep -q "^$m " /proc/modules; then rmmod "$m" || true; fi
  done
  return 0
}

# --- kernel SRP target peer (LIO ib_srpt through configfs) ----------------------------------
# srpt_peer_setup [-s SIZE_MIB] [-b ram|null] [-p RDMA_CM_PORT]
# One LUN on a LIO ramdisk (rd_mcp; null: rd_nullio, data discarded), ACLs for this guest's
# initiator, RDMA CM listener on $E2E_IP:PORT. Defaults: 64 MiB, ram, $SRPT_PEER_PORT.
# Sets SRPT_PEER_TARGET (the add_target string for srp_login) and SRPT_PEER_PORT.
srpt_peer_setup() {
  local size=64 back=ram port=$SRPT_PEER_PORT o
  local OPTIND=1 OPTARG
  while getopts s:b:p: o; do
    case $o in
      s) size=$OPTARG ;; b) back=$OPTARG ;; p) port=$OPTARG ;;
      *) fail "srpt_peer_setup: bad option" ;;
    esac
  done
  log "srpt peer: $back ${size} MiB on rdma_cm port $port"
  modprobe ib_srpt || fail "modprobe ib_srpt failed"
  local c=/sys/kernel/config/target
  [ -d $c ] || fail "no $c (target_core_mod missing)"
  local rd=$c/core/rd_mcp_0/srpt_peer
  mkdir -p "$rd"
  case $back in
    ram) echo "rd_pages=$((size * 256))" > "$rd/control" ;;
    null) echo "rd_pages=$((size * 256)),rd_nullio=1" > "$rd/control" ;;
    *) fail "srpt_peer_setup: unknown backing '$back'" ;;
  esac
  echo 1 > "$rd/enable" || fail "cannot enable the LIO ramdisk"
  mkdir -p $c/srpt
  echo "$port" > $c/srpt/discovery_auth/rdma_cm_port
  # ib_srpt names the port (and here its TPG) by the GID without the fe80 prefix
  local gid pn t ng a
  gid=$(< "/sys/class/infiniband/$E2E_RDMA_DEV/ports/1/gids/0")
  pn=${gid#fe80:0000:0000:0000:}
  t=$c/srpt/$pn/$pn
  mkdir -p "$t/lun/lun_0" || fail "cannot create the ib_srpt TPG $t"
  ln -s "$rd" "$t/lun/lun_0/srpt_peer"
  ng=$(tr -d : < "/sys/class/infiniband/$E2E_RDMA_DEV/node_guid")
  # ib_srpt has no demo mode: an ACL is required. RDMA CM logins match the IP form.
  for a in "$E2E_IP" "0x0000000000000000$ng"; do
    mkdir "$t/acls/$a" "$t/acls/$a/lun_0"
    ln -s "$t/lun/lun_0" "$t/acls/$a/lun_0/lun_0"
  done
  echo 1 > "$t/enable" || fail "cannot enable the ib_srpt TPG"
  # the target port id is id_ext + ioc_guid; ib_srpt uses the node GUID for both
  SRPT_PEER_TARGET="id_ext=$ng,ioc_guid=$ng,dest=$E2E_IP:$port"
  SRPT_PEER_PORT=$port
  export SRPT_PEER_TARGET SRPT_PEER_PORT
}

# srpt_peer_teardown: removes every ib_srpt TPG and port and every rd_mcp device, unloads
# ib_srpt. Idempotent; the runner calls it after every scenario.
srpt_peer_teardown() {
  local c=/sys/kernel/config/target t d p h
  if [ -d $c/srpt ]; then
    for t in "$c"/srpt/*/*; do
      [ -f "$t/enable" ] || continue
      echo 0 > "$t/enable" 2> /dev/null || true
      for d in "$t"/acls/*/lun_* "$t"/lun/lun_*; do
        [ -d "$d" ] || continue
        find "$d" -maxdepth 1 -type l -exec rm -f {} +
        rmdir "$d"
      done
      for d in "$t"/acls/*; do [ -d "$d" ] && rmdir "$d"; done
      rmdir "$t"
    done
    for p in "$c"/srpt/*; do
      [ -d "$p" ] && [ "${p##*/}" != discovery_auth ] && rmdir "$p"
    done
    echo 0 > $c/srpt/discovery_auth/rdma_cm_port 2> /dev/null || true
    rmdir $c/srpt 2> /dev/null || true
  fi
  for h in "$c"/core/rd_mcp_*; do
    [ -d "$h" ] || continue
    for d in "$h"/*; do [ -d "$d" ] && rmdir "$d"; done
    rmdir "$h"
  done
  if grep -q '^ib_srpt ' /proc/modules; then rmmod ib_srpt || true; fi
  return 0
}

# --- NVMe over Fabrics initiator (nvme-cli) --------------------------------------------------
# nvme_ctrls NQN: controller names (nvme0 ...) connected to subsystem NQN.
nvme_ctrls() {
  local c
  for c in /sys/class/nvme/nvme*; do
    [ -r "$c/subsysnqn" ] && [ "$(< "$c/subsysnqn")" = "$1" ] && echo "${c##*/}"
  done
  return 0
}

# nvme_ns_dev NQN [NSID]: the block device (/dev/nvmeXnY) of namespace NSID (default 1) of
# subsystem NQN. Returns status 1 if there is none.
nvme_ns_dev() {
  local b nqn
  for b in /sys/block/nvme*n*; do
    [ -e "$b" ] || continue
    [[ ${b##*/} == *c* ]] && continue            # hidden per-path nodes nvmeXcYnZ
    [ "$(cat "$b/nsid" 2> /dev/null)" = "${2:-1}" ] || continue
    nqn=$(cat "$b/device/subsysnqn" 2> /dev/null) || continue
    if [ "$nqn" = "$1" ]; then echo "/dev/${b##*/}"; return 0; fi
  done
  return 1
}

# nvme_connect NQN [ADDR [PORT]] [-- NVME_CLI_OPTIONS...]: nvme connect over RDMA (defaults
# $E2E_IP, $RTGT_NVME_PORT) and wait for namespace 1; prints its block device. Fails the
# scenario if the connect fails (for an expected failure use `expect_fail nvme connect ...`).
nvme_connect() {
  local nqn=$1 addr=$E2E_IP port=$RTGT_NVME_PORT dev; shift
  if [ $# -gt 0 ] && [ "$1" != -- ]; then addr=$1; shift; fi
  if [ $# -gt 0 ] && [ "$1" != -- ]; then port=$1; shift; fi
  [ "${1:-}" = -- ] && shift
  log "nvme connect -t rdma -a $addr -s $port -n $nqn $*"
  nvme connect -t rdma -a "$addr" -s "$port" -n "$nqn" \
    --ctrl-loss-tmo="$NVME_CTRL_LOSS_TMO" --reconnect-delay=1 "$@" >&2 \
    || fail "nvme connect to $nqn at $addr:$port failed"
  wait_for 20 nvme_ns_dev "$nqn" 1
  dev=$(nvme_ns_dev "$nqn" 1)
  wait_for 10 test -b "$dev"
  echo "$dev"
}

# nvme_disconnect NQN: disconnect every controller of NQN and wait until they are gone.
nvme_disconnect() {
  log "nvme disconnect -n $1"
  nvme disconnect -n "$1" >&2 || fail "nvme disconnect -n $1 failed"
  wait_for 20 e2e__no_ctrl "$1"
}
e2e__no_ctrl() { [ -z "$(nvme_ctrls "$1")" ]; }

# --- SRP initiator (ib_srp) ------------------------------------------------------------------
# srp_add_target SPEC: write SPEC ("id_ext=..,ioc_guid=..,dest=IP:PORT[,...]") to ib_srp's
# add_target. Returns status: the write fails when the login is rejected.
srp_add_target() {
  log "ib_srp add_target: $1"
  echo "$1" > "/sys/class/infiniband_srp/$E2E_SRP_HOST/add_target"
}

# srp_hosts: SCSI host numbers of the current SRP remote ports.
srp_hosts() {
  local p n
  for p in /sys/class/srp_remote_ports/port-*; do
    [ -e "$p" ] || continue
    n=${p##*/port-}; echo "${n%%:*}"
  done
  return 0
}

# srp_disks HOSTNUM: SCSI disks (sdX) behind SCSI host HOSTNUM, in LUN order.
srp_disks() {
  local b
  for b in /sys/block/sd*; do
    [ -e "$b" ] || continue
    [[ $(readlink -f "$b/device") == */host"$1"/* ]] && echo "$(basename "$(readlink -f "$b/device")") ${b##*/}"
  done | sort -t: -k4n | cut -d' ' -f2
  return 0
}

# srp_login SPEC: add the target, wait for its first disk (LUN 0); prints /dev/sdX. Sets
# nothing (it runs in $(...)); srp_hosts / srp_disks find the rest.
srp_login() {
  local before h host="" dev
  before=" $(srp_hosts | tr '\n' ' ') "
  srp_add_target "$1" || fail "ib_srp login rejected: $1 (see dmesg)"
  for h in $(srp_hosts); do [[ $before == *" $h "* ]] || host=$h; done
  [ -n "$host" ] || fail "ib_srp add_target succeeded but no new SRP remote port appeared"
  wait_for 20 e2e__has_srp_disk "$host"
  dev=/dev/$(srp_disks "$host" | head -1)
  wait_for 10 test -b "$dev"
  log "SRP login: host$host, $dev"
  echo "$dev"
}
e2e__has_srp_disk() { [ -n "$(srp_disks "$1")" ]; }

# srp_port_guid NQN: the 16 hex digits of the SRP target port GUID rtgt derives from a
# subsystem NQN when no srp_port_id is set (id_ext = ioc_guid = this value): FNV-1a-64 of the
# NQN, top byte replaced by 0x02 (transport_srp::port_id::derived_guid).
srp_port_guid() {
  local s=$1 h=-3750763034362895579 i c   # 0xcbf29ce484222325 as a signed 64-bit value
  for ((i = 0; i < ${#s}; i++)); do
    printf -v c '%d' "'${s:i:1}"
    h=$(( (h ^ c) * 1099511628211 ))
  done
  printf '%016x\n' $(( (h & 0x00ffffffffffffff) | (0x02 << 56) ))
}

# srp_login_spec NQN [PORT]: the add_target string for an rtgt subsystem (derived port id)
# listening on $E2E_IP:PORT (default $RTGT_SRP_PORT).
srp_login_spec() {
  local g
  g=$(srp_port_guid "$1")
  echo "id_ext=$g,ioc_guid=$g,dest=$E2E_IP:${2:-$RTGT_SRP_PORT}"
}

# srp_logout_all: delete every SRP remote port and wait until they are gone.
srp_logout_all() {
  local p
  for p in /sys/class/srp_remote_ports/port-*; do
    [ -e "$p/delete" ] || continue
    log "ib_srp delete ${p##*/}"
    echo 1 > "$p/delete" || true
  done
  wait_for 30 e2e__no_srp_ports
  # The remote port goes first; the SCSI host (and its reconnect work) a little later. A host
  # still reconnecting would log in to the next scenario's target.
  wait_for 30 e2e__no_srp_scsi_hosts
}
e2e__no_srp_ports() { [ -z "$(srp_hosts)" ]; }
e2e__no_srp_scsi_hosts() { ! grep -qx ib_srp /sys/class/scsi_host/host*/proc_name 2> /dev/null; }

# --- TCP from the guest (bash /dev/tcp; busybox's static wget crashes) ----------------------
# http_get HOST PORT PATH [SECS]: HTTP/1.0 GET; prints the body. Returns status 1 unless the
# answer is 200 within SECS (default 10).
http_get() {
  local resp status
  resp=$(timeout "${4:-10}" bash -c 'exec 3<> "/dev/tcp/$1/$2" || exit 1
    printf "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n" "$3" "$1" >&3
    cat <&3' bash "$1" "$2" "$3") || return 1
  status=${resp%%$'\r'*}
  [[ $status == "HTTP/1."?" 200"* ]] || { echo "http_get $1:$2$3: $status" >&2; return 1; }
  printf '%s\n' "${resp#*$'\r\n\r\n'}"
}

# --- fio -------------------------------------------------------------------------------------
# fio_verify DEV SIZE [FIO_OPTIONS...]: write SIZE (e.g. 32M) of DEV with crc32c verification
# headers, then read it all back and verify: O_DIRECT, libaio, QD16, 4k-128k blocks in random
# order. Later options override these. Fails the scenario on any error. Runs in the background
# too: `fio_verify "$dev" 64M & pid=$!; ...; wait $pid`.
fio_verify() {
  local dev=$1 size=$2 out; shift 2
  out=$E2E_LOGDIR/fio-$(e2e_next fio).log
  log "fio verify $dev $size $* -> ${out##*/}"
  if ! fio --name=verify --filename="$dev" --size="$size" --direct=1 --ioengine=libaio \
      --iodepth=16 --rw=randwrite --bsrange=4k-128k --verify=crc32c --do_verify=1 \
      --verify_fatal=1 --verify_dump=1 --exitall_on_error=1 "$@" --output="$out" >&2; then
    fail "fio verify on $dev failed: $(grep -iE 'err|verify|bad' "$out" | head -3 | tr '\n' ' ' | head -c 300)"
  fi
  grep -q 'err= 0' "$out" || fail "fio verify on $dev reported errors (see ${out##*/})"
}

# fio_json NAME [FIO_OPTIONS...]: fio with JSON output to $E2E_LOGDIR/NAME.json (benchmarks).
# Returns fio's status.
fio_json() {
  local name=$1; shift
  log "fio $* -> $name.json"
  fio --output-format=json --output="$E2E_LOGDIR/$name.json" "$@"
}

# --- cleanup between scenarios --------------------------------------------------------------
# e2e_cleanup: bring the guest back to its boot state: initiators disconnected, every rtgt
# stopped, kernel peers torn down, null_blk devices removed. The runner calls it after every
# scenario (in a new shell); a scenario may call it too.
e2e_cleanup() {
  set +e
  local p n
  nvme disconnect-all > /dev/null 2>&1
  for p in /sys/class/srp_remote_ports/port-*; do
    [ -e "$p/delete" ] && echo 1 > "$p/delete"
  done
  poll_until 30 e2e__no_srp_ports || echo "cleanup: SRP ports remain: $(srp_hosts)"
  for p in $(pidof rtgt); do kill -TERM "$p"; done
  poll_until "$RTGT_STOP_TIMEOUT" e2e__no_rtgt || {
    echo "cleanup: rtgt did not stop on SIGTERM; killing"
    for p in $(pidof rtgt); do kill -KILL "$p"; done
  }
  rm -f "$RTGT_SOCK" "$RTGT_SOCK.lock" /var/tmp/spdk.sock /var/tmp/spdk.sock.lock
  nvmet_peer_teardown
  srpt_peer_teardown
  for n in /sys/kernel/config/nullb/*; do
    [ -d "$n" ] && nullb_destroy "${n##*/}"
  done
  return 0
}
e2e__no_rtgt() { ! pidof rtgt > /dev/null; }
