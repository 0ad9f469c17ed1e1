# ib_srp against rtgt under management and error handling while fio verifies: two LUNs become
# two disks; the subsystem is paused and resumed, a LUN reset (sg_reset -d, an SRP_TSK_MGMT
# LOGICAL UNIT RESET from ib_srp) and a host reset (sg_reset -H: ib_srp reconnects, a
# single-channel login that terminates the old channels) happen during the I/O; every fio
# pass verifies, and rtgt's counters are back at zero after the logout. LUN 0 is a delay bdev
# over a malloc bdev: its latencies are 0 (malloc speed) except around the LUN reset, where
# 200 ms holds fio's I/O in rtgt so that the reset always finds tasks to abort.
# e2e-timeout: 300

NQN=nqn.2016-06.io.rtgt:srp-reset
start_rtgt
rtgt_rpc_ok nvmf_create_transport '{"trtype":"SRP","max_queue_depth":64}' > /dev/null
for n in 0 1; do
  rtgt_rpc_ok bdev_malloc_create "{\"name\":\"Malloc$n\",\"num_blocks\":65536,\"block_size\":512}" > /dev/null
done
rtgt_rpc_ok bdev_delay_create '{"base_bdev_name":"Malloc0","name":"Delay0","avg_read_latency":0,
  "p99_read_latency":0,"avg_write_latency":0,"p99_write_latency":0}' > /dev/null
rtgt_rpc_ok nvmf_create_subsystem "{\"nqn\":\"$NQN\",\"allow_any_host\":true}" > /dev/null
for b in Delay0 Malloc1; do
  rtgt_rpc_ok nvmf_subsystem_add_ns \
    "{\"nqn\":\"$NQN\",\"namespace\":{\"bdev_name\":\"$b\"}}" > /dev/null
done
rtgt_rpc_ok nvmf_subsystem_add_listener "$(jq -nc --arg nqn "$NQN" --arg ip "$E2E_IP" \
  --arg port "$RTGT_SRP_PORT" \
  '{nqn:$nqn, listen_address:{trtype:"SRP", adrfam:"IPv4", traddr:$ip, trsvcid:$port}}')" > /dev/null
qpairs() { rtgt_rpc_ok nvmf_subsystem_get_qpairs "{\"nqn\":\"$NQN\"}"; }
no_channels() { [ "$(qpairs | jq length)" = 0 ]; }
# delay_us US: every latency of Delay0 (LUN 0), for I/O completing from now on.
delay_us() {
  local t
  for t in avg_read p99_read avg_write p99_write; do
    rtgt_rpc_ok bdev_delay_update_latency \
      "{\"delay_bdev_name\":\"Delay0\",\"latency_type\":\"$t\",\"latency_us\":$1}" > /dev/null
  done
}
held_in_rtgt() {
  [ "$(rtgt_rpc_ok nvmf_get_stats | jq '[.poll_groups[].pending_bdev_io] | add')" -ge 1 ]
}

dev=$(srp_login "$(srp_login_spec "$NQN")")
host=$(srp_hosts | head -1)
wait_for 20 test "$(srp_disks "$host" | wc -l)" = 2
dev1=/dev/$(srp_disks "$host" | sed -n 2p)
assert_eq "$(blockdev --getsize64 "$dev1")" $((32 << 20)) "size of LUN 1 ($dev1)"
assert_eq "$(jq '.[0].credits' <<< "$(qpairs)")" 64 "credits granted"

# Pause and resume while fio runs on both LUNs.
fio_verify "$dev" 24M --iodepth=32 & f0=$!
fio_verify "$dev1" 24M --iodepth=8 --bsrange=512-16k & f1=$!
sleep 2
rtgt_rpc_ok nvmf_subsystem_pause "{\"nqn\":\"$NQN\"}" > /dev/null
state=$(rtgt_rpc_ok nvmf_get_subsystems | jq -r --arg n "$NQN" '.[] | select(.nqn == $n) | .state')
assert_eq "$state" paused "subsystem state"
sleep 1
rtgt_rpc_ok nvmf_subsystem_resume "{\"nqn\":\"$NQN\"}" > /dev/null
wait $f0
wait $f1

# A LUN reset during I/O: ib_srp's SRP_TSK_MGMT must be answered, the I/O must verify. The
# tasks the reset aborts get no response (SAM; LIO does the same): the SCSI layer times them
# out, aborts them (ABORT TASK for tasks rtgt no longer has: FUNCTION COMPLETE) and retries.
# A short command timeout keeps that wait short.
# Malloc I/O spends microseconds in rtgt, so a reset could find nothing to abort: for the
# reset, Delay0 holds every completed read and write for 200 ms, and fio's 32 tasks sit in
# rtgt. 200 ms stays far below the 5 s command timeout (held I/O is not timed out and
# retried) and the 5 s ib_srp allows a task management request (rtgt answers the reset once
# the aborted tasks are back from the bdev, at most 200 ms later). Then back to 0, so the
# retried I/O and the rest of fio run at malloc speed.
echo 5 > "/sys/block/${dev#/dev/}/device/timeout"
fio_verify "$dev" 24M --iodepth=32 --loops=4 & f0=$!
sleep 1
log "LUN 0 latency 200 ms"
delay_us 200000
wait_for 10 held_in_rtgt
log "sg_reset -d $dev"
sg_reset -d "$dev" || fail "sg_reset -d $dev failed (see dmesg)"
# rtgt counts a task as aborted when it is gone (the bdev gave it back): wait for that.
aborted_tasks() { qpairs | jq '[.[].aborted] | add'; }
some_aborted() { [ "$(aborted_tasks)" -ge 1 ]; }
if ! poll_until 10 some_aborted; then
  log "rtgt: $(grep -E 'task management|aborting' "$RTGT_LOG" | tail -5)"
  log "qpairs: $(qpairs | jq -c '[.[] | {qid, outstanding, task_management, aborted}]')"
  fail "the LUN reset found no task in flight on rtgt"
fi
log "the LUN reset aborted $(aborted_tasks) task(s)"
delay_us 0
wait $f0
assert_contains "$(grep -c 'task management LunReset' "$RTGT_LOG")" 1 "LUN resets in the rtgt log"

# A host reset: ib_srp reconnects (new single-channel login terminating the old channels).
log "sg_reset -H $dev"
sg_reset -H "$dev" || fail "sg_reset -H $dev failed (see dmesg)"
fio_verify "$dev" 8M

srp_logout_all
wait_for 30 no_channels
assert_eq "$(rtgt_rpc_ok nvmf_subsystem_get_controllers "{\"nqn\":\"$NQN\"}")" "[]" "sessions"
stats=$(rtgt_rpc_ok nvmf_get_stats)
assert_eq "$(jq '[.poll_groups[].current_io_qpairs] | add' <<< "$stats")" 0 "current I/O qpairs"
assert_eq "$(jq '[.poll_groups[].pending_bdev_io] | add' <<< "$stats")" 0 "pending bdev I/O"
assert_eq "$(jq '[.poll_groups[].transports[] | select(.trtype == "SRP") | .devices[] |
  select(.free_data_buffers != .total_data_buffers)] | length' <<< "$stats")" 0 "data buffers home"
stop_rtgt
