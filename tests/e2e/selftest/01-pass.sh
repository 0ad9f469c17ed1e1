# Harness self-test: a scenario that passes, exercising the helpers and the guest environment.
assert test -e "/sys/class/infiniband/$E2E_RDMA_DEV"
assert test -e "/sys/class/infiniband_srp/$E2E_SRP_HOST"
assert_eq "$(cat /etc/nvme/hostnqn)" "$E2E_HOSTNQN" "hostnqn"
assert_contains "$(ip -4 addr show dev "$E2E_NETDEV")" "$E2E_IP/$E2E_PREFIXLEN"
assert_match "$(ibv_devices)" "$E2E_RDMA_DEV"
expect_fail false
poll_until 2 true
expect_fail poll_until 1 false
assert test -x /bin/e2e-rpc
dev=$(nullb_create selftest 16)
fio_verify "$dev" 8M --rw=write --bs=64k
nullb_destroy selftest
echo marker > "$E2E_LOGDIR/artifact.txt"
# real tools come before busybox applets
assert_match "$(ip -V)" "iproute2"
assert_match "$(bash --version | head -1)" "GNU bash"
