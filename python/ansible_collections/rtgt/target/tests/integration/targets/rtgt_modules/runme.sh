#!/usr/bin/env bash
# Integration test of the rtgt.target modules against a live `rtgt serve --fabric sim`:
#   1. site.yml            -> changed > 0          (the target is built)
#   2. site.yml            -> changed = 0          (idempotent); verify.yml checks the state
#   3. site.yml --check -e edited=true --diff  -> the 3 edited tasks changed, target unchanged
#      (save_config before and after is identical; verify.yml passes again)
#   4. errors.yml          -> RPC errors fail tasks with the server's message
#   5. cleanup.yml twice   -> changed, then unchanged
#   6. a gateway group of two daemons (gateways.ini): gateway-group.yml builds it (A optimized,
#      B inaccessible), then is idempotent; failover.yml A -> B changes one listener on each
#      (the states follow), again changes nothing, in check mode B -> A changes nothing on the
#      targets, and B -> A moves the states back
#   7. a Ceph gateway group (ceph-group.json, a throw-away cluster of scripts/ceph-cluster.sh):
#      playbooks/ceph_gateway_group.yml builds it (RBD bdevs, two load-balancing groups, one
#      owned by each gateway), is idempotent, refuses overlapping controller IDs and a
#      conflicting namespace identity, moves a namespace between groups in place;
#      ceph_failover.yml after A is killed fences A's recorded client address (`ceph osd
#      blocklist ls` has it), B waits for the map and owns both groups; ceph_failback.yml with A
#      restarted removes the entry, re-registers A (a new client address) and gives group 1 back
# Needs RTGT_BIN (the rtgt binary), ansible-playbook on PATH and Ceph (ceph-mon, ceph-osd,
# ceph-common: scripts/install-deps.sh) for 7. The RDMA listener and
# transport are declared only when the rtgt build can create an RDMA transport.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE"
: "${RTGT_BIN:?set RTGT_BIN to the rtgt binary}"
if [ -z "${ANSIBLE_COLLECTIONS_PATH:-}" ]; then
  ANSIBLE_COLLECTIONS_PATH=$(cd "$HERE/../../../../../../.." && pwd)
  export ANSIBLE_COLLECTIONS_PATH
fi
export ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0 ANSIBLE_RETRY_FILES_ENABLED=0

work=$(mktemp -d)
pid=""
gw_pids=""
ceph_dir=/tmp/rtgt-ansible-ceph-$$
cleanup() {
  local p
  for p in $pid $gw_pids; do
    if kill -0 "$p" 2>/dev/null; then
      kill -TERM "$p"
      wait "$p" || true
    fi
  done
  [ ! -d "$ceph_dir" ] || "$HERE/../../../../../../../../scripts/ceph-cluster.sh" stop "$ceph_dir" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

sock="$work/rtgt.sock"
image="$work/disk.img"
truncate -s 4M "$image"

starts=0
start_daemon() {  # $1: socket path
  starts=$((starts + 1))
  log="$work/rtgt.$starts.log"
  "$RTGT_BIN" serve -r "$1" --fabric sim >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 500); do
    # Wait for the ready line, not the socket: rtgt serve serves the socket briefly once to
    # probe its lock before applying its configuration.
    [ -S "$1" ] && grep -q "rtgt ready: JSON-RPC on $1" "$log" && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$log"; echo "rtgt serve exited" >&2; return 1; }
    sleep 0.02
  done
  echo "rtgt serve did not create $1" >&2
  return 1
}

rpc() { python3 - "$sock" "$@" <<'PY'
import json, socket, sys
path, method = sys.argv[1], sys.argv[2]
params = json.loads(sys.argv[3]) if len(sys.argv) > 3 else None
s = socket.socket(socket.AF_UNIX)
s.connect(path)
req = {"jsonrpc": "2.0", "id": 1, "method": method}
if params:
    req["params"] = params
s.sendall(json.dumps(req).encode())
buf, dec = "", json.JSONDecoder()
while True:
    buf += s.recv(65536).decode()
    try:
        resp, _ = dec.raw_decode(buf.strip())
        break
    except ValueError:
        continue
print(json.dumps(resp, sort_keys=True))
PY
}

start_daemon "$sock"


playbook() {  # $1: label, rest: ansible-playbook arguments; prints the output, keeps the recap
  local label=$1; shift
  echo "=== ansible-playbook $label"
  ansible-playbook -i inventory.ini -e "rtgt_socket=$sock rtgt_image=$image" "$@" | tee "$work/out"
  recap=$(grep -E '^localhost +: ok=' "$work/out" | tail -1)
}
count() { sed -E "s/.* $1=([0-9]+).*/\1/" <<<"$recap"; }
pass() { echo "PASS: $1"; }
fail() { echo "FAIL: $1 ($recap)" >&2; exit 1; }
expect_changed() {  # $1: what, $2: test operator, $3: number; nothing may fail
  local changed failed
  changed=$(count changed)
  failed=$(count failed)
  if test "$changed" "$2" "$3" && [ "$failed" -eq 0 ]; then pass "$1"; else fail "$1"; fi
}

playbook "run 1 (build)" site.yml
expect_changed "run 1 changed something and failed nothing" -gt 0
playbook "run 2 (idempotent)" site.yml
expect_changed "run 2 changed nothing" -eq 0
playbook "verify" verify.yml
expect_changed "state matches the declaration" -eq 0

before=$(rpc framework_get_config '{"name":"nvmf"}'; rpc framework_get_config '{"name":"bdev"}')
playbook "run 3 (edit, check mode)" site.yml --check --diff -e edited=true
expect_changed "check mode reports the 3 edited tasks as changed" -eq 3
after=$(rpc framework_get_config '{"name":"nvmf"}'; rpc framework_get_config '{"name":"bdev"}')
if [ "$before" = "$after" ]; then pass "check mode changed nothing on the target"; else fail "check mode changed the target"; fi
playbook "verify after check mode" verify.yml
expect_changed "state still matches the declaration" -eq 0

playbook "errors" errors.yml
expect_changed "error tasks change nothing" -eq 0
if [ "$(count ignored)" -eq 5 ]; then pass "all 5 error tasks failed as asserted"; else fail "error tasks"; fi

playbook "cleanup 1" cleanup.yml
expect_changed "cleanup removed things" -eq 2
playbook "cleanup 2" cleanup.yml
expect_changed "cleanup is idempotent" -eq 0

kill -TERM "$pid"
wait "$pid"
pid=""

# --- 6. a gateway group -------------------------------------------------------------------
truncate -s 4M "$work/shared.img"
start_daemon "$work/gw-a.sock"
gw_pids="$pid"
start_daemon "$work/gw-b.sock"
gw_pids="$gw_pids $pid"
pid=""
gw_playbook() {  # like playbook, on the two gateways; the recap sums both hosts
  local label=$1; shift
  echo "=== ansible-playbook $label"
  ansible-playbook -i gateways.ini -e "gw_dir=$work" "$@" | tee "$work/out"
  recap=$(grep -E '^(gw_[ab]|localhost) +: ok=' "$work/out" | awk '{
      for (i = 3; i <= NF; i++) { split($i, kv, "="); n[kv[1]] += kv[2] } }
    END { for (k in n) printf " %s=%d", k, n[k]; print "" }')
}
# ana STATE_A STATE_B: the listeners' ANA states (group 1) on gateway A and B
ana() {
  local a b
  a=$(sock="$work/gw-a.sock" rpc nvmf_subsystem_get_listeners '{"nqn":"nqn.2016-06.io.spdk:gwgroup"}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["result"][0]["ana_states"][0]["ana_state"])')
  b=$(sock="$work/gw-b.sock" rpc nvmf_subsystem_get_listeners '{"nqn":"nqn.2016-06.io.spdk:gwgroup"}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["result"][0]["ana_states"][0]["ana_state"])')
  if [ "$a $b" = "$1 $2" ]; then pass "ANA states A=$1 B=$2"; else recap="A=$a B=$b"; fail "ANA states A=$1 B=$2"; fi
}
gw_playbook "gateway group (build)" gateway-group.yml
expect_changed "the gateway group is built" -gt 0
ana optimized inaccessible
gw_playbook "gateway group (idempotent)" gateway-group.yml
expect_changed "the gateway group is unchanged" -eq 0
gw_playbook "failover A -> B" failover.yml -e from_gw=gw_a -e to_gw=gw_b
expect_changed "failover changed one listener per gateway" -eq 2
ana inaccessible optimized
gw_playbook "failover A -> B again" failover.yml -e from_gw=gw_a -e to_gw=gw_b -e anagrpid=1
expect_changed "failover again changed nothing" -eq 0
gw_playbook "failback B -> A (check mode)" failover.yml --check --diff -e from_gw=gw_b -e to_gw=gw_a
expect_changed "check mode reports both listeners as changed" -eq 2
ana inaccessible optimized
gw_playbook "failback B -> A" failover.yml -e from_gw=gw_b -e to_gw=gw_a
expect_changed "failback changed one listener per gateway" -eq 2
ana optimized inaccessible
for p in $gw_pids; do kill -TERM "$p"; wait "$p"; done
gw_pids=""

# --- 7. a Ceph gateway group ---------------------------------------------------------------
ROOT=$(cd "$HERE/../../../../../../../.." && pwd)
PB=rtgt.target
# The Ceph tools get their own stderr: they leave a shared one non-blocking, which ansible-playbook
# then refuses ("Ansible requires blocking IO").
conf=$("$ROOT/scripts/ceph-cluster.sh" start "$ceph_dir" --owner-pid $$ </dev/null 2>"$work/ceph.log") \
  || { cat "$work/ceph.log"; echo "FAIL: the Ceph cluster did not start (scripts/install-deps.sh installs Ceph)" >&2; exit 1; }
for img in lb1 lb2; do rbd --conf "$conf" create "rbd/$img" --size 16M </dev/null 2>>"$work/ceph.log"; done
ceph_cmd="ceph --conf $conf"
start_daemon "$work/gw-a.sock"; pid_a=$pid
start_daemon "$work/gw-b.sock"; pid_b=$pid
gw_pids="$pid_a $pid_b"
pid=""
group() { gw_playbook "$@" -e @ceph-group.json -e "ceph_conf=$conf gateway_state_dir=$work" -e "ceph_command='$ceph_cmd'"; }
# states GW: "STATE(group 1) STATE(group 2)" of GW's listener
states() {
  sock="$work/gw-$1.sock" rpc nvmf_subsystem_get_listeners '{"nqn":"nqn.2016-06.io.spdk:cephgw"}' |
    python3 -c 'import json,sys; s={a["ana_group"]: a["ana_state"] for a in json.load(sys.stdin)["result"][0]["ana_states"]}; print(s.get(1), s.get(2))'
}
expect_states() {  # GW "S1 S2"
  local got
  got=$(states "$1")
  if [ "$got" = "$2" ]; then pass "gateway $1: groups 1 2 $2"; else recap="$1: $got"; fail "gateway $1: groups 1 2 $2"; fi
}
ns_group() {  # GW NSID: the namespace's ANA group
  sock="$work/gw-$1.sock" rpc nvmf_get_subsystems | python3 -c 'import json,sys
for s in json.load(sys.stdin)["result"]:
    for n in s.get("namespaces", []):
        if s["nqn"].endswith("cephgw") and n["nsid"] == '"$2"': print(n["anagrpid"])'
}
blocklist() { $ceph_cmd osd blocklist ls </dev/null 2>/dev/null; }

group "ceph gateway group (build)" "$PB.ceph_gateway_group"
expect_changed "the Ceph gateway group is built" -gt 0
expect_states a "optimized inaccessible"
expect_states b "inaccessible optimized"
addr_a=$(cat "$work/gw_a.client_addr")
case $addr_a in 127.0.0.1:0/[0-9]*) pass "A's client address recorded: $addr_a" ;; *) recap=$addr_a; fail "A's client address" ;; esac
group "ceph gateway group (idempotent)" "$PB.ceph_gateway_group"
expect_changed "the Ceph gateway group is unchanged" -eq 0

python3 - "$work" <<'PY'
import json, sys
g = json.load(open("ceph-group.json"))
o = json.loads(json.dumps(g)); o["gateway_group"]["gateways"]["gw_b"]["cntlid_min"] = 900
json.dump(o, open(sys.argv[1] + "/overlap.json", "w"))
o = json.loads(json.dumps(g)); o["gateway_group"]["namespaces"][0]["nguid"] = "00000000000000000000000000000001"
json.dump(o, open(sys.argv[1] + "/identity.json", "w"))
o = json.loads(json.dumps(g)); o["gateway_group"]["namespaces"][1]["anagrpid"] = 1
o["gateway_group"]["gateways"]["gw_b"]["owns"] = []
json.dump(o, open(sys.argv[1] + "/moved.json", "w"))
PY
refused() {  # LABEL FILE WHAT: the check fails saying WHAT; no gateway is configured
  gw_playbook "$1" "$PB.ceph_gateway_group" -e "@$2" -e "ceph_conf=$conf" > "$work/refused" 2>&1 || true
  if grep -q "$3" "$work/refused" && [ "$(count changed)" -eq 0 ] && [ "$(count failed)" -ge 1 ] \
      && ! grep -q 'PLAY \[Configure every gateway\]' "$work/refused"; then
    pass "$1 refused before any gateway was configured"
  else cat "$work/refused"; fail "$1: not refused as expected (no '$3', or a gateway was configured)"; fi
}
refused "overlapping controller IDs" "$work/overlap.json" "controller ID ranges of gw_"
refused "a conflicting NGUID" "$work/identity.json" "refusing an inconsistent identity"
expect_states a "optimized inaccessible"

gw_playbook "namespace 2 moved to group 1" "$PB.ceph_gateway_group" -e "@$work/moved.json" -e "ceph_conf=$conf gateway_state_dir=$work"
expect_changed "the move changed namespace 2 on both gateways" -eq 2
if [ "$(ns_group a 2) $(ns_group b 2)" = "1 1" ]; then pass "namespace 2 in group 1 on both"; else fail "namespace 2's group"; fi
group "namespace 2 moved back" "$PB.ceph_gateway_group"
expect_changed "moving it back changed namespace 2 on both gateways" -eq 2
if [ "$(ns_group a 2) $(ns_group b 2)" = "2 2" ]; then pass "namespace 2 in group 2 on both"; else fail "namespace 2's group"; fi

kill -KILL "$pid_a"; wait "$pid_a" 2>/dev/null || true
gw_pids=$pid_b
group "ceph failover A -> B (A killed)" "$PB.ceph_failover" -e failed_gw=gw_a -e survivor_gw=gw_b
if [ "$(count failed)" -eq 0 ] && grep -q "$addr_a" <<<"$(blocklist)"; then pass "A's client $addr_a fenced"; else fail "A fenced"; fi
expect_states b "optimized optimized"

start_daemon "$work/gw-a.sock"; pid_a=$pid
gw_pids="$pid_a $pid_b"
pid=""
group "ceph failback B -> A" "$PB.ceph_failback" -e returning_gw=gw_a -e survivor_gw=gw_b
expect_changed "failback changed something and failed nothing" -gt 0
if grep -q "$addr_a" <<<"$(blocklist)"; then fail "A's old entry still in the blocklist"; else pass "A's old blocklist entry removed"; fi
addr_a2=$(cat "$work/gw_a.client_addr")
if [ "$addr_a2" != "$addr_a" ]; then pass "A re-registered as a new client ($addr_a2)"; else fail "A's new client address"; fi
expect_states a "optimized inaccessible"
expect_states b "inaccessible optimized"
group "ceph gateway group after the failback (idempotent)" "$PB.ceph_gateway_group"
expect_changed "the group is as described again" -eq 0

for p in $gw_pids; do kill -TERM "$p"; wait "$p"; done
gw_pids=""
"$ROOT/scripts/ceph-cluster.sh" stop "$ceph_dir" </dev/null >/dev/null 2>>"$work/ceph.log"
echo "rtgt.target integration: all runs as expected"
