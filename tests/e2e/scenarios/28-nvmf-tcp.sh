# rtgt exports a malloc bdev over NVMe/TCP to the Linux kernel host (nvme_tcp): `nvme discover
# -t tcp` lists it with TSAS "none", `nvme connect -t tcp` creates the block device, fio writes
# and verifies while the subsystem is paused and resumed; the same with header and data digests
# (`--hdr-digest --data-digest`); disconnect and reconnect; rtgt then reports no controllers,
# and the kernel logged no transport errors.
# e2e-timeout: 300

NQN=nqn.2016-06.io.spdk:tcp1
NVME_TRANSPORT=tcp
LISTEN=$(jq -nc --arg ip "$E2E_IP" --arg port "$RTGT_NVME_PORT" \
  '{trtype:"TCP", adrfam:"IPv4", traddr:$ip, trsvcid:$port}')

no_controllers() {
  [ "$(rtgt_rpc_ok nvmf_subsystem_get_controllers "{\"nqn\":\"$NQN\"}")" = "[]" ]
}

modprobe nvme_tcp || fail "modprobe nvme_tcp failed"
start_rtgt
rtgt_rpc_error nvmf_create_transport '{"trtype":"TCP","dif_insert_or_strip":true}' -32602 > /dev/null
rtgt_rpc_ok nvmf_create_transport '{"trtype":"TCP"}' > /dev/null
tr=$(rtgt_rpc_ok nvmf_get_transports | jq -c '.[] | select(.trtype == "TCP")')
assert_eq "$(jq -r .io_unit_size <<< "$tr")" 131072 "TCP io_unit_size default"
rtgt_rpc_ok bdev_malloc_create '{"name":"Malloc0","num_blocks":131072,"block_size":512}' > /dev/null
rtgt_rpc_ok nvmf_create_subsystem "{\"nqn\":\"$NQN\",\"allow_any_host\":true,\"serial_number\":\"RTGT0028\"}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_ns "{\"nqn\":\"$NQN\",\"namespace\":{\"bdev_name\":\"Malloc0\"}}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_listener "{\"nqn\":\"$NQN\",\"listen_address\":$LISTEN}" > /dev/null

log "nvme discover -t tcp -a $E2E_IP -s $RTGT_NVME_PORT"
disc=$(nvme discover -t tcp -a "$E2E_IP" -s "$RTGT_NVME_PORT") || fail "nvme discover -t tcp failed"
assert_contains "$disc" "subnqn:  $NQN" "discovery log"
assert_contains "$disc" "trtype:  tcp" "discovery log"
assert_contains "$disc" "traddr:  $E2E_IP" "discovery log"
assert_contains "$disc" "trsvcid: $RTGT_NVME_PORT" "discovery log"
assert_contains "$disc" "sectype: none" "discovery log"

# pass DIGEST_OPTIONS...: connect, fio write+verify with pauses and resumes, disconnect.
pass() {
  local dev size ctrl fio i
  dev=$(nvme_connect "$NQN" -- "$@")
  size=$(blockdev --getsize64 "$dev")
  assert_eq "$size" $((64 << 20)) "size of $dev"
  ctrl=${dev#/dev/}; ctrl=${ctrl%n*}
  assert_eq "$(cat /sys/class/nvme/"$ctrl"/transport)" tcp "transport"
  assert_eq "$(rtgt_rpc_ok nvmf_subsystem_get_controllers "{\"nqn\":\"$NQN\"}" | jq length)" 1 \
    "controllers while connected"
  fio_verify "$dev" 32M & fio=$!
  for i in 1 2 3; do
    sleep 1.5
    pid_alive $fio || break
    rtgt_rpc_ok nvmf_subsystem_pause "{\"nqn\":\"$NQN\"}" > /dev/null
    sleep 0.5
    rtgt_rpc_ok nvmf_subsystem_resume "{\"nqn\":\"$NQN\"}" > /dev/null
  done
  wait $fio || fail "fio write+verify failed ($*)"
  nvme_disconnect "$NQN"
  expect_fail test -b "$dev"
  wait_for 10 no_controllers
}

log "pass 1: no digests"
pass
log "pass 2: --hdr-digest --data-digest"
pass --hdr-digest --data-digest
log "pass 3: reconnect without digests"
pass

stats=$(rtgt_rpc_ok nvmf_get_stats)
caps=$(echo "$stats" | jq '[.poll_groups[].transports[] | select(.trtype == "TCP") | .capsules] | add')
[ "$caps" -gt 1000 ] || fail "nvmf_get_stats counted only $caps TCP capsules"
assert_eq "$(rtgt_rpc_ok nvmf_subsystem_get_qpairs "{\"nqn\":\"$NQN\"}")" "[]" "qpairs after disconnect"
bad=$(dmesg | grep -iE 'nvme_tcp.*(error|failed|digest)|bogus|mismatch|bad command_id' || true)
[ -z "$bad" ] || fail "kernel complained: $(echo "$bad" | head -3 | tr '\n' ' ')"
stop_rtgt
