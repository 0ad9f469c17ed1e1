# Asymmetric Namespace Access with the kernel's native NVMe multipath: one rtgt exports one
# subsystem with ana_reporting on two listeners (ports 4420 and 4421 of the guest's address),
# the host connects through both (two controllers, one /dev/nvmeXnY, paths nvmeXcYnZ), and
# /sys/block/nvme*c*n*/ana_state shows the configured states. Under fio write+verify the
# optimized path is switched to inaccessible and the other to optimized, then back: fio ends
# with no verify error, and the host's I/O moves to the new optimized path within 10 s of
# each switch (per-path block statistics).
# e2e-timeout: 300

NQN=nqn.2016-06.io.spdk:ana
PORT_A=$RTGT_NVME_PORT
PORT_B=$((RTGT_NVME_PORT + 1))
listen() {
  jq -nc --arg ip "$E2E_IP" --arg port "$1" \
    '{trtype:"RDMA", adrfam:"IPv4", traddr:$ip, trsvcid:$port}'
}

path_of() { nvme_path_of "$NQN" "$1"; }
ios() { nvme_path_ios "$1"; }
ana_state_is() { nvme_path_ana_is "$@"; }
# moved PATH BEFORE: the path completed more than 50 I/Os since BEFORE.
moved() { [ $(($(ios "$1") - $2)) -gt 50 ]; }

set_state() {
  rtgt_rpc_ok nvmf_subsystem_listener_set_ana_state \
    "{\"nqn\":\"$NQN\",\"listen_address\":$(listen "$1"),\"ana_state\":\"$2\"}" > /dev/null
}

# switch FROM TO: demote FROM, promote TO (docs/ha.md), and check that I/O moves to TO within
# 10 s while it stops on FROM.
switch() {
  local from=$1 to=$2 pf pt before t0 t1
  pf=$(path_of "$from"); pt=$(path_of "$to")
  pid_alive "$fio" || fail "fio ended before the switch to $to"
  before=$(ios "$pt")
  t0=$(uptime_s)
  set_state "$from" inaccessible
  set_state "$to" optimized
  t1=$(uptime_s)
  wait_for 10 moved "$pt" "$before"
  log "switch $from -> $to: RPCs took $(awk -v a="$t0" -v b="$t1" 'BEGIN{print b - a}')s," \
    "I/O on $pt after $(awk -v a="$t0" -v b="$(uptime_s)" 'BEGIN{print b - a}')s"
  wait_for 10 ana_state_is "$pf" inaccessible
  wait_for 10 ana_state_is "$pt" optimized
  # Nothing more completes on the demoted path (a short grace for I/O already in flight).
  sleep 1
  local stale; stale=$(ios "$pf"); sleep 2
  assert_eq "$(ios "$pf")" "$stale" "I/Os completed on the inaccessible path $pf"
}

[ "$(cat /sys/module/nvme_core/parameters/multipath)" = Y ] \
  || fail "the guest kernel has native NVMe multipath disabled"

start_rtgt
rtgt_rpc_ok nvmf_create_transport '{"trtype":"RDMA"}' > /dev/null
rtgt_rpc_ok bdev_malloc_create '{"name":"Malloc0","num_blocks":262144,"block_size":512}' > /dev/null
rtgt_rpc_ok nvmf_create_subsystem \
  "{\"nqn\":\"$NQN\",\"allow_any_host\":true,\"serial_number\":\"RTGT0024\",\"ana_reporting\":true}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_ns "{\"nqn\":\"$NQN\",\"namespace\":{\"bdev_name\":\"Malloc0\"}}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_listener "{\"nqn\":\"$NQN\",\"listen_address\":$(listen "$PORT_A")}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_listener \
  "{\"nqn\":\"$NQN\",\"listen_address\":$(listen "$PORT_B"),\"ana_state\":\"inaccessible\"}" > /dev/null
states=$(rtgt_rpc_ok nvmf_subsystem_get_listeners "{\"nqn\":\"$NQN\"}" \
  | jq -c '[.[] | [.address.trsvcid, .ana_states[0].ana_state]]')
assert_eq "$states" "[[\"$PORT_A\",\"optimized\"],[\"$PORT_B\",\"inaccessible\"]]" "get_listeners"

dev=$(nvme_connect "$NQN" "$E2E_IP" "$PORT_A")
dev_b=$(nvme_connect "$NQN" "$E2E_IP" "$PORT_B")
assert_eq "$dev_b" "$dev" "one multipath block device for both paths"
assert_eq "$(nvme_ctrls "$NQN" | wc -l)" 2 "controllers of $NQN"
wait_for 10 path_of "$PORT_B"
pa=$(path_of "$PORT_A"); pb=$(path_of "$PORT_B")
log "paths: $pa ($PORT_A), $pb ($PORT_B) under $dev"
wait_for 10 ana_state_is "$pa" optimized
wait_for 10 ana_state_is "$pb" inaccessible
assert_eq "$(cat /sys/block/"$pa"/ana_grpid)" 1 "ANA group of namespace 1"
size=$(blockdev --getsize64 "$dev")
assert_eq "$size" $((128 << 20)) "size of $dev"

# fio writes and verifies the device twice while the paths switch and switch back.
fio_verify "$dev" "$size" --loops=2 & fio=$!
wait_for 10 moved "$pa" "$(ios "$pa")"
switch "$PORT_A" "$PORT_B"
switch "$PORT_B" "$PORT_A"
wait $fio || fail "fio write+verify failed across the switches"

bad=$(dmesg | grep -iE 'bogus|mismatch|bad command_id|I/O error' | grep -v rdma_rxe || true)
[ -z "$bad" ] || fail "kernel errors: $bad"
nvme disconnect -n "$NQN" > /dev/null
stop_rtgt
