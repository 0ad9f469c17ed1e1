# Implicit ALUA on SRP with a gateway group of two rtgt processes. Both export the same LU (one
# loop device on a file, through the aio bdev, with the same UUID/NGUID) in a subsystem with
# ana_reporting, each under its own SRP target port id, relative target port and target port
# group; gateway A's listener is optimized, B's inaccessible (standby). ib_srp logs in to both:
# both SCSI disks carry the same WWID (VPD 83h NAA), sg_inq shows TPGS=1, sg_rtpg each
# gateway's group and state. A read through A succeeds, one through B gets NOT READY, target
# port in standby state. Then A is demoted and B promoted over RPC: the first command on each
# path reports ASYMMETRIC ACCESS STATE CHANGED, a read through A now gets the standby sense and
# one through B succeeds and returns what was written through A (shared storage).
# e2e-timeout: 300

NQN=nqn.2016-06.io.rtgt:srp-alua
UUID=5f1a2b3c-4d5e-4f60-8a7b-9c0d1e2f3a4b
NGUID=5F1A2B3C4D5E4F608A7B9C0D1E2F3A4B
GA=0002c903000a0001          # SRP target port id (id_ext = ioc_guid) of gateway A
GB=0002c903000b0001          # ... of gateway B (ib_srp refuses a second login to one id)
PORT_A=$RTGT_SRP_PORT
PORT_B=$((RTGT_SRP_PORT + 1))

# --- the shared block device ---
modprobe loop
IMG=$E2E_RUN/alua-shared.img
dd if=/dev/zero of="$IMG" bs=1M count=64 status=none
LOOP=$(losetup -f --show "$IMG" 2> /dev/null || busybox losetup -f -s "$IMG" 2> /dev/null ||
  { busybox losetup -f "$IMG" && busybox losetup -a | awk -F: -v f="$IMG" 'index($0, f) {print $1; exit}'; })
[ -b "$LOOP" ] || fail "no loop device for $IMG"
log "shared device: $LOOP"

# --- gateway B: a second rtgt with its own RPC socket and log (start_rtgt runs one rtgt) ---
SOCK_B=$E2E_RUN/rtgt-b.sock
LOG_B=$E2E_LOGDIR/rtgt-b.log
start_gateway_b() {
  log "start: rtgt serve -r $SOCK_B (gateway B)"
  "$RTGT" serve -r "$SOCK_B" >> "$LOG_B" 2>&1 &
  PID_B=$!
  wait_for 20 test -S "$SOCK_B"
}
stop_gateway_b() {
  kill -TERM "$PID_B" 2> /dev/null || true
  local rc=0
  wait "$PID_B" || rc=$?
  [ "$rc" = 0 ] || fail "gateway B exited with status $rc (see rtgt-b.log)"
}
rpc_a() { rtgt_rpc_ok "$@"; }
rpc_b() { RTGT_SOCK=$SOCK_B rtgt_rpc_ok "$@"; }

# configure RPC_FN SRP_ID PORT REL TPG STATE: the same subsystem and LU identity on a gateway.
configure() {
  local rpc=$1 id=$2 port=$3 rel=$4 tpg=$5 state=$6
  $rpc nvmf_create_transport '{"trtype":"SRP"}' > /dev/null
  $rpc bdev_aio_create "{\"name\":\"Shared0\",\"filename\":\"$LOOP\",\"block_size\":512}" > /dev/null
  $rpc nvmf_create_subsystem "{\"nqn\":\"$NQN\",\"allow_any_host\":true,\"ana_reporting\":true,
    \"max_namespaces\":4,\"srp_port_id\":\"$id:$id\"}" > /dev/null
  $rpc nvmf_subsystem_add_ns "{\"nqn\":\"$NQN\",\"namespace\":{\"bdev_name\":\"Shared0\",
    \"uuid\":\"$UUID\",\"nguid\":\"$NGUID\"}}" > /dev/null
  $rpc nvmf_subsystem_add_listener "$(jq -nc --arg nqn "$NQN" --arg ip "$E2E_IP" \
    --arg port "$port" --argjson rel "$rel" --argjson tpg "$tpg" --arg st "$state" \
    '{nqn:$nqn, listen_address:{trtype:"SRP", adrfam:"IPv4", traddr:$ip, trsvcid:$port},
      relative_target_port_id:$rel, target_port_group_id:$tpg, ana_state:$st}')" > /dev/null
}

start_rtgt
start_gateway_b
configure rpc_a "$GA" "$PORT_A" 1 1 optimized
configure rpc_b "$GB" "$PORT_B" 2 2 inaccessible
l=$(rpc_b nvmf_subsystem_get_listeners "{\"nqn\":\"$NQN\"}")
assert_eq "$(jq -r '.[0].ana_states[0].ana_state' <<< "$l")" inaccessible "B's state for group 1"
assert_eq "$(jq -r '.[0].relative_target_port_id' <<< "$l")" 2 "B's relative port"

# --- log in to both gateways ---
dev_a=$(srp_login "id_ext=$GA,ioc_guid=$GA,dest=$E2E_IP:$PORT_A")
dev_b=$(srp_login "id_ext=$GB,ioc_guid=$GB,dest=$E2E_IP:$PORT_B")
sys_a=/sys/block/${dev_a#/dev/}/device
sys_b=/sys/block/${dev_b#/dev/}/device
log "paths: A $dev_a, B $dev_b"
assert_eq "$(cat "$sys_b/wwid")" "$(cat "$sys_a/wwid")" "the LU's WWID through both gateways"
assert_eq "$(blockdev --getsize64 "$dev_b")" $((64 << 20)) "size through the standby path"

# --- INQUIRY, VPD 83h, REPORT TARGET PORT GROUPS ---
assert_contains "$(sg_inq "$dev_a")" "TPGS=1" "sg_inq through A"
assert_contains "$(sg_inq "$dev_b")" "TPGS=1" "sg_inq through B"
vpd=$(sg_vpd -p di "$dev_b")
assert_contains "$vpd" "Relative target port: 0x2" "VPD 83h through B"
assert_contains "$vpd" "Target port group: 0x2" "VPD 83h through B"
# rtpg DEV: one line per group: "<id> <state byte>".
rtpg() {
  sg_rtpg "$1" | awk '/target port group id/ {sub(/,/, "", $6); id = $6}
    /asymmetric access state/ {print id, $NF}'
}
log "sg_rtpg A: $(sg_rtpg -d "$dev_a" | tr '\n' ' ')"
assert_eq "$(rtpg "$dev_a")" "0x1 0x00" "A's group: active/optimized"
assert_eq "$(rtpg "$dev_b")" "0x2 0x02" "B's group: standby"

# read10 DEV: READ(10) of block 0 through sg_raw; prints "rc=<sg_raw's exit status>" (0: GOOD,
# 2: NOT READY, 6: UNIT ATTENTION) and its report of the sense data.
read10() {
  local rc=0 out
  out=$(sg_raw -r 512 "$1" 28 00 00 00 00 00 00 00 01 00 2>&1) || rc=$?
  printf 'rc=%s %s\n' "$rc" "$(tr '\n' ' ' <<< "$out")"
}
# read_until_no_ua DEV: READ(10) until it no longer reports the state-change unit attention.
read_until_no_ua() {
  local out i
  for i in 1 2 3 4; do
    out=$(read10 "$1")
    [[ $out == rc=6* ]] || break
  done
  printf '%s\n' "$out"
}
# Write a pattern through A (the optimized path).
head -c 4096 /dev/urandom > "$E2E_RUN/pattern"
dd if="$E2E_RUN/pattern" of="$dev_a" bs=4096 count=1 conv=fsync status=none
out=$(read10 "$dev_a")
assert_match "$out" "^rc=0 " "READ through A"
out=$(read10 "$dev_b")
assert_match "$out" "^rc=2 " "READ through B (standby): NOT READY"
assert_contains "$out" "target port in standby state" "READ through B (standby)"
assert_eq "$(sg_turs "$dev_b" > /dev/null 2>&1; echo $?)" 2 "TEST UNIT READY through B: not ready"

# --- switch: demote A, then promote B ---
t0=$EPOCHREALTIME
rpc_a nvmf_subsystem_listener_set_ana_state "$(jq -nc --arg nqn "$NQN" --arg ip "$E2E_IP" \
  --arg port "$PORT_A" '{nqn:$nqn, listen_address:{trtype:"SRP", adrfam:"IPv4", traddr:$ip,
  trsvcid:$port}, ana_state:"inaccessible"}')" > /dev/null
rpc_b nvmf_subsystem_listener_set_ana_state "$(jq -nc --arg nqn "$NQN" --arg ip "$E2E_IP" \
  --arg port "$PORT_B" '{nqn:$nqn, listen_address:{trtype:"SRP", adrfam:"IPv4", traddr:$ip,
  trsvcid:$port}, ana_state:"optimized"}')" > /dev/null
log "switch RPCs took $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.2f", b - a}') s"
out=$(read10 "$dev_b")
log "first READ through B after the switch: $(tr '\n' ' ' <<< "$out")"
assert_match "$out" "^rc=6 " "unit attention through B"
assert_contains "${out,,}" "asymmetric access state changed" "unit attention through B"
out=$(read_until_no_ua "$dev_a")
assert_match "$out" "^rc=2 " "READ through A after the switch"
assert_contains "$out" "target port in standby state" "READ through A after the switch"
out=$(read10 "$dev_b")
assert_match "$out" "^rc=0 " "READ through B after the switch"
assert_eq "$(rtpg "$dev_b")" "0x2 0x00" "B's group: active/optimized"
assert_eq "$(rtpg "$dev_a")" "0x1 0x02" "A's group: standby"
blockdev --flushbufs "$dev_b"
dd if="$dev_b" of="$E2E_RUN/readback" bs=4096 count=1 status=none
cmp "$E2E_RUN/pattern" "$E2E_RUN/readback" || fail "B returned other data than written through A"
fio_verify "$dev_b" 8M

srp_logout_all
stop_gateway_b
stop_rtgt
losetup -d "$LOOP" 2> /dev/null || busybox losetup -d "$LOOP" || true
