#!/bin/bash
# RBD end to end against `rbd bench`, 4 KiB QD32 random reads and writes, in alternating rounds
# on one test cluster (scripts/ceph-cluster.sh) and one image: `rbd bench` with its defaults,
# `rbd bench` with the librbd options rtgt sets (bdev-rbd/src/rados.rs), rtgt-bench with the
# NVMe host on the reactor's thread (--inline-initiator) and on a thread of its own. Prints one
# line of IOPS per round and job type (docs/performance.md, "RBD end to end").
#
#   CARGO_TARGET_DIR=target bench/scripts/rbd-vs-rbd-bench.sh [ROUNDS]
set -e
cd "$(dirname "$0")/../.."
B=${CARGO_TARGET_DIR:-target}/release/rtgt-bench
ROUNDS=${1:-5}
D=$(mktemp -d /tmp/rbd-vs-rbd-bench.XXXXXX)
rmdir "$D"
CONF=$(scripts/ceph-cluster.sh start $D)
trap "scripts/ceph-cluster.sh stop $D; rm -f $D.json" EXIT
rbd --conf $CONF create rbd/bench --size 256M
rbd --conf $CONF bench --io-type write --io-pattern seq --io-size 128K --io-threads 32 --io-total 256M rbd/bench > /dev/null
OPTS="--rbd_cache=false --rbd_io_scheduler=none --rbd_skip_partial_discard=false --rados_osd_op_timeout=20 --rados_mon_op_timeout=20"
rbdb() { # type extra...
  local t=$1; shift
  local tot=128M; [ $t = write ] && tot=64M
  rbd --conf $CONF bench --io-type $t --io-pattern rand --io-size 4K --io-threads 32 --io-total $tot "$@" rbd/bench 2>&1 | awk '/elapsed/{for(i=1;i<=NF;i++) if($i=="ops/sec:") print $(i+1)}'
}
rtgt() { # rw [extra]
  local rw=$1; shift
  $B --transport rdma --reactors 1 --qpairs 1 --qd 32 --bs 4096 --rw $rw --duration 4 --warmup 1 \
     --bdev rbd --rbd-conf $CONF --rbd-image bench --idle-sleep-us 20 "$@" --json "$D.json" > /dev/null 2>&1
  jq -r '.iops|floor' "$D.json"
}
for r in $(seq 1 "$ROUNDS"); do
  for t in read write; do
    rw=rand$t
    a=$(rbdb $t); b=$(rbdb $t $OPTS); c=$(rtgt $rw --inline-initiator); d=$(rtgt $rw)
    echo "round $r $rw: rbd-bench-default $a  rbd-bench-rtgt-opts $b  rtgt-bench-inline $c  rtgt-bench-host-thread $d  load $(cut -d' ' -f1 /proc/loadavg)"
  done
done
