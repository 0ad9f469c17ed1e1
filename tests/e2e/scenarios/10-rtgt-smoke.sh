# rtgt starts in the guest: `rtgt serve` creates its RPC socket and answers JSON-RPC on it, and
# SIGTERM stops it with exit status 0, removing the socket and its lock file.
# e2e-timeout: 60

start_rtgt
assert test -S "$RTGT_SOCK"

# Any JSON-RPC response (even "method not found") shows the server speaks the protocol.
rc=0
resp=$(e2e-rpc -s "$RTGT_SOCK" -t 10 rpc_get_methods 2>&1) || rc=$?
[ "$rc" -le 1 ] || fail "no JSON-RPC response on $RTGT_SOCK: $resp"
assert_match "$resp" '"jsonrpc": *"2\.0"' "response to rpc_get_methods"

stop_rtgt
expect_fail test -e "$RTGT_SOCK"
expect_fail test -e "$RTGT_SOCK.lock"
