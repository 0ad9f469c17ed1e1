# Harness self-test: start_rtgt, rtgt_rpc*, stop_rtgt against tools/fake-rtgt.rs (selftest.sh
# installs it as /bin/rtgt), which follows the daemon's contract: socket + lock, JSON-RPC,
# exit 0 on SIGTERM with both files removed. 07-rtgt-smoke (a link to the real smoke scenario)
# runs against it too.
expect_fail rtgt_alive
start_rtgt
assert rtgt_alive
assert test -e "$RTGT_SOCK.lock"
assert_eq "$(rtgt_rpc_ok rpc_get_methods)" '["rpc_get_methods","spdk_get_version"]' "rpc_get_methods"
assert_eq "$(rtgt_rpc spdk_get_version '{}' | jq -r .version)" fake "version"
err=$(rtgt_rpc_error no_such_method '{}' -32601)
assert_contains "$err" "Method not found"
rc=0; rtgt_rpc no_such_method 2> /dev/null || rc=$?
assert_eq "$rc" 1 "rtgt_rpc status on an error response"
assert_contains "$(cat "$E2E_LOGDIR/rpc.log")" ">> spdk_get_version {}"
stop_rtgt
expect_fail test -e "$RTGT_SOCK"
expect_fail rtgt_alive
assert_contains "$(cat "$RTGT_LOG")" "fake-rtgt: terminated"

# Named instances (gw_*): two at once on their own sockets; a SIGKILL leaves the socket behind
# and a restart on the same path takes it over.
gw_start one
gw_start two
assert gw_alive one
assert_eq "$(gw_rpc_ok two spdk_get_version '{}' | jq -r .version)" fake "version through gw_rpc_ok"
assert_contains "$(cat "$E2E_LOGDIR/rpc.log")" ">> [two] spdk_get_version"
gw_kill one
expect_fail gw_alive one
assert test -S "$(gw_sock one)"
gw_start one
assert_eq "$(gw_rpc_ok one spdk_get_version '{}' | jq -r .version)" fake "version after the restart"
gw_stop one
gw_stop two
expect_fail test -e "$(gw_sock two)"
assert_contains "$(cat "$(gw_log one)")" "rtgt killed with SIGKILL"
