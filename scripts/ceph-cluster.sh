#!/usr/bin/env bash
# A throw-away Ceph cluster for tests and benchmarks: one monitor and one OSD on one address
# (loopback by default), the memstore object store (data in RAM, saved to DIR when the OSD
# stops cleanly, so `osd-stop` + `osd-start` keep the data), pool `rbd`, auth off or cephx.
# Several clusters can run at once: each picks a free monitor port; the OSD binds free ports.
#
# Usage:
#   scripts/ceph-cluster.sh start  DIR [--cephx] [--port N] [--netns NS --addr IP] [--owner-pid PID]
#   scripts/ceph-cluster.sh stop   DIR          stop the daemons and remove DIR
#   scripts/ceph-cluster.sh status DIR          exit 0 if the cluster serves I/O
#   scripts/ceph-cluster.sh osd-stop  DIR       stop the OSD cleanly (its data is saved in DIR)
#   scripts/ceph-cluster.sh osd-start DIR       start it again and wait until the pool serves I/O
#   scripts/ceph-cluster.sh mon-stop  DIR / mon-start DIR   the same for the monitor
#
# `start` prints the path of the cluster's ceph.conf on stdout (use it as CEPH_CONF); progress
# and the time it took go to stderr. DIR must be under /tmp (or $TMPDIR) and is created anew.
# With --cephx, client.admin's keyring is DIR/ceph.client.admin.keyring and a restricted client
# `client.rtgt` (profile rbd on pool rbd) gets DIR/ceph.client.rtgt.keyring; both are found by
# name through the `keyring` option of ceph.conf. --netns runs the daemons inside an existing
# network namespace, listening on --addr (which must be configured in it). --owner-pid stops the
# cluster (and removes DIR) when that process exits, so a crashed test leaves nothing behind.
#
# Needs the Debian packages ceph-mon, ceph-osd and ceph-common (scripts/install-deps.sh).
set -euo pipefail

die() { echo "ceph-cluster: $*" >&2; exit 1; }
say() { echo "ceph-cluster: $*" >&2; }

cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
shift 2
cephx=0; port=""; netns=""; addr=127.0.0.1; owner=""
while [ $# -gt 0 ]; do
  case "$1" in
    --cephx) cephx=1 ;;
    --port) port=${2:?--port needs a value}; shift ;;
    --netns) netns=${2:?--netns needs a value}; shift ;;
    --addr) addr=${2:?--addr needs a value}; shift ;;
    --owner-pid) owner=${2:?--owner-pid needs a value}; shift ;;
    *) die "unknown option $1" ;;
  esac
  shift
done

case "$dir" in
  /tmp/?*|"${TMPDIR:-/tmp}"/?*) ;;
  *) die "DIR must be under /tmp (cluster data is removed on stop): $dir" ;;
esac
dir=${dir%/}
conf=$dir/ceph.conf

for t in ceph-mon ceph-osd ceph ceph-authtool monmaptool rados; do
  command -v "$t" >/dev/null || die "$t not found: run scripts/install-deps.sh (packages ceph-mon ceph-osd ceph-common)"
done

# Runs a command in the cluster's network namespace, if any.
in_ns() { if [ -n "$netns" ]; then ip netns exec "$netns" "$@"; else "$@"; fi; }
# A ceph client command with a time bound, so that a dead cluster never hangs the script.
cli() { in_ns timeout 20 "$@" --conf "$conf" --client_mount_timeout 10; }

load_env() {
  [ -f "$dir/cluster.env" ] || die "no cluster in $dir"
  # shellcheck disable=SC1091
  . "$dir/cluster.env"
}

pid_of() { local f="$dir/$1.pid"; [ -f "$f" ] && cat "$f" || true; }
alive() { local p; p=$(pid_of "$1"); [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }

# Stops a daemon (SIGTERM, then SIGKILL after 15 s) and waits for it to be gone.
stop_daemon() {
  local name=$1 p i
  p=$(pid_of "$name")
  [ -n "$p" ] || return 0
  kill -TERM "$p" 2>/dev/null || { rm -f "$dir/$name.pid"; return 0; }
  for i in $(seq 150); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$p" 2>/dev/null; then
    say "$name (pid $p) did not stop in 15 s; killing it"
    kill -KILL "$p" 2>/dev/null || true
    for i in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$dir/$name.pid"
}

# Waits until an object can be written to and read from pool rbd (up to $1 seconds).
wait_io() {
  local deadline=$(( $(date +%s) + $1 ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    if cli rados -p rbd put rtgt-probe "$conf" >/dev/null 2>&1 \
        && cli rados -p rbd stat rtgt-probe >/dev/null 2>&1; then
      cli rados -p rbd rm rtgt-probe >/dev/null 2>&1 || true
      return 0
    fi
    sleep 0.3
  done
  return 1
}

start_mon() { in_ns ceph-mon --conf "$conf" -i a 2>>"$dir/log/mon.a.stderr"; }
start_osd() { in_ns ceph-osd --conf "$conf" -i 0 2>>"$dir/log/osd.0.stderr"; }

port_free() { ! in_ns bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$addr" "$1" 2>/dev/null; }

write_conf() {
  local auth=none
  [ "$cephx" = 1 ] && auth=cephx
  cat > "$conf" <<EOF
# Written by scripts/ceph-cluster.sh for a throw-away test cluster.
[global]
fsid = $fsid
mon_host = v2:$addr:$port
public_addr = $addr
auth_cluster_required = $auth
auth_service_required = $auth
auth_client_required = $auth
keyring = $dir/ceph.\$name.keyring
run_dir = $dir
admin_socket = $dir/\$name.asok
pid_file = $dir/\$name.pid
log_file = $dir/log/\$name.log
mon_data = $dir/mon
osd_data = $dir/osd
osd_objectstore = memstore
memstore_device_bytes = 2147483648
memstore_page_set = true
osd_memory_target = 536870912
osd_fast_shutdown = false
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_crush_chooseleaf_type = 0
mon_allow_pool_size_one = true
mon_allow_pool_delete = true
mon_warn_on_pool_no_redundancy = false
# The machine's disk is shared and often nearly full; the monitor's store is tiny.
mon_data_avail_crit = 0
mon_data_avail_warn = 1
ms_bind_msgr1 = false
EOF
}

do_start() {
  local t0 tries
  t0=$(date +%s%N)
  if [ -d "$dir" ]; then
    if [ -f "$dir/cluster.env" ]; then
      ( do_stop ) || true
    fi
    rm -rf "$dir"
  fi
  mkdir -p "$dir/mon" "$dir/osd" "$dir/log"
  fsid=$(cat /proc/sys/kernel/random/uuid)
  local fixed_port=$port
  for tries in 1 2 3 4 5; do
    if [ -z "$fixed_port" ]; then
      port=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
      port_free "$port" || continue
    fi
    write_conf
    rm -rf "$dir/mon"; mkdir -p "$dir/mon"
    # Keys: mon., client.admin (all caps); with cephx the OSD's key is made at its mkfs.
    ceph-authtool --create-keyring "$dir/mon.keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
    ceph-authtool --create-keyring "$dir/ceph.client.admin.keyring" --gen-key -n client.admin \
      --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' >/dev/null
    ceph-authtool "$dir/mon.keyring" --import-keyring "$dir/ceph.client.admin.keyring" >/dev/null
    monmaptool --create --clobber --add a "v2:$addr:$port" --fsid "$fsid" "$dir/monmap" >/dev/null
    in_ns ceph-mon --conf "$conf" --mkfs -i a --monmap "$dir/monmap" --keyring "$dir/mon.keyring"
    if start_mon && cli ceph mon stat >/dev/null 2>&1; then
      break
    fi
    stop_daemon mon.a
    grep -h -- ' -1 ' "$dir/log/mon.a.log" "$dir/log/mon.a.stderr" 2>/dev/null | tail -n 3 >&2 || true
    [ -z "$fixed_port" ] || die "the monitor did not start on $addr:$port (see $dir/log/mon.a.log)"
    say "monitor did not come up on port $port; trying another"
  done
  alive mon.a || die "the monitor did not start (see $dir/log/mon.a.log)"
  cat > "$dir/cluster.env" <<EOF
fsid=$fsid
port=$port
addr=$addr
netns=$netns
cephx=$cephx
EOF

  local id
  id=$(cli ceph osd create)
  [ "$id" = 0 ] || die "unexpected OSD id $id"
  if [ "$cephx" = 1 ]; then
    # The OSD's key is registered first: its mkfs fetches the configuration from the monitor.
    ceph-authtool --create-keyring "$dir/ceph.osd.0.keyring" --gen-key -n osd.0 >/dev/null
    cli ceph auth add osd.0 osd 'allow *' mon 'allow profile osd' -i "$dir/ceph.osd.0.keyring" >/dev/null 2>&1
  fi
  in_ns ceph-osd --conf "$conf" -i 0 --mkfs 2>>"$dir/log/mkfs.log" \
    || die "OSD mkfs failed (see $dir/log/mkfs.log)"
  start_osd
  cli ceph osd pool create rbd 8 >/dev/null 2>&1
  cli ceph osd pool application enable rbd rbd >/dev/null 2>&1 || true
  if [ "$cephx" = 1 ]; then
    cli ceph auth get-or-create client.rtgt mon 'profile rbd' osd 'profile rbd pool=rbd' \
      -o "$dir/ceph.client.rtgt.keyring" >/dev/null 2>&1
  fi
  wait_io 60 || die "pool rbd does not serve I/O after 60 s (see $dir/log)"
  if [ -n "$owner" ]; then
    # A watchdog that tears the cluster down when the owner goes away.
    nohup setsid bash -c 'while kill -0 "$1" 2>/dev/null && [ -d "$2" ]; do sleep 1; done; [ -d "$2" ] && exec "$3" stop "$2"' \
      _ "$owner" "$dir" "$(readlink -f "$0")" >/dev/null 2>&1 &
    echo $! > "$dir/watchdog.pid"
  fi
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  say "cluster up in $((ms / 1000)).$(( ms % 1000 / 100 )) s: mon v2:$addr:$port, pool rbd, auth $([ "$cephx" = 1 ] && echo cephx || echo none)"
  echo "$conf"
}

do_stop() {
  [ -d "$dir" ] || return 0
  [ -f "$dir/cluster.env" ] && load_env
  stop_daemon osd.0
  stop_daemon mon.a
  local w; w=$(pid_of watchdog)
  if [ -n "$w" ] && [ "$w" != "$PPID" ] && [ "$w" != "$$" ]; then kill "$w" 2>/dev/null || true; fi
  rm -rf "$dir"
}

do_status() {
  load_env
  alive mon.a || { say "monitor not running"; return 1; }
  alive osd.0 || { say "OSD not running"; return 1; }
  wait_io 10 || { say "pool rbd does not serve I/O"; return 1; }
  echo "mon v2:$addr:$port, osd.0 up, pool rbd serves I/O"
}

case "$cmd" in
  start) do_start ;;
  stop) do_stop ;;
  status) do_status ;;
  osd-stop) load_env; stop_daemon osd.0 ;;
  osd-start)
    load_env
    alive osd.0 && die "osd.0 is running"
    start_osd
    wait_io 60 || die "pool rbd does not serve I/O 60 s after the OSD restarted"
    ;;
  mon-stop) load_env; stop_daemon mon.a ;;
  mon-start)
    load_env
    alive mon.a && die "mon.a is running"
    start_mon
    ;;
  *) die "unknown command '$cmd' (start, stop, status, osd-stop, osd-start, mon-stop, mon-start)" ;;
esac
