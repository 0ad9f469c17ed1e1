# COMPARE AND WRITE and MODE SELECT with the kernel's SRP initiator (docs/reservations.md).
# sg_compare_and_write through ib_srp: a matching compare writes, a stale one is MISCOMPARE
# (sense key 0xe) with the offset of the first differing byte and writes nothing; VPD B0h
# reports MAXIMUM COMPARE AND WRITE LENGTH 1. Then the sd driver's own MODE SELECT: writing
# "write through" to the disk's cache_type (sd sends MODE SENSE + MODE SELECT of the caching
# page) turns WCE off, and sd reads it back after revalidating.
# e2e-timeout: 120

NQN=nqn.2016-06.io.rtgt:caw
SRP_LISTEN=$(jq -nc --arg ip "$E2E_IP" --arg port "$RTGT_SRP_PORT" \
  '{trtype:"SRP", adrfam:"IPv4", traddr:$ip, trsvcid:$port}')

start_rtgt
rtgt_rpc_ok nvmf_create_transport '{"trtype":"SRP"}' > /dev/null
rtgt_rpc_ok bdev_malloc_create '{"name":"Caw0","num_blocks":65536,"block_size":512}' > /dev/null
rtgt_rpc_ok nvmf_create_subsystem "{\"nqn\":\"$NQN\",\"allow_any_host\":true}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_ns "{\"nqn\":\"$NQN\",\"namespace\":{\"bdev_name\":\"Caw0\"}}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_listener "{\"nqn\":\"$NQN\",\"listen_address\":$SRP_LISTEN}" > /dev/null

dev=$(srp_login "$(srp_login_spec "$NQN")")

vpd=$(sg_vpd -p bl "$dev" 2>&1) || fail "sg_vpd -p bl: $vpd"
grep -qiE 'compare and write length: 1 ' <<< "$vpd" || fail "VPD B0h: $vpd"

# Block 8 holds A; compare A, write B.
head -c 512 /dev/zero | tr '\0' 'A' > /tmp/a
head -c 512 /dev/zero | tr '\0' 'B' > /tmp/b
sg_raw -s 512 -i /tmp/a "$dev" 2a 00 00 00 00 08 00 00 01 00 > /dev/null 2>&1 || fail "WRITE(10)"
cat /tmp/a /tmp/b > /tmp/ab
out=$(sg_compare_and_write --in=/tmp/ab --lba=8 --num=1 "$dev" 2>&1) || \
  fail "sg_compare_and_write of matching data failed: $out"
sg_raw -r 512 -o /tmp/got "$dev" 28 00 00 00 00 08 00 00 01 00 > /dev/null 2>&1 || fail "READ(10)"
cmp -s /tmp/got /tmp/b || fail "the COMPARE AND WRITE did not write block 8"

# Stale compare data (A again, one byte off at 77 in case the block were A): MISCOMPARE.
rc=0
out=$(sg_compare_and_write --in=/tmp/ab --lba=8 --num=1 -v "$dev" 2>&1) || rc=$?
log "stale sg_compare_and_write (exit $rc): $(grep -iE -m2 'miscompare|info' <<< "$out" | tr '\n' ' ')"
[ "$rc" = 14 ] || fail "stale compare: exit $rc, not 14 (miscompare): $out"
sg_raw -r 512 -o /tmp/got "$dev" 28 00 00 00 00 08 00 00 01 00 > /dev/null 2>&1 || fail "READ(10)"
cmp -s /tmp/got /tmp/b || fail "a miscompare wrote block 8"
# Block 8 is B; compare data B except byte 77: INFORMATION = 77.
cp /tmp/b /tmp/bx
printf 'X' | dd of=/tmp/bx bs=1 seek=77 conv=notrunc status=none
cat /tmp/bx /tmp/a > /tmp/bxa
rc=0
out=$(sg_compare_and_write --in=/tmp/bxa --lba=8 --num=1 -v "$dev" 2>&1) || rc=$?
[ "$rc" = 14 ] || fail "compare differing at byte 77: exit $rc: $out"
grep -qiE 'info(rmation)?[^0-9]*(0x)?0*4d|info(rmation)?[^0-9]*77' <<< "$out" || \
  fail "miscompare without the offset 77 (0x4d): $out"

# MODE SELECT by the sd driver: cache_type "write through" sends the caching page, WCE = 0.
ct=$(echo /sys/block/"${dev##*/}"/device/scsi_disk/*/cache_type)
assert_eq "$(cat "$ct")" "write back" "cache type before"
echo "write through" > "$ct" || fail "sd's MODE SELECT (cache_type write through) failed"
assert_eq "$(cat "$ct")" "write through" "cache type after MODE SELECT"
page=$(sg_raw -r 64 "$dev" 1a 08 08 00 40 00 2>&1) || fail "MODE SENSE: $page"
log "caching page after MODE SELECT: $(tr '\n' ' ' <<< "$page")"
dd if=/tmp/a of="$dev" bs=512 count=1 seek=9 oflag=direct status=none || fail "write-through write"
echo "write back" > "$ct" || fail "MODE SELECT back to write back failed"
assert_eq "$(cat "$ct")" "write back" "cache type restored"

srp_logout_all
stop_rtgt
