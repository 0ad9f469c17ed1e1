# fence_scsi's check with two ib_srp logins to one LU (different initiator_ext: two I_T
# nexuses, docs/reservations.md): node A registers and holds Write Exclusive – Registrants
# Only (fence_scsi's type 5); A's writes are held in rtgt by a delay bdev (2 s on every
# completion); node B registers and runs `sg_persist --preempt-abort` against A's key. The
# PREEMPT AND ABORT completes only once A's tasks are gone; none of A's held writes completes
# successfully (rtgt answers them TASK ABORTED), and A's later writes get RESERVATION CONFLICT.
# e2e-timeout: 120

NQN=nqn.2016-06.io.rtgt:fence
start_rtgt
rtgt_rpc_ok nvmf_create_transport '{"trtype":"SRP"}' > /dev/null
rtgt_rpc_ok bdev_malloc_create '{"name":"Malloc0","num_blocks":65536,"block_size":512}' > /dev/null
rtgt_rpc_ok bdev_delay_create '{"base_bdev_name":"Malloc0","name":"Delay0","avg_read_latency":0,
  "p99_read_latency":0,"avg_write_latency":0,"p99_write_latency":0}' > /dev/null
rtgt_rpc_ok nvmf_create_subsystem "{\"nqn\":\"$NQN\",\"allow_any_host\":true}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_ns "{\"nqn\":\"$NQN\",\"namespace\":{\"bdev_name\":\"Delay0\"}}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_listener "$(jq -nc --arg nqn "$NQN" --arg ip "$E2E_IP" \
  --arg port "$RTGT_SRP_PORT" \
  '{nqn:$nqn, listen_address:{trtype:"SRP", adrfam:"IPv4", traddr:$ip, trsvcid:$port}}')" > /dev/null
delay_us() {
  local t
  for t in avg_write p99_write; do
    rtgt_rpc_ok bdev_delay_update_latency \
      "{\"delay_bdev_name\":\"Delay0\",\"latency_type\":\"$t\",\"latency_us\":$1}" > /dev/null
  done
}
held_in_rtgt() {
  [ "$(rtgt_rpc_ok nvmf_get_stats | jq '[.poll_groups[].pending_bdev_io] | add')" -ge 4 ]
}

spec=$(srp_login_spec "$NQN")
A=$(srp_login "$spec,initiator_ext=00000000000000a1")
B=$(srp_login "$spec,initiator_ext=00000000000000b2")
log "node A: $A, node B: $B"
[ "$A" != "$B" ] || fail "one disk for two logins"
ok() { local what=$1 out; shift; out=$("$@" 2>&1) || fail "$what failed: $out"; }
ok "A registers" sg_persist --out --register --param-sark=0xa1 "$A"
ok "B registers" sg_persist --out --register --param-sark=0xb2 "$B"
ok "A reserves WE-RO" sg_persist --out --reserve --param-rk=0xa1 --prout-type=5 "$A"
ok "A writes" dd if=/dev/urandom of="$A" bs=4k count=1 oflag=direct status=none

# A's writes, held in rtgt.
delay_us 2000000
pids=()
for k in 1 2 3 4; do
  dd if=/dev/urandom of="$A" bs=4k count=1 seek=$((k * 16)) oflag=direct status=none \
    2> "/tmp/fence-dd$k" & pids+=($!)
done
wait_for 10 held_in_rtgt
log "B: PREEMPT AND ABORT of A's key"
t0=$SECONDS
ok "B preempt-abort" sg_persist --out --preempt-abort --param-rk=0xb2 --param-sark=0xa1 \
  --prout-type=5 "$B"
log "PREEMPT AND ABORT took about $((SECONDS - t0)) s (it waits for A's held writes)"
delay_us 0
failed=0
for k in 1 2 3 4; do
  if wait "${pids[$((k - 1))]}"; then
    log "A's write $k: completed"
  else
    failed=$((failed + 1))
    log "A's write $k: $(head -1 "/tmp/fence-dd$k")"
  fi
done
rm -f /tmp/fence-dd*
assert_eq "$failed" 4 "A's in-flight writes that did not succeed"
grep -q 'PREEMPT AND ABORT: aborting' "$RTGT_LOG" || fail "rtgt did not abort A's tasks"

# A's later writes conflict (the first may report the unit attention REGISTRATIONS
# PREEMPTED instead, if no retry consumed it).
out=""
for _ in 1 2 3; do
  out=$(sg_raw -s 512 -i /dev/zero "$A" 2a 00 00 00 01 00 00 00 01 00 2>&1) && \
    fail "A's WRITE(10) passed after it was preempted: $out"
  grep -qi 'reservation conflict' <<< "$out" && break
done
grep -qi 'reservation conflict' <<< "$out" || fail "A's WRITE(10): not a reservation conflict: $out"
log "A's WRITE(10) after the preempt: $(grep -i -m1 'reservation conflict' <<< "$out")"
ok "B writes" sg_raw -s 512 -i /dev/zero "$B" 2a 00 00 00 01 00 00 00 01 00
keys=$(sg_persist --in --read-keys "$B" 2>&1) || fail "sg_persist --read-keys: $keys"
grep -q 0xa1 <<< "$keys" && fail "A's key survived the preempt: $keys"
ok "B clears" sg_persist --out --clear --param-rk=0xb2 "$B"

srp_logout_all
stop_rtgt
