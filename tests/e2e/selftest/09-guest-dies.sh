# Harness self-test: the guest kernel crashes; the host reports this scenario and the next
# as failed and exits non-zero.
echo 1 > /proc/sys/kernel/sysrq
echo c > /proc/sysrq-trigger
