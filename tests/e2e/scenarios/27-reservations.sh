# Reservations with the kernel initiators (docs/reservations.md). Two NVMe/RDMA hosts (their
# own host NQN and host id) on one subsystem: `nvme resv-register/acquire/report/release`
# through each host's controller; while host A holds Write Exclusive, host B's write
# (io-passthru) gets Reservation Conflict and its read passes; B preempts A, after which A's
# writes conflict; release and clear free the namespace; B's Preempt and Abort (RACQA 010b)
# of A leaves B the holder and A's writes conflicting. Then an ib_srp login to the same
# subsystem (its LUN 0 is the same bdev): the NVMe host's Write Exclusive refuses the SRP
# initiator's WRITE(10) (sg_raw: RESERVATION CONFLICT) but not its READ(10), and sg_persist
# shows the NVMe host's key; the SRP initiator's Exclusive Access (sg_persist) refuses the
# NVMe host's write.
# e2e-timeout: 200

NQN=nqn.2016-06.io.rtgt:resv
LISTEN=$(jq -nc --arg ip "$E2E_IP" --arg port "$RTGT_NVME_PORT" \
  '{trtype:"RDMA", adrfam:"IPv4", traddr:$ip, trsvcid:$port}')
SRP_LISTEN=$(jq -nc --arg ip "$E2E_IP" --arg port "$RTGT_SRP_PORT" \
  '{trtype:"SRP", adrfam:"IPv4", traddr:$ip, trsvcid:$port}')

start_rtgt
rtgt_rpc_ok nvmf_create_transport '{"trtype":"RDMA"}' > /dev/null
rtgt_rpc_ok nvmf_create_transport '{"trtype":"SRP"}' > /dev/null
rtgt_rpc_ok bdev_malloc_create '{"name":"Shared","num_blocks":65536,"block_size":512}' > /dev/null
rtgt_rpc_ok nvmf_create_subsystem "{\"nqn\":\"$NQN\",\"allow_any_host\":true}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_ns "{\"nqn\":\"$NQN\",\"namespace\":{\"bdev_name\":\"Shared\"}}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_listener "{\"nqn\":\"$NQN\",\"listen_address\":$LISTEN}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_listener "{\"nqn\":\"$NQN\",\"listen_address\":$SRP_LISTEN}" > /dev/null

# --- two NVMe hosts ----------------------------------------------------------------------------
nvme_connect "$NQN" > /dev/null
HOSTB_ID=3b0c4f7e-2d7a-4b1c-8e55-6a1f0c9d2e40
HOSTB=nqn.2014-08.org.nvmexpress:uuid:$HOSTB_ID
B=/dev/$(nvme_connect_as "$NQN" "$HOSTB" "$HOSTB_ID")
A=/dev/$(nvme_ctrl_of_host "$NQN" "$E2E_HOSTNQN")
log "host A: $A, host B: $B"
# Commands go through each host's own controller (its character device), not the multipath
# block device, so that the target sees the host we mean.
oncs=$(nvme id-ctrl "$A" -o json | jq .oncs)
(( oncs & 32 )) || fail "ONCS $oncs: no reservations bit"
assert_eq "$(nvme id-ns "$A" -n 1 -o json | jq .rescap)" 254 "RESCAP (no ptpl_file)"

head -c 512 /dev/urandom > /tmp/blk
# nvme_io DEV write|read: one block at LBA 0 through io-passthru; prints nvme-cli's output and
# returns its status.
nvme_io() {
  if [ "$2" = write ]; then
    nvme io-passthru "$1" --opcode=0x01 --namespace-id=1 --data-len=512 --write \
      --input-file=/tmp/blk --cdw10=0 --cdw11=0 --cdw12=0 2>&1
  else
    nvme io-passthru "$1" --opcode=0x02 --namespace-id=1 --data-len=512 --read \
      --cdw10=0 --cdw11=0 --cdw12=0 2>&1 > /dev/null
  fi
}
# expect_conflict WHAT COMMAND...: the command fails with Reservation Conflict.
expect_conflict() {
  local what=$1 out rc=0; shift
  out=$("$@" 2>&1) || rc=$?
  [ "$rc" != 0 ] || fail "$what succeeded through a reservation"
  grep -qiE 'reservation.?conflict' <<< "$out" || fail "$what: not a reservation conflict: $out"
  log "$what: $(grep -iE -m1 'reservation.?conflict' <<< "$out")"
}
ok() { local what=$1 out; shift; out=$("$@" 2>&1) || fail "$what failed: $out"; }
report() { nvme resv-report "$1" -n 1 --eds -o json; }

ok "A registers 0xa1" nvme resv-register "$A" -n 1 --nrkey=0xa1 --rrega=0
ok "B registers 0xb2" nvme resv-register "$B" -n 1 --nrkey=0xb2 --rrega=0
expect_conflict "B registering another key" nvme resv-register "$B" -n 1 --nrkey=0xb3 --rrega=0
r=$(report "$A")
log "report: $(jq -c . <<< "$r")"
assert_eq "$(jq .regctl <<< "$r")" 2 "registrants"
assert_eq "$(jq -c '[.regctlext[].rkey]' <<< "$r")" "[161,178]" "keys"

ok "A acquires Write Exclusive" nvme resv-acquire "$A" -n 1 --crkey=0xa1 --rtype=1 --racqa=0
assert_eq "$(report "$B" | jq .rtype)" 1 "reservation type"
expect_conflict "B's write" nvme_io "$B" write
ok "B's read" nvme_io "$B" read
ok "A's write" nvme_io "$A" write
expect_conflict "B acquiring" nvme resv-acquire "$B" -n 1 --crkey=0xb2 --rtype=1 --racqa=0

ok "B preempts A" nvme resv-acquire "$B" -n 1 --crkey=0xb2 --prkey=0xa1 --rtype=1 --racqa=1
expect_conflict "A's write after the preempt" nvme_io "$A" write
ok "B's write" nvme_io "$B" write
r=$(report "$A")
assert_eq "$(jq -c '[.regctlext[].rkey]' <<< "$r")" "[178]" "keys after the preempt"
ok "B releases" nvme resv-release "$B" -n 1 --crkey=0xb2 --rtype=1 --rrela=0
assert_eq "$(report "$A" | jq .rtype)" 0 "reservation type after the release"
ok "A's write after the release" nvme_io "$A" write
# Preempt and Abort (RACQA 010b): A holds Write Exclusive again, B preempts and aborts it.
ok "A registers 0xa1 again" nvme resv-register "$A" -n 1 --nrkey=0xa1 --rrega=0
ok "A acquires Write Exclusive again" nvme resv-acquire "$A" -n 1 --crkey=0xa1 --rtype=1 --racqa=0
ok "B preempts and aborts A" \
  nvme resv-acquire "$B" -n 1 --crkey=0xb2 --prkey=0xa1 --rtype=1 --racqa=2
expect_conflict "A's write after the preempt and abort" nvme_io "$A" write
ok "B's write after the preempt and abort" nvme_io "$B" write
r=$(report "$A")
log "report after the preempt and abort: $(jq -c . <<< "$r")"
assert_eq "$(jq -c '[.rtype, [.regctlext[] | [.rkey, .rcsts]]]' <<< "$r")" "[1,[[178,1]]]" \
  "B holds Write Exclusive, A is gone"
ok "B clears" nvme resv-release "$B" -n 1 --crkey=0xb2 --rrela=1
assert_eq "$(report "$A" | jq .regctl)" 0 "registrants after the clear"

# --- NVMe and SRP on the same bdev -------------------------------------------------------------
dev=$(srp_login "$(srp_login_spec "$NQN")")
ok "A registers 0xa1" nvme resv-register "$A" -n 1 --nrkey=0xa1 --rrega=0
ok "A acquires Write Exclusive" nvme resv-acquire "$A" -n 1 --crkey=0xa1 --rtype=1 --racqa=0
out=$(sg_raw -s 512 -i /tmp/blk "$dev" 2a 00 00 00 00 00 00 00 01 00 2>&1) && \
  fail "the SRP initiator's WRITE(10) passed the NVMe host's reservation: $out"
grep -qi 'reservation conflict' <<< "$out" || fail "SRP WRITE(10): not a reservation conflict: $out"
log "SRP WRITE(10) under the NVMe host's Write Exclusive: $(grep -i -m1 'reservation conflict' <<< "$out")"
ok "SRP READ(10)" sg_raw -r 512 "$dev" 28 00 00 00 00 00 00 00 01 00
keys=$(sg_persist --in --read-keys "$dev" 2>&1) || fail "sg_persist --read-keys: $keys"
log "sg_persist --read-keys: $(tr '\n' ' ' <<< "$keys")"
grep -q '0xa1' <<< "$keys" || fail "SCSI does not see the NVMe host's key: $keys"
res=$(sg_persist --in --read-reservation "$dev" 2>&1) || fail "sg_persist --read-reservation: $res"
grep -qi 'Write Exclusive' <<< "$res" || fail "READ RESERVATION: $res"
ok "A releases" nvme resv-release "$A" -n 1 --crkey=0xa1 --rtype=1 --rrela=0
ok "A unregisters" nvme resv-register "$A" -n 1 --crkey=0xa1 --rrega=1

ok "sg_persist register" sg_persist --out --register --param-sark=0x55 "$dev"
ok "sg_persist reserve EA" sg_persist --out --reserve --param-rk=0x55 --prout-type=3 "$dev"
expect_conflict "NVMe write under the SRP initiator's Exclusive Access" nvme_io "$A" write
expect_conflict "NVMe read under the SRP initiator's Exclusive Access" nvme_io "$A" read
r=$(report "$A")
log "NVMe report of the SCSI reservation: $(jq -c . <<< "$r")"
assert_eq "$(jq .rtype <<< "$r")" 2 "NVMe type of SCSI Exclusive Access"
ok "SRP WRITE(10) by the holder" sg_raw -s 512 -i /tmp/blk "$dev" 2a 00 00 00 00 00 00 00 01 00
ok "sg_persist clear" sg_persist --out --clear --param-rk=0x55 "$dev"
ok "NVMe write after the clear" nvme_io "$A" write

srp_logout_all
nvme disconnect -n "$NQN" > /dev/null 2>&1 || true
wait_for 20 e2e__no_ctrl "$NQN"
stop_rtgt
