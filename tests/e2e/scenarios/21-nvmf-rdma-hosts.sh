# NVMe/RDMA host access control with the Linux kernel host: a connect from a host NQN that the
# subsystem does not allow fails (Connect Invalid Host), succeeds once the host is added, and
# removing the host disconnects it. A discovery controller only lists what the host may access.
# While connected, a namespace added over RPC reaches the host through a namespace-attribute
# AEN (a new block device appears) and disappears again when it is removed.
# e2e-timeout: 150

NQN=nqn.2016-06.io.spdk:acl
OTHER=nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-00000000abcd
LISTEN=$(jq -nc --arg ip "$E2E_IP" --arg port "$RTGT_NVME_PORT" \
  '{trtype:"RDMA", adrfam:"IPv4", traddr:$ip, trsvcid:$port}')

expect_gone() { [ ! -b "$1" ]; }
no_controllers() {
  [ "$(rtgt_rpc_ok nvmf_subsystem_get_controllers "{\"nqn\":\"$NQN\"}")" = "[]" ]
}

start_rtgt
rtgt_rpc_ok nvmf_create_transport '{"trtype":"RDMA","max_queue_depth":32}' > /dev/null
rtgt_rpc_ok bdev_malloc_create '{"name":"Malloc1","num_blocks":16384,"block_size":4096}' > /dev/null
rtgt_rpc_ok nvmf_create_subsystem "{\"nqn\":\"$NQN\"}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_ns "{\"nqn\":\"$NQN\",\"namespace\":{\"bdev_name\":\"Malloc1\"}}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_listener "{\"nqn\":\"$NQN\",\"listen_address\":$LISTEN}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_host "{\"nqn\":\"$NQN\",\"host\":\"$OTHER\"}" > /dev/null

disc=$(nvme discover -t rdma -a "$E2E_IP" -s "$RTGT_NVME_PORT" 2>&1 || true)
[[ "$disc" != *"subnqn:  $NQN"* ]] || fail "discovery lists a subsystem this host may not access"

log "nvme connect from a host that is not allowed"
out=$(nvme connect -t rdma -a "$E2E_IP" -s "$RTGT_NVME_PORT" -n "$NQN" 2>&1) \
  && fail "connect from a host that is not allowed succeeded"
log "refused: $out"
assert_eq "$(nvme_ctrls "$NQN")" "" "controllers after the refused connect"
dmesg | grep -q "Connect for subsystem $NQN is not allowed" \
  || fail "the kernel did not see Connect Invalid Host"

rtgt_rpc_ok nvmf_subsystem_add_host "{\"nqn\":\"$NQN\",\"host\":\"$E2E_HOSTNQN\"}" > /dev/null
disc=$(nvme discover -t rdma -a "$E2E_IP" -s "$RTGT_NVME_PORT") || fail "nvme discover failed"
assert_contains "$disc" "subnqn:  $NQN" "discovery log once allowed"
dev=$(nvme_connect "$NQN" -- -Q 16 -i 2)
assert_eq "$(blockdev --getsize64 "$dev")" $((64 << 20)) "size of $dev"
assert_eq "$(blockdev --getss "$dev")" 4096 "logical block size"
fio_verify "$dev" 16M --bsrange=4k-64k
ctrl=${dev#/dev/}; ctrl=${ctrl%n*}
assert_eq "$(cat /sys/class/nvme/"$ctrl"/sqsize)" 15 "sqsize (-Q 16)"

log "namespace hot add and remove (AEN)"
rtgt_rpc_ok bdev_malloc_create '{"name":"Malloc2","num_blocks":2048,"block_size":4096}' > /dev/null
nsid=$(rtgt_rpc_ok nvmf_subsystem_add_ns "{\"nqn\":\"$NQN\",\"namespace\":{\"bdev_name\":\"Malloc2\"}}")
assert_eq "$nsid" 2 "NSID of the added namespace"
wait_for 20 nvme_ns_dev "$NQN" 2
dev2=$(nvme_ns_dev "$NQN" 2)
wait_for 10 test -b "$dev2"
assert_eq "$(blockdev --getsize64 "$dev2")" $((8 << 20)) "size of $dev2"
fio_verify "$dev2" 8M --bsrange=4k-32k
rtgt_rpc_ok nvmf_subsystem_remove_ns "{\"nqn\":\"$NQN\",\"nsid\":2}" > /dev/null
wait_for 20 expect_gone "$dev2"

log "removing the host disconnects it"
rtgt_rpc_ok nvmf_subsystem_remove_host "{\"nqn\":\"$NQN\",\"host\":\"$E2E_HOSTNQN\"}" > /dev/null
wait_for 20 no_controllers
nvme disconnect -n "$NQN" > /dev/null 2>&1 || true
stop_rtgt
