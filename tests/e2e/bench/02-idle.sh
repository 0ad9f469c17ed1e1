# Adaptive polling, end to end: an idle `rtgt serve -m 0x3` (two reactors) with 16 connected
# NVMe/RDMA queue pairs (four controllers of the kernel host on four subsystems, each an admin
# queue and three I/O queues) must cost next to no CPU; then the same target under fio load for comparison.
# CPU is read from /proc/PID/stat (utime + stime) over BENCH_IDLE_S seconds (default 30) and
# written to idle.json. A benchmark: it fails only when the setup cannot be made.
# e2e-timeout: 400

IDLE_S=${BENCH_IDLE_S:-30}
NQN=nqn.2016-06.io.rtgt:idle
OUT=$E2E_LOGDIR/idle.json
ticks() { awk '{print $14 + $15}' "/proc/$RTGT_PID/stat"; }
hz=$(getconf CLK_TCK 2> /dev/null || echo 100)

start_rtgt -m 0x3
rtgt_rpc_ok nvmf_create_transport '{"trtype":"RDMA"}' > /dev/null
LISTEN=$(jq -nc --arg ip "$E2E_IP" --arg port "$RTGT_NVME_PORT" \
  '{trtype:"RDMA", adrfam:"IPv4", traddr:$ip, trsvcid:$port}')
# Four subsystems and a controller on each (nvme-cli makes one controller per subsystem and
# address): an admin queue and three I/O queues apiece.
for i in 1 2 3 4; do
  rtgt_rpc_ok bdev_null_create "{\"name\":\"Null$i\",\"num_blocks\":2097152,\"block_size\":512}" \
    > /dev/null
  rtgt_rpc_ok nvmf_create_subsystem "{\"nqn\":\"$NQN$i\",\"allow_any_host\":true}" > /dev/null
  rtgt_rpc_ok nvmf_subsystem_add_ns \
    "{\"nqn\":\"$NQN$i\",\"namespace\":{\"bdev_name\":\"Null$i\"}}" > /dev/null
  rtgt_rpc_ok nvmf_subsystem_add_listener "{\"nqn\":\"$NQN$i\",\"listen_address\":$LISTEN}" \
    > /dev/null
  dev=$(nvme_connect "$NQN$i" -- --nr-io-queues=2 --nr-write-queues=1)
done
nq=0
for i in 1 2 3 4; do
  n=$(rtgt_rpc_ok nvmf_subsystem_get_qpairs "{\"nqn\":\"$NQN$i\"}" | jq length)
  nq=$((nq + n))
done
log "connected: $nq queue pairs"
[ "$nq" -ge 16 ] || log "note: only $nq queue pairs (the kernel caps queues per controller)"
sleep 3

t0=$(ticks); s0=$(date +%s.%N)
sleep "$IDLE_S"
t1=$(ticks); s1=$(date +%s.%N)
idle=$(awk -v a="$t0" -v b="$t1" -v hz="$hz" -v s="$s0" -v e="$s1" \
  'BEGIN { printf "%.4f", (b - a) / hz / (e - s) * 100 }')
log "idle: rtgt used $(printf %.3f "$idle")% of one CPU over ${IDLE_S}s with $nq queue pairs"

fio_json busy --name=busy --filename="$dev" --direct=1 --ioengine=libaio --rw=randread --bs=4k \
  --iodepth=32 --time_based --runtime=10 --ramp_time=2 > /dev/null &
fio=$!
sleep 4
t2=$(ticks); s2=$(date +%s.%N)
sleep 5
t3=$(ticks); s3=$(date +%s.%N)
wait $fio || fail "fio failed"
busy=$(awk -v a="$t2" -v b="$t3" -v hz="$hz" -v s="$s2" -v e="$s3" \
  'BEGIN { printf "%.2f", (b - a) / hz / (e - s) * 100 }')
iops=$(jq '.jobs[0].read.iops | floor' "$E2E_LOGDIR/busy.json")
log "busy: rtgt used $(printf %.1f "$busy")% of one CPU, $iops IOPS (4k random read, QD32)"
jq -n --argjson q "$nq" --argjson idle "$idle" --argjson busy "$busy" --argjson iops "$iops" \
  --argjson s "$IDLE_S" \
  '{qpairs: $q, reactors: 2, idle_seconds: $s, idle_cpu_percent: $idle,
    busy_cpu_percent: $busy, busy_iops: $iops}' > "$OUT"
cat "$OUT"
nvme disconnect-all > /dev/null 2>&1 || true
stop_rtgt
