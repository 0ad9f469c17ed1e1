# Harness self-test: hangs with a child process; the per-scenario timeout must kill both.
# e2e-timeout: 4
sleep 300 &
echo $! > /run/selftest-sleeper.pid
sleep 300
