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
# Needs RTGT_BIN (the rtgt binary) and ansible-playbook on PATH. The RDMA listener and
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
cleanup() {
  local p
  for p in $pid $gw_pids; do
    if kill -0 "$p" 2>/dev/null; then
      kill -TERM "$p"
      wait "$p" || true
    fi
  done
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
  recap=$(grep -E '^gw_[ab] +: ok=' "$work/out" | awk '{
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
echo "rtgt.target integration: all runs as expected"
