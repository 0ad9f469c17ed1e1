# Harness self-test: fails with an assertion message; leaves an "rtgt log" to be printed.
echo "selftest rtgt log line" >> "$RTGT_LOG"
assert_eq "actual" "expected" "selftest value"
echo "not reached" >&2
