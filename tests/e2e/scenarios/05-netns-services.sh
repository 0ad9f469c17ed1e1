# The guest reaches services in a host network namespace: run.sh boots this guest inside a
# namespace it creates, the guest's virtio-net NIC ($E2E_NETNS_DEV, 10.78.0.2/24) is the other
# end of a tap there (10.78.0.1/24), and the hook netns/tcp-services.sh starts an HTTP server and
# a line echo server in the namespace before the guest boots. The guest fetches the random
# token the hook generated, has a line echoed, and has no route out of the namespace's subnet;
# soft-RoCE on the dummy netdev is unchanged. (The base for the Ceph cluster scenarios.)
# e2e-netns: netns/tcp-services.sh
# e2e-timeout: 60

assert_match "$E2E_NETNS_GUEST_IP" '^[0-9.]+$' "E2E_NETNS_GUEST_IP"
assert_contains "$(ip -4 addr show dev "$E2E_NETNS_DEV")" "$E2E_NETNS_GUEST_IP/$E2E_NETNS_PREFIXLEN" "address of $E2E_NETNS_DEV"
assert_match "$NETNS_TOKEN" '^[0-9a-f]{32}$' "token from the hook"

log "GET http://$E2E_NETNS_HOST_IP:$NETNS_HTTP_PORT/token"
got=$(http_get "$E2E_NETNS_HOST_IP" "$NETNS_HTTP_PORT" /token) \
  || fail "GET /token from the namespace's http.server failed"
assert_eq "$got" "$NETNS_TOKEN" "token served in the namespace"

line="hello from the guest $(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')"
log "echo service: $line"
exec 3<> "/dev/tcp/$E2E_NETNS_HOST_IP/$NETNS_ECHO_PORT" || fail "cannot connect to the echo service"
echo "$line" >&3
read -r -t 10 reply <&3 || fail "no reply from the echo service"
exec 3<&-
assert_eq "$reply" "echo $line" "echo reply"

# nothing leaves the namespace: no route beyond its subnet
expect_fail ip route get 192.0.2.1
# soft-RoCE stays on the dummy netdev
assert_contains "$(rdma link show)" "$E2E_RDMA_DEV/1 state ACTIVE"
assert_contains "$(rdma link show)" "netdev $E2E_NETDEV"
