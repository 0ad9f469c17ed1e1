# Side by side, one guest, one run: fio 4K random read QD32, 128K sequential read QD8, 4K random
# write QD32 and 4K 70/30 random read/write QD32 against
# (a) rtgt NVMe/RDMA on a null bdev and the Linux nvmet-rdma target on null_blk, and (b) rtgt
# SRP on a null bdev and LIO ib_srpt on rd_nullio, both over soft-RoCE (rxe0), and (c) rtgt
# NVMe/TCP on a null bdev and the Linux nvmet-tcp target on null_blk over the guest's loopback
# path to its own address (4K randread QD32, 128K read QD8, 4K randwrite QD32), all with the
# guest's own kernel initiators. The guest is emulated (TCG) on a shared host, so its speed drifts: the
# targets take turns, BENCH_ROUNDS times (kernel first in odd rounds, rtgt first in even ones),
# and each figure is the median of its rounds. Every run, the medians and the ratios
# rtgt/kernel are logged and written to side-by-side.json. A benchmark, not a test: it fails
# only when a run cannot be made.
#
# Environment: BENCH_ROUNDS (default 3), BENCH_RUNTIME (s per fio job, default 10), BENCH_SIZE_MIB (backing size, 1024),
# BENCH_RTGT_MASK (rtgt's -m; default empty: no -m, the reactors unpinned; "0x1" pins one
# reactor to vCPU 0, the round-1 figures' setting), BENCH_RTGT_ARGS (more `rtgt serve` options;
# default "--cores 2": two unpinned reactors with the default adaptive polling, which on this
# 2-vCPU soft-RoCE guest lets the soft-RoCE work of the posts run on both vCPUs, as the kernel
# targets' does — docs/performance.md, guest-srp; the round-1 setting was "--idle-sleep-us 0"
# with -m 0x1),
# BENCH_PARTS ("nvme srp tcp"). Each job also records the guest's CPU use
# (all vCPUs, from /proc/stat; 100 = one vCPU) and, for rtgt, the daemon's own.
# BENCH_PERF (a job name, e.g. seqread-128k-qd8; needs RTGT_E2E_BINS=/usr/bin/perf on the host):
# in round 1 that job runs under `perf record -a -g` (cpu-clock, both vCPUs), and
# perf-<target>-<job>.txt holds where the guest's CPU went, by command and by kernel or user
# symbol, for each target side by side.
# After each job the log also has: each vCPU's busy share; for rtgt, its context switches,
# reactor sleeps and SRP/TCP polls per I/O, for NVMe/TCP its socket reads, sends and sends that
# would block per I/O; soft-RoCE's hw_counters per I/O (packets, retries,
# duplicate requests, RNR NAKs); for SRP, ib_srp's req_lim (min/max while the job ran),
# queue_depth and can_queue. Counts per I/O do not depend on the host's load as IOPS do.
# e2e-timeout: 1800

ROUNDS=${BENCH_ROUNDS:-3}
log "guest clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)" \
  "(available: $(cat /sys/devices/system/clocksource/clocksource0/available_clocksource))"
RUNTIME=${BENCH_RUNTIME:-10}
SIZE=${BENCH_SIZE_MIB:-1024}
MASK=${BENCH_RTGT_MASK-}
RTGT_ARGS=${BENCH_RTGT_ARGS---cores 2}
PARTS=${BENCH_PARTS:-nvme srp tcp}
PERF_JOB=${BENCH_PERF:-}
if [ -n "$PERF_JOB" ] && [ ! -x "$E2E_BIN/perf" ]; then
  fail "BENCH_PERF=$PERF_JOB needs perf in the guest: run with RTGT_E2E_BINS=/usr/bin/perf"
fi
OUT=$E2E_LOGDIR/side-by-side.json
NQN=nqn.2016-06.io.rtgt:bench
echo '{}' > "$OUT"

cpu_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat; }
rtgt_ticks() { if rtgt_alive; then awk '{ print $14 + $15 }' "/proc/$RTGT_PID/stat"; else echo 0; fi; }
# Per-vCPU busy and total ticks ("busy0 total0 busy1 total1 ...").
vcpu_ticks() { awk '/^cpu[0-9]/ { printf "%d %d ", $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat; }
# rtgt's context switches (voluntary: it slept; nonvoluntary: preempted; all threads) and its
# reactors' sleeps and polls.
rtgt_counts() {
  local cs="0 0" sl=0 po="0 0 0 0"
  if rtgt_alive; then
    cs=$(awk '/^voluntary_ctxt_switches/ { s += $2 } /^nonvoluntary_ctxt_switches/ { n += $2 }
              END { print s + 0, n + 0 }' \
      /proc/"$RTGT_PID"/task/*/status 2> /dev/null || true)
    sl=$(rtgt_rpc framework_get_reactors 2> /dev/null | jq '[.reactors[].sleeps] | add // 0' || echo 0)
    po=$(rtgt_rpc nvmf_get_stats 2> /dev/null \
      | jq -r '[.poll_groups[].transports[]] as $t
               | [([$t[] | .polls // 0] | add // 0), ([$t[] | .socket_reads // 0] | add // 0),
                  ([$t[] | .socket_sends // 0] | add // 0),
                  ([$t[] | .socket_sends_blocked // 0] | add // 0)] | map(tostring) | join(" ")' \
      || echo "0 0 0 0")
  fi
  echo "$cs $sl $po"
}
# soft-RoCE's own counters (rxe0 port 1 hw_counters: packets, RNR NAKs, retries, ...), "name=value".
rxe_counters() {
  local f
  for f in /sys/class/infiniband/*/ports/1/hw_counters/*; do
    [ -r "$f" ] && printf '%s=%s ' "${f##*/}" "$(cat "$f" 2> /dev/null || echo 0)"
  done
  echo
}
# The SRP initiator's request limit (ib_srp's req_lim: the smallest over the channels), sampled
# every 2 s while a job runs: its minimum shows whether credits ran short.
# Bash built-ins only: the sampler must not take the CPU the job measures (a fork and exec in the
# emulated guest costs milliseconds).
srp_req_lim() {
  local f v m=
  for f in /sys/class/scsi_host/host*/req_lim; do
    [ -r "$f" ] && read -r v < "$f" && { [ -z "$m" ] || [ "$v" -lt "$m" ]; } && m=$v
  done
  echo "$m"
}

RDMA_JOBS=("randread-4k-qd32:--rw=randread --bs=4k --iodepth=32"
           "seqread-128k-qd8:--rw=read --bs=128k --iodepth=8"
           "randwrite-4k-qd32:--rw=randwrite --bs=4k --iodepth=32"
           "randrw70-4k-qd32:--rw=randrw --rwmixread=70 --bs=4k --iodepth=32")
TCP_JOBS=("randread-4k-qd32:--rw=randread --bs=4k --iodepth=32"
          "seqread-128k-qd8:--rw=read --bs=128k --iodepth=8"
          "randwrite-4k-qd32:--rw=randwrite --bs=4k --iodepth=32")

# bench_jobs DEV LABEL ROUND JOB...: the fio jobs (NAME:OPTIONS) on DEV; appends them to LABEL's
# runs in $OUT (a write job's figures are its writes'; a mixed job's IOPS and MiB/s are reads
# plus writes, its latencies the reads'). rtgt_cpu_us_per_io: rtgt's CPU time per I/O.
bench_jobs() {
  local dev=$1 label=$2 round=$3 j; shift 3
  for j in "$@"; do
    local name=${j%%:*} opts=${j#*:} f
    f=$E2E_LOGDIR/$label-$name-$round.json
    local c0 r0 c1 r1 t0 t1
    local perf_pid=
    if [ "$name" = "$PERF_JOB" ] && [ "$round" = 1 ]; then
      "$E2E_BIN/perf" record -q -a -g -F 499 -o "$E2E_LOGDIR/perf-$label-$name.data" \
        -- sleep $((RUNTIME + 2)) > /dev/null 2>&1 &
      perf_pid=$!
    fi
    local v0 v1 k0 k1 x0 x1 lim_pid= lim_f=$E2E_RUN/req_lim
    v0=$(vcpu_ticks); k0=$(rtgt_counts); x0=$(rxe_counters)
    if [ -n "$(srp_req_lim)" ]; then
      : > "$lim_f"
      (while :; do srp_req_lim >> "$lim_f"; sleep 2; done) &
      lim_pid=$!
    fi
    read -r c0 t0 <<< "$(cpu_ticks)"; r0=$(rtgt_ticks); s0=$(date +%s.%N)
    # shellcheck disable=SC2086
    fio_json "$label-$name-$round" --name="$name" --filename="$dev" --direct=1 --ioengine=libaio \
      $opts --time_based --runtime="$RUNTIME" --ramp_time=2 --numjobs=1 \
      || fail "fio $name on $label ($dev) failed"
    read -r c1 t1 <<< "$(cpu_ticks)"; r1=$(rtgt_ticks); s1=$(date +%s.%N)
    v1=$(vcpu_ticks); k1=$(rtgt_counts); x1=$(rxe_counters)
    [ -z "$lim_pid" ] || { kill "$lim_pid"; wait "$lim_pid" 2> /dev/null || true; }
    [ -z "$perf_pid" ] || perf_summary "$perf_pid" "$label-$name"
    local gcpu tcpu ncpu hz
    ncpu=$(nproc); hz=$(getconf CLK_TCK 2> /dev/null || echo 100)
    gcpu=$(awk -v a="$c0" -v b="$c1" -v x="$t0" -v y="$t1" -v n="$ncpu" \
      'BEGIN { printf "%.1f", (b - a) / (y - x) * n * 100 }')
    tcpu=$(awk -v a="$r0" -v b="$r1" -v hz="$hz" -v s="$s0" -v e="$s1" \
      'BEGIN { printf "%.1f", (b - a) / hz / (e - s) * 100 }')
    jq -e '.jobs[0].error == 0' "$f" > /dev/null || fail "fio $name on $label reported errors"
    jq --arg l "$label" --arg n "$name" --slurpfile r "$f" \
      '$r[0].jobs[0] as $j
       | ($j | if .read.io_bytes > 0 then .read else .write end) as $d
       | ($j.read.iops + $j.write.iops) as $iops
       | .[$l][$n].runs += [{iops: $iops, mib_s: (($j.read.bw + $j.write.bw) / 1024),
                    lat_us_mean: ($d.lat_ns.mean / 1000),
                    lat_us_p99: ($d.clat_ns.percentile["99.000000"] / 1000),
                    usr_cpu: $r[0].jobs[0].usr_cpu, sys_cpu: $r[0].jobs[0].sys_cpu,
                    guest_cpu_percent: '"$gcpu"', rtgt_cpu_percent: '"$tcpu"',
                    rtgt_cpu_us_per_io: (if $iops > 0 then '"$tcpu"' / 100 / $iops * 1e6 else 0 end)}]' \
      "$OUT" > "$OUT.tmp" && mv "$OUT.tmp" "$OUT"
    log "round $round $label $name: $(jq -r --arg l "$label" --arg n "$name" \
      '.[$l][$n].runs[-1] | "\(.iops | floor) IOPS, \(.mib_s | floor) MiB/s, mean \(.lat_us_mean | floor) us, guest CPU \(.guest_cpu_percent)%, rtgt \(.rtgt_cpu_percent)%"' "$OUT")"
    local ios
    ios=$(jq --arg l "$label" --arg n "$name" '.[$l][$n].runs[-1] | .iops' "$OUT")
    log "  per vCPU busy: $(awk -v a="$v0" -v b="$v1" 'BEGIN { n = split(a, x, " "); split(b, y, " ");
        for (i = 1; i < n; i += 2) printf "cpu%d %.0f%% ", (i - 1) / 2, (y[i] - x[i]) / (y[i + 1] - x[i + 1] + 1e-9) * 100 }')"
    if [ "$r1" != 0 ]; then
      log "  rtgt per I/O (incl. ramp): $(awk -v a="$k0" -v b="$k1" -v io="$ios" -v t="$(awk -v s="$s0" -v e="$s1" 'BEGIN { print e - s }')" \
        'BEGIN { split(a, x, " "); split(b, y, " "); n = io * t + 1e-9;
          printf "%.2f voluntary and %.2f nonvoluntary context switches, %.2f reactor sleeps, %.2f transport polls (SRP, TCP)", (y[1] - x[1]) / n, (y[2] - x[2]) / n, (y[3] - x[3]) / n, (y[4] - x[4]) / n
          if (y[6] > 0) printf ", %.2f socket reads, %.2f sendmsg, %.3f sendmsg that would block", (y[5] - x[5]) / n, (y[6] - x[6]) / n, (y[7] - x[7]) / n }')"
    fi
    log "  soft-RoCE counters per I/O (incl. ramp): $(awk -v a="$x0" -v b="$x1" -v io="$ios" \
      -v t="$(awk -v s="$s0" -v e="$s1" 'BEGIN { print e - s }')" 'BEGIN {
        n = split(a, x, " "); split(b, y, " "); m = io * t + 1e-9
        for (i = 1; i <= n; i++) { split(x[i], p, "="); split(y[i], q, "=")
          if (q[2] - p[2] > 0) printf "%s %.3g ", p[1], (q[2] - p[2]) / m } }')"
    [ -z "$lim_pid" ] || log "  ib_srp req_lim during the job: min $(sort -n "$lim_f" | head -1), max $(sort -n "$lim_f" | tail -1);" \
      "queue_depth $(cat "/sys/block/${dev##*/}/device/queue_depth" 2> /dev/null || echo ?)," \
      "can_queue $(cat /sys/class/scsi_host/host*/can_queue 2> /dev/null | tr '\n' ' ' || true)"
  done
}

# perf_summary PID NAME: waits for the perf record PID, writes perf-NAME.txt (the guest's CPU by
# command, by command and object, then by command and symbol, no call chains) and removes the raw data.
perf_summary() {
  wait "$1" || fail "perf record for $2 failed"
  local d=$E2E_LOGDIR/perf-$2.data t=$E2E_LOGDIR/perf-$2.txt
  { echo "# perf record -a -g -F 499 during $2 (both vCPUs, cpu-clock)"
    "$E2E_BIN/perf" report -i "$d" --stdio --no-children --sort comm --percent-limit 1 2> /dev/null \
      | grep -v '^$'
    "$E2E_BIN/perf" report -i "$d" --stdio --no-children -g none --sort comm,dso \
      --percent-limit 0.5 2> /dev/null | grep -v '^$'
    "$E2E_BIN/perf" report -i "$d" --stdio --no-children -g none --sort comm,dso,sym \
      --percent-limit 0.7 2> /dev/null | grep -v '^$'
    # rtgt's reactors, inclusive of callees (system calls and what runs inside them): which
    # calls carry the cost.
    if [[ $2 == rtgt-* ]]; then
      echo "# rtgt reactors, children included (inclusive cost per symbol)"
      { "$E2E_BIN/perf" report -i "$d" --stdio --children --comms reactor_0,reactor_1 \
          --sort sym -g none --percent-limit 0.5 2> /dev/null || true; } \
        | grep -v '^$' | grep -v '^#' | head -80 || true
    fi
  } > "$t"
  rm -f "$d"
  log "perf profile of $2: $(basename "$t") ($(grep -c '%' "$t") lines)"
}

rtgt_common() { # TRTYPE PORT
  # shellcheck disable=SC2086
  start_rtgt ${MASK:+-m "$MASK"} $RTGT_ARGS
  rtgt_rpc_ok nvmf_create_transport "{\"trtype\":\"$1\"}" > /dev/null
  rtgt_rpc_ok bdev_null_create \
    "{\"name\":\"Null0\",\"num_blocks\":$((SIZE * 2048)),\"block_size\":512}" > /dev/null
  rtgt_rpc_ok nvmf_create_subsystem "{\"nqn\":\"$NQN\",\"allow_any_host\":true}" > /dev/null
  rtgt_rpc_ok nvmf_subsystem_add_ns "{\"nqn\":\"$NQN\",\"namespace\":{\"bdev_name\":\"Null0\"}}" \
    > /dev/null
  rtgt_rpc_ok nvmf_subsystem_add_listener "$(jq -nc --arg nqn "$NQN" --arg t "$1" \
    --arg ip "$E2E_IP" --arg port "$2" \
    '{nqn:$nqn, listen_address:{trtype:$t, adrfam:"IPv4", traddr:$ip, trsvcid:$port}}')" \
    > /dev/null
}

kernel_nvme() {
  nvmet_peer_setup -b null -s "$SIZE"
  local dev
  dev=$(nvme_connect "$NVMET_PEER_NQN" "$E2E_IP" "$NVMET_PEER_PORT")
  bench_jobs "$dev" kernel-nvmet "$1" "${RDMA_JOBS[@]}"
  nvme_disconnect "$NVMET_PEER_NQN"
  nvmet_peer_teardown
}
rtgt_nvme() {
  rtgt_common RDMA "$RTGT_NVME_PORT"
  local dev
  dev=$(nvme_connect "$NQN")
  bench_jobs "$dev" rtgt-nvme "$1" "${RDMA_JOBS[@]}"
  nvme_disconnect "$NQN"
  stop_rtgt
}
kernel_srp() {
  srpt_peer_setup -b null -s "$SIZE"
  local dev
  dev=$(srp_login "$SRPT_PEER_TARGET")
  bench_jobs "$dev" kernel-srpt "$1" "${RDMA_JOBS[@]}"
  srp_logout_all
  srpt_peer_teardown
}
rtgt_srp() {
  rtgt_common SRP "$RTGT_SRP_PORT"
  local dev
  dev=$(srp_login "$(srp_login_spec "$NQN")")
  bench_jobs "$dev" rtgt-srp "$1" "${RDMA_JOBS[@]}"
  srp_logout_all
  stop_rtgt
}
kernel_tcp() {
  nvmet_peer_setup -b null -s "$SIZE" -t tcp
  local dev
  dev=$(NVME_TRANSPORT=tcp nvme_connect "$NVMET_PEER_NQN" "$E2E_IP" "$NVMET_PEER_PORT")
  bench_jobs "$dev" kernel-nvmet-tcp "$1" "${TCP_JOBS[@]}"
  nvme_disconnect "$NVMET_PEER_NQN"
  nvmet_peer_teardown
}
rtgt_tcp() {
  rtgt_common TCP "$RTGT_NVME_PORT"
  local dev
  dev=$(NVME_TRANSPORT=tcp nvme_connect "$NQN")
  bench_jobs "$dev" rtgt-tcp "$1" "${TCP_JOBS[@]}"
  nvme_disconnect "$NQN"
  stop_rtgt
}

for round in $(seq 1 "$ROUNDS"); do
  for part in $PARTS; do
    if [ $((round % 2)) = 1 ]; then
      "kernel_$part" "$round"; "rtgt_$part" "$round"
    else
      "rtgt_$part" "$round"; "kernel_$part" "$round"
    fi
  done
done

# Medians of the rounds.
jq 'def median: sort | if length % 2 == 1 then .[length / 2 | floor]
                       else (.[length / 2 - 1] + .[length / 2]) / 2 end;
    with_entries(.value |= with_entries(.value |= (. + (
      .runs as $r | {iops: ($r | map(.iops) | median), mib_s: ($r | map(.mib_s) | median),
        lat_us_mean: ($r | map(.lat_us_mean) | median), lat_us_p99: ($r | map(.lat_us_p99) | median),
        guest_cpu_percent: ($r | map(.guest_cpu_percent) | median),
        rtgt_cpu_percent: ($r | map(.rtgt_cpu_percent) | median),
        rtgt_cpu_us_per_io: ($r | map(.rtgt_cpu_us_per_io) | median)}))))' \
  "$OUT" > "$OUT.tmp" && mv "$OUT.tmp" "$OUT"

# Ratios rtgt / kernel.
jq '. as $r
    | .ratios = (
        [ {p: "nvme", a: "rtgt-nvme", b: "kernel-nvmet"}, {p: "srp", a: "rtgt-srp", b: "kernel-srpt"},
          {p: "tcp", a: "rtgt-tcp", b: "kernel-nvmet-tcp"} ]
        | map(select($r[.a] != null and $r[.b] != null))
        | map(. as $x | {key: $x.p, value: ($r[$x.a] | keys | map({key: ., value:
            {iops: ($r[$x.a][.].iops / $r[$x.b][.].iops),
             mib_s: ($r[$x.a][.].mib_s / $r[$x.b][.].mib_s)}}) | from_entries)})
        | from_entries)
    | .conditions = {rounds: '"$ROUNDS"', runtime_s: '"$RUNTIME"', size_mib: '"$SIZE"', rtgt_cpumask: "'"$MASK"'",
                     rtgt_args: "'"$RTGT_ARGS"'",
                     vcpus: '"$(nproc)"', kernel: "'"$(uname -r)"'",
                     clocksource: "'"$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"'"}' \
  "$OUT" > "$OUT.tmp" && mv "$OUT.tmp" "$OUT"
log "ratios rtgt/kernel: $(jq -c '.ratios' "$OUT")"
cat "$OUT"
