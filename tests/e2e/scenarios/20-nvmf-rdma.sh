# rtgt exports a malloc bdev over NVMe/RDMA to the Linux kernel host: `nvme discover -t rdma`
# lists it, `nvme connect` creates the block device, fio writes and verifies (crc32c) the whole
# device while the subsystem is paused and resumed several times, `nvme disconnect` is clean
# (no errors in dmesg) and rtgt then reports no controllers and no queue pairs. Its Prometheus
# metrics (--metrics) counted the I/O: every write in the bdev's counter and latency histogram.
# e2e-timeout: 240

NQN=nqn.2016-06.io.spdk:cnode1
LISTEN=$(jq -nc --arg ip "$E2E_IP" --arg port "$RTGT_NVME_PORT" \
  '{trtype:"RDMA", adrfam:"IPv4", traddr:$ip, trsvcid:$port}')

METRICS_PORT=9465
# metrics: GET /metrics over bash's /dev/tcp (HTTP/1.0: the server closes after answering).
metrics() {
  local body
  exec 3<> /dev/tcp/127.0.0.1/$METRICS_PORT || fail "cannot reach the metrics endpoint"
  printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3
  body=$(cat <&3); exec 3<&-
  printf '%s\n' "$body" | tr -d '\r' | sed '1,/^$/d'
}
# sample TEXT NAME{LABELS}: the value of one sample.
sample() { printf '%s\n' "$1" | awk -v k="$2" '$1 == k {print $2}'; }

no_controllers() {
  [ "$(rtgt_rpc_ok nvmf_subsystem_get_controllers "{\"nqn\":\"$NQN\"}")" = "[]" ]
}

start_rtgt --metrics "$METRICS_PORT"
rtgt_rpc_ok nvmf_create_transport '{"trtype":"RDMA"}' > /dev/null
rtgt_rpc_ok bdev_malloc_create '{"name":"Malloc0","num_blocks":131072,"block_size":512}' > /dev/null
rtgt_rpc_ok nvmf_create_subsystem "{\"nqn\":\"$NQN\",\"allow_any_host\":true,\"serial_number\":\"RTGT0001\"}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_ns "{\"nqn\":\"$NQN\",\"namespace\":{\"bdev_name\":\"Malloc0\"}}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_listener "{\"nqn\":\"$NQN\",\"listen_address\":$LISTEN}" > /dev/null

log "nvme discover -t rdma -a $E2E_IP -s $RTGT_NVME_PORT"
disc=$(nvme discover -t rdma -a "$E2E_IP" -s "$RTGT_NVME_PORT") || fail "nvme discover failed"
assert_contains "$disc" "subnqn:  $NQN" "discovery log"
assert_contains "$disc" "traddr:  $E2E_IP" "discovery log"
assert_contains "$disc" "trsvcid: $RTGT_NVME_PORT" "discovery log"
assert_contains "$disc" "trtype:  rdma" "discovery log"

dev=$(nvme_connect "$NQN")
size=$(blockdev --getsize64 "$dev")
assert_eq "$size" $((64 << 20)) "size of $dev"
ctrl=${dev#/dev/}; ctrl=${ctrl%n*}
assert_eq "$(cat /sys/class/nvme/"$ctrl"/subsysnqn)" "$NQN" "subsysnqn"
assert_eq "$(cat /sys/class/nvme/"$ctrl"/transport)" rdma "transport"
nctrl=$(rtgt_rpc_ok nvmf_subsystem_get_controllers "{\"nqn\":\"$NQN\"}" | jq length)
assert_eq "$nctrl" 1 "controllers while connected"

# Write then verify the whole device; pause and resume the subsystem during the pass.
fio_verify "$dev" "$size" & fio=$!
for i in 1 2 3 4; do
  sleep 1.5
  pid_alive $fio || break
  rtgt_rpc_ok nvmf_subsystem_pause "{\"nqn\":\"$NQN\"}" > /dev/null
  state=$(rtgt_rpc_ok nvmf_get_subsystems | jq -r --arg n "$NQN" '.[] | select(.nqn == $n) | .state')
  assert_eq "$state" paused "subsystem state after pause $i"
  sleep 0.5
  rtgt_rpc_ok nvmf_subsystem_resume "{\"nqn\":\"$NQN\"}" > /dev/null
done
wait $fio || fail "fio write+verify failed"

stats=$(rtgt_rpc_ok nvmf_get_stats)
reqs=$(echo "$stats" | jq '[.poll_groups[].transports[] | select(.trtype == "RDMA") | .devices[].requests] | add')
[ "$reqs" -gt 1000 ] || fail "nvmf_get_stats counted only $reqs RDMA requests"

m=$(metrics)
writes=$(sample "$m" 'rtgt_bdev_ops_total{bdev="Malloc0",op="write"}')
[ "${writes:-0}" -gt 200 ] || fail "metrics counted ${writes:-no} writes on Malloc0"
assert_eq "$(sample "$m" 'rtgt_bdev_latency_seconds_count{bdev="Malloc0",op="write"}')" "$writes" \
  "writes in the latency histogram"
assert_eq "$(sample "$m" "rtgt_nvmf_subsystem_controllers{subsystem=\"$NQN\"}")" 1 "controllers in the metrics"
log "metrics: $writes writes on Malloc0"

nvme_disconnect "$NQN"
expect_fail test -b "$dev"
wait_for 10 no_controllers
assert_eq "$(rtgt_rpc_ok nvmf_subsystem_get_qpairs "{\"nqn\":\"$NQN\"}")" "[]" "qpairs after disconnect"
bad=$(dmesg | grep -iE 'bogus|mismatch|local length|bad command_id|shutdown incomplete|failed' \
  | grep -v 'rdma_rxe' || true)
[ -z "$bad" ] || fail "kernel complained: $(echo "$bad" | head -3 | tr '\n' ' ')"
stop_rtgt
