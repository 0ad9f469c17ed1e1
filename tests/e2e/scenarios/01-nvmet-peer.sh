# The Linux kernel NVMe/RDMA target (nvmet-rdma) as a peer, on a memory-backed null_blk:
# nvme discover lists it, nvme connect creates the namespace's block device, fio writes and
# verifies it (crc32c), nvme disconnect removes it. Proves the nvmet peer harness that the
# benchmarks reuse, and the kernel NVMe/RDMA host over soft-RoCE.
# e2e-timeout: 120

nvmet_peer_setup -s 64 -b ram

log "nvme discover -t rdma -a $E2E_IP -s $NVMET_PEER_PORT"
disc=$(nvme discover -t rdma -a "$E2E_IP" -s "$NVMET_PEER_PORT") || fail "nvme discover failed"
assert_contains "$disc" "subnqn:  $NVMET_PEER_NQN" "discovery log"
assert_contains "$disc" "traddr:  $E2E_IP" "discovery log"

dev=$(nvme_connect "$NVMET_PEER_NQN" "$E2E_IP" "$NVMET_PEER_PORT")
assert_eq "$(blockdev --getsize64 "$dev")" $((64 << 20)) "size of $dev"

fio_verify "$dev" 32M

nvme_disconnect "$NVMET_PEER_NQN"
expect_fail test -b "$dev"
nvmet_peer_teardown
