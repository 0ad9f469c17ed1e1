# Records what the Linux kernel initiators send to rtgt, for the fuzz seed corpora: a debug
# build of rtgt (its trace-level wire dumps, target `rtgt_wire`, are compiled out of release
# builds) serves NVMe/RDMA and SRP; `nvme discover`, `nvme connect`, some I/O (reads, writes,
# discard, flush) and `nvme disconnect`; then ib_srp logs in (several channels), does I/O and
# logs out. The rtgt log, kept in the run directory, holds every capsule, Connect data, RDMA CM
# private data, SRP login and SRP IU. See fuzz/seeds/captures/README.md.
# e2e-timeout: 600

NQN=nqn.2016-06.io.spdk:cnode1
SNQN=nqn.2016-06.io.rtgt:srp-capture
RTGT_START_TIMEOUT=60
start_rtgt --log-level trace
rtgt_rpc_ok nvmf_create_transport '{"trtype":"RDMA"}' > /dev/null
rtgt_rpc_ok nvmf_create_transport '{"trtype":"SRP"}' > /dev/null
rtgt_rpc_ok bdev_malloc_create '{"name":"Malloc0","num_blocks":32768,"block_size":512}' > /dev/null
rtgt_rpc_ok bdev_malloc_create '{"name":"Malloc1","num_blocks":32768,"block_size":512}' > /dev/null
rtgt_rpc_ok nvmf_create_subsystem "{\"nqn\":\"$NQN\",\"allow_any_host\":true,\"serial_number\":\"RTGT0001\"}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_ns "{\"nqn\":\"$NQN\",\"namespace\":{\"bdev_name\":\"Malloc0\"}}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_listener "$(jq -nc --arg nqn "$NQN" --arg ip "$E2E_IP" --arg port "$RTGT_NVME_PORT" \
  '{nqn:$nqn, listen_address:{trtype:"RDMA", adrfam:"IPv4", traddr:$ip, trsvcid:$port}}')" > /dev/null
rtgt_rpc_ok nvmf_create_subsystem "{\"nqn\":\"$SNQN\",\"allow_any_host\":true}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_ns "{\"nqn\":\"$SNQN\",\"namespace\":{\"bdev_name\":\"Malloc1\"}}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_listener "$(jq -nc --arg nqn "$SNQN" --arg ip "$E2E_IP" --arg port "$RTGT_SRP_PORT" \
  '{nqn:$nqn, listen_address:{trtype:"SRP", adrfam:"IPv4", traddr:$ip, trsvcid:$port}}')" > /dev/null

nvme discover -t rdma -a "$E2E_IP" -s "$RTGT_NVME_PORT" > /dev/null || fail "nvme discover failed"
dev=$(nvme_connect "$NQN")
dd if=/dev/urandom of="$dev" bs=4k count=8 oflag=direct 2> /dev/null || fail "write"
dd if=/dev/urandom of="$dev" bs=128k count=2 seek=1 oflag=direct 2> /dev/null || fail "large write"
dd if="$dev" of=/dev/null bs=64k count=4 iflag=direct 2> /dev/null || fail "read"
blkdiscard -o 1048576 -l 65536 "$dev" || log "blkdiscard failed (ignored)"
sync
nvme flush "$dev" > /dev/null 2>&1 || true
nvme_disconnect "$NQN"

sdev=$(srp_login "$(srp_login_spec "$SNQN")")
dd if=/dev/urandom of="$sdev" bs=4k count=8 oflag=direct 2> /dev/null || fail "SRP write"
dd if=/dev/urandom of="$sdev" bs=256k count=1 seek=1 oflag=direct 2> /dev/null || fail "SRP large write"
dd if="$sdev" of=/dev/null bs=64k count=4 iflag=direct 2> /dev/null || fail "SRP read"
sg_reset -d "$sdev" 2> /dev/null || true
srp_logout_all
n=$(grep -c rtgt_wire "$RTGT_LOG" || true)
log "captured $n wire records"
[ "$n" -gt 50 ] || fail "only $n wire records in $RTGT_LOG"
stop_rtgt
