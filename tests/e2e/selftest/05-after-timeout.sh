# Harness self-test: the processes of the timed-out scenario are gone, and cleanup ran.
pid=$(cat /run/selftest-sleeper.pid)
expect_fail pid_alive "$pid"
expect_fail test -d /sys/kernel/config/nullb/selftest
