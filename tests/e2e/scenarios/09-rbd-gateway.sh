# rtgt as an RBD gateway: rtgt in the guest registers the cluster of the hook netns/ceph.sh
# (bdev_rbd_register_cluster with the guest's ceph.conf as client.$CEPH_CLIENT_ID) and makes
# two RBD bdevs on pre-made images (bdev_rbd_create): e2e1 with 4096-byte blocks exported as an
# NVMe/RDMA namespace, e2e2 with 512-byte blocks as an SRP LUN. bdev_get_bdevs shows SPDK's
# driver_specific.rbd. The kernel NVMe/RDMA host and ib_srp each write and verify (fio,
# crc32c) their device, the NVMe subsystem paused and resumed during the pass. Then the OSD is
# stopped during fio on both devices: each fio ends with an I/O error within a bounded time
# (the registration sets rados_osd_op_timeout=5; no hang, rtgt keeps answering RPCs), and after
# the OSD restarts a fresh write+verify passes on both. Both images then grow from outside
# (`rbd resize` by the host-side client): the kernel NVMe host rescans on the Namespace Attribute
# Changed notice and its block device takes the new size by itself; sd reports CAPACITY DATA HAS
# CHANGED and a rescan reads the new capacity; bdev_rbd_resize grows the NVMe one again. After
# rtgt exits (SIGTERM, status 0) the images have no watcher left at once: rtgt closed them.
# e2e-netns: netns/ceph.sh
# e2e-timeout: 300

ceph_require
NQN_NVME=nqn.2016-06.io.rtgt:rbd-nvme
NQN_SRP=nqn.2016-06.io.rtgt:rbd-srp
OSD_TIMEOUT=5
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
log "cluster: mon $CEPH_MON_HOST, auth ${CEPH_AUTH:-none}, client.$CEPH_CLIENT_ID, pool $CEPH_POOL"

start_rtgt
rtgt_rpc_ok nvmf_create_transport '{"trtype":"RDMA"}' > /dev/null
rtgt_rpc_ok nvmf_create_transport '{"trtype":"SRP"}' > /dev/null

# --- the cluster and two RBD bdevs --------------------------------------------------------------
t0=$(uptime_s)
assert_eq "$(rtgt_rpc_ok bdev_rbd_register_cluster "$(jq -nc --arg c "$CEPH_CONF" --arg u "$CEPH_CLIENT_ID" \
  --arg t "$OSD_TIMEOUT" '{name:"ceph0", config_file:$c, user_id:$u, config_param:{rados_osd_op_timeout:$t}}')")" \
  '"ceph0"' "bdev_rbd_register_cluster's result"
log "cluster registered in $(secs "$t0" "$(uptime_s)")s"
# rbd_create NAME IMAGE BLOCK_SIZE
rbd_create() {
  assert_eq "$(rtgt_rpc_ok bdev_rbd_create "$(jq -nc --arg n "$1" --arg p "$CEPH_POOL" --arg i "$2" --argjson b "$3" \
    '{name:$n, pool_name:$p, rbd_name:$i, block_size:$b, cluster_name:"ceph0"}')")" "\"$1\"" "bdev_rbd_create $1's result"
}
rbd_create Rbd0 e2e1 4096
rbd_create Rbd1 e2e2 512
for b in Rbd0:e2e1:4096 Rbd1:e2e2:512; do
  IFS=: read -r name img bs <<< "$b"
  d=$(rtgt_rpc_ok bdev_get_bdevs "{\"name\":\"$name\"}" | jq -c '.[0]')
  assert_eq "$(jq -r .product_name <<< "$d")" "Ceph Rbd Disk" "$name's product_name"
  assert_eq "$(jq .block_size <<< "$d")" "$bs" "$name's block_size"
  assert_eq "$(jq '.block_size * .num_blocks' <<< "$d")" $((64 << 20)) "$name's size"
  assert_eq "$(jq -c '.driver_specific.rbd | {pool_name, rbd_name, cluster_name}' <<< "$d")" \
    "{\"pool_name\":\"$CEPH_POOL\",\"rbd_name\":\"$img\",\"cluster_name\":\"ceph0\"}" "$name's driver_specific.rbd"
  assert_eq "$(jq -r .driver_specific.rbd.config_file <<< "$d")" "$CEPH_CONF" "$name's registration in driver_specific.rbd"
done
assert_contains "$(ceph_host_ok rbd_status e2e1)" "watcher=" "e2e1's watchers (rtgt holds the image open)"

# --- exports: Rbd0 over NVMe/RDMA, Rbd1 over SRP --------------------------------------------------
rtgt_rpc_ok nvmf_create_subsystem "{\"nqn\":\"$NQN_NVME\",\"allow_any_host\":true,\"serial_number\":\"RTGTRBD0\"}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_ns "{\"nqn\":\"$NQN_NVME\",\"namespace\":{\"bdev_name\":\"Rbd0\"}}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_listener "$(jq -nc --arg nqn "$NQN_NVME" --arg ip "$E2E_IP" --arg port "$RTGT_NVME_PORT" \
  '{nqn:$nqn, listen_address:{trtype:"RDMA", adrfam:"IPv4", traddr:$ip, trsvcid:$port}}')" > /dev/null
rtgt_rpc_ok nvmf_create_subsystem "{\"nqn\":\"$NQN_SRP\",\"allow_any_host\":true}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_ns "{\"nqn\":\"$NQN_SRP\",\"namespace\":{\"bdev_name\":\"Rbd1\"}}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_listener "$(jq -nc --arg nqn "$NQN_SRP" --arg ip "$E2E_IP" --arg port "$RTGT_SRP_PORT" \
  '{nqn:$nqn, listen_address:{trtype:"SRP", adrfam:"IPv4", traddr:$ip, trsvcid:$port}}')" > /dev/null

nvme_dev=$(nvme_connect "$NQN_NVME")
assert_eq "$(blockdev --getsize64 "$nvme_dev")" $((64 << 20)) "size of $nvme_dev"
assert_eq "$(blockdev --getss "$nvme_dev")" 4096 "logical block size of $nvme_dev"
srp_dev=$(srp_login "$(srp_login_spec "$NQN_SRP")")
assert_eq "$(blockdev --getsize64 "$srp_dev")" $((64 << 20)) "size of $srp_dev"
assert_eq "$(blockdev --getss "$srp_dev")" 512 "logical block size of $srp_dev"
log "NVMe/RDMA: $nvme_dev (e2e1), SRP: $srp_dev (e2e2)"

# --- verified I/O on both, the NVMe subsystem paused and resumed during its pass ---------------
# fio_figures: the bandwidth lines of the newest fio log (figures, not asserted).
fio_figures() { grep -hE '^ +(READ|WRITE):' "$(ls -t "$E2E_LOGDIR"/fio-*.log | head -1)" | tr -s ' ' | tr '\n' ';'; }
t0=$(uptime_s)
fio_verify "$nvme_dev" 48M & nvme_fio=$!
fio_verify "$srp_dev" 48M --bsrange=512-128k & srp_fio=$!
pauses=0
for i in 1 2 3; do
  sleep 1.5
  pid_alive "$nvme_fio" || break
  rtgt_rpc_ok nvmf_subsystem_pause "{\"nqn\":\"$NQN_NVME\"}" > /dev/null
  assert_eq "$(rtgt_rpc_ok nvmf_get_subsystems "{\"nqn\":\"$NQN_NVME\"}" | jq -r '.[0].state')" paused "state after pause $i"
  sleep 0.5
  rtgt_rpc_ok nvmf_subsystem_resume "{\"nqn\":\"$NQN_NVME\"}" > /dev/null
  pauses=$i
done
wait "$nvme_fio" || fail "fio write+verify over NVMe/RDMA on RBD failed"
wait "$srp_fio" || fail "fio write+verify over SRP on RBD failed"
[ "$pauses" -ge 1 ] || fail "the NVMe fio pass ended before the first pause"
log "verified 48 MiB on each device in $(secs "$t0" "$(uptime_s)")s, NVMe subsystem paused $pauses time(s)"
log "fio figures (last: SRP): $(fio_figures)"
for f in $(ls "$E2E_LOGDIR"/fio-*.log); do
  grep -q 'verify: bad\|VERIFY' "$f" && fail "verify errors in ${f##*/}"
done

# --- fault: the OSD stopped during fio; errors come back in bounded time ------------------------
# fault_fio NAME DEV: time-based random writes until the first error (no verify); its status
# and output stay in $E2E_LOGDIR/NAME.log.
fault_fio() {
  fio --name="$1" --filename="$2" --size=32M --direct=1 --ioengine=libaio --iodepth=8 --rw=randwrite \
    --bs=4k --time_based --runtime=150 --output="$E2E_LOGDIR/$1.log" > /dev/null 2>&1
}
{ fault_fio fault-nvme "$nvme_dev" || exit $?; } & fn=$!
{ fault_fio fault-srp "$srp_dev" || exit $?; } & fs=$!
sleep 3
pid_alive "$fn" && pid_alive "$fs" || fail "a fault-phase fio ended before the OSD was stopped"
t_stop=$(uptime_s)
ceph_host_ok osd_stop > /dev/null
log "OSD stopped ($(secs "$t_stop" "$(uptime_s)")s); waiting for both fio runs to fail"
t_nvme="" t_srp=""
for _ in $(seq 1 900); do
  [ -z "$t_nvme" ] && ! pid_alive "$fn" && t_nvme=$(uptime_s)
  [ -z "$t_srp" ] && ! pid_alive "$fs" && t_srp=$(uptime_s)
  [ -n "$t_nvme" ] && [ -n "$t_srp" ] && break
  sleep 0.1
done
# rtgt still answers while the I/O is stuck or failing
rtgt_rpc_ok bdev_get_bdevs '{"name":"Rbd0"}' > /dev/null
[ -n "$t_nvme" ] || fail "fio over NVMe/RDMA still runs 90 s after the OSD stopped (I/O hangs)"
[ -n "$t_srp" ] || fail "fio over SRP still runs 90 s after the OSD stopped (I/O hangs)"
rc=0; wait "$fn" || rc=$?
[ "$rc" != 0 ] || fail "fio over NVMe/RDMA ran its 150 s without an error while the OSD was stopped"
rc=0; wait "$fs" || rc=$?
[ "$rc" != 0 ] || fail "fio over SRP ran its 150 s without an error while the OSD was stopped"
for n in nvme srp; do
  assert_match "$(cat "$E2E_LOGDIR/fault-$n.log")" "Input/output error|err= *5" "fio over $n with the OSD stopped"
done
log "OSD stopped: NVMe/RDMA fio failed after $(secs "$t_stop" "$t_nvme")s, SRP fio after $(secs "$t_stop" "$t_srp")s (rados_osd_op_timeout $OSD_TIMEOUT s)"
log "kernel: $(dmesg | grep -E 'I/O error|critical medium|nvme.*(status|error)' | tail -n 3 | tr '\n' ' ' | head -c 400)"
t0=$(uptime_s)
ceph_host_ok osd_start > /dev/null
log "OSD started; the pool serves I/O again after $(secs "$t0" "$(uptime_s)")s"
# the hosts keep their devices (an I/O error is not a path failure)
assert_eq "$(nvme_ns_dev "$NQN_NVME")" "$nvme_dev" "NVMe namespace after the fault"
test -b "$srp_dev" || fail "$srp_dev is gone after the fault"
t0=$(uptime_s)
fio_verify "$nvme_dev" 16M & nvme_fio=$!
fio_verify "$srp_dev" 16M & srp_fio=$!
wait "$nvme_fio" || fail "fio write+verify over NVMe/RDMA after the OSD restarted failed"
wait "$srp_fio" || fail "fio write+verify over SRP after the OSD restarted failed"
log "after the OSD restarted: 16 MiB verified on each device in $(secs "$t0" "$(uptime_s)")s"

# --- resize from outside: the hosts see the new sizes -------------------------------------------
size_is() { [ "$(blockdev --getsize64 "$1")" = "$2" ]; }
t0=$(uptime_s)
ceph_host_ok rbd_resize e2e1 80M > /dev/null
poll_until 20 size_is "$nvme_dev" $((80 << 20)) \
  || fail "$nvme_dev is $(blockdev --getsize64 "$nvme_dev") bytes 20 s after rbd resize e2e1 80M"
log "rbd resize e2e1 80M: $nvme_dev is 80 MiB after $(secs "$t0" "$(uptime_s)")s"
dmesg -c > /dev/null
ceph_host_ok rbd_resize e2e2 80M > /dev/null
# sd hears of it on its next command: CAPACITY DATA HAS CHANGED; a rescan reads the capacity.
ua_seen() {
  dd if="$srp_dev" of=/dev/null bs=4k count=1 iflag=direct status=none 2> /dev/null
  dmesg | grep -q "Capacity data has changed"
}
poll_until 20 ua_seen || fail "no CAPACITY DATA HAS CHANGED from $srp_dev 20 s after rbd resize e2e2: $(dmesg | tail -n 5 | tr '\n' ' ')"
echo 1 > "/sys/class/block/${srp_dev##*/}/device/rescan"
poll_until 10 size_is "$srp_dev" $((80 << 20)) \
  || fail "$srp_dev is $(blockdev --getsize64 "$srp_dev") bytes after the rescan (expected 80 MiB)"
log "rbd resize e2e2 80M: sd reported '$(dmesg | grep -m1 -o "Capacity data has changed")'; $srp_dev is 80 MiB after a rescan"
assert_eq "$(rtgt_rpc_ok bdev_rbd_resize '{"name":"Rbd0","new_size":96}')" true "bdev_rbd_resize Rbd0 96"
poll_until 20 size_is "$nvme_dev" $((96 << 20)) \
  || fail "$nvme_dev is $(blockdev --getsize64 "$nvme_dev") bytes 20 s after bdev_rbd_resize 96"
# the new blocks take verified I/O
fio --name=tail --filename="$nvme_dev" --offset=64M --size=32M --direct=1 --ioengine=libaio --rw=write \
  --bs=128k --verify=crc32c --output="$E2E_LOGDIR/fio-tail.log" > /dev/null 2>&1 \
  || fail "write+verify of the grown part of $nvme_dev failed"
log "bdev_rbd_resize Rbd0 96: $nvme_dev is 96 MiB; its last 32 MiB verified"

# --- teardown ------------------------------------------------------------------------------------
nvme_disconnect "$NQN_NVME"
srp_logout_all
stop_rtgt
# rtgt closes its images at exit: the watch goes with it, not after the cluster's
# osd_client_watch_timeout (30 s).
t0=$(uptime_s)
no_watchers() { ceph_host_ok rbd_status e2e1 | grep -q "Watchers: none" && ceph_host_ok rbd_status e2e2 | grep -q "Watchers: none"; }
poll_until 5 no_watchers || fail "a watcher is left 5 s after rtgt exited: $(ceph_host_ok rbd_status e2e1 | tr '\n' ' ')"
log "the images' watches were gone $(secs "$t0" "$(uptime_s)")s after rtgt exited"
grep -q "RBD image .* closed" "$RTGT_LOG" || fail "rtgt's log does not show the images closed"
