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
# Set by the Ceph namespace hook (scenarios/netns/ceph.sh); empty otherwise.
: "${CEPH_MON_HOST:=}"                        # v2:10.78.0.1:3300
: "${CEPH_CONTROL:=}"                         # the control channel, 10.78.0.1:7300 (ceph_host)
: "${CEPH_CONF:=/etc/ceph/ceph.conf}"         # written at boot by ceph_guest_setup
export CEPH_MON_HOST CEPH_CONTROL CEPH_CONF
: "${E2E_BINDSRC_LIB:=/opt/rtgt/lib/libe2e-bindsrc.so}"   # with_src_addr's LD_PRELOAD shim
export E2E_BINDSRC_LIB
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
  if pidof rtgt > /dev/null; then fail "an rtgt is already running (pid $(pidof rtgt))"; fi
  e2e__rtgt_start "$RTGT_SOCK" "$RTGT_LOG" "$E2E_RUN/rtgt.pid" "$@"
  RTGT_PID=$E2E__STARTED_PID
}

# e2e__rtgt_start SOCK LOG PIDFILE [ARGS...]: start one rtgt instance (start_rtgt, gw_start).
# Waits until SOCK is a socket made by this process: a socket left behind by a killed
# instance (same inode as before the start) does not count. Sets E2E__STARTED_PID.
e2e__rtgt_start() {
  local sock=$1 logf=$2 pidf=$3 pid stale end rc; shift 3
  [ -x "$RTGT" ] || fail "no rtgt binary at $RTGT"
  if ! rtgt_has_serve; then
    fail "the rtgt binary has no 'serve' subcommand ('rtgt serve --help' printed no usage: '$("$RTGT" serve --help 2>&1 | head -1)')"
  fi
  stale=$(stat -c %i "$sock" 2> /dev/null || true)
  log "start: rtgt serve -r $sock $*${stale:+ (a stale socket is there)}"
  echo "=== rtgt serve -r $sock $* (uptime $(uptime_s))" >> "$logf"
  "$RTGT" serve -r "$sock" "$@" >> "$logf" 2>&1 &
  pid=$!
  echo "$pid" > "$pidf"
  end=$(( EPOCHSECONDS + RTGT_START_TIMEOUT ))
  while [ ! -S "$sock" ] || { [ -n "$stale" ] && [ "$(stat -c %i "$sock" 2> /dev/null)" = "$stale" ]; }; do
    if ! pid_alive "$pid"; then
      rc=0; wait "$pid" || rc=$?
      fail "rtgt exited with status $rc before creating $sock: $(grep -v '^===' "$logf" | tail -n 3 | tr '\n' ' ' | head -c 300)"
    fi
    [ "$EPOCHSECONDS" -lt "$end" ] || fail "rtgt did not create $sock within ${RTGT_START_TIMEOUT}s"
    sleep 0.1
  done
  log "rtgt running (pid $pid, $sock)"
  E2E__STARTED_PID=$pid
}

# rtgt_alive: true while the rtgt started by start_rtgt runs.
rtgt_alive() {
  [ -n "${RTGT_PID:-}" ] && pid_alive "$RTGT_PID"
}

# stop_rtgt: SIGTERM, then wait up to $RTGT_STOP_TIMEOUT s. Fails the scenario if rtgt does not
# exit in time (it is then killed) or exits with a non-zero status.
stop_rtgt() {
  [ -n "${RTGT_PID:-}" ] || fail "stop_rtgt: no rtgt was started by this scenario"
  e2e__rtgt_stop "$RTGT_PID" "$RTGT_LOG" "$E2E_RUN/rtgt.pid"
  RTGT_PID=
}

# e2e__rtgt_stop PID LOG PIDFILE: SIGTERM one instance and check it exits 0 in time.
e2e__rtgt_stop() {
  local pid=$1 rc=0
  log "stop rtgt (pid $pid)"
  kill -TERM "$pid" 2> /dev/null || true
  if ! poll_until "$RTGT_STOP_TIMEOUT" e2e__pid_gone "$pid"; then
    kill -KILL "$pid" 2> /dev/null || true
    fail "rtgt (pid $pid) did not exit within ${RTGT_STOP_TIMEOUT}s of SIGTERM"
  fi
  wait "$pid" || rc=$?
  rm -f "$3"
  echo "=== rtgt exited with status $rc" >> "$2"
  [ "$rc" = 0 ] || fail "rtgt (pid $pid) exited with status $rc after SIGTERM"
}
e2e__pid_gone() { ! pid_alive "$1"; }

# --- several rtgt instances (gateways) ----------------------------------------------------------
# A named instance NAME has its own RPC socket /var/tmp/rtgt-NAME.sock, log
# $E2E_LOGDIR/rtgt-NAME.log and pid file; GW_PID[NAME] is its pid. Call gw_start, gw_stop,
# gw_kill directly (not in $(...)): they keep the pid in this shell.
declare -gA GW_PID=()

# gw_sock NAME, gw_log NAME: the instance's RPC socket and log file.
gw_sock() { echo "/var/tmp/rtgt-$1.sock"; }
gw_log() { echo "$E2E_LOGDIR/rtgt-$1.log"; }

# gw_start NAME [ARGS...]: `rtgt serve -r $(gw_sock NAME) ARGS...` in the background, as
# start_rtgt. Fails if NAME already runs. After gw_kill the same socket path is used again (the
# killed process left it behind: the new process must take it over).
gw_start() {
  local name=$1; shift
  if gw_alive "$name"; then fail "gateway $name already runs (pid ${GW_PID[$name]})"; fi
  e2e__rtgt_start "$(gw_sock "$name")" "$(gw_log "$name")" "$E2E_RUN/rtgt-$name.pid" "$@"
  GW_PID[$name]=$E2E__STARTED_PID
}

# gw_alive NAME: true while instance NAME runs.
gw_alive() { [ -n "${GW_PID[$1]:-}" ] && pid_alive "${GW_PID[$1]}"; }

# gw_stop NAME: SIGTERM; fails unless it exits with status 0 within $RTGT_STOP_TIMEOUT s.
gw_stop() {
  [ -n "${GW_PID[$1]:-}" ] || fail "gw_stop: gateway $1 was not started"
  e2e__rtgt_stop "${GW_PID[$1]}" "$(gw_log "$1")" "$E2E_RUN/rtgt-$1.pid"
  GW_PID[$1]=
}

# gw_kill NAME: SIGKILL (no clean-up in rtgt: socket and lock file stay), wait until it is gone.
gw_kill() {
  local pid=${GW_PID[$1]:-}
  [ -n "$pid" ] || fail "gw_kill: gateway $1 was not started"
  log "kill -9 gateway $1 (pid $pid)"
  kill -KILL "$pid" 2> /dev/null || true
  wait "$pid" 2> /dev/null || true
  echo "=== rtgt killed with SIGKILL (uptime $(uptime_s))" >> "$(gw_log "$1")"
  rm -f "$E2E_RUN/rtgt-$1.pid"
  GW_PID[$1]=
}

# gw_restart NAME [ARGS...]: gw_stop (if it runs), then gw_start with ARGS.
gw_restart() {
  local name=$1; shift
  if gw_alive "$name"; then gw_stop "$name"; fi
  gw_start "$name" "$@"
}

# gw_rpc NAME METHOD [PARAMS_JSON], gw_rpc_ok ..., gw_rpc_error NAME METHOD PARAMS_JSON [CODE]:
# rtgt_rpc, rtgt_rpc_ok, rtgt_rpc_error on instance NAME's socket (rpc.log tags them [NAME]).
# (locals, not `VAR=x func`: bash complains when `fail` exits under a temporary assignment)
gw_rpc() { local RTGT_SOCK E2E_RPC_TAG="[$1] "; RTGT_SOCK=$(gw_sock "$1"); shift; rtgt_rpc "$@"; }
gw_rpc_ok() { local RTGT_SOCK E2E_RPC_TAG="[$1] "; RTGT_SOCK=$(gw_sock "$1"); shift; rtgt_rpc_ok "$@"; }
gw_rpc_error() { local RTGT_SOCK E2E_RPC_TAG="[$1] "; RTGT_SOCK=$(gw_sock "$1"); shift; rtgt_rpc_error "$@"; }

# rtgt_rpc METHOD [PARAMS_JSON]: one JSON-RPC call on $RTGT_SOCK through the shipped e2e-rpc
# client (independent of the rtgt CLI). Prints the `result` as compact JSON. Returns status: 1
# on an error response (printed to stderr), 2 when no response came. Calls go to rpc.log.
rtgt_rpc() {
  local rc=0 out
  out=$(e2e-rpc -s "$RTGT_SOCK" -t "$RTGT_RPC_TIMEOUT" "$@" 2>&1) || rc=$?
  printf '>> %s%s %s\n<< %s\n' "${E2E_RPC_TAG:-}" "$1" "${2:-}" "$out" >> "$E2E_LOGDIR/rpc.log"
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
  printf '>> %s%s %s\n<< %s\n' "${E2E_RPC_TAG:-}" "$1" "$2" "$out" >> "$E2E_LOGDIR/rpc.log"
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

# nvmet_peer_add_host HOSTNQN [HOST_SECRET [CTRL_SECRET [HASH [DHGROUP]]]]: the peer subsystem
# admits only the hosts added (allow_any_host off). With HOST_SECRET the host must authenticate
# with DH-HMAC-CHAP (HASH hmac(sha256|sha384|sha512), default hmac(sha256); DHGROUP null or
# ffdhe2048...ffdhe8192, default null); with CTRL_SECRET the controller authenticates to the host
# too. Calling it again for the same host changes its keys (no effect on live controllers).
nvmet_peer_add_host() {
  local s=/sys/kernel/config/nvmet h=/sys/kernel/config/nvmet/hosts/$1
  log "nvmet peer: host $1${2:+ with DH-HMAC-CHAP ${4:-hmac(sha256)} ${5:-null}}${3:+, bidirectional}"
  [ -d "$h" ] || mkdir "$h" || fail "cannot create nvmet host $1"
  echo 0 > "$s/subsystems/$NVMET_PEER_NQN/attr_allow_any_host"
  [ -L "$s/subsystems/$NVMET_PEER_NQN/allowed_hosts/$1" ] \
    || ln -s "$h" "$s/subsystems/$NVMET_PEER_NQN/allowed_hosts/$1" || fail "cannot allow host $1"
  if [ -n "${2:-}" ]; then
    [ -f "$h/dhchap_key" ] || fail "this kernel's nvmet has no DH-HMAC-CHAP (CONFIG_NVME_TARGET_AUTH; use # e2e-kernel: 6.12)"
    echo "${4:-hmac(sha256)}" > "$h/dhchap_hash" || fail "nvmet refused dhchap_hash ${4:-hmac(sha256)}"
    echo "${5:-null}" > "$h/dhchap_dhgroup" || fail "nvmet refused dhchap_dhgroup ${5:-null}"
    echo "$2" > "$h/dhchap_key" || fail "nvmet refused the host key"
    if [ -n "${3:-}" ]; then
      echo "$3" > "$h/dhchap_ctrl_key" || fail "nvmet refused the controller key"
    fi
  fi
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

# nvme_connect NQN [ADDR [PORT]] [-- NVME_CLI_OPTIONS...]: nvme connect over RDMA (or the
# transport in $NVME_TRANSPORT, e.g. tcp; defaults $E2E_IP, $RTGT_NVME_PORT) and wait for
# namespace 1; prints its block device. Fails the scenario if the connect fails (for an expected
# failure use `expect_fail nvme connect ...`).
nvme_connect() {
  local nqn=$1 addr=$E2E_IP port=$RTGT_NVME_PORT tr=${NVME_TRANSPORT:-rdma} dev; shift
  if [ $# -gt 0 ] && [ "$1" != -- ]; then addr=$1; shift; fi
  if [ $# -gt 0 ] && [ "$1" != -- ]; then port=$1; shift; fi
  [ "${1:-}" = -- ] && shift
  log "nvme connect -t $tr -a $addr -s $port -n $nqn $(e2e_redact "$*")"
  nvme connect -t "$tr" -a "$addr" -s "$port" -n "$nqn" \
    --ctrl-loss-tmo="$NVME_CTRL_LOSS_TMO" --reconnect-delay=1 "$@" >&2 \
    || fail "nvme connect to $nqn at $addr:$port failed"
  wait_for 20 nvme_ns_dev "$nqn" 1
  dev=$(nvme_ns_dev "$nqn" 1)
  wait_for 10 test -b "$dev"
  echo "$dev"
}

# --- NVMe multipath: one controller per path ------------------------------------------------
# nvme_ctrl_of NQN PORT: the controller (nvmeN) of subsystem NQN connected to port PORT.
# Returns status 1 if there is none.
nvme_ctrl_of() {
  local c
  for c in $(nvme_ctrls "$1"); do
    grep -qE "trsvcid=$2(,|\$)" /sys/class/nvme/"$c"/address && { echo "$c"; return 0; }
  done
  return 1
}

# nvme_ctrl_of_host NQN HOSTNQN: the controller (nvmeX) of subsystem NQN connected as host
# HOSTNQN. Returns status 1 if there is none.
nvme_ctrl_of_host() {
  local c
  for c in $(nvme_ctrls "$1"); do
    [ "$(cat "/sys/class/nvme/$c/hostnqn")" = "$2" ] && { echo "$c"; return 0; }
  done
  return 1
}

# nvme_connect_as NQN HOSTNQN HOSTID: connects a controller of NQN (RDMA, $E2E_IP
# $RTGT_NVME_PORT) as another host, and prints its name (nvmeX) once it is there (20 s). nvme-cli
# refuses a second connect to the same target address whatever the host NQN; the kernel does
# not (it matches the host NQN too), so this writes to /dev/nvme-fabrics directly.
nvme_connect_as() {
  local nqn=$1 hostnqn=$2 hostid=$3
  log "connect as host $hostnqn"
  echo "transport=rdma,traddr=$E2E_IP,trsvcid=$RTGT_NVME_PORT,nqn=$nqn,hostnqn=$hostnqn,hostid=$hostid" \
    > /dev/nvme-fabrics || fail "connect as host $hostnqn failed (see dmesg)"
  wait_for 20 nvme_ctrl_of_host "$nqn" "$hostnqn" > /dev/null
  nvme_ctrl_of_host "$nqn" "$hostnqn"
}

# nvme_path_of NQN PORT [NSID]: the per-path block device (nvmeXcYnZ, hidden under native
# multipath) of namespace NSID (default 1) through the controller of NQN connected to PORT.
# Returns status 1 if there is none.
nvme_path_of() {
  local b c
  c=$(nvme_ctrl_of "$1" "$2") || return 1
  for b in /sys/block/nvme*c*n*; do
    [ -e "$b" ] || continue
    [ "$(cat "$b/nsid" 2> /dev/null)" = "${3:-1}" ] || continue
    [ "$(basename "$(readlink -f "$b/device")")" = "$c" ] && { echo "${b##*/}"; return 0; }
  done
  return 1
}

# nvme_path_ios PATH: reads + writes completed through a per-path block device (its stat).
nvme_path_ios() { awk '{print $1 + $5}' /sys/block/"$1"/stat; }

# nvme_path_ana_is PATH STATE: the path's ana_state is STATE (optimized, inaccessible, ...).
nvme_path_ana_is() { [ "$(cat /sys/block/"$1"/ana_state)" = "$2" ]; }

# nvme_disconnect NQN: disconnect every controller of NQN and wait until they are gone.
nvme_disconnect() {
  log "nvme disconnect -n $1"
  nvme disconnect -n "$1" >&2 || fail "nvme disconnect -n $1 failed"
  wait_for 20 e2e__no_ctrl "$1"
}
e2e__no_ctrl() { [ -z "$(nvme_ctrls "$1")" ]; }

# --- NVMe in-band authentication (DH-HMAC-CHAP, kernel 6.12) ---------------------------------
# Helpers for the host side, shared by the kernel-peer reference scenario and rtgt's own
# authentication scenarios. The guest must run a kernel with CONFIG_NVME_HOST_AUTH: put
# "# e2e-kernel: 6.12" in the scenario's header.

# e2e_redact STRING: STRING with every DHHC-1 secret replaced by DHHC-1:<redacted> (for logs).
e2e_redact() { sed -E 's/DHHC-1:[0-9]{2}:[A-Za-z0-9+\/=]+:/DHHC-1:<redacted>/g' <<< "$1"; }

# dhchap_gen_key [HMAC [NQN [LENGTH]]]: a new secret in the DHHC-1 representation from
# `nvme gen-dhchap-key`. HMAC (0 none, 1 SHA-256, 2 SHA-384, 3 SHA-512; default 1) is the hash
# the key is transformed with, for NQN (default $E2E_HOSTNQN: a host key; give the subsystem
# NQN for a controller key). LENGTH 32, 48 or 64 bytes (default 32).
dhchap_gen_key() {
  local key
  key=$(nvme gen-dhchap-key --hmac="${1:-1}" --nqn="${2:-$E2E_HOSTNQN}" --key-length="${3:-32}") \
    || fail "nvme gen-dhchap-key failed"
  [[ $key =~ ^DHHC-1:0${1:-1}:[A-Za-z0-9+/]+=*:$ ]] || fail "nvme gen-dhchap-key printed no DHHC-1 key: $key"
  echo "$key"
}

# nvme_connect_dhchap NQN ADDR PORT HOST_SECRET [CTRL_SECRET] [-- NVME_CLI_OPTIONS...]:
# nvme_connect with --dhchap-secret (and --dhchap-ctrl-secret for bidirectional
# authentication); prints the namespace's block device. nvme_auth_result tells what was
# negotiated.
nvme_connect_dhchap() {
  local nqn=$1 addr=$2 port=$3 opts=("--dhchap-secret=$4"); shift 4
  if [ $# -gt 0 ] && [ "$1" != -- ]; then opts+=("--dhchap-ctrl-secret=$1"); shift; fi
  [ "${1:-}" = -- ] && shift
  nvme_connect "$nqn" "$addr" "$port" -- "${opts[@]}" "$@"
}

# nvme_auth_result CTRL: what the host logged for the last authentication of controller CTRL
# (nvme0 ...) on its admin queue: "HASH DHGROUP" (e.g. "hmac(sha256) ffdhe2048") followed by
# " bidirectional" when the host also authenticated the controller. Returns status 1 if the
# host logged no successful authentication.
nvme_auth_result() {
  dmesg | awk -v c="nvme $1: qid 0: " '
    index($0, c "authenticated with hash ") { n = split($0, w, " "); r = w[n - 2] " " w[n]; bi = "" }
    index($0, c "controller authenticated") { bi = " bidirectional" }
    index($0, c "authentication failed") || index($0, c "controller authentication failed") { r = ""; bi = "" }
    END { if (r == "") exit 1; print r bi }'
}

# nvme_set_admin_timeout SECONDS [RETRIES]: the kernel host's admin command timeout and retry
# count (nvme_core admin_timeout / max_retries, for controllers created from now on); the
# defaults are 60 s and 5 retries. nvme_restore_admin_timeout (and e2e_cleanup) restores them:
# keep the short values to the connects that must be refused (under load, a legitimate admin
# command of a TCG guest can take seconds). A refused authentication that
# never reaches the host (nvmet closes the queue right after sending failure1/failure2; under
# soft-RoCE the message is often lost) ends only when the pending authentication command times
# out: 6 x 60 s with the defaults, during which `nvme connect` cannot be killed. No
# `nvme connect` option bounds it (keep-alive-tmo, ctrl-loss-tmo and reconnect-delay apply to
# live controllers).
nvme_set_admin_timeout() {
  local p=/sys/module/nvme_core/parameters
  [ -f "$E2E_RUN/nvme_core.admin_timeout" ] || cat $p/admin_timeout > "$E2E_RUN/nvme_core.admin_timeout"
  [ -f "$E2E_RUN/nvme_core.max_retries" ] || cat $p/max_retries > "$E2E_RUN/nvme_core.max_retries"
  log "nvme_core admin_timeout=$1 max_retries=${2:-0}"
  echo "$1" > $p/admin_timeout || fail "cannot set nvme_core admin_timeout"
  echo "${2:-0}" > $p/max_retries || fail "cannot set nvme_core max_retries"
}

# nvme_restore_admin_timeout: undo nvme_set_admin_timeout.
nvme_restore_admin_timeout() {
  local n
  for n in admin_timeout max_retries; do
    [ -f "$E2E_RUN/nvme_core.$n" ] || continue
    cat "$E2E_RUN/nvme_core.$n" > "/sys/module/nvme_core/parameters/$n"
    rm -f "$E2E_RUN/nvme_core.$n"
  done
  log "nvme_core admin_timeout=$(< /sys/module/nvme_core/parameters/admin_timeout) max_retries=$(< /sys/module/nvme_core/parameters/max_retries)"
}

# nvme_connect_refused MAX_SECONDS NQN ADDR PORT [NVME_CLI_OPTIONS...]: `nvme connect` must fail
# within MAX_SECONDS and leave no controller of NQN. Sets NVME_REFUSED_SECS (how long it took)
# and NVME_REFUSED_ERROR (nvme-cli's first line, e.g. "... Key was rejected by service" when
# the host received the refusal, "... Input/output error" when its command timed out). Call it
# directly, not in $(...).
nvme_connect_refused() {
  local max=$1 nqn=$2 addr=$3 port=$4 t0 rc=0 out; shift 4
  log "nvme connect (must be refused within ${max}s) -t rdma -a $addr -s $port -n $nqn $(e2e_redact "$*")"
  t0=$(uptime_s)
  out=$(nvme connect -t rdma -a "$addr" -s "$port" -n "$nqn" --ctrl-loss-tmo="$NVME_CTRL_LOSS_TMO" \
        --reconnect-delay=1 "$@" 2>&1) || rc=$?
  NVME_REFUSED_SECS=$(awk -v a="$t0" -v b="$(uptime_s)" 'BEGIN{printf "%.1f", b-a}')
  NVME_REFUSED_ERROR=$(head -1 <<< "$out")
  [ "$rc" != 0 ] || fail "nvme connect to $nqn succeeded; it must be refused"
  log "refused after ${NVME_REFUSED_SECS}s: $NVME_REFUSED_ERROR"
  awk -v s="$NVME_REFUSED_SECS" -v m="$max" 'BEGIN{exit !(s <= m)}' \
    || fail "nvme connect to $nqn was refused only after ${NVME_REFUSED_SECS}s (limit ${max}s): $NVME_REFUSED_ERROR"
  [ -z "$(nvme_ctrls "$nqn")" ] || fail "a refused connect left controller(s) $(nvme_ctrls "$nqn")"
}

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

# --- Ceph cluster on the host side (scenarios/netns/ceph.sh) --------------------------------
# ceph_guest_setup: /etc/ceph/ceph.conf for the cluster the hook started (monitor, fsid, auth)
# and, with cephx, the keyring of client.$CEPH_CLIENT_ID. /init calls it at boot when the hook
# set CEPH_MON_HOST. Client logs go to $E2E_BOOT_DIR/ceph/ (host-visible); no admin socket.
ceph_guest_setup() {
  local auth=${CEPH_AUTH:-none} id=${CEPH_CLIENT_ID:-rtgt}
  mkdir -p /etc/ceph "${E2E_BOOT_DIR:-/out}/ceph"
  {
    echo "# Written by lib.sh's ceph_guest_setup for the cluster of scenarios/netns/ceph.sh."
    echo "[global]"
    echo "fsid = ${CEPH_FSID:-}"
    echo "mon_host = $CEPH_MON_HOST"
    echo "auth_cluster_required = $auth"
    echo "auth_service_required = $auth"
    echo "auth_client_required = $auth"
    echo "admin_socket ="
    echo "log_file = ${E2E_BOOT_DIR:-/out}/ceph/\$name.\$pid.log"
    echo "[client]"
    echo "keyring = /etc/ceph/ceph.\$name.keyring"
  } > "$CEPH_CONF"
  if [ -n "${CEPH_CLIENT_KEY:+set}" ]; then
    # without xtrace (/init traces the boot into boot.log): the key stays out of the logs
    ( set +x; umask 077; printf '[client.%s]\n\tkey = %s\n' "$id" "$CEPH_CLIENT_KEY" > "/etc/ceph/ceph.client.$id.keyring" ) 2> /dev/null
  fi
}

# ceph_require: fail unless the guest runs with the Ceph namespace hook.
ceph_require() {
  [ -n "$CEPH_MON_HOST" ] && [ -n "$CEPH_CONTROL" ] \
    || fail "no Ceph cluster: this scenario needs '# e2e-netns: netns/ceph.sh' (or netns/ceph-cephx.sh)"
  [ -s "$CEPH_CONF" ] || fail "no $CEPH_CONF (ceph_guest_setup did not run at boot; see boot.log)"
}

# ceph_host COMMAND [ARG...]: one command on the host-side cluster through the control channel
# (scenarios/netns/ceph-control.py: blocklist_add ADDR [SECS], blocklist_rm ADDR, blocklist_ls,
# osd_stop, osd_start, mon_stop, mon_start, status, rbd_create IMAGE SIZE [FEATURES],
# rbd_resize IMAGE SIZE, rbd_rm IMAGE, rbd_info IMAGE, rbd_status IMAGE, rbd_ls,
# partition IPV4, heal IPV4|all, partitions, ping, help). Prints the command's output; returns
# its exit status (2: refused by the channel, 255: no answer within 150 s). Logged to
# $E2E_LOGDIR/ceph-host.log.
ceph_host() {
  local out rc line
  [ -n "$CEPH_CONTROL" ] || { echo "ceph_host: no control channel (CEPH_CONTROL is empty)" >&2; return 255; }
  out=$(timeout 150 bash -c 'exec 3<> "/dev/tcp/${1%:*}/${1##*:}" || exit 1
    printf "%s\n" "$2" >&3
    cat <&3' bash "$CEPH_CONTROL" "$*" 2>&1) || true
  line=$(tail -n 1 <<< "$out")
  if [[ $line =~ ^EXIT\ ([0-9]+)$ ]]; then
    rc=${BASH_REMATCH[1]}
    out=$(sed '$d' <<< "$out")
  else
    rc=255
    out="ceph_host $*: no answer from the control channel at $CEPH_CONTROL: $out"
  fi
  printf '[%s] >> %s\n%s\n<< exit %s\n' "$(uptime_s)" "$*" "$out" "$rc" >> "$E2E_LOGDIR/ceph-host.log"
  [ -z "$out" ] || printf '%s\n' "$out"
  return "$rc"
}

# ceph_host_ok COMMAND [ARG...]: ceph_host that fails the scenario unless the command succeeds.
ceph_host_ok() {
  local out rc=0
  out=$(ceph_host "$@") || rc=$?
  [ "$rc" = 0 ] || fail "ceph_host $* failed (status $rc): $(head -c 300 <<< "$out")"
  [ -z "$out" ] || printf '%s\n' "$out"
}

# --- Source addresses ------------------------------------------------------------------------
# with_src_addr ADDR CMD...: run CMD with every IPv4 TCP connection it makes leaving from ADDR
# (an address of the guest, e.g. one of $CEPH_GW_ADDRS), through the LD_PRELOAD shim
# tools/bindsrc.c. librados has no option that does this; its client address (what
# `ceph osd blocklist` and `ceph_host partition` act on) is then ADDR. In the background, run
# it as `{ with_src_addr ADDR CMD... || exit $?; } &`: a function's failure in a background
# job would otherwise become the scenario's failure reason (the ERR trap), even if expected.
with_src_addr() {
  local a=$1; shift
  [ -f "$E2E_BINDSRC_LIB" ] || fail "no $E2E_BINDSRC_LIB in the guest"
  # no `ip | grep -q` here: under pipefail, grep quitting early makes ip's SIGPIPE a failure
  [[ $(ip -o addr show) == *" $a/"* ]] || fail "with_src_addr: $a is not an address of the guest"
  env LD_PRELOAD="$E2E_BINDSRC_LIB${LD_PRELOAD:+:$LD_PRELOAD}" E2E_BIND_SRC="$a" "$@"
}

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
  rm -f "$RTGT_SOCK" "$RTGT_SOCK.lock" /var/tmp/spdk.sock /var/tmp/spdk.sock.lock \
    /var/tmp/rtgt-*.sock /var/tmp/rtgt-*.sock.lock
  nvme_restore_admin_timeout > /dev/null 2>&1
  nvmet_peer_teardown
  srpt_peer_teardown
  for n in /sys/kernel/config/nullb/*; do
    [ -d "$n" ] && nullb_destroy "${n##*/}"
  done
  return 0
}
e2e__no_rtgt() { ! pidof rtgt > /dev/null; }
