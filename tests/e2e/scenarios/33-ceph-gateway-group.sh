# A Ceph gateway group over RDMA (docs/ha.md, "Ceph gateway group over RDMA"): two rtgt
# gateways, A and B, export ONE subsystem from ONE RBD image of the hook's cluster (each its own
# librados client, from its own guest address: A 10.78.0.3, B 10.78.0.4, through with_src_addr,
# so the cluster can fence or partition one of them). Same NQN, serial, model and namespace
# identities, disjoint controller id ranges, A optimized, B inaccessible; the kernel host
# connects to both (native multipath).
#   Run 1 (kill): fio write+verify on the multipath device; A is killed with SIGKILL; the
#     failover procedure fences A (`ceph osd blocklist add` of the client address A reported in
#     bdev_rbd_get_clusters_info), waits on B for the OSD map that has the entry
#     (bdev_rbd_wait_for_latest_osdmap) and makes B optimized; fio goes on through B. A's entry
#     is removed, A restarts from its saved configuration (cluster re-registered, listener
#     inaccessible), the host reconnects, failback B -> A. fio ends with no verify error.
#   Run 2 (partition): A (optimized, alive) loses its traffic to the cluster (nft on the
#     cluster's side); the procedure fences it and promotes B; B writes a block; the partition
#     heals; a write of that block through A's own controller (nvme io-passthru on A's
#     controller, not the multipath device) fails, and B reads back B's data, not A's.
# Figures (FIGURE lines, figures.txt): fio's longest stall across the failover, from the kill
# to the first I/O completed on B, the procedure's steps.
# e2e-netns: netns/ceph.sh
# e2e-timeout: 300

ceph_require
NQN=nqn.2016-06.io.spdk:cephgw
IMAGE=gw33
PORT_A=$RTGT_NVME_PORT
PORT_B=$((RTGT_NVME_PORT + 1))
read -r ADDR_A ADDR_B _ <<< "$CEPH_GW_ADDRS"
NGUID=3C5E0A7B1D2F4E6A8B9C0D1E2F3A4B5D
UUID=2f6b1d3e-8a4c-4e5f-9b7a-1c2d3e4f5a6b
FIO_SECS=${CEPHGW_FIO_SECS:-75}
OSD_TIMEOUT=5
FIG=$E2E_LOGDIR/figures.txt
# the killed gateway is back within ~20-30 s under TCG; the host must not give it up
NVME_CTRL_LOSS_TMO=90

[ "$(cat /sys/module/nvme_core/parameters/multipath)" = Y ] \
  || fail "the guest kernel has native NVMe multipath disabled"
[ -n "$ADDR_A" ] && [ -n "$ADDR_B" ] || fail "CEPH_GW_ADDRS has no two gateway addresses: '$CEPH_GW_ADDRS'"

listen() {
  jq -nc --arg ip "$E2E_IP" --arg port "$1" '{trtype:"RDMA", adrfam:"IPv4", traddr:$ip, trsvcid:$port}'
}
port_of() { case $1 in A) echo "$PORT_A" ;; B) echo "$PORT_B" ;; esac; }
addr_of() { case $1 in A) echo "$ADDR_A" ;; B) echo "$ADDR_B" ;; esac; }
now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }
secs_since() { awk -v a="$1" -v b="$(now_ms)" 'BEGIN{printf "%.2f", (b - a) / 1000}'; }
figure() { log "FIGURE $*"; echo "$*" >> "$FIG"; }

# start GW [ARGS...]: gateway GW, its Ceph client leaving from its own address
start() {
  local gw=$1; shift
  [ -f "$E2E_BINDSRC_LIB" ] || fail "no $E2E_BINDSRC_LIB in the guest"
  export LD_PRELOAD=$E2E_BINDSRC_LIB E2E_BIND_SRC
  E2E_BIND_SRC=$(addr_of "$gw")
  gw_start "$gw" "$@"
  unset LD_PRELOAD E2E_BIND_SRC
}

# configure GW MIN_CNTLID MAX_CNTLID ANA_STATE: the cluster, the RBD bdev, the subsystem.
configure() {
  local gw=$1
  gw_rpc_ok "$gw" nvmf_create_transport '{"trtype":"RDMA"}' > /dev/null
  assert_eq "$(gw_rpc_ok "$gw" bdev_rbd_register_cluster "$(jq -nc --arg c "$CEPH_CONF" --arg u "$CEPH_CLIENT_ID" \
    --arg t "$OSD_TIMEOUT" '{name:"ceph0", config_file:$c, user_id:$u, config_param:{rados_osd_op_timeout:$t}}')")" \
    '"ceph0"' "gateway $gw's bdev_rbd_register_cluster"
  gw_rpc_ok "$gw" bdev_rbd_create "$(jq -nc --arg p "$CEPH_POOL" --arg i "$IMAGE" \
    '{name:"Rbd0", pool_name:$p, rbd_name:$i, block_size:4096, cluster_name:"ceph0"}')" > /dev/null
  gw_rpc_ok "$gw" nvmf_create_subsystem "$(jq -nc --arg nqn "$NQN" --argjson min "$2" --argjson max "$3" \
    '{nqn:$nqn, allow_any_host:true, serial_number:"RTGTCEPH33", model_number:"rtgt ceph gateway group",
      max_namespaces:8, ana_reporting:true, min_cntlid:$min, max_cntlid:$max}')" > /dev/null
  gw_rpc_ok "$gw" nvmf_subsystem_add_ns "$(jq -nc --arg nqn "$NQN" --arg g "$NGUID" --arg u "$UUID" \
    '{nqn:$nqn, namespace:{bdev_name:"Rbd0", nsid:1, nguid:$g, uuid:$u, anagrpid:1}}')" > /dev/null
  gw_rpc_ok "$gw" nvmf_subsystem_add_listener "$(jq -nc --arg nqn "$NQN" --argjson a "$(listen "$(port_of "$gw")")" \
    --arg s "$4" '{nqn:$nqn, listen_address:$a, ana_state:$s}')" > /dev/null
}

# client_addr GW: the client address gateway GW's registration reports (the fencing target)
client_addr() {
  local a
  a=$(gw_rpc_ok "$1" bdev_rbd_get_clusters_info '{"name":"ceph0"}' | jq -r .nonce)
  assert_match "$a" "^$(addr_of "$1"):0/[0-9]+$" "gateway $1's client address (bdev_rbd_get_clusters_info nonce)"
  echo "$a"
}
set_state() {  # GW STATE
  gw_rpc_ok "$1" nvmf_subsystem_listener_set_ana_state "$(jq -nc --arg nqn "$NQN" \
    --argjson a "$(listen "$(port_of "$1")")" --arg s "$2" '{nqn:$nqn, listen_address:$a, ana_state:$s}')" > /dev/null
}

# fence_and_promote FAILED SURVIVOR ADDR: the failover procedure (docs/ha.md): blocklist the
# failed gateway's client, the survivor waits for the OSD map with the entry, then becomes
# optimized. Sets FENCE_S, OSDMAP_S, PROMOTE_S (seconds, each step).
fence_and_promote() {
  local t
  t=$(now_ms)
  ceph_host_ok blocklist_add "$3" > /dev/null
  FENCE_S=$(secs_since "$t"); t=$(now_ms)
  assert_eq "$(gw_rpc_ok "$2" bdev_rbd_wait_for_latest_osdmap '{"name":"ceph0"}')" true \
    "bdev_rbd_wait_for_latest_osdmap on $2"
  OSDMAP_S=$(secs_since "$t"); t=$(now_ms)
  set_state "$2" optimized
  PROMOTE_S=$(secs_since "$t")
  assert_contains "$(ceph_host_ok blocklist_ls)" "$3" "the blocklist after fencing $1"
}

path_of() { nvme_path_of "$NQN" "$1"; }
ctrl_of() { nvme_ctrl_of "$NQN" "$1"; }
ctrl_live() { [ "$(cat /sys/class/nvme/"$(ctrl_of "$1")"/state 2> /dev/null)" = live ]; }
ios() { nvme_path_ios "$1"; }
moved() { [ $(($(ios "$1") - $2)) -gt 50 ]; }
listener_is() {
  [ "$(gw_rpc "$1" nvmf_subsystem_get_listeners "{\"nqn\":\"$NQN\"}" 2> /dev/null | jq -r '.[0].ana_states[0].ana_state')" = "$2" ]
}
first_io() {  # PATH BEFORE T0_MS: seconds from T0 to the first I/O completed on PATH (20 s at most)
  local end=$(( $(now_ms) + 20000 ))
  while [ "$(ios "$1")" = "$2" ]; do
    [ "$(now_ms)" -lt "$end" ] || { echo none; return 0; }
    sleep 0.05
  done
  secs_since "$3"
}

# --- the image, the two gateways, the host ---------------------------------------------------
ceph_host_ok rbd_create "$IMAGE" 64M > /dev/null
start A -m 0x1
start B -m 0x2
configure A 1 1000 optimized
configure B 1001 2000 inaccessible
addr_a=$(client_addr A)
addr_b=$(client_addr B)
log "client addresses: A $addr_a, B $addr_b"
idents=$(for gw in A B; do
  gw_rpc_ok $gw nvmf_get_subsystems | jq -c --arg n "$NQN" '.[] | select(.nqn == $n)
    | [.serial_number, .model_number, .namespaces[0].nguid, .namespaces[0].uuid]'
done | sort -u)
assert_eq "$(wc -l <<< "$idents")" 1 "identities differ between the gateways: $idents"
# A's restart configuration: its saved configuration (cluster registration and bdev included),
# its listener coming up inaccessible
"$RTGT" rpc -s "$(gw_sock A)" save_config > "$E2E_RUN/gw-A.json" || fail "save_config on A failed"
jq '(.subsystems[] | select(.subsystem == "nvmf") | .config) |=
    (map(select(.method != "nvmf_subsystem_listener_set_ana_state"))
     | map(if .method == "nvmf_subsystem_add_listener" then .params.ana_state = "inaccessible" else . end))' \
  "$E2E_RUN/gw-A.json" > "$E2E_LOGDIR/gw-A-restart.json"
assert_eq "$(jq -c '[.subsystems[] | select(.subsystem == "bdev") | .config[].method
    | select(startswith("bdev_rbd"))]' "$E2E_LOGDIR/gw-A-restart.json")" \
  '["bdev_rbd_register_cluster","bdev_rbd_create"]' "RBD entries of A's saved configuration"

dev=$(nvme_connect "$NQN" "$E2E_IP" "$PORT_A")
assert_eq "$(nvme_connect "$NQN" "$E2E_IP" "$PORT_B")" "$dev" "one multipath device for both gateways"
wait_for 10 path_of "$PORT_B"
pa=$(path_of "$PORT_A"); pb=$(path_of "$PORT_B")
ca=$(ctrl_of "$PORT_A"); cb=$(ctrl_of "$PORT_B")
wait_for 10 nvme_path_ana_is "$pa" optimized
wait_for 10 nvme_path_ana_is "$pb" inaccessible
size=$(blockdev --getsize64 "$dev")
assert_eq "$size" $((64 << 20)) "size of $dev"
log "A: $ca $pa, B: $cb $pb, under $dev"

# --- run 1: A killed under fio; fenced; B promoted; A back; failback --------------------------
: > "$FIG"
fio_verify "$dev" "$size" --time_based --runtime="$FIO_SECS" --verify_backlog=64 \
  --write_lat_log="$E2E_LOGDIR/gw" --log_unix_epoch=1 & fio=$!
wait_for 20 moved "$pa" "$(ios "$pa")"
sleep 3
pid_alive "$fio" || fail "fio ended before the kill"
before=$(ios "$pb")
kill_ms=$(now_ms)
gw_kill A
detect_ms=$(now_ms)   # the failure is known: the process is gone
first_io "$pb" "$before" "$detect_ms" > "$E2E_RUN/first_io" & watcher=$!
fence_and_promote A B "$addr_a"
promoted_ms=$(now_ms)
wait "$watcher" || true
resumed=$(< "$E2E_RUN/first_io")
[ "$resumed" != none ] || fail "no I/O completed on B ($pb) within 20 s of the failure"
wait_for 10 moved "$pb" "$before"
wait_for 10 nvme_path_ana_is "$pb" optimized
figure "failover (A killed): fenced in ${FENCE_S}s (ceph osd blocklist add), B had the OSD map ${OSDMAP_S}s later (bdev_rbd_wait_for_latest_osdmap), B optimized ${PROMOTE_S}s later; first I/O completed on B ${resumed}s after the failure was detected"

# failback: the entry goes, A restarts from its configuration (re-registering the cluster as a
# new client), the host reconnects, then B -> A
ceph_host_ok blocklist_rm "$addr_a" > /dev/null
start A -m 0x1 --json "$E2E_LOGDIR/gw-A-restart.json"
wait_for 60 listener_is A inaccessible
addr_a2=$(client_addr A)
[ "$addr_a2" != "$addr_a" ] || fail "A's new registration reports the old client address $addr_a"
wait_for 60 ctrl_live "$PORT_A"
back_ms=$(now_ms)
wait_for 10 nvme_path_ana_is "$pa" inaccessible
pid_alive "$fio" || fail "fio ended before the failback (raise CEPHGW_FIO_SECS)"
before=$(ios "$pa")
t0=$(now_ms)
set_state B inaccessible
set_state A optimized
wait_for 20 moved "$pa" "$before"
figure "failback: A restarted and reconnected $(awk -v a="$kill_ms" -v b="$back_ms" 'BEGIN{printf "%.2f", (b - a) / 1000}')s after the kill; I/O on A again $(secs_since "$t0")s after the switch began"
wait_for 10 nvme_path_ana_is "$pa" optimized
wait_for 10 nvme_path_ana_is "$pb" inaccessible
pid_alive "$fio" || fail "fio ended before the failback was checked (raise CEPHGW_FIO_SECS)"
wait $fio || fail "fio write+verify failed across the failover and failback"
grep -q 'err= 0' "$E2E_LOGDIR"/fio-1.log || fail "fio reported errors"

stall() {  # FROM_MS TO_MS: fio's longest gap between two completions in the window
  sort -t, -k1n "$E2E_LOGDIR"/gw_clat.*.log | awk -F, -v a="$1" -v b="$2" '
    $1 + 0 >= a && $1 + 0 <= b { if (p != "" && $1 - p > m) m = $1 - p; p = $1 } END { print m + 0 }'
}
max_lat() {  # FROM_MS TO_MS: the longest completion latency (ms) of an I/O completed in the window
  cat "$E2E_LOGDIR"/gw_clat.*.log | awk -F, -v a="$1" -v b="$2" '
    $1 + 0 >= a && $1 + 0 <= b && $2 + 0 > m { m = $2 + 0 } END { printf "%.0f", m / 1000000 }'
}
figure "fio across the failover (kill to 10 s after B was promoted): longest stall $(stall "$kill_ms" $((promoted_ms + 10000))) ms, longest I/O latency $(max_lat "$kill_ms" $((promoted_ms + 10000))) ms"
figure "fio across the failback (10 s from its start): longest stall $(stall "$t0" $((t0 + 10000))) ms"
figure "fio: $(grep -E '^ +(read|write):' "$E2E_LOGDIR"/fio-1.log | tr -s ' ' | tr '\n' ';')"

# --- run 2: A partitioned from the cluster, fenced; its later writes fail --------------------
LBA=16000
block() { head -c 4096 /dev/zero | tr '\0' "$1" > "$E2E_RUN/block.$1"; }
passthru_write() {  # CTRL CHAR: write 4 KiB of CHAR at LBA through controller CTRL only
  nvme io-passthru "/dev/$1" --opcode=0x1 --namespace-id=1 --data-len=4096 --cdw10=$LBA \
    --cdw11=0 --cdw12=0 --write --input-file="$E2E_RUN/block.$2" --timeout=30000
}
passthru_read() {  # CTRL: the block at LBA through controller CTRL, as its first byte
  nvme io-passthru "/dev/$1" --opcode=0x2 --namespace-id=1 --data-len=4096 --cdw10=$LBA \
    --cdw11=0 --cdw12=0 --read --raw-binary --timeout=30000 > "$E2E_RUN/read" 2> "$E2E_RUN/read.err" \
    || fail "reading LBA $LBA through $1 failed: $(head -c 200 "$E2E_RUN/read.err")"
  head -c 1 "$E2E_RUN/read"
}
for c in a b z; do block "$c"; done
ca=$(ctrl_of "$PORT_A"); cb=$(ctrl_of "$PORT_B")
passthru_write "$ca" a > /dev/null 2>&1 || fail "writing through A ($ca) failed before the partition"
assert_eq "$(passthru_read "$ca")" a "the block written through A, read through A"
ceph_host_ok partition "$ADDR_A" > /dev/null
part_ms=$(now_ms)
log "A ($ADDR_A, client $addr_a2) partitioned from the cluster"
fence_and_promote A B "$addr_a2"
figure "partition: A fenced ${FENCE_S}s, B had the OSD map ${OSDMAP_S}s later, B optimized ${PROMOTE_S}s later ($(secs_since "$part_ms")s after the partition)"
assert_eq "$(passthru_read "$cb")" a "the block A wrote before the partition, read through B"
passthru_write "$cb" b > /dev/null 2>&1 || fail "writing through B ($cb) after the fence failed"
assert_eq "$(passthru_read "$cb")" b "the block written through B"
ceph_host_ok heal "$ADDR_A" > /dev/null
# A's client reaches the cluster again and learns it is blocklisted; what it writes now must
# not land
sleep 3
t0=$(now_ms)
rc=0; out=$(passthru_write "$ca" z 2>&1) || rc=$?
log "write through the fenced A ($ca), $(secs_since "$t0")s: status $rc: $(tr '\n' ' ' <<< "$out" | head -c 200)"
[ "$rc" != 0 ] || fail "a write through the fenced gateway A succeeded: $out"
assert_eq "$(passthru_read "$cb")" b "the block read through B after A's write (A's write must not land)"
figure "fenced A: its write after the heal failed (nvme status $rc: $(tr '\n' ' ' <<< "$out" | head -c 120)); B reads B's data"
log "A's log on the fenced write: $(grep -iE 'blocklist|errno|rbd.*(fail|error)' "$(gw_log A)" | tail -n 3 | tr '\n' ' ' | head -c 400)"

# --- teardown --------------------------------------------------------------------------------
nvme_disconnect "$NQN"
gw_kill A
# B broke the fenced A's lock and holds the image: a clean stop closes it (bdev-rbd's close at
# exit) and must exit 0 (it used to die with SIGSEGV in the process exit, status 139).
gw_stop B
ceph_host_ok blocklist_rm "$addr_a2" > /dev/null
ceph_host heal all > /dev/null || true
