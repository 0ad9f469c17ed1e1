# SCSI persistent reservations against the Linux LIO target as the reference (issue 17): the
# same sg_persist / sg_raw sequence (pr_sequence below) runs through two ib_srp logins with
# different initiator_ext (two I_T nexuses, A and B) to one LU on LIO ib_srpt (rd_mcp ramdisk)
# and, at the same time, through two more to rtgt (malloc bdev); the two transcripts are
# normalized and compared line by line. Every difference fails the scenario, except the ones
# listed in DEVIATIONS (a step whose exit statuses on both sides are the listed ones: an LIO
# deviation from SPC-4, with the clause), LINE_DEVIATIONS (one line of a step, the same),
# CAPABILITIES (SIP_C / ATP_C, which rtgt documents as 0), FIELD_POINTERS (rtgt's optional
# sense-key specific pointer, checked) and generation_fix (LIO does not count unregistrations
# in PRgeneration); docs/reservations.md "Compared with LIO" lists them. APTPL is 0 but for
# one step that turns it on and the next that turns it off. The raw and normalized
# transcripts and the diff are in $E2E_LOGDIR (lio-raw.txt, lio.txt, lio-explained.txt, the
# same for rtgt, diff.txt).
# e2e-timeout: 180

EXT_A=00000000000000a1
EXT_B=00000000000000b2
head -c 512 /dev/zero > /tmp/pr-cmp-zero
# a PERSISTENT RESERVE OUT parameter list with RESERVATION KEY 0xb2 (B's key) and nothing else
{ printf '\0\0\0\0\0\0\0\262'; head -c 16 /dev/zero; } > /tmp/pr-cmp-keyb2

# --- the sequence -----------------------------------------------------------------------------
# step WHO WHAT COMMAND...: runs COMMAND (with @ replaced by WHO's device), prints a header with
# its exit status, then its output (stdout and stderr) with the device names replaced by <A>/<B>.
step() {
  local who=$1 what=$2 dev out rc=0 a; shift 2
  dev=${DEVS[$who]}
  local args=()
  for a in "$@"; do [ "$a" = @ ] && args+=("$dev") || args+=("$a"); done
  out=$("${args[@]}" 2>&1) || rc=$?
  echo "== $who: $what (rc=$rc)"
  sed -e "s#${DEVS[A]}#<A>#g" -e "s#${DEVS[B]}#<B>#g" <<< "$out" | sed '/^[[:space:]]*$/d'
}
prout() { sg_persist -n --out "$@"; }
prin() { sg_persist -n --in "$@"; }
write10() { sg_raw -s 512 -i /tmp/pr-cmp-zero "$1" 2a 00 00 00 00 10 00 00 01 00; }
read10() { sg_raw -r 512 -o /dev/null "$1" 28 00 00 00 00 10 00 00 01 00; }
tur() { sg_raw "$1" 00 00 00 00 00 00; }
# Commands whose data length depends on the target (its mode pages, LUN list), not on
# reservations: only their status is compared (the "Writing N bytes" line is dropped).
status_of() { "$@" 2>&1 | grep -v '^Writing [0-9]* bytes of data to /dev/null'; return "${PIPESTATUS[0]}"; }
readcap10() { status_of sg_raw -r 8 -o /dev/null "$1" 25 00 00 00 00 00 00 00 00 00; }
modesense6() { status_of sg_raw -r 252 -o /dev/null "$1" 1a 00 3f 00 fc 00; }
reportluns() { status_of sg_raw -r 256 -o /dev/null "$1" a0 00 00 00 00 00 00 00 01 00 00 00; }
reserve6() { sg_raw "$1" 16 00 00 00 00 00; }
release6() { sg_raw "$1" 17 00 00 00 00 00; }
# status_all [caps]: what the nexuses read back (with caps: REPORT CAPABILITIES from both).
status_all() {
  step A "READ KEYS" prin --read-keys @
  step B "READ RESERVATION" prin --read-reservation @
  step A "READ FULL STATUS" prin --read-full-status @
  if [ -n "${1:-}" ]; then
    step A "REPORT CAPABILITIES" prin --report-capabilities @
    step B "REPORT CAPABILITIES" prin --report-capabilities @
  fi
}

# pr_sequence: the whole comparison script on ${DEVS[A]} and ${DEVS[B]}.
pr_sequence() {
  step A "TEST UNIT READY" tur @
  step B "TEST UNIT READY" tur @
  step A "REGISTER 0xa1" prout --register --param-sark=0xa1 @
  step B "REGISTER 0xb2" prout --register --param-sark=0xb2 @
  step B "REGISTER 0xb3 while registered with 0xb2 (wrong key)" prout --register \
    --param-rk=0xb4 --param-sark=0xb3 @
  step A "RESERVE Write Exclusive" prout --reserve --param-rk=0xa1 --prout-type=1 @
  step A "RESERVE Write Exclusive again (holder)" prout --reserve --param-rk=0xa1 --prout-type=1 @
  step A "RESERVE Exclusive Access (holder, other type)" prout --reserve --param-rk=0xa1 \
    --prout-type=3 @
  step B "WRITE(10) under A's Write Exclusive" write10 @
  step B "READ(10) under A's Write Exclusive" read10 @
  step A "WRITE(10) by the holder" write10 @
  step B "RESERVE Write Exclusive (not the holder)" prout --reserve --param-rk=0xb2 --prout-type=1 @
  step B "RELEASE (not the holder)" prout --release --param-rk=0xb2 --prout-type=1 @
  step B "RELEASE with a wrong key" prout --release --param-rk=0xbb --prout-type=1 @
  status_all caps
  step B "PREEMPT A's key" prout --preempt --param-rk=0xb2 --param-sark=0xa1 --prout-type=1 @
  step A "WRITE(10) after the preempt" write10 @
  step A "WRITE(10) after the preempt, again" write10 @
  step A "READ(10) after the preempt" read10 @
  step A "RELEASE by the preempted nexus" prout --release --param-rk=0xa1 --prout-type=1 @
  step B "WRITE(10) by the new holder" write10 @
  status_all
  step B "RELEASE with the wrong type" prout --release --param-rk=0xb2 --prout-type=3 @
  step B "RELEASE" prout --release --param-rk=0xb2 --prout-type=1 @
  step A "WRITE(10) after the release" write10 @
  step A "REGISTER AND IGNORE EXISTING KEY 0xa2 (unregistered)" prout --register-ignore \
    --param-sark=0xa2 @
  step B "REGISTER AND IGNORE EXISTING KEY 0xb3 (registered)" prout --register-ignore \
    --param-sark=0xb3 @
  step B "READ KEYS" prin --read-keys @
  step A "RESERVE Write Exclusive - Registrants Only" prout --reserve --param-rk=0xa2 \
    --prout-type=5 @
  step B "WRITE(10) as a registrant under Registrants Only" write10 @
  step B "CLEAR with a wrong key" prout --clear --param-rk=0xb2 @
  step B "CLEAR" prout --clear --param-rk=0xb3 @
  step A "TEST UNIT READY after the clear" tur @
  step A "TEST UNIT READY after the clear, again" tur @
  status_all

  # SPC-2 RESERVE(6) / RELEASE(6), no registrations.
  step A "RESERVE(6)" reserve6 @
  step A "RESERVE(6) again (holder)" reserve6 @
  step B "WRITE(10) under A's RESERVE(6)" write10 @
  step B "READ(10) under A's RESERVE(6)" read10 @
  step B "RESERVE(6) under A's RESERVE(6)" reserve6 @
  step B "PERSISTENT RESERVE IN under A's RESERVE(6)" prin --read-keys @
  step B "REGISTER under A's RESERVE(6)" prout --register --param-sark=0xb2 @
  step B "REPORT LUNS under A's RESERVE(6)" reportluns @
  step B "RELEASE(6) (not the holder)" release6 @
  step A "WRITE(10) by the RESERVE(6) holder" write10 @
  step A "RELEASE(6)" release6 @
  step B "WRITE(10) after RELEASE(6)" write10 @

  # RESERVE(6) / RELEASE(6) while registrations exist (SPC-4 5.13.3, CRH = 1).
  step B "REGISTER 0xb2" prout --register --param-sark=0xb2 @
  step A "RESERVE(6) unregistered, registrations exist" reserve6 @
  step B "RESERVE(6) registered, no persistent reservation" reserve6 @
  step A "RELEASE(6) unregistered, registrations exist" release6 @
  step B "RESERVE Write Exclusive - Registrants Only" prout --reserve --param-rk=0xb2 \
    --prout-type=5 @
  step B "RESERVE(6) by the persistent reservation holder" reserve6 @
  step A "RESERVE(6) unregistered, under B's Registrants Only" reserve6 @
  step A "REGISTER 0xa1" prout --register --param-sark=0xa1 @
  step A "RESERVE(6) registrant under Registrants Only" reserve6 @
  step A "RELEASE(6) registrant under Registrants Only" release6 @
  step B "RELEASE(6) by the persistent reservation holder" release6 @
  step A "READ RESERVATION" prin --read-reservation @
  step A "WRITE(10) registrant under Registrants Only" write10 @
  step B "RELEASE" prout --release --param-rk=0xb2 --prout-type=5 @
  step A "TEST UNIT READY after the release" tur @
  step B "RESERVE Write Exclusive" prout --reserve --param-rk=0xb2 --prout-type=1 @
  step A "RESERVE(6) registrant, not holder, under Write Exclusive" reserve6 @
  step B "UNREGISTER (holder)" prout --register --param-rk=0xb2 --param-sark=0 @
  step A "TEST UNIT READY after the holder left" tur @
  status_all
  step A "CLEAR" prout --clear --param-rk=0xa1 @
  step A "READ KEYS" prin --read-keys @

  # Registration corner cases, All Registrants, Exclusive Access.
  step B "REGISTER unregistered with a non-zero RESERVATION KEY" prout --register \
    --param-rk=0x1 --param-sark=0xb2 @
  step A "REGISTER unregistered with SA key 0" prout --register --param-sark=0 @
  step A "READ KEYS" prin --read-keys @
  step A "REGISTER 0xa1" prout --register --param-sark=0xa1 @
  step A "REGISTER registered with RESERVATION KEY 0" prout --register --param-sark=0xa3 @
  step B "REGISTER 0xb2" prout --register --param-sark=0xb2 @
  step B "RESERVE Exclusive Access - All Registrants" prout --reserve --param-rk=0xb2 \
    --prout-type=8 @
  step A "READ RESERVATION" prin --read-reservation @
  step A "READ FULL STATUS" prin --read-full-status @
  step A "WRITE(10) as a registrant under All Registrants" write10 @
  step A "RELEASE as a holder of All Registrants" prout --release --param-rk=0xa1 --prout-type=8 @
  step B "TEST UNIT READY after the release" tur @
  step B "RESERVE Exclusive Access - All Registrants" prout --reserve --param-rk=0xb2 \
    --prout-type=8 @
  step A "PREEMPT with key 0 under All Registrants, as Exclusive Access" prout --preempt \
    --param-rk=0xa1 --param-sark=0 --prout-type=3 @
  step B "READ(10) after the preempt" read10 @
  step B "READ(10) after the preempt, again" read10 @
  step B "TEST UNIT READY under Exclusive Access" tur @
  step B "READ CAPACITY(10) under Exclusive Access" readcap10 @
  step B "MODE SENSE(6) under Exclusive Access" modesense6 @
  step B "REPORT LUNS under Exclusive Access" reportluns @
  step B "PERSISTENT RESERVE IN under Exclusive Access" prin --read-keys @
  step B "PREEMPT with key 0 (not All Registrants)" prout --preempt --param-rk=0xb2 \
    --param-sark=0 --prout-type=3 @
  step A "READ FULL STATUS" prin --read-full-status @
  step A "PREEMPT itself to change the type" prout --preempt --param-rk=0xa1 --param-sark=0xa1 \
    --prout-type=1 @
  step A "READ RESERVATION" prin --read-reservation @
  step A "CLEAR" prout --clear --param-rk=0xa1 @

  # APTPL on and off again (both targets can persist: LIO to db_root, rtgt to its ptpl_file),
  # PREEMPT AND ABORT, RESERVE(10) / RELEASE(10).
  step A "REGISTER 0xa1 with APTPL" prout --register --param-sark=0xa1 --param-aptpl @
  step B "REPORT CAPABILITIES (APTPL on)" prin --report-capabilities @
  step A "REGISTER AND IGNORE EXISTING KEY 0xa1, APTPL 0" prout --register-ignore \
    --param-sark=0xa1 @
  step B "REPORT CAPABILITIES (APTPL off)" prin --report-capabilities @
  step B "REGISTER 0xb2" prout --register --param-sark=0xb2 @
  step A "RESERVE Write Exclusive - Registrants Only" prout --reserve --param-rk=0xa1 \
    --prout-type=5 @
  step B "PREEMPT AND ABORT A's key" prout --preempt-abort --param-rk=0xb2 --param-sark=0xa1 \
    --prout-type=5 @
  step A "TEST UNIT READY after the preempt and abort" tur @
  step A "WRITE(10) after the preempt and abort" write10 @
  step A "READ FULL STATUS" prin --read-full-status @
  step B "CLEAR" prout --clear --param-rk=0xb2 @
  step A "RESERVE(10)" sg_raw @ 56 00 00 00 00 00 00 00 00 00
  step B "WRITE(10) under A's RESERVE(10)" write10 @
  step B "RELEASE(10) (not the holder)" sg_raw @ 57 00 00 00 00 00 00 00 00 00
  step A "RELEASE(10)" sg_raw @ 57 00 00 00 00 00 00 00 00 00
  step B "WRITE(10) after RELEASE(10)" write10 @

  # Implicit release, preempting a non-holder, refusals and malformed commands.
  step A "REGISTER 0xa1" prout --register --param-sark=0xa1 @
  step B "REGISTER 0xb2" prout --register --param-sark=0xb2 @
  step A "RESERVE Write Exclusive - Registrants Only" prout --reserve --param-rk=0xa1 \
    --prout-type=5 @
  step A "UNREGISTER (holder of Registrants Only)" prout --register --param-rk=0xa1 \
    --param-sark=0 @
  step B "TEST UNIT READY after the holder left" tur @
  step B "READ RESERVATION" prin --read-reservation @
  step B "RESERVE Write Exclusive" prout --reserve --param-rk=0xb2 --prout-type=1 @
  step A "REGISTER 0xa1" prout --register --param-sark=0xa1 @
  step B "PREEMPT a registrant that does not hold the reservation" prout --preempt \
    --param-rk=0xb2 --param-sark=0xa1 --prout-type=1 @
  step A "TEST UNIT READY after being preempted" tur @
  step B "READ RESERVATION" prin --read-reservation @
  step A "CLEAR unregistered" prout --clear --param-rk=0xa1 @
  step A "REGISTER AND IGNORE EXISTING KEY with SA key 0, unregistered" prout --register-ignore \
    --param-sark=0 @
  step B "PREEMPT a key nobody has" prout --preempt --param-rk=0xb2 --param-sark=0xee \
    --prout-type=1 @
  step B "RESERVE with type 2 (obsolete)" prout --reserve --param-rk=0xb2 --prout-type=2 @
  step B "READ KEYS, 8-byte allocation length" prin --read-keys --maxlen=8 @
  step B "PERSISTENT RESERVE IN, service action 7" sg_raw -r 64 @ 5e 07 00 00 00 00 00 00 40 00
  step B "PERSISTENT RESERVE OUT REGISTER, 16-byte parameter list" sg_raw -s 16 \
    -i /tmp/pr-cmp-zero @ 5f 00 00 00 00 00 00 00 10 00
  step B "PERSISTENT RESERVE OUT RESERVE, scope 1" sg_raw -s 24 -i /tmp/pr-cmp-keyb2 @ \
    5f 01 11 00 00 00 00 00 18 00
  step B "CLEAR" prout --clear --param-rk=0xb2 @

  # All Registrants outliving its reserver; more commands under Write Exclusive and
  # Exclusive Access - Registrants Only.
  step A "REGISTER 0xa1" prout --register --param-sark=0xa1 @
  step B "REGISTER 0xb2" prout --register --param-sark=0xb2 @
  step A "RESERVE Write Exclusive - All Registrants" prout --reserve --param-rk=0xa1 \
    --prout-type=7 @
  step A "UNREGISTER (All Registrants, not the last registrant)" prout --register \
    --param-rk=0xa1 --param-sark=0 @
  step B "READ RESERVATION" prin --read-reservation @
  step A "WRITE(10) unregistered under All Registrants" write10 @
  step B "REGISTER AND IGNORE EXISTING KEY 0xb3 (the last registrant)" prout --register-ignore \
    --param-sark=0xb3 @
  step B "PREEMPT under All Registrants with its own key" prout --preempt --param-rk=0xb3 \
    --param-sark=0xb3 --prout-type=6 @
  step B "READ RESERVATION after preempting its own key under All Registrants" \
    prin --read-reservation @
  # (the two targets differ here, see DEVIATIONS; the next two steps bring them together)
  step B "REGISTER AND IGNORE EXISTING KEY 0xb3 (again)" prout --register-ignore \
    --param-sark=0xb3 @
  step B "CLEAR" prout --clear --param-rk=0xb3 @
  step B "REGISTER 0xb3" prout --register --param-sark=0xb3 @
  step B "RESERVE Exclusive Access - Registrants Only" prout --reserve --param-rk=0xb3 \
    --prout-type=6 @
  step A "READ(10) non-registrant under Exclusive Access - Registrants Only" read10 @
  step A "SYNCHRONIZE CACHE(10) non-registrant under Exclusive Access - Registrants Only" \
    sg_raw @ 35 00 00 00 00 00 00 00 00 00
  step A "LOG SENSE non-registrant under Exclusive Access - Registrants Only" \
    status_of sg_raw -r 64 -o /dev/null @ 4d 00 00 00 00 00 00 00 40 00
  step A "REQUEST SENSE non-registrant under Exclusive Access - Registrants Only" \
    status_of sg_raw -r 18 -o /dev/null @ 03 00 00 00 12 00
  step A "REGISTER 0xa1" prout --register --param-sark=0xa1 @
  step A "READ(10) registrant under Exclusive Access - Registrants Only" read10 @
  step B "RESERVE Write Exclusive again (holder, other type)" prout --reserve --param-rk=0xb3 \
    --prout-type=1 @
  step B "PREEMPT itself to Write Exclusive" prout --preempt --param-rk=0xb3 --param-sark=0xb3 \
    --prout-type=1 @
  step A "TEST UNIT READY after the type change" tur @
  step A "SYNCHRONIZE CACHE(10) non-holder under Write Exclusive" \
    sg_raw @ 35 00 00 00 00 00 00 00 00 00
  step A "MODE SENSE(6) non-holder under Write Exclusive" modesense6 @
  step B "UNREGISTER (holder, last but one)" prout --register --param-rk=0xb3 --param-sark=0 @
  step A "READ FULL STATUS" prin --read-full-status @
  step A "CLEAR" prout --clear --param-rk=0xa1 @
}

# --- the normalization and the allow-list ---------------------------------------------------
# normalize: the rules, each justified (device names are already replaced in step).
# - READ FULL STATUS's RELATIVE TARGET PORT IDENTIFIER: any non-zero value names the port
#   (SPC-4 7.8.2: 1 and 2 are ports A and B, 3-FFFFh further ports); LIO numbers its LUN's
#   ports from 1, rtgt derives one from the listener. What must hold is that it is the port
#   the LU reports in its Device Identification VPD page (the relative target port
#   designator): only that value, read through the same nexus, is replaced.
vpd_rtpi() {
  local rtpi
  rtpi=$(sg_vpd -p di "${DEVS[A]}" | sed -n 's/.*Relative target port: \(0x[0-9a-f]*\).*/\1/p' |
    head -1)
  [ -n "$rtpi" ] || fail "no relative target port designator in VPD page 83h of ${DEVS[A]}"
  echo "$rtpi"
}
normalize() {
  sed -e "s/Relative port address: $RTPI\$/Relative port address: <VPD 83h relative target port>/"
}

# The explained differences. A step listed here is replaced, in each transcript, by one line
# naming the deviation, but only when that side ended with the exit status listed for it
# (sg_persist / sg_raw: 0 GOOD, 24 RESERVATION CONFLICT, 5 ILLEGAL REQUEST); anything else
# stays and fails the comparison. Format: "STEP|LIO status|rtgt status|reason".
DEVIATIONS=$(cat <<'END'
B: RELEASE with a wrong key|0|24|SPC-4, basic PERSISTENT RESERVE OUT parameter list: a RESERVATION KEY other than the nexus's registered key conflicts for every service action but REGISTER AND IGNORE EXISTING KEY and an unregistered REGISTER; LIO checks the key of a RELEASE only from the holder: LIO deviates
B: RELEASE with the wrong type|24|5|SPC-4 Releasing (spc4r17 5.7.11.2): the holder releasing with another TYPE gets ILLEGAL REQUEST, INVALID RELEASE OF PERSISTENT RESERVATION; LIO answers RESERVATION CONFLICT: LIO deviates
A: RESERVE(6) registrant under Registrants Only|24|0|SPC-4 5.13.3 (spc4r17 5.7.3) b): RESERVE(6/10) from a registered I_T nexus while a Registrants Only or All Registrants reservation exists is GOOD and changes nothing; LIO looks for the type in the requester's own registration, which only the holder's carries, and conflicts: LIO deviates
A: RELEASE(6) registrant under Registrants Only|24|0|SPC-4 5.13.3 b), as for RESERVE(6) above: LIO deviates
B: REPORT LUNS under A's RESERVE(6)|24|0|SPC-4 REPORT LUNS is not affected by reservations (allowed in every column of the reservation tables); LIO refuses every command but INQUIRY and RELEASE from another nexus under an SPC-2 reservation: LIO deviates
B: READ RESERVATION after preempting its own key under All Registrants|0|0|SPC-4 PREEMPT under an All Registrants reservation: with a non-zero SERVICE ACTION RESERVATION KEY only the registrations with that key are removed and the reservation is not preempted (only a zero key preempts it); B's own key removes B, the last registrant, so the reservation ends (rtgt: none held); LIO takes it for B as Exclusive Access - Registrants Only: LIO deviates
B: READ CAPACITY(10) under Exclusive Access|24|0|SBC-3 4.17: READ CAPACITY is allowed under every persistent reservation type, for non-registrants too; LIO's non-holder table lacks READ CAPACITY(10) and conflicts: LIO deviates
END
)
# Capability lines of REPORT CAPABILITIES that differ by design: LIO supports SPEC_I_PT and
# ALL_TG_PT, rtgt refuses both with INVALID FIELD IN PARAMETER LIST and says so (SIP_C = 0,
# ATP_C = 0; docs/reservations.md, SCSI specifics). Format: "line on LIO|line on rtgt".
CAPABILITIES=$(cat <<'END'
  Specify Initiator Ports Capable(SIP_C): 1|  Specify Initiator Ports Capable(SIP_C): 0
  All Target Ports Capable(ATP_C): 1|  All Target Ports Capable(ATP_C): 0
END
)
# LIO does not count an unregistration (REGISTER with SA key 0) in PRgeneration; SPC-4 READ
# KEYS (PRGENERATION) increments it for every REGISTER service action that succeeds. After
# each successful "UNREGISTER" step LIO's generation is one more behind rtgt's: generation_fix
# adds the number of those steps so far to LIO's values, and marks the lines on both sides
# from the first one on.
generation_fix() {
  local l n=0 g rc
  while IFS= read -r l; do
    if [[ $l =~ ^==\ [AB]:\ UNREGISTER\ .*\(rc=([0-9]+)\)$ ]]; then
      rc=${BASH_REMATCH[1]}
      [ "$rc" = 0 ] && n=$((n + 1))
    fi
    if [ $n -gt 0 ] && [[ $l =~ ^(.*PR\ generation=0x)([0-9a-f]+)(.*)$ ]]; then
      g=$((16#${BASH_REMATCH[2]}))
      [ "$1" = lio ] && g=$((g + n))
      printf -v l '%s%x%s [LIO + %d: unregistrations]' "${BASH_REMATCH[1]}" $g \
        "${BASH_REMATCH[3]}" $n
    fi
    printf '%s\n' "$l"
  done
}

# The sense-key specific field pointer is optional (SPC-4 4.5.2.4: SKSV may be 0); LIO sends
# none for these, rtgt points at the field in error. On rtgt's side the pointer line is
# dropped only where it is the right one. Format: "STEP|pointer line".
FIELD_POINTERS=$(cat <<'END'
B: PERSISTENT RESERVE IN, service action 7|  Sense Key Specific: Error in Command: byte 1 bit 4
B: PERSISTENT RESERVE OUT RESERVE, scope 1|  Sense Key Specific: Error in Command: byte 2 bit 7
END
)
# Single lines where LIO deviates within a step whose status agrees; on LIO's side, in that
# step, the LIO line is read as rtgt's (so rtgt's must be exactly that). Format:
# "STEP|LIO line|rtgt line". SCOPE is a CDB field (PERSISTENT RESERVE OUT byte 2), and an
# obsolete or reserved code there is INVALID FIELD IN CDB (SPC-4, reserved and obsolete
# field values); LIO answers INVALID FIELD IN PARAMETER LIST.
LINE_DEVIATIONS=$(cat <<'END'
B: PERSISTENT RESERVE OUT RESERVE, scope 1|Additional sense: Invalid field in parameter list|Additional sense: Invalid field in cdb
END
)
# explain SIDE (lio|rtgt): the transcript on stdin with the explained differences of SIDE
# replaced by their names.
explain() {
  DEVIATIONS=$DEVIATIONS CAPABILITIES=$CAPABILITIES FIELD_POINTERS=$FIELD_POINTERS \
    LINE_DEVIATIONS=$LINE_DEVIATIONS \
    awk -v side="$1" '
    BEGIN {
      col = side == "lio" ? 2 : 3
      n = split(ENVIRON["DEVIATIONS"], d, "\n")
      for (i = 1; i <= n; i++) { split(d[i], f, "|"); want[f[1]] = f[col] }
      n = split(ENVIRON["CAPABILITIES"], c, "\n")
      for (i = 1; i <= n; i++) { split(c[i], f, "|"); cap[side == "lio" ? f[1] : f[2]] = f[1] }
      n = split(ENVIRON["FIELD_POINTERS"], p, "\n")
      for (i = 1; i <= n; i++) { split(p[i], f, "|"); ptr[f[1]] = f[2] }
      n = split(ENVIRON["LINE_DEVIATIONS"], l, "\n")
      for (i = 1; i <= n; i++) { split(l[i], f, "|"); lio_line[f[1]] = f[2]; as_rtgt[f[1]] = f[3] }
    }
    /^== / {
      skip = 0
      t = substr($0, 4); sub(/ \(rc=[0-9]+\)$/, "", t)
      rc = $0; sub(/.*\(rc=/, "", rc); sub(/\)$/, "", rc)
      if ((t in want) && want[t] == rc) { print "== " t ": known deviation"; skip = 1; next }
    }
    skip { next }
    side == "rtgt" && (t in ptr) && $0 == ptr[t] { next }
    side == "lio" && (t in lio_line) && $0 == lio_line[t] { print as_rtgt[t]; next }
    ($0 in cap) { print cap[$0] " (LIO) / documented rtgt capability difference"; next }
    { print }'
}

# --- LIO ib_srpt: one LU reached by the two initiator port ids ----------------------------------
# srpt_peer_setup's TPG sits on the port GUID: ib_srpt names RDMA CM sessions there by the
# source IP, so both logins would be one initiator for LIO. On the port GID form of the target
# port, ib_srpt looks the session up by the 16-byte initiator port id (0x + initiator_ext +
# port GUID), so each login has its own ACL, as LIO's PR code needs for two I_T nexuses.
lio_setup() {
  local c=/sys/kernel/config/target gid gn ig t rd e
  modprobe ib_srpt || fail "modprobe ib_srpt failed"
  # LIO rewrites its APTPL file (db_root/pr/aptpl_<unit serial>) on every registration
  # change, APTPL = 0 included, and fails the command (LOGICAL UNIT COMMUNICATION FAILURE)
  # when it cannot: give it its default db_root and a unit serial.
  mkdir -p /var/target/pr
  rd=$c/core/rd_mcp_0/prcmp
  mkdir -p "$rd"
  echo "rd_pages=$((16 * 256))" > "$rd/control"
  echo 1 > "$rd/enable" || fail "cannot enable the LIO ramdisk"
  echo prcmp0001 > "$rd/wwn/vpd_unit_serial" || fail "cannot set the LIO unit serial"
  mkdir -p $c/srpt
  echo "$SRPT_PEER_PORT" > $c/srpt/discovery_auth/rdma_cm_port
  gid=$(< "/sys/class/infiniband/$E2E_RDMA_DEV/ports/1/gids/0")
  gn=0x$(tr -d : <<< "$gid")
  ig=$(cut -d: -f5- <<< "$gid" | tr -d :)
  t=$c/srpt/$gn/$gn
  mkdir -p "$t/lun/lun_0" || fail "cannot create the ib_srpt TPG $t"
  ln -s "$rd" "$t/lun/lun_0/prcmp"
  for e in $EXT_A $EXT_B; do
    mkdir "$t/acls/0x$e$ig" "$t/acls/0x$e$ig/lun_0"
    ln -s "$t/lun/lun_0" "$t/acls/0x$e$ig/lun_0/lun_0"
  done
  echo 1 > "$t/enable" || fail "cannot enable the ib_srpt TPG"
  local ng
  ng=$(tr -d : < "/sys/class/infiniband/$E2E_RDMA_DEV/node_guid")
  LIO_SPEC="id_ext=$ng,ioc_guid=$ng,dest=$E2E_IP:$SRPT_PEER_PORT"
}

# login_both SPEC: the two logins (A, then B) to the target of SPEC; prints "devA devB".
login_both() {
  local a b
  a=$(srp_login "$1,initiator_ext=$EXT_A")
  b=$(srp_login "$1,initiator_ext=$EXT_B")
  [ "$a" != "$b" ] || fail "one disk for two logins"
  echo "$a $b"
}
# run_side SIDE DEV_A DEV_B: the sequence through DEV_A and DEV_B into SIDE-raw.txt, normalized
# into SIDE.txt.
declare -A DEVS
run_side() {
  DEVS[A]=$2 DEVS[B]=$3
  log "$1: nexus A ${DEVS[A]}, nexus B ${DEVS[B]}"
  RTPI=$(vpd_rtpi)
  pr_sequence > "$E2E_LOGDIR/$1-raw.txt"
  normalize < "$E2E_LOGDIR/$1-raw.txt" > "$E2E_LOGDIR/$1.txt"
}

log "LIO ib_srpt"
lio_setup
read -r LIO_A LIO_B <<< "$(login_both "$LIO_SPEC")"
sessions=$(ls -d /sys/kernel/config/target/srpt/0x*/0x*/acls/0x* | wc -l)
assert_eq "$sessions" 2 "LIO ACLs"

log "rtgt"
NQN=nqn.2016-06.io.rtgt:prcmp
rm -f /tmp/pr-cmp-ptpl.json
start_rtgt
rtgt_rpc_ok nvmf_create_transport '{"trtype":"SRP"}' > /dev/null
rtgt_rpc_ok bdev_malloc_create '{"name":"Malloc0","num_blocks":32768,"block_size":512}' > /dev/null
rtgt_rpc_ok nvmf_create_subsystem "{\"nqn\":\"$NQN\",\"allow_any_host\":true}" > /dev/null
# A ptpl_file so that rtgt, like LIO, can persist (PTPL_C = 1, and APTPL = 1 is accepted).
rtgt_rpc_ok nvmf_subsystem_add_ns "{\"nqn\":\"$NQN\",\"namespace\":{\"bdev_name\":\"Malloc0\",
  \"ptpl_file\":\"/tmp/pr-cmp-ptpl.json\"}}" > /dev/null
rtgt_rpc_ok nvmf_subsystem_add_listener "$(jq -nc --arg nqn "$NQN" --arg ip "$E2E_IP" \
  --arg port "$RTGT_SRP_PORT" \
  '{nqn:$nqn, listen_address:{trtype:"SRP", adrfam:"IPv4", traddr:$ip, trsvcid:$port}}')" > /dev/null
read -r RTGT_A RTGT_B <<< "$(login_both "$(srp_login_spec "$NQN")")"

# The two targets share nothing (their own LU, nexuses and ports): both sequences run at once.
run_side lio "$LIO_A" "$LIO_B" & lio_pid=$!
run_side rtgt "$RTGT_A" "$RTGT_B" & rtgt_pid=$!
wait $lio_pid || fail "the LIO sequence failed"
wait $rtgt_pid || fail "the rtgt sequence failed"
srp_logout_all
srpt_peer_teardown
stop_rtgt
rm -f /tmp/pr-cmp-ptpl.json /tmp/pr-cmp-zero /tmp/pr-cmp-keyb2

# --- the comparison ---------------------------------------------------------------------------
grep -q '^== ' "$E2E_LOGDIR/lio.txt" || fail "empty LIO transcript"
for side in lio rtgt; do
  explain $side < "$E2E_LOGDIR/$side.txt" | generation_fix $side > "$E2E_LOGDIR/$side-explained.txt"
done
log "$(grep -c '^== ' "$E2E_LOGDIR/lio.txt") steps; explained: $(grep -c 'known deviation\|capability difference' "$E2E_LOGDIR/rtgt-explained.txt") lines"
if ! diff -U3 --label LIO --label rtgt "$E2E_LOGDIR/lio-explained.txt" \
    "$E2E_LOGDIR/rtgt-explained.txt" > "$E2E_LOGDIR/diff.txt"; then
  cat "$E2E_LOGDIR/diff.txt"
  fail "LIO and rtgt differ: $(grep -E '^[-+][^-+]' "$E2E_LOGDIR/diff.txt" | head -2 | tr '\n' ' ')"
fi
