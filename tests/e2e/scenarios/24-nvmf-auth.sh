# NVMe in-band authentication (DH-HMAC-CHAP) between the kernel host and rtgt: the steps of the
# kernel-peer reference (06-nvmet-auth-peer.sh) against rtgt, with keys in rtgt's keyring
# (keyring_file_add_key, nvmf_subsystem_add_host dhchap_key/dhchap_ctrlr_key):
# - unidirectional: the right secret connects (every queue authenticates) and data verifies;
#   no secret and a wrong secret are refused, the wrong one at once (rtgt sends AUTH_Failure1
#   and closes the queue only once it was sent, so the host is told);
# - bidirectional (--dhchap-ctrl-secret); a wrong controller secret is refused by the host;
# - nvmf_subsystem_set_keys while connected: the live controller keeps working and
#   re-authenticates with the new key (sysfs dhchap_secret); a reconnect with the old secret is
#   refused, with the new one it succeeds;
# - no secret in rtgt's log.
# e2e-kernel: 6.12
# e2e-timeout: 200

NQN=nqn.2016-06.io.spdk:auth
LISTEN=$(jq -nc --arg ip "$E2E_IP" --arg port "$RTGT_NVME_PORT" \
  '{trtype:"RDMA", adrfam:"IPv4", traddr:$ip, trsvcid:$port}')
PORT=$RTGT_NVME_PORT

start_rtgt
rtgt_rpc_ok nvmf_create_transport '{"trtype":"RDMA","max_queue_depth":32}' > /dev/null
rtgt_rpc_ok bdev_malloc_create '{"name":"Malloc1","num_blocks":8192,"block_size":4096}' > /dev/null
rtgt_rpc_ok nvmf_create_subsystem "{\"nqn\":\"$NQN\"}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_ns "{\"nqn\":\"$NQN\",\"namespace\":{\"bdev_name\":\"Malloc1\"}}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_listener "{\"nqn\":\"$NQN\",\"listen_address\":$LISTEN}" > /dev/null

hkey=$(dhchap_gen_key 1 "$E2E_HOSTNQN")
ckey=$(dhchap_gen_key 1 "$NQN")
other=$(dhchap_gen_key 1 "$E2E_HOSTNQN")
kdir=$E2E_RUN/keys
mkdir -p "$kdir"
for k in hkey ckey other; do
  (umask 077; printf '%s\n' "${!k}" > "$kdir/$k")
  rtgt_rpc_ok keyring_file_add_key "{\"name\":\"$k\",\"path\":\"$kdir/$k\"}" > /dev/null
done
auth_states() {
  rtgt_rpc_ok nvmf_subsystem_get_qpairs "{\"nqn\":\"$NQN\"}" \
    | jq -r '[.[] | "\(.auth.state) \(.auth.digest) \(.auth.dhgroup)"] | unique | join(",")'
}

log "unidirectional"
rtgt_rpc_ok nvmf_subsystem_add_host "{\"nqn\":\"$NQN\",\"host\":\"$E2E_HOSTNQN\",\"dhchap_key\":\"hkey\"}" > /dev/null
t0=$(uptime_s)
dev=$(nvme_connect_dhchap "$NQN" "$E2E_IP" "$PORT" "$hkey")
echo "connect with the right secret (all queues, SHA-512/ffdhe8192): $(awk -v a="$t0" -v b="$(uptime_s)" 'BEGIN{printf "%.1f", b-a}')s" >> "$E2E_LOGDIR/refusals.txt"
ctrl=$(nvme_ctrls "$NQN")
assert_eq "$(nvme_auth_result "$ctrl")" "hmac(sha512) ffdhe8192" "authentication of $ctrl"
assert_eq "$(auth_states)" "completed sha512 ffdhe8192" "every queue authenticated"
fio_verify "$dev" 8M
nvme_disconnect "$NQN"

nvme_set_admin_timeout 5 0
nvme_connect_refused 10 "$NQN" "$E2E_IP" "$PORT"
assert_contains "$NVME_REFUSED_ERROR" "Required key not available" "connect without a secret"
nvme_connect_refused 4 "$NQN" "$E2E_IP" "$PORT" --dhchap-secret="$other"
assert_contains "$NVME_REFUSED_ERROR" "Key was rejected by service" "connect with a wrong secret (the failure reached the host)"
echo "wrong host secret: refused after ${NVME_REFUSED_SECS}s: $NVME_REFUSED_ERROR" >> "$E2E_LOGDIR/refusals.txt"
nvme_restore_admin_timeout
grep -q "authentication failed.*$E2E_HOSTNQN\|$E2E_HOSTNQN.*authentication failed" "$RTGT_LOG" \
  || fail "rtgt did not log the failure with the host NQN"

log "bidirectional"
rtgt_rpc_ok nvmf_subsystem_set_keys "{\"nqn\":\"$NQN\",\"host\":\"$E2E_HOSTNQN\",\"dhchap_key\":\"hkey\",\"dhchap_ctrlr_key\":\"ckey\"}" > /dev/null
dev=$(nvme_connect_dhchap "$NQN" "$E2E_IP" "$PORT" "$hkey" "$ckey")
ctrl=$(nvme_ctrls "$NQN")
assert_eq "$(nvme_auth_result "$ctrl")" "hmac(sha512) ffdhe8192 bidirectional" "authentication of $ctrl"
fio_verify "$dev" 4M
nvme_disconnect "$NQN"
nvme_set_admin_timeout 5 0
nvme_connect_refused 15 "$NQN" "$E2E_IP" "$PORT" --dhchap-secret="$hkey" \
  --dhchap-ctrl-secret="$(dhchap_gen_key 1 "$NQN")"
assert_contains "$NVME_REFUSED_ERROR" "Key was rejected by service" "connect with a wrong controller secret"
echo "wrong controller secret: refused after ${NVME_REFUSED_SECS}s: $NVME_REFUSED_ERROR" >> "$E2E_LOGDIR/refusals.txt"
nvme_restore_admin_timeout

log "rotation with nvmf_subsystem_set_keys"
dev=$(nvme_connect_dhchap "$NQN" "$E2E_IP" "$PORT" "$hkey" "$ckey")
ctrl=$(nvme_ctrls "$NQN")
rtgt_rpc_ok nvmf_subsystem_set_keys "{\"nqn\":\"$NQN\",\"host\":\"$E2E_HOSTNQN\",\"dhchap_key\":\"other\",\"dhchap_ctrlr_key\":\"ckey\"}" > /dev/null
fio_verify "$dev" 4M
# re-authentication of the live controller with the new secret
n_before=$(dmesg | grep -c "nvme $ctrl: qid 0: authenticated" || true)
echo "$other" > "/sys/class/nvme/$ctrl/dhchap_secret"
reauthenticated() { [ "$(dmesg | grep -c "nvme $ctrl: qid 0: authenticated")" -gt "$n_before" ]; }
wait_for 20 reauthenticated
assert_eq "$(nvme_auth_result "$ctrl")" "hmac(sha512) ffdhe8192 bidirectional" "re-authentication of $ctrl"
fio_verify "$dev" 4M
nvme_disconnect "$NQN"
nvme_set_admin_timeout 5 0
nvme_connect_refused 4 "$NQN" "$E2E_IP" "$PORT" --dhchap-secret="$hkey" --dhchap-ctrl-secret="$ckey"
assert_contains "$NVME_REFUSED_ERROR" "Key was rejected by service" "reconnect with the old secret"
echo "rotated host secret, old one: refused after ${NVME_REFUSED_SECS}s: $NVME_REFUSED_ERROR" >> "$E2E_LOGDIR/refusals.txt"
nvme_restore_admin_timeout
dev=$(nvme_connect_dhchap "$NQN" "$E2E_IP" "$PORT" "$other" "$ckey")
assert_eq "$(nvme_auth_result "$(nvme_ctrls "$NQN")")" "hmac(sha512) ffdhe8192 bidirectional" "authentication with the new secret"
fio_verify "$dev" 4M
nvme_disconnect "$NQN"

log "no secret in rtgt's log or RPC output"
# save_config is the client's: framework_get_config of every subsystem, as rpc.py builds it.
# (Fetched here, not in a pipeline: rtgt_rpc_ok's fail would only end a subshell there.)
subs=$(rtgt_rpc_ok framework_get_subsystems | jq -r '.[].subsystem')
saved=""
for s in $subs; do
  saved+=$(rtgt_rpc_ok framework_get_config "{\"name\":\"$s\"}")
done
assert_contains "$saved" "nvmf_subsystem_add_host" "the saved configuration"
listed=$(rtgt_rpc_ok nvmf_get_subsystems)
for k in "$hkey" "$ckey" "$other"; do
  b64=$(cut -d: -f3 <<< "$k")
  ! grep -qF -- "$b64" "$RTGT_LOG" || fail "a secret is in rtgt's log"
  ! grep -qF -- "$b64" <<< "$listed" || fail "a secret is in nvmf_get_subsystems"
  ! grep -qF -- "$b64" <<< "$saved" || fail "a secret is in save_config"
done
stop_rtgt
