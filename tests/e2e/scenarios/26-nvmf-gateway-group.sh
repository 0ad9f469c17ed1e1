# A gateway group (docs/ha.md): two rtgt processes, gateways A and B, export ONE subsystem from
# one shared block device (a loop device on a file in the guest, an aio bdev in each process):
# same NQN, serial, model and namespace identities (NGUID, UUID, EUI-64 given explicitly),
# disjoint controller id ranges, one listener each (A 4420, B 4421), ana_reporting. The kernel
# host connects to both (native multipath: two controllers, one /dev/nvmeXnY) and
# /sys/block/nvme*c*n*/ana_state shows the configured states. Under fio write+verify:
#   1. switchover A -> B (A demoted to inaccessible, then B promoted to optimized);
#   2. A killed with SIGKILL, I/O goes on through B; A restarted on the same RPC socket path
#      from its saved configuration rewritten to bring its listener up inaccessible; the host
#      reconnects to it;
#   3. failback B -> A (B demoted, A promoted);
#   4. unplanned failover: the owner A killed with SIGKILL, then B promoted.
# fio ends with no verify error; after each switch I/O completes on the new optimized path
# within 10 s and none on the demoted one. Figures in the log (FIGURE lines, figures.txt): time
# from the first RPC of a switch (or the kill) to the first I/O completed on the new optimized
# path, and fio's longest completion gap (stall) per switch, across the kills and overall.
# e2e-timeout: 240

NQN=nqn.2016-06.io.spdk:gwgroup
PORT_A=$RTGT_NVME_PORT
PORT_B=$((RTGT_NVME_PORT + 1))
NGUID=5A1E0C3B9D2F4E7A8B6C1D0E2F3A4B5C
UUID=7d0c2a4e-91b3-4f6a-8e25-3c1b9a7f6d40
EUI64=0024E5A7C3B10D26
FIO_SECS=${GW_FIO_SECS:-75}
FIG=$E2E_LOGDIR/figures.txt
SWITCH_MS=()
# The host keeps reconnecting to the killed gateway until it is back (under TCG a restart takes
# 10-20 s with fio running); the default 20 s would give the controller up.
NVME_CTRL_LOSS_TMO=90

listen() {
  jq -nc --arg ip "$E2E_IP" --arg port "$1" \
    '{trtype:"RDMA", adrfam:"IPv4", traddr:$ip, trsvcid:$port}'
}
port_of() { case $1 in A) echo "$PORT_A" ;; B) echo "$PORT_B" ;; esac; }

# configure GW MIN_CNTLID MAX_CNTLID ANA_STATE: the same subsystem on gateway GW, its listener
# coming up in ANA_STATE (atomically, through add_listener's ana_state).
configure() {
  local gw=$1
  gw_rpc_ok "$gw" nvmf_create_transport '{"trtype":"RDMA"}' > /dev/null
  gw_rpc_ok "$gw" bdev_aio_create "{\"name\":\"Shared0\",\"filename\":\"$LOOP\"}" > /dev/null
  gw_rpc_ok "$gw" nvmf_create_subsystem "$(jq -nc --arg nqn "$NQN" --argjson min "$2" --argjson max "$3" \
    '{nqn:$nqn, allow_any_host:true, serial_number:"RTGT0026", model_number:"rtgt gateway group",
      max_namespaces:32, ana_reporting:true, min_cntlid:$min, max_cntlid:$max}')" > /dev/null
  gw_rpc_ok "$gw" nvmf_subsystem_add_ns "$(jq -nc --arg nqn "$NQN" --arg g "$NGUID" --arg u "$UUID" --arg e "$EUI64" \
    '{nqn:$nqn, namespace:{bdev_name:"Shared0", nsid:1, nguid:$g, uuid:$u, eui64:$e, anagrpid:1}}')" > /dev/null
  gw_rpc_ok "$gw" nvmf_subsystem_add_listener "$(jq -nc --arg nqn "$NQN" --argjson a "$(listen "$(port_of "$gw")")" \
    --arg s "$4" '{nqn:$nqn, listen_address:$a, ana_state:$s}')" > /dev/null
  local got
  got=$(gw_rpc_ok "$gw" nvmf_subsystem_get_listeners "{\"nqn\":\"$NQN\"}" | jq -r '.[0].ana_states[0].ana_state')
  assert_eq "$got" "$4" "gateway $gw's listener state"
}

listener_is() {  # GW STATE: the gateway's listener reports STATE for group 1
  [ "$(gw_rpc "$1" nvmf_subsystem_get_listeners "{\"nqn\":\"$NQN\"}" 2> /dev/null | jq -r '.[0].ana_states[0].ana_state')" = "$2" ]
}
state_params() {  # GW STATE: the parameters of nvmf_subsystem_listener_set_ana_state
  jq -nc --arg nqn "$NQN" --argjson a "$(listen "$(port_of "$1")")" --arg s "$2" \
    '{nqn:$nqn, listen_address:$a, ana_state:$s}'
}
set_state() {  # GW PARAMS
  gw_rpc_ok "$1" nvmf_subsystem_listener_set_ana_state "$2" > /dev/null
}

ctrl_of() { nvme_ctrl_of "$NQN" "$1"; }
ctrl_down() { [ "$(cat /sys/class/nvme/"$1"/state)" != live ]; }
ctrl_live() { [ "$(cat /sys/class/nvme/"$(ctrl_of "$1")"/state)" = live ]; }
path_of() { nvme_path_of "$NQN" "$1"; }
ios() { nvme_path_ios "$1"; }
ana_state_is() { nvme_path_ana_is "$@"; }
moved() { [ $(($(ios "$1") - $2)) -gt 50 ]; }
now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }
secs_since() { awk -v a="$1" -v b="$(now_ms)" 'BEGIN{printf "%.2f", (b - a) / 1000}'; }
figure() { log "FIGURE $*"; echo "$*" >> "$FIG"; }

# first_io PATH BEFORE T0_MS: wait (10 s at most, polling every 50 ms) for the first I/O
# completed on PATH after BEFORE; prints the seconds since T0_MS.
first_io() {
  local end=$(( $(now_ms) + 10000 ))
  while [ "$(ios "$1")" = "$2" ]; do
    [ "$(now_ms)" -lt "$end" ] || { echo none; return 0; }
    sleep 0.05
  done
  secs_since "$3"
}

# switch FROM TO: demote FROM, promote TO (docs/ha.md); I/O moves to TO within 10 s and stops
# on FROM. Records the figure.
switch() {
  local from=$1 to=$2 pf pt before t0 rpcs first stale demote_p promote_p watcher
  pf=$(path_of "$(port_of "$from")"); pt=$(path_of "$(port_of "$to")")
  demote_p=$(state_params "$from" inaccessible); promote_p=$(state_params "$to" optimized)
  pid_alive "$fio" || fail "fio ended before the switch $from -> $to"
  before=$(ios "$pt")
  t0=$(now_ms)
  # the watcher polls the new path from before the first RPC (the RPCs block this shell)
  first_io "$pt" "$before" "$t0" > "$E2E_RUN/first_io" & watcher=$!
  set_state "$from" "$demote_p"
  demote=$(secs_since "$t0")
  set_state "$to" "$promote_p"
  rpcs=$(secs_since "$t0")
  wait "$watcher" || true
  first=$(< "$E2E_RUN/first_io")
  wait_for 10 moved "$pt" "$before"
  SWITCH_MS+=("$t0")
  figure "switch $from -> $to: first I/O on $pt ${first}s after the first RPC (demote RPC ${demote}s, both RPCs ${rpcs}s; first RPC at Unix ms $t0)"
  wait_for 10 ana_state_is "$pf" inaccessible
  wait_for 10 ana_state_is "$pt" optimized
  sleep 1
  stale=$(ios "$pf"); sleep 2
  assert_eq "$(ios "$pf")" "$stale" "I/Os completed on the inaccessible path $pf"
}

[ "$(cat /sys/module/nvme_core/parameters/multipath)" = Y ] \
  || fail "the guest kernel has native NVMe multipath disabled"

# --- the shared device: a loop device on a file, opened by both processes -------------------
modprobe loop || fail "modprobe loop failed"
IMG=/tmp/gw-shared.img
rm -f "$IMG"
dd if=/dev/zero of="$IMG" bs=1M count=0 seek=128 2> /dev/null
LOOP=$(losetup -f) || fail "no free loop device"
losetup "$LOOP" "$IMG" || fail "losetup $LOOP $IMG failed"
log "shared device $LOOP on $IMG"

# each gateway's reactor on its own core, as on two machines
gw_start A -m 0x1
gw_start B -m 0x2
configure A 1 1000 optimized
configure B 1001 2000 inaccessible
# A's saved configuration, rewritten to bring its listener up inaccessible: how a gateway that
# failed is restarted (docs/ha.md, unplanned failover)
"$RTGT" rpc -s "$(gw_sock A)" save_config > "$E2E_RUN/gw-A.json" || fail "rtgt rpc save_config on A failed"
jq '(.subsystems[] | select(.subsystem == "nvmf") | .config) |=
    (map(select(.method != "nvmf_subsystem_listener_set_ana_state"))
     | map(if .method == "nvmf_subsystem_add_listener" then .params.ana_state = "inaccessible" else . end))' \
  "$E2E_RUN/gw-A.json" > "$E2E_LOGDIR/gw-A-restart.json"
assert_eq "$(jq '[.. | .ana_state? // empty] | unique' -c "$E2E_LOGDIR/gw-A-restart.json")" '["inaccessible"]' \
  "ANA states in A's restart configuration"
# both opened the device with O_DIRECT and use io_uring on it (the aio bdev logs when it falls
# back to buffered I/O or to its thread engine, which uses the buffered descriptor)
for gw in A B; do
  if grep -qE "O_DIRECT not supported|io_uring unavailable" "$(gw_log $gw)"; then
    fail "gateway $gw does not do direct I/O on $LOOP: $(grep -E "O_DIRECT|io_uring" "$(gw_log $gw)")"
  fi
done
idents=$(for gw in A B; do
  gw_rpc_ok $gw nvmf_get_subsystems | jq -c --arg n "$NQN" '.[] | select(.nqn == $n)
    | [.serial_number, .model_number, .namespaces[0].nguid, .namespaces[0].uuid, .namespaces[0].eui64]'
done | sort -u)
assert_eq "$(wc -l <<< "$idents")" 1 "identities differ between the gateways: $idents"

dev=$(nvme_connect "$NQN" "$E2E_IP" "$PORT_A")
dev_b=$(nvme_connect "$NQN" "$E2E_IP" "$PORT_B")
assert_eq "$dev_b" "$dev" "one multipath block device for both gateways"
assert_eq "$(nvme_ctrls "$NQN" | wc -l)" 2 "controllers of $NQN"
wait_for 10 path_of "$PORT_B"
pa=$(path_of "$PORT_A"); pb=$(path_of "$PORT_B")
ca=$(ctrl_of "$PORT_A"); cb=$(ctrl_of "$PORT_B")
log "gateway A: $ca $pa (cntlid $(< /sys/class/nvme/"$ca"/cntlid)), gateway B: $cb $pb (cntlid $(< /sys/class/nvme/"$cb"/cntlid)) under $dev"
assert_match "$(< /sys/class/nvme/"$ca"/cntlid)" '^([1-9][0-9]{0,2}|1000)$' "A's cntlid (1-1000)"
assert_match "$(< /sys/class/nvme/"$cb"/cntlid)" '^(100[1-9]|10[1-9][0-9]|1[1-9][0-9]{2}|2000)$' "B's cntlid (1001-2000)"
wait_for 10 ana_state_is "$pa" optimized
wait_for 10 ana_state_is "$pb" inaccessible
size=$(blockdev --getsize64 "$dev")
assert_eq "$size" $((128 << 20)) "size of $dev"

# fio writes and verifies (each block read back soon after it is written: verify_backlog) for
# FIO_SECS; every completion goes to its clat log, with Unix-epoch milliseconds.
: > "$FIG"
fio_verify "$dev" "$size" --time_based --runtime="$FIO_SECS" --verify_backlog=64 \
  --write_lat_log="$E2E_LOGDIR/gw" --log_unix_epoch=1 & fio=$!
wait_for 10 moved "$pa" "$(ios "$pa")"

# 1. planned switchover A -> B
switch A B

# 2. A dies; I/O goes on through B; A comes back, inaccessible
before=$(ios "$pb")
kill_ms=$(now_ms)
gw_kill A
wait_for 10 moved "$pb" "$before"
poll_until 10 ctrl_down "$ca" || true
log "host's controller $ca of the killed gateway: $(< /sys/class/nvme/"$ca"/state)"
gw_start A -m 0x1 --json "$E2E_LOGDIR/gw-A-restart.json"
wait_for 30 listener_is A inaccessible
restart_ms=$(now_ms)
wait_for 60 ctrl_live "$PORT_A"
back_ms=$(now_ms)
wait_for 10 ana_state_is "$pa" inaccessible
assert_eq "$(ctrl_of "$PORT_A")" "$ca" "controller of gateway A after the restart"
figure "gateway A killed (SIGKILL), restarted from its configuration: listening $(awk -v a="$kill_ms" -v b="$restart_ms" 'BEGIN{printf "%.2f", (b - a) / 1000}')s after the kill, host's controller $ca live again after $(secs_since "$kill_ms")s"

# 3. failback B -> A
switch B A

# 4. unplanned failover: the owner A dies (killed: fenced), then B is promoted
pid_alive "$fio" || fail "fio ended before the unplanned failover"
before=$(ios "$pb")
kill2_ms=$(now_ms)
gw_kill A
first_io "$pb" "$before" "$kill2_ms" > "$E2E_RUN/first_io" & watcher=$!
set_state B "$(state_params B optimized)"
promoted=$(secs_since "$kill2_ms")
wait "$watcher" || true
wait_for 10 moved "$pb" "$before"
wait_for 10 ana_state_is "$pb" optimized
figure "unplanned failover: owner A killed (SIGKILL), B promoted ${promoted}s after the kill, first I/O on $pb $(< "$E2E_RUN/first_io")s after the kill"
pid_alive "$fio" || fail "fio ended before the unplanned failover was checked (raise GW_FIO_SECS)"
wait $fio || fail "fio write+verify failed across the gateway switches"

# fio's longest gap between two completions (ms), in windows of Unix-epoch milliseconds
stall() {  # FROM_MS TO_MS: the longest gap between completions in [FROM, TO], and where
  sort -t, -k1n "$E2E_LOGDIR"/gw_clat.*.log | awk -F, -v a="$1" -v b="$2" -v now="$(now_ms)" -v up="$(uptime_s)" '
    $1 + 0 >= a && $1 + 0 <= b { if (p != "" && $1 - p > m) { m = $1 - p; at = p } p = $1 }
    END { printf "%d ms (from +%.2f s to +%.2f s of the window, uptime %.2f)\n", m, (at - a) / 1000,
          (at + m - a) / 1000, up - (now - at) / 1000 }'
}
fio_t0=$(sort -t, -k1n "$E2E_LOGDIR"/gw_clat.*.log | awk -F, 'NR == 1 { v = $1 } END { print v }')
figure "fio's longest stall in the 10 s from the first RPC of switch A -> B: $(stall "${SWITCH_MS[0]}" $((SWITCH_MS[0] + 10000)))"
figure "fio's longest stall from 1 s before the kill to 1 s after A was back: $(stall $((kill_ms - 1000)) $((back_ms + 1000)))"
figure "fio's longest stall in the 10 s from the first RPC of switch B -> A: $(stall "${SWITCH_MS[1]}" $((SWITCH_MS[1] + 10000)))"
figure "fio's longest stall in the 10 s from the kill of the owner A (unplanned failover): $(stall "$kill2_ms" $((kill2_ms + 10000)))"
figure "fio's longest stall over the whole run (${FIO_SECS}s from its first completion): $(stall "$fio_t0" $((fio_t0 + FIO_SECS * 1000 + 5000)))"
figure "fio: $(grep -E '^ +(read|write):' "$E2E_LOGDIR"/fio-1.log | tr -s ' ' | tr '\n' ';')"

bad=$(dmesg | grep -iE 'bogus|mismatch|bad command_id|I/O error|identifiers changed' | grep -v rdma_rxe || true)
[ -z "$bad" ] || fail "kernel errors: $bad"
nvme_disconnect "$NQN"
gw_stop B
losetup -d "$LOOP"
rm -f "$IMG"
