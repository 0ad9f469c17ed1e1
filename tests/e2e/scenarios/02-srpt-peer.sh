# The Linux kernel SRP target (LIO ib_srpt) as a peer, on a LIO ramdisk: ib_srp's add_target
# logs in over RDMA CM, a SCSI disk appears, fio writes and verifies it (crc32c), deleting the
# remote port removes the disk. Proves the srpt peer harness that the benchmarks reuse, and the
# kernel SRP initiator over soft-RoCE.
# e2e-timeout: 120

srpt_peer_setup -s 64 -b ram

dev=$(srp_login "$SRPT_PEER_TARGET")
assert_eq "$(blockdev --getsize64 "$dev")" $((64 << 20)) "size of $dev"
assert_contains "$(cat "/sys/block/${dev#/dev/}/device/vendor")" LIO "SCSI vendor of $dev"

fio_verify "$dev" 32M

srp_logout_all
expect_fail test -b "$dev"
srpt_peer_teardown
