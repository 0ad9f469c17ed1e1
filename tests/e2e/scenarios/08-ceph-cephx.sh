# Ceph with cephx on (hook netns/ceph-cephx.sh): the guest's client.rtgt (`profile rbd` on pool
# rbd) authenticates the ways bdev_rbd_register_cluster offers, through rtgt's RBD bdev
# (rbd_bench): user_id with the keyring ceph.conf names, and user_id with key_file; without a
# key, with a wrong key and with a key_file that does not exist registration is refused with
# the errno and hint the docs promise (docs/ceph.md), within rtgt's connect timeout; the key
# appears in no log.
# e2e-netns: netns/ceph-cephx.sh
# e2e-timeout: 180

{ set +x; } 2> /dev/null   # run.sh -x would trace the key into output.log: not here
ceph_require
assert_eq "$CEPH_AUTH" cephx "the cluster's auth"
KEYRING=/etc/ceph/ceph.client.$CEPH_CLIENT_ID.keyring   # what ceph.conf's `keyring` names
ASIDE=/tmp/keys/client.$CEPH_CLIENT_ID.keyring          # the same key, where only key_file finds it
[ -s "$KEYRING" ] || fail "no $KEYRING (ceph_guest_setup, see boot.log)"
log "cluster: mon $CEPH_MON_HOST, auth $CEPH_AUTH, client.$CEPH_CLIENT_ID"

RBD_BENCH=("$E2E_BIN/rbd_bench" --conf "$CEPH_CONF" --pool "$CEPH_POOL" --no-create
  --skip-rbd-bench --rounds 0)
# bench_ok LABEL ARGS...: rbd_bench verifies 4 MiB on e2e0; fails the scenario unless it does.
bench_ok() {
  local label=$1 out rc=0; shift
  log "$label"
  out=$("${RBD_BENCH[@]}" --image e2e0 --verify-mib 4 "$@" 2>&1) || rc=$?
  printf '== %s\n%s\n' "$label" "$out" >> "$E2E_LOGDIR/rbd_bench.log"
  [ "$rc" = 0 ] || fail "$label: rbd_bench exited with $rc: $(tail -n 2 <<< "$out" | tr '\n' ' ')"
  assert_contains "$out" "read back and compared: ok" "$label"
}
# bench_refused LABEL EXPECT ARGS...: registration fails (exit 1) with a message containing
# EXPECT, within 15 s (rtgt's connect timeout is 10 s); prints how long it took.
bench_refused() {
  local label=$1 expect=$2 out rc=0 t0; shift 2
  log "$label"
  t0=$(uptime_s)
  out=$("${RBD_BENCH[@]}" --image e2e0 --verify-mib 1 "$@" 2>&1) || rc=$?
  printf '== %s\n%s\n' "$label" "$out" >> "$E2E_LOGDIR/rbd_bench.log"
  [ "$rc" = 1 ] || fail "$label: rbd_bench exited with $rc, expected 1: $(tail -n 2 <<< "$out" | tr '\n' ' ')"
  assert_contains "$out" "bdev_rbd_register_cluster: " "$label"
  assert_contains "$out" "$expect" "$label"
  local took
  took=$(awk -v a="$t0" -v b="$(uptime_s)" 'BEGIN { printf "%.1f", b - a }')
  awk -v t="$took" 'BEGIN { exit !(t < 15) }' || fail "$label: refused only after ${took}s"
  log "  refused in ${took}s: $(grep -m1 'bdev_rbd_register_cluster: ' <<< "$out" | head -c 240)"
}

# --- user_id, the key found through ceph.conf's keyring option --------------------------------
bench_ok "user_id $CEPH_CLIENT_ID, keyring from ceph.conf" --id "$CEPH_CLIENT_ID"
ceph_host_ok blocklist_ls > /dev/null   # the host side still answers with cephx (client.admin)

# --- key_file: the keyring moved where only key_file finds it ---------------------------------
mkdir -p "${ASIDE%/*}"
mv "$KEYRING" "$ASIDE"
bench_ok "user_id $CEPH_CLIENT_ID, key_file $ASIDE" --id "$CEPH_CLIENT_ID" --key-file "$ASIDE"
bench_refused "user_id $CEPH_CLIENT_ID without a key" \
  "(no key for client.$CEPH_CLIENT_ID? give key_file)" --id "$CEPH_CLIENT_ID"
bench_refused "key_file that does not exist" "key_file '/tmp/keys/none.keyring'" \
  --id "$CEPH_CLIENT_ID" --key-file /tmp/keys/none.keyring
# a wrong key of the right form: one base64 digit of the secret changed (the key is 28 bytes:
# type, creation time, length, then the 16-byte secret, which digits 16-37 encode)
good=$(awk '$1 == "key" { print $3 }' "$ASIDE")
[ ${#good} = 40 ] || fail "unexpected key length ${#good} in $ASIDE"
c=${good:30:1}
[ "$c" = A ] && n=B || n=A
( umask 077; printf '[client.%s]\n\tkey = %s\n' "$CEPH_CLIENT_ID" "${good:0:30}$n${good:31}" > /tmp/keys/wrong.keyring )
bench_refused "key_file with a wrong key" "(wrong key for client.$CEPH_CLIENT_ID?)" \
  --id "$CEPH_CLIENT_ID" --key-file /tmp/keys/wrong.keyring
mv "$ASIDE" "$KEYRING"

# --- the key is in no log --------------------------------------------------------------------
# (this scenario's logs, the boot's: boot.log, the Ceph clients' logs in ceph/)
leaks=$(grep -rlF -- "$good" "$E2E_LOGDIR" /out/boot-* 2> /dev/null || true)
[ -z "$leaks" ] || fail "client.$CEPH_CLIENT_ID's key appears in: $leaks"
