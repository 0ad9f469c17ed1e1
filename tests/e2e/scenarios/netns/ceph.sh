#!/usr/bin/env bash
# Namespace hook of the Ceph scenarios (`# e2e-netns: netns/ceph.sh`; netns/ceph-cephx.sh is the
# same with cephx on). run.sh calls it inside the guest's network namespace, in $E2E_NETNS_DIR:
#
#   ceph.sh start   a one-monitor one-OSD memstore cluster (scripts/ceph-cluster.sh) listening on
#                   $E2E_NETNS_HOST_IP (monitor v2 port 3300), pool `rbd`, the images of
#                   $CEPH_E2E_IMAGES made in advance; an nftables table that can cut guest
#                   addresses off the cluster; the control channel (netns/ceph-control.py) on
#                   $E2E_NETNS_HOST_IP:7300. Then it writes what the guest needs to
#                   $E2E_NETNS_ENV (below) and returns.
#   ceph.sh stop    stops the control channel and the cluster (its logs are kept in
#                   $E2E_NETNS_DIR/ceph-logs) and removes the cluster's directory.
#
# The guest gets (exported to its scenarios, and used by /init to write /etc/ceph/ceph.conf and
# the client's keyring, see lib.sh's ceph_guest_setup):
#   CEPH_MON_HOST      v2:10.78.0.1:3300
#   CEPH_FSID          the cluster's fsid
#   CEPH_AUTH          none or cephx
#   CEPH_CLIENT_ID     rtgt (client.rtgt: with cephx a user restricted to `profile rbd` on pool rbd)
#   CEPH_CLIENT_KEY    client.rtgt's key (cephx only; a throw-away key of a throw-away cluster)
#   CEPH_POOL          rbd
#   CEPH_IMAGES        the images made in advance (names; 64 MiB each unless NAME:SIZE was given)
#   CEPH_CONTROL       10.78.0.1:7300, the control channel (lib.sh's ceph_host)
#   CEPH_GW_ADDRS      extra guest addresses for gateways' Ceph clients (10.78.0.3 10.78.0.4),
#   E2E_NETNS_GUEST_EXTRA_IPS   which /init adds to ns0 (lib.sh's with_src_addr uses them)
#
# Settings (environment of run.sh): CEPH_E2E_CEPHX=1 (cephx; ceph-cephx.sh sets it),
# CEPH_E2E_IMAGES (default "e2e0 e2e1 e2e2"; NAME or NAME:SIZE with SIZE as rbd takes it).
set -euo pipefail

HOOK_DIR=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
ROOT=$(cd "$HOOK_DIR/../../../.." && pwd)
CLUSTER_SH=$ROOT/scripts/ceph-cluster.sh
MON_PORT=3300
CONTROL_PORT=7300
GW_ADDRS="10.78.0.3 10.78.0.4"
: "${CEPH_E2E_IMAGES:=e2e0 e2e1 e2e2}"
: "${CEPH_E2E_CEPHX:=0}"
: "${E2E_NETNS:?run by run.sh in a namespace}" "${E2E_NETNS_DIR:?}" "${E2E_NETNS_ENV:?}"
CLUSTER_DIR=/tmp/rtgt-e2e-ceph-$E2E_NETNS
CONF=$CLUSTER_DIR/ceph.conf

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }

# run.sh's pid is in the namespace's name (rtgt-e2e-<pid>-<n>): the cluster goes with it if
# run.sh dies without calling `stop`.
owner_pid() {
  local p=${E2E_NETNS#rtgt-e2e-}
  p=${p%%-*}
  if [[ $p =~ ^[0-9]+$ ]] && kill -0 "$p" 2> /dev/null; then echo "$p"; fi
}

nft_setup() {
  # Partitions: a guest address in the set loses all traffic to and from the namespace (the
  # cluster and the control channel); the counters say how many packets were dropped.
  nft -f - <<'EOF'
table inet rtgt_e2e {
  set partitioned { type ipv4_addr; }
  chain input { type filter hook input priority 0; ip saddr @partitioned counter drop; }
  chain output { type filter hook output priority 0; ip daddr @partitioned counter drop; }
}
EOF
}

start() {
  local t0 ta cephx=() owner img name size key="" auth=none
  command -v nft > /dev/null || { echo "nft not found: install nftables (scripts/install-deps.sh)"; return 1; }
  command -v python3 > /dev/null || { echo "python3 not found (scripts/install-deps.sh)"; return 1; }
  [ "$CEPH_E2E_CEPHX" = 1 ] && cephx=(--cephx) auth=cephx
  owner=$(owner_pid)
  t0=$(now)
  "$CLUSTER_SH" start "$CLUSTER_DIR" --addr "$E2E_NETNS_HOST_IP" --port "$MON_PORT" "${cephx[@]}" \
    ${owner:+--owner-pid "$owner"} > /dev/null
  echo "cluster started in $(since "$t0")s"
  ta=$(now)
  for img in $CEPH_E2E_IMAGES; do
    name=${img%%:*} size=64M
    [ "$name" = "$img" ] || size=${img#*:}
    timeout 30 rbd --conf "$CONF" create "rbd/$name" --size "$size"
  done
  echo "images ($CEPH_E2E_IMAGES) made in $(since "$ta")s"
  nft_setup
  python3 -u "$HOOK_DIR/ceph-control.py" --listen "$E2E_NETNS_HOST_IP" --port "$CONTROL_PORT" \
    --conf "$CONF" --cluster-sh "$CLUSTER_SH" --cluster-dir "$CLUSTER_DIR" > control.log 2>&1 &
  echo $! > control.pid
  local i
  for i in $(seq 50); do
    (exec 3<> "/dev/tcp/$E2E_NETNS_HOST_IP/$CONTROL_PORT") 2> /dev/null && break
    sleep 0.1
  done
  (exec 3<> "/dev/tcp/$E2E_NETNS_HOST_IP/$CONTROL_PORT") 2> /dev/null \
    || { echo "the control channel did not listen: $(cat control.log)"; return 1; }
  if [ "$CEPH_E2E_CEPHX" = 1 ]; then
    key=$(awk '$1 == "key" {print $3}' "$CLUSTER_DIR/ceph.client.rtgt.keyring")
    [ -n "$key" ] || { echo "no key in $CLUSTER_DIR/ceph.client.rtgt.keyring"; return 1; }
  fi
  # shellcheck disable=SC1091
  . "$CLUSTER_DIR/cluster.env"
  {
    echo "CEPH_MON_HOST=v2:$E2E_NETNS_HOST_IP:$MON_PORT"
    echo "CEPH_FSID=$fsid"
    echo "CEPH_AUTH=$auth"
    echo "CEPH_CLIENT_ID=rtgt"
    [ -z "$key" ] || echo "CEPH_CLIENT_KEY=$key"
    echo "CEPH_POOL=rbd"
    echo "CEPH_IMAGES=$(for img in $CEPH_E2E_IMAGES; do printf '%s ' "${img%%:*}"; done | sed 's/ $//')"
    echo "CEPH_CONTROL=$E2E_NETNS_HOST_IP:$CONTROL_PORT"
    echo "CEPH_GW_ADDRS=$GW_ADDRS"
    echo "E2E_NETNS_GUEST_EXTRA_IPS=$GW_ADDRS"
  } >> "$E2E_NETNS_ENV"
  echo "Ceph for the guest in $(since "$t0")s: mon v2:$E2E_NETNS_HOST_IP:$MON_PORT, auth $auth, control channel on $CONTROL_PORT (pid $(cat control.pid))"
}

stop() {
  if [ -f control.pid ]; then
    kill "$(cat control.pid)" 2> /dev/null || true
    rm -f control.pid
  fi
  if [ -d "$CLUSTER_DIR" ]; then
    rm -rf ceph-logs
    cp -r "$CLUSTER_DIR/log" ceph-logs 2> /dev/null || true
    "$CLUSTER_SH" stop "$CLUSTER_DIR"
  fi
  echo "stopped"
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
