# The guest reaches a Ceph cluster on the host side and the host side acts on it for the
# scenario: the hook netns/ceph.sh starts a one-monitor one-OSD cluster in the guest's network
# namespace and a control channel (ceph_host). From the guest, bdev-rbd's rbd_bench (librbd
# through rtgt's RBD bdev on a target-core reactor) writes, reads back and verifies data on a
# pre-made image and on one another client made; a client blocklisted through the control
# channel sees its writes fail (ESHUTDOWN, within seconds) while a new client works, and works
# again after the entry is removed; a client cut off by a partition of its own source address
# (with_src_addr, the gateways' addresses) gets ETIMEDOUT after its OSD timeout and resumes
# after the heal; with the OSD stopped I/O fails, after it restarts data verifies again; with
# the monitor stopped a new client is refused within rtgt's connect timeout, naming the
# monitor, and works after it restarts. A client that exited holds no watch on its image.
# With CEPH_REACH_BENCH_SECS=N (run.sh --env) it also measures 4K QD32 IOPS (not asserted).
# e2e-netns: netns/ceph.sh
# e2e-timeout: 300

ceph_require
: "${CEPH_REACH_BENCH_SECS:=0}"
GW_ADDR=${CEPH_GW_ADDRS%% *}
log "cluster: mon $CEPH_MON_HOST, auth ${CEPH_AUTH:-none}, images $CEPH_IMAGES, control $CEPH_CONTROL"

# The librbd client, as client.$CEPH_CLIENT_ID with the guest's ceph.conf. (An array, not a
# function: a function run in the background would report its expected failure as the
# scenario's through the ERR trap.)
RBD_BENCH=("$E2E_BIN/rbd_bench" --conf "$CEPH_CONF" --id "$CEPH_CLIENT_ID" --pool "$CEPH_POOL"
  --no-create --skip-rbd-bench)
# verify_image IMAGE MIB [ARGS...]: write, read back and compare MIB MiB; fails the scenario
# unless rbd_bench says so and exits 0. Prints its output.
verify_image() {
  local img=$1 mib=$2 out rc=0; shift 2
  log "rbd_bench verify $img ${mib} MiB $*"
  out=$("${RBD_BENCH[@]}" --image "$img" --verify-mib "$mib" --rounds 0 "$@" 2>&1) || rc=$?
  printf '%s\n' "$out" >> "$E2E_LOGDIR/rbd_bench.log"
  [ "$rc" = 0 ] || fail "rbd_bench verify on $img exited with $rc: $(tail -n 3 <<< "$out" | tr '\n' ' ')"
  assert_contains "$out" "read back and compared: ok" "rbd_bench verify on $img"
  printf '%s\n' "$out"
}
gone() { ! pid_alive "$1"; }
# last_progress FILE FIELD: FIELD (uptime, ios, errors, first_errno) of the last progress line.
last_progress() {
  awk -v f="$2" '$1 == "progress" { for (i = 2; i < NF; i += 2) if ($i == f) v = $(i + 1) } END { print v + 0 }' "$1"
}
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

# --- the guest's view: configuration, control channel, cluster healthy -----------------------
assert_contains "$(cat "$CEPH_CONF")" "mon_host = $CEPH_MON_HOST" "$CEPH_CONF"
assert_eq "$(ceph_host_ok ping)" pong "control channel"
ceph_host_ok status > /dev/null
rc=0; ceph_host partition "$E2E_NETNS_HOST_IP" > /dev/null || rc=$?
assert_eq "$rc" 2 "control channel's status for partitioning the cluster's own address"
rc=0; ceph_host rbd_rm ../x > /dev/null || rc=$?
assert_eq "$rc" 2 "control channel's status for a bad image name"
for img in $CEPH_IMAGES; do assert_contains "$(ceph_host_ok rbd_ls)" "$img" "pre-made images"; done

# --- verified I/O through librbd, on a pre-made image and on one another client made ---------
t0=$(uptime_s)
out=$(verify_image e2e0 16)
log "verified 16 MiB on e2e0 in $(secs "$t0" "$(uptime_s)")s (process start, connect, open, write, read)"
assert_match "$out" "client_addr $E2E_NETNS_GUEST_IP:0/[0-9]+" "the client's address (ns0's address)"
# rbd_bench closed the image before exiting: no watcher left (the next client's first write
# would otherwise wait ~30 s for the stale watch to time out)
assert_contains "$(ceph_host_ok rbd_status e2e0)" "Watchers: none" "e2e0's watchers after rbd_bench exited"
ceph_host_ok rbd_create reach1 32M > /dev/null
verify_image reach1 8 > /dev/null
ceph_host_ok rbd_resize reach1 48M > /dev/null
assert_eq "$(ceph_host_ok rbd_info reach1 | jq .size)" $((48 << 20)) "reach1's size after rbd_resize"

# --- blocklist: the fenced client's writes fail, a new client works --------------------------
w=$E2E_LOGDIR/blocklist-writer.log
log "writer on e2e1 until its first error"
"${RBD_BENCH[@]}" --image e2e1 --rw randwrite --qd 8 --seconds 90 --rounds 1 --progress --exit-on-error > "$w" 2>&1 &
wpid=$!
wait_for 60 grep -q '^progress .* ios [1-9]' "$w"
addr=$(awk '$1 == "client_addr" {print $2}' "$w")
assert_match "$addr" "^$E2E_NETNS_GUEST_IP:0/[0-9]+$" "writer's client address"
t_bl=$(uptime_s)
ceph_host_ok blocklist_add "$addr" > /dev/null
t_bl_done=$(uptime_s)
poll_until 60 gone "$wpid" || fail "the blocklisted writer still runs 60 s after 'ceph osd blocklist add': $(tail -n 2 "$w" | tr '\n' ' ')"
rc=0; wait "$wpid" || rc=$?
assert_eq "$rc" 3 "blocklisted writer's exit status (3: stopped at its first error; $(tail -n 1 "$w"))"
line=$(grep '^first I/O error' "$w")
assert_match "$line" "errno 108 " "the blocklisted writer's first error (ESHUTDOWN)"
t_err=$(awk '{for (i = 1; i < NF; i++) if ($i == "uptime") print $(i + 1)}' <<< "$line" | tr -d ,)
log "blocklist: first failed write $(secs "$t_bl" "$t_err")s after the request ($(secs "$t_bl_done" "$t_err")s after 'ceph osd blocklist add' returned, which took $(secs "$t_bl" "$t_bl_done")s): $line"
assert_contains "$(ceph_host_ok blocklist_ls)" "$addr" "blocklist"
# the entry names one client instance (its nonce): a new client from the same address works
verify_image e2e2 4 > /dev/null
ceph_host_ok blocklist_rm "$addr" > /dev/null
bl=$(ceph_host_ok blocklist_ls)
[[ $bl != *"$addr"* ]] || fail "$addr still in the blocklist after blocklist_rm: $bl"
verify_image e2e2 4 > /dev/null

# --- partition one source address, then heal --------------------------------------------------
w=$E2E_LOGDIR/partition-writer.log
log "writer on e2e0 from $GW_ADDR, OSD timeout 5 s"
{ with_src_addr "$GW_ADDR" "${RBD_BENCH[@]}" --image e2e0 --rw randwrite --qd 8 --seconds 30 \
    --rounds 1 --progress --config rados_osd_op_timeout=5 > "$w" 2>&1 || exit $?; } &
wpid=$!
wait_for 60 grep -q '^progress .* ios [1-9]' "$w"
addr=$(awk '$1 == "client_addr" {print $2}' "$w")
assert_match "$addr" "^$GW_ADDR:0/[0-9]+$" "partitioned writer's client address (with_src_addr)"
t_part=$(uptime_s)
ceph_host_ok partition "$GW_ADDR" > /dev/null
wait_for 30 grep -q '^progress .* errors [1-9]' "$w"
t_fail=$(uptime_s)
assert_eq "$(last_progress "$w" first_errno)" 110 "the partitioned writer's first error (ETIMEDOUT)"
drops=$(ceph_host_ok partitions | awk '/saddr @partitioned counter/ {print $(NF - 3)}')
[ "${drops:-0}" -gt 0 ] || fail "the partition dropped no packets from $GW_ADDR: $(ceph_host partitions | tr '\n' ' ')"
ok_at_heal=$(( $(last_progress "$w" ios) - $(last_progress "$w" errors) ))
err_at_heal=$(last_progress "$w" errors)
t_heal=$(uptime_s)
ceph_host_ok heal "$GW_ADDR" > /dev/null
log "partition: the first failed write seen $(secs "$t_part" "$t_fail")s after it (${drops} packets dropped)"
resumed() { [ $(( $(last_progress "$w" ios) - $(last_progress "$w" errors) )) -gt $((ok_at_heal + 100)) ]; }
poll_until 40 resumed || fail "no successful write within 40 s of the heal (or the writer ended): $(tail -n 2 "$w" | tr '\n' ' ')"
t_res=$(uptime_s)
log "heal: writes succeed again within $(secs "$t_heal" "$t_res")s; errors $err_at_heal at the heal, $(last_progress "$w" errors) now"
poll_until 60 gone "$wpid" || fail "the partition writer did not end"
rc=0; wait "$wpid" || rc=$?
assert_eq "$rc" 1 "partition writer's exit status (1: some of its writes failed; $(tail -n 1 "$w"))"
assert_contains "$(tail -n 1 "$w")" "the first with errno 110" "partition writer's summary"

# --- the OSD stopped and started through the control channel --------------------------------
ceph_host_ok osd_stop > /dev/null
expect_fail ceph_host status > /dev/null
rc=0; out=$("${RBD_BENCH[@]}" --image e2e0 --verify-mib 1 --rounds 0 --config rados_osd_op_timeout=3 \
  --config client_mount_timeout=5 2>&1) || rc=$?
printf '%s\n' "$out" >> "$E2E_LOGDIR/rbd_bench.log"
[ "$rc" = 1 ] || fail "rbd_bench with the OSD stopped: exit status $rc, expected 1: $(tail -n 2 <<< "$out" | tr '\n' ' ')"
assert_contains "$out" "Connection timed out" "rbd_bench with the OSD stopped"
log "with the OSD stopped: $(tail -n 1 <<< "$out" | head -c 200)"
ceph_host_ok osd_start > /dev/null
verify_image e2e0 4 > /dev/null

# --- the monitor stopped: a new client is refused in bounded time, naming it ------------------
ceph_host_ok mon_stop > /dev/null
t0=$(uptime_s)
rc=0; out=$("${RBD_BENCH[@]}" --image e2e0 --verify-mib 1 --rounds 0 2>&1) || rc=$?
took=$(secs "$t0" "$(uptime_s)")
printf '%s\n' "$out" >> "$E2E_LOGDIR/rbd_bench.log"
[ "$rc" = 1 ] || fail "rbd_bench with the monitor stopped: exit status $rc, expected 1: $(tail -n 2 <<< "$out" | tr '\n' ' ')"
assert_contains "$out" "bdev_rbd_register_cluster: cluster 'bench': cannot connect to the Ceph monitors at $CEPH_MON_HOST" \
  "rbd_bench with the monitor stopped"
awk -v t="$took" 'BEGIN { exit !(t < 20) }' || fail "with the monitor stopped, refused only after ${took}s"
log "with the monitor stopped: refused in ${took}s: $(grep -m1 'bdev_rbd_register_cluster' <<< "$out" | head -c 200)"
ceph_host_ok mon_start > /dev/null
serves_io() { ceph_host status > /dev/null; }
poll_until 60 serves_io || fail "the cluster does not serve I/O 60 s after the monitor restarted"
verify_image e2e0 4 > /dev/null

# --- 4K QD32 IOPS (figures only) --------------------------------------------------------------
if [ "$CEPH_REACH_BENCH_SECS" -gt 0 ]; then
  for rw in randwrite randread; do
    out=$("${RBD_BENCH[@]}" --image e2e2 --rw "$rw" --qd 32 --bs 4096 --seconds "$CEPH_REACH_BENCH_SECS" --rounds 1 2>&1) \
      || fail "rbd_bench $rw: $(tail -n 2 <<< "$out" | tr '\n' ' ')"
    printf '%s\n' "$out" >> "$E2E_LOGDIR/iops.txt"
    log "$(grep '^round 0' <<< "$out")"
  done
else
  log "IOPS not measured (run.sh --env CEPH_REACH_BENCH_SECS=10 to measure)"
fi
