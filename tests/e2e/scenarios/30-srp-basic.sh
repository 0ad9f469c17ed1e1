# rtgt as an SRP target for the kernel's ib_srp initiator. add_target with dest=IP:PORT logs in
# over RDMA CM (one channel per CPU: a single-channel login, then multi-channel ones); a SCSI
# disk with rtgt's identity appears; fio writes and verifies it (crc32c); the session and its
# channels show in nvmf_subsystem_get_controllers / get_qpairs. Removing the remote port tears
# the channels down on rtgt, and logging in again works. A login naming another target port id
# is rejected (0x10003), and so is an initiator that is not an allowed host (0x10006) until it
# is added under its initiator port id. A second subsystem with an explicit srp_port_id shares
# the listener (one RDMA CM listener per address) and is reached under that id.
# e2e-timeout: 300

NQN=nqn.2016-06.io.rtgt:srp-e2e
start_rtgt
rtgt_rpc_ok nvmf_create_transport '{"trtype":"SRP"}' > /dev/null
rtgt_rpc_ok bdev_malloc_create '{"name":"Malloc0","num_blocks":131072,"block_size":512}' > /dev/null
rtgt_rpc_ok nvmf_create_subsystem "{\"nqn\":\"$NQN\",\"allow_any_host\":true}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_ns \
  "{\"nqn\":\"$NQN\",\"namespace\":{\"bdev_name\":\"Malloc0\"}}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_listener "$(jq -nc --arg nqn "$NQN" --arg ip "$E2E_IP" \
  --arg port "$RTGT_SRP_PORT" \
  '{nqn:$nqn, listen_address:{trtype:"SRP", adrfam:"IPv4", traddr:$ip, trsvcid:$port}}')" > /dev/null

G=$(srp_port_guid "$NQN")
SPEC=$(srp_login_spec "$NQN")
assert_eq "$(rtgt_rpc_ok nvmf_get_subsystems "{\"nqn\":\"$NQN\"}" | jq -r '.[0].srp_port_id')" \
  "0x$G$G" "srp_port_id of $NQN (derived from the NQN)"

qpairs() { rtgt_rpc_ok nvmf_subsystem_get_qpairs "{\"nqn\":\"$NQN\"}"; }
ctrls() { rtgt_rpc_ok nvmf_subsystem_get_controllers "{\"nqn\":\"$NQN\"}"; }
no_channels() { [ "$(qpairs | jq length)" = 0 ]; }

# --- login, identity, verified I/O ---
dev=$(srp_login "$SPEC")
assert_eq "$(blockdev --getsize64 "$dev")" $((64 << 20)) "size of $dev"
assert_contains "$(cat "/sys/block/${dev#/dev/}/device/vendor")" RTGT "SCSI vendor of $dev"
q=$(qpairs)
nch=$(jq length <<< "$q")
[ "$nch" -ge 1 ] || fail "no channel on rtgt after the login"
assert_eq "$(jq -r '.[0].target_port_id' <<< "$q")" "0x$G$G" "target port id"
assert_eq "$(jq '[.[] | select(.state == "live")] | length' <<< "$q")" "$nch" "live channels"
assert_eq "$(jq '[.[] | select(.immediate_data)] | length' <<< "$q")" "$nch" "immediate data"
c=$(ctrls)
assert_eq "$(jq length <<< "$c")" 1 "sessions"
assert_eq "$(jq '.[0].num_io_qpairs' <<< "$c")" "$nch" "channels of the session"
IPORT=$(jq -r '.[0].hostnqn' <<< "$c")
assert_match "$IPORT" '^0x[0-9a-f]{32}$' "initiator port id"
log "ib_srp logged in with $nch channel(s) as $IPORT"

fio_verify "$dev" 32M

# --- remove the remote port, log in again ---
srp_logout_all
wait_for 30 no_channels
assert_eq "$(ctrls)" "[]" "sessions after the logout"
dev=$(srp_login "$SPEC")
fio_verify "$dev" 16M --bsrange=512-64k --iodepth=32
srp_logout_all
wait_for 30 no_channels

# --- a login naming another target port id ---
expect_fail srp_add_target "id_ext=$G,ioc_guid=0123456789abcdef,dest=$E2E_IP:$RTGT_SRP_PORT"
assert_contains "$(dmesg | tail -n 20)" "SRP LOGIN REJECTED, reason 0x00010003" "ib_srp's log"
assert_eq "$(srp_hosts)" "" "SRP ports after a rejected login"
assert_eq "$(qpairs | jq length)" 0 "channels after a rejected login"

# --- allowed hosts hold initiator port ids ---
rtgt_rpc_ok nvmf_subsystem_allow_any_host "{\"nqn\":\"$NQN\",\"allow_any_host\":false}" > /dev/null
expect_fail srp_add_target "$SPEC"
assert_contains "$(dmesg | tail -n 20)" "SRP LOGIN REJECTED, reason 0x00010006" "ib_srp's log"
rtgt_rpc_ok nvmf_subsystem_add_host "{\"nqn\":\"$NQN\",\"host\":\"$IPORT\"}" > /dev/null
dev=$(srp_login "$SPEC")
fio_verify "$dev" 8M
log "SRP poll group stats: $(rtgt_rpc_ok nvmf_get_stats | jq -c '[.poll_groups[].transports[] | select(.trtype == "SRP")]')"
srp_logout_all
wait_for 30 no_channels

# --- an explicit target port id, on the same listener ---
NQN2=nqn.2016-06.io.rtgt:srp-explicit
X=0002c903000e8acd
rtgt_rpc_ok bdev_malloc_create '{"name":"Malloc1","num_blocks":32768,"block_size":512}' > /dev/null
rtgt_rpc_ok nvmf_create_subsystem \
  "{\"nqn\":\"$NQN2\",\"allow_any_host\":true,\"srp_port_id\":\"$X:$X\"}" > /dev/null
assert_eq "$(rtgt_rpc_ok nvmf_get_subsystems "{\"nqn\":\"$NQN2\"}" | jq -r '.[0].srp_port_id')" \
  "0x$X$X" "explicit srp_port_id"
rtgt_rpc_ok nvmf_subsystem_add_ns \
  "{\"nqn\":\"$NQN2\",\"namespace\":{\"bdev_name\":\"Malloc1\"}}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_listener "$(jq -nc --arg nqn "$NQN2" --arg ip "$E2E_IP" \
  --arg port "$RTGT_SRP_PORT" \
  '{nqn:$nqn, listen_address:{trtype:"SRP", adrfam:"IPv4", traddr:$ip, trsvcid:$port}}')" > /dev/null
dev=$(srp_login "id_ext=$X,ioc_guid=$X,dest=$E2E_IP:$RTGT_SRP_PORT")
assert_eq "$(blockdev --getsize64 "$dev")" $((16 << 20)) "size of $dev"
fio_verify "$dev" 8M
srp_logout_all

stop_rtgt
