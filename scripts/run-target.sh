#!/usr/bin/env bash
# Installs the build dependencies, builds rtgt, and runs it with an example configuration: a
# 64 MiB malloc bdev exported by nqn.2016-06.io.spdk:cnode1 over NVMe/TCP on 127.0.0.1:4420
# (any Linux host with nvme-tcp: nvme connect -t tcp -a 127.0.0.1 -s 4420 -n ...) and over
# NVMe/RDMA.
#
# Usage: scripts/run-target.sh [CONFIG.json] [extra rtgt serve options]
#   RTGT_ADDR=192.168.1.10 scripts/run-target.sh     listen on this RDMA-capable address
#
# On a machine without an RDMA device the RDMA transport runs on the in-process simulated fabric
# (--fabric sim); NVMe/TCP works either way.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --build-only
cargo build --release -p rtgt
BIN=${CARGO_TARGET_DIR:-target}/release/rtgt
CONFIG=${1:-examples/nvmf-malloc.json}
[ $# -gt 0 ] && shift
FABRIC=rdma
if ! ls /sys/class/infiniband/ 2>/dev/null | grep -q .; then
  echo "run-target: no RDMA device found; using the simulated fabric (--fabric sim)"
  FABRIC=sim
fi
TMP=$(mktemp /tmp/rtgt-config.XXXXXX.json)
trap 'rm -f "$TMP"' EXIT
ADDR=${RTGT_ADDR:-10.0.0.1}
sed "s/\"10.0.0.1\"/\"$ADDR\"/" "$CONFIG" > "$TMP"
SOCK=${RTGT_SOCKET:-/var/tmp/spdk.sock}
echo "run-target: rtgt serve --fabric $FABRIC -r $SOCK --json $CONFIG (listening on TCP 127.0.0.1:4420, RDMA $ADDR:4420)"
echo "run-target: try: nvme connect -t tcp -a 127.0.0.1 -s 4420 -n nqn.2016-06.io.spdk:cnode1"
echo "run-target: try: rtgt rpc -s $SOCK nvmf_get_subsystems   (or SPDK's rpc.py -s $SOCK ...)"
"$BIN" serve --fabric "$FABRIC" -r "$SOCK" --json "$TMP" "$@"
