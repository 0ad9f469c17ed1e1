# The discovery service with the Linux kernel host and nvme-cli (libnvme). The log's TRADDR and
# TRSVCID are space-padded ASCII fields (as SPDK writes them): `nvme discover` prints them
# stripped and `nvme connect-all` connects with them. A persistent discovery controller
# (`nvme discover --persistent`) is sent the discovery log change notice when a subsystem gets
# a listener: the kernel turns it into an NVME_AEN=0x70f002 uevent.
# e2e-timeout: 120

A=nqn.2016-06.io.spdk:disc-a
B=nqn.2016-06.io.spdk:disc-b
DISC=nqn.2014-08.org.nvmexpress.discovery
LISTEN=$(jq -nc --arg ip "$E2E_IP" --arg port "$RTGT_NVME_PORT" \
  '{trtype:"RDMA", adrfam:"IPv4", traddr:$ip, trsvcid:$port}')

# subsystem NQN BDEV: a subsystem any host may use, with a 16 MiB malloc namespace and the
# listener.
subsystem() {
  rtgt_rpc_ok bdev_malloc_create "{\"name\":\"$2\",\"num_blocks\":32768,\"block_size\":512}" > /dev/null
  rtgt_rpc_ok nvmf_create_subsystem "{\"nqn\":\"$1\",\"allow_any_host\":true}" > /dev/null
  rtgt_rpc_ok nvmf_subsystem_add_ns "{\"nqn\":\"$1\",\"namespace\":{\"bdev_name\":\"$2\"}}" > /dev/null
  rtgt_rpc_ok nvmf_subsystem_add_listener "{\"nqn\":\"$1\",\"listen_address\":$LISTEN}" > /dev/null
}

start_rtgt
rtgt_rpc_ok nvmf_create_transport '{"trtype":"RDMA"}' > /dev/null
subsystem "$A" MallocA

log "nvme discover: TRADDR and TRSVCID without their padding"
disc=$(nvme discover -t rdma -a "$E2E_IP" -s "$RTGT_NVME_PORT") || fail "nvme discover failed"
assert_contains "$disc" "subnqn:  $A" "discovery log"
grep -qx "traddr:  $E2E_IP" <<< "$disc" \
  || fail "traddr line of nvme discover: '$(grep traddr <<< "$disc" | head -1)'"
grep -qx "trsvcid: $RTGT_NVME_PORT" <<< "$disc" \
  || fail "trsvcid line of nvme discover: '$(grep trsvcid <<< "$disc" | head -1)'"

log "nvme connect-all -t rdma -a $E2E_IP -s $RTGT_NVME_PORT"
nvme connect-all -t rdma -a "$E2E_IP" -s "$RTGT_NVME_PORT" >&2 || fail "nvme connect-all failed"
wait_for 20 nvme_ns_dev "$A" 1
nvme_disconnect "$A"

log "persistent discovery controller and the discovery log change notice"
uevents=$E2E_LOGDIR/nvme-aen-uevents
: > "$uevents"
# Every uevent runs the command with the event in its environment; keep the NVMe AENs.
busybox uevent sh -c "[ -z \"\${NVME_AEN:-}\" ] || echo \"\$NVME_AEN \$NVME_TRADDR\" >> $uevents" &
monitor=$!
sleep 0.5
nvme discover -t rdma -a "$E2E_IP" -s "$RTGT_NVME_PORT" --persistent > /dev/null \
  || fail "nvme discover --persistent failed"
dctrl=$(nvme_ctrls "$DISC")
[ -n "$dctrl" ] || fail "no persistent discovery controller after nvme discover --persistent"
log "persistent discovery controller $dctrl; adding $B with a listener"
subsystem "$B" MallocB
aen_seen() { grep -q '^0x70f002' "$uevents"; }
poll_until 20 aen_seen \
  || fail "no discovery log change AEN (NVME_AEN=0x70f002) in 20 s; uevents: '$(head -c 300 "$uevents")'"
log "uevent: $(head -1 "$uevents")"
disc=$(nvme discover -t rdma -a "$E2E_IP" -s "$RTGT_NVME_PORT") || fail "nvme discover failed"
assert_contains "$disc" "subnqn:  $B" "discovery log after the notice"
kill "$monitor" 2> /dev/null || true
wait "$monitor" 2> /dev/null || true
nvme disconnect -d "$dctrl" >&2 || fail "nvme disconnect -d $dctrl failed"
wait_for 20 e2e__no_ctrl "$DISC"
stop_rtgt
