# The fabric crate's conformance suite (fabric/tests/conformance.rs, the same tests
# `cargo test -p fabric` runs against the sim provider) against the rdma provider on rxe0.
# The test binary comes from guest-bins.txt.
# e2e-timeout: 120
bins=("$E2E_BIN"/conformance-*)
[ -x "${bins[0]}" ] || fail "no conformance test binary in $E2E_BIN (see scenarios/guest-bins.txt)"
[ ${#bins[@]} = 1 ] || fail "several conformance binaries in $E2E_BIN: ${bins[*]}"
log "${bins[0]##*/} --test-threads=2 (RTGT_FABRIC=rdma RTGT_FABRIC_ADDR=$E2E_IP)"
if ! RTGT_FABRIC=rdma RTGT_FABRIC_ADDR=$E2E_IP "${bins[0]}" --test-threads=2 \
    > "$E2E_LOGDIR/conformance.log" 2>&1; then
  fail "fabric conformance failed: $(grep -E '^test .*FAILED|panicked|^test result' "$E2E_LOGDIR/conformance.log" | head -4 | tr '\n' ' ')"
fi
grep '^test result' "$E2E_LOGDIR/conformance.log" >&2
