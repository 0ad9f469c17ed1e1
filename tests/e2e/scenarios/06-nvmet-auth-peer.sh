# NVMe in-band authentication (DH-HMAC-CHAP) between the kernel's own host and target: the
# reference rtgt's authentication scenarios mirror. Kernel nvmet-rdma on 6.12 admits only this
# host, with keys from `nvme gen-dhchap-key` set through configfs:
# - unidirectional (SHA-256, no DH): the right secret connects and data verifies; no secret and
#   a wrong secret are refused;
# - bidirectional (--dhchap-ctrl-secret): connects, the host authenticates the controller; a
#   wrong controller secret is refused by the host;
# - a DH group (SHA-512, ffdhe2048): connects and data verifies;
# - a key changed on the target while connected: the live controller stays, a reconnect with
#   the old secret is refused and with the new one succeeds.
# A refused host secret fails fast when the host receives nvmet's failure1; nvmet closes the
# queue at once and under soft-RoCE the host often never sees it and waits for its admin
# command timeout (6 x 60 s by default; nvme_set_admin_timeout bounds it to 5 s for the connects
# that must be refused).
# e2e-kernel: 6.12
# e2e-timeout: 150

NQN=$NVMET_PEER_NQN
nvmet_peer_setup -s 32 -b ram
hkey=$(dhchap_gen_key 1 "$E2E_HOSTNQN")
ckey=$(dhchap_gen_key 1 "$NQN")
other=$(dhchap_gen_key 1 "$E2E_HOSTNQN")

# unidirectional
nvmet_peer_add_host "$E2E_HOSTNQN" "$hkey"
dev=$(nvme_connect_dhchap "$NQN" "$E2E_IP" "$NVMET_PEER_PORT" "$hkey")
ctrl=$(nvme_ctrls "$NQN")
assert_eq "$(nvme_auth_result "$ctrl")" "hmac(sha256) null" "authentication of $ctrl"
assert_eq "$(cat "/sys/class/nvme/$ctrl/dhchap_secret")" "$hkey" "host secret of $ctrl"
assert_contains "$(dmesg)" "for NQN $E2E_HOSTNQN with DH-HMAC-CHAP" "nvmet's log"
fio_verify "$dev" 8M
nvme_disconnect "$NQN"

nvme_set_admin_timeout 5 0
nvme_connect_refused 10 "$NQN" "$E2E_IP" "$NVMET_PEER_PORT"
assert_contains "$NVME_REFUSED_ERROR" "Required key not available" "connect without a secret"
# admin_timeout 5 s, no retry: the refusal arrives at once, or the command times out at 5 s
nvme_connect_refused 15 "$NQN" "$E2E_IP" "$NVMET_PEER_PORT" --dhchap-secret="$other"
assert_match "$NVME_REFUSED_ERROR" "Key was rejected by service|Input/output error" "connect with a wrong secret"
echo "wrong host secret: refused after ${NVME_REFUSED_SECS}s: $NVME_REFUSED_ERROR" >> "$E2E_LOGDIR/refusals.txt"
nvme_restore_admin_timeout

# bidirectional
nvmet_peer_add_host "$E2E_HOSTNQN" "$hkey" "$ckey"
dev=$(nvme_connect_dhchap "$NQN" "$E2E_IP" "$NVMET_PEER_PORT" "$hkey" "$ckey")
ctrl=$(nvme_ctrls "$NQN")
assert_eq "$(nvme_auth_result "$ctrl")" "hmac(sha256) null bidirectional" "authentication of $ctrl"
nvme_disconnect "$NQN"
# the host finds the controller's response wrong and refuses (it may still wait for its
# failure2 to be acknowledged)
nvme_set_admin_timeout 5 0
nvme_connect_refused 15 "$NQN" "$E2E_IP" "$NVMET_PEER_PORT" --dhchap-secret="$hkey" \
  --dhchap-ctrl-secret="$(dhchap_gen_key 1 "$NQN")"
assert_contains "$NVME_REFUSED_ERROR" "Key was rejected by service" "connect with a wrong controller secret"
echo "wrong controller secret: refused after ${NVME_REFUSED_SECS}s: $NVME_REFUSED_ERROR" >> "$E2E_LOGDIR/refusals.txt"
nvme_restore_admin_timeout

# a DH group and SHA-512
nvmet_peer_add_host "$E2E_HOSTNQN" "$hkey" "$ckey" "hmac(sha512)" ffdhe2048
dev=$(nvme_connect_dhchap "$NQN" "$E2E_IP" "$NVMET_PEER_PORT" "$hkey" "$ckey")
ctrl=$(nvme_ctrls "$NQN")
assert_eq "$(nvme_auth_result "$ctrl")" "hmac(sha512) ffdhe2048 bidirectional" "authentication of $ctrl"
fio_verify "$dev" 8M

# the target's key changes while connected: the live controller keeps working
nvmet_peer_add_host "$E2E_HOSTNQN" "$other" "$ckey" "hmac(sha512)" ffdhe2048
fio_verify "$dev" 4M
nvme_disconnect "$NQN"
nvme_set_admin_timeout 5 0
nvme_connect_refused 15 "$NQN" "$E2E_IP" "$NVMET_PEER_PORT" --dhchap-secret="$hkey" --dhchap-ctrl-secret="$ckey"
echo "rotated host secret, old one: refused after ${NVME_REFUSED_SECS}s: $NVME_REFUSED_ERROR" >> "$E2E_LOGDIR/refusals.txt"
nvme_restore_admin_timeout
dev=$(nvme_connect_dhchap "$NQN" "$E2E_IP" "$NVMET_PEER_PORT" "$other" "$ckey")
assert_eq "$(nvme_auth_result "$(nvme_ctrls "$NQN")")" "hmac(sha512) ffdhe2048 bidirectional" "authentication with the new secret"
nvme_disconnect "$NQN"
nvmet_peer_teardown
