# Namespace masking with the kernel initiators. NVMe/RDMA: a namespace added with
# no_auto_visible is no block device on the host; nvmf_ns_add_host makes the kernel host add it
# by itself (Namespace Attribute Changed notice, Changed Namespace List), fio verifies it, and
# nvmf_ns_remove_host makes the host remove it. A second host (its own --hostnqn/--hostid) on
# the same subsystem sees only namespace 1 while the first sees both: its active namespace list
# has one entry, Identify Namespace 2 answers zeroes and `nvme io-passthru` to it fails;
# adding it makes the namespace active for it without reconnecting. SRP: the same namespace list, the initiator
# named by its port id: the hidden LUN is not in REPORT LUNS (no disk after the login nor after
# a rescan) until the initiator is added; then a rescan finds it and fio verifies it; a second
# initiator port id (initiator_ext) sees LUN 0 only in sg_luns until it is added too.
# e2e-timeout: 240

NQN=nqn.2016-06.io.rtgt:masking
LISTEN=$(jq -nc --arg ip "$E2E_IP" --arg port "$RTGT_NVME_PORT" \
  '{trtype:"RDMA", adrfam:"IPv4", traddr:$ip, trsvcid:$port}')
SRP_LISTEN=$(jq -nc --arg ip "$E2E_IP" --arg port "$RTGT_SRP_PORT" \
  '{trtype:"SRP", adrfam:"IPv4", traddr:$ip, trsvcid:$port}')

start_rtgt
rtgt_rpc_ok nvmf_create_transport '{"trtype":"RDMA"}' > /dev/null
rtgt_rpc_ok nvmf_create_transport '{"trtype":"SRP"}' > /dev/null
for b in Open Hidden; do
  rtgt_rpc_ok bdev_malloc_create "{\"name\":\"$b\",\"num_blocks\":65536,\"block_size\":512}" > /dev/null
done
rtgt_rpc_ok nvmf_create_subsystem "{\"nqn\":\"$NQN\",\"allow_any_host\":true}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_ns "{\"nqn\":\"$NQN\",\"namespace\":{\"bdev_name\":\"Open\"}}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_ns \
  "{\"nqn\":\"$NQN\",\"namespace\":{\"bdev_name\":\"Hidden\",\"no_auto_visible\":true}}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_listener "{\"nqn\":\"$NQN\",\"listen_address\":$LISTEN}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_listener "{\"nqn\":\"$NQN\",\"listen_address\":$SRP_LISTEN}" > /dev/null
ns_host() { rtgt_rpc_ok "nvmf_ns_$1_host" "{\"nqn\":\"$NQN\",\"nsid\":2,\"host\":\"$2\"}" > /dev/null; }
no_ns2() { ! nvme_ns_dev "$NQN" 2 > /dev/null; }

# --- NVMe/RDMA -------------------------------------------------------------------------------
dev1=$(nvme_connect "$NQN")
sleep 2
no_ns2 || fail "namespace 2 is a block device on a host it is hidden from: $(nvme_ns_dev "$NQN" 2)"
ctrl=$(nvme_ctrls "$NQN" | head -1)
assert_eq "$(nvme list-ns "/dev/$ctrl" | grep -c ':0x')" 1 "active namespaces the host sees"
log "hidden namespace absent; nvmf_ns_add_host $E2E_HOSTNQN"
t0=$(uptime_s)
ns_host add "$E2E_HOSTNQN"
wait_for 20 nvme_ns_dev "$NQN" 2
dev2=$(nvme_ns_dev "$NQN" 2)
log "the host added $dev2 by itself $(awk -v a="$t0" -v b="$(uptime_s)" 'BEGIN{printf "%.1f", b-a}') s after nvmf_ns_add_host"
wait_for 10 test -b "$dev2"
fio_verify "$dev2" 16M

# host B: its own host NQN and host id, on the same subsystem
HOSTB_ID=7a1c9a44-0b52-4d0e-9d7f-3c5e2b1f0a23
HOSTB=nqn.2014-08.org.nvmexpress:uuid:$HOSTB_ID
ctrlB=$(nvme_connect_as "$NQN" "$HOSTB" "$HOSTB_ID")
nsB() { nvme list-ns "/dev/$ctrlB" | grep -c ':0x'; }
assert_eq "$(nsB)" 1 "active namespaces host B sees"
assert_eq "$(nvme list-ns "/dev/$(nvme_ctrl_of_host "$NQN" "$E2E_HOSTNQN")" | grep -c ':0x')" 2 "active namespaces host A sees"
rc=0; out=$(nvme io-passthru "/dev/$ctrlB" --opcode=0x02 --namespace-id=2 --data-len=512 --read \
  --cdw10=0 --cdw11=0 --cdw12=0 2>&1) || rc=$?
[ "$rc" != 0 ] || fail "host B read namespace 2 through io-passthru: $out"
log "host B's io-passthru read of namespace 2 fails: $(head -1 <<< "$out")"
# (6.1 does not send it: the controller's only namespace is 1. What rtgt answers for a hidden
# NSID is checked through Identify, which goes to the target with any NSID, and, with the I/O
# status, by tests/tests/nvmf_masking.rs.)
idns=$(nvme id-ns "/dev/$ctrlB" -n 2 -o json) || fail "nvme id-ns -n 2 on host B's controller failed"
assert_eq "$(jq .nsze <<< "$idns")" 0 "NSZE of namespace 2 for host B (inactive: zeroes)"
assert_eq "$(nvme id-ns "/dev/$(nvme_ctrl_of_host "$NQN" "$E2E_HOSTNQN")" -n 2 -o json | jq .nsze)" 65536 "NSZE of namespace 2 for host A"
ns_host add "$HOSTB"
two_for_B() { [ "$(nsB)" = 2 ]; }
wait_for 20 two_for_B
rc=0; out=$(nvme io-passthru "/dev/$ctrlB" --opcode=0x02 --namespace-id=2 --data-len=512 --read \
  --cdw10=0 --cdw11=0 --cdw12=0 2>&1) || rc=$?
log "host B after nvmf_ns_add_host: list-ns $(nsB) namespaces; io-passthru read of namespace 2: status $rc"
ns_host remove "$HOSTB"
one_for_B() { [ "$(nsB)" = 1 ]; }
wait_for 20 one_for_B

log "nvmf_ns_remove_host $E2E_HOSTNQN"
ns_host remove "$E2E_HOSTNQN"
wait_for 20 no_ns2
assert_eq "$(nvme_ns_dev "$NQN" 1)" "$dev1" "namespace 1 stays"
fio_verify "$dev1" 8M
nvme_disconnect "$NQN"

# --- SRP ----------------------------------------------------------------------------------------
dev=$(srp_login "$(srp_login_spec "$NQN")")
host=$(srp_hosts | head -1)
IPORT=$(rtgt_rpc_ok nvmf_subsystem_get_controllers "{\"nqn\":\"$NQN\"}" | jq -r '.[0].hostnqn')
assert_match "$IPORT" '^0x[0-9a-f]{32}$' "initiator port id"
rescan() { echo "- - -" > "/sys/class/scsi_host/host$host/scan"; }
ndisks() { srp_disks "$host" | wc -l; }
rescan
sleep 1
assert_eq "$(ndisks)" 1 "SRP disks with LUN 1 hidden (after a rescan)"
log "hidden LUN absent; nvmf_ns_add_host $IPORT"
ns_host add "$IPORT"
rescan
two_disks() { [ "$(ndisks)" = 2 ]; }
wait_for 20 two_disks
lun1=/dev/$(srp_disks "$host" | sed -n 2p)
wait_for 10 test -b "$lun1"
assert_eq "$(blockdev --getsize64 "$lun1")" $((32 << 20)) "size of LUN 1 ($lun1)"
fio_verify "$lun1" 16M

# A second initiator port id (ib_srp's initiator_ext) on the same target port: its REPORT LUNS
# (sg_luns, live, no rescan) lists LUN 0 only while the first one's lists both; added to the
# namespace, it lists both too.
devB=$(srp_login "$(srp_login_spec "$NQN"),initiator_ext=0000000000000b0b")
IPORT_B=$(rtgt_rpc_ok nvmf_subsystem_get_controllers "{\"nqn\":\"$NQN\"}" \
  | jq -r --arg a "$IPORT" '[.[].hostnqn | select(. != $a)][0]')
assert_match "$IPORT_B" '^0x0000000000000b0b[0-9a-f]{16}$' "second initiator port id"
luns() { sg_luns "$1" | grep -cE '^ +[0-9a-f]{16}$'; }
assert_eq "$(luns "$dev")" 2 "LUNs initiator $IPORT sees (sg_luns)"
assert_eq "$(luns "$devB")" 1 "LUNs initiator $IPORT_B sees (sg_luns)"
ns_host add "$IPORT_B"
assert_eq "$(luns "$devB")" 2 "LUNs initiator $IPORT_B sees after nvmf_ns_add_host"
ns_host remove "$IPORT_B"
assert_eq "$(luns "$devB")" 1 "LUNs initiator $IPORT_B sees after nvmf_ns_remove_host"
log "sg_luns: $IPORT sees 2 LUNs, $IPORT_B 1 (2 while added)"
ns_host remove "$IPORT"
assert_eq "$(luns "$dev")" 1 "LUNs initiator $IPORT sees after nvmf_ns_remove_host"
rtgt_rpc_ok nvmf_get_subsystems "{\"nqn\":\"$NQN\"}" > /dev/null
srp_logout_all
