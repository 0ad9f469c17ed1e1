# Harness self-test: rtgt exits before creating its socket; start_rtgt says so with its log.
start_rtgt --exit-early
