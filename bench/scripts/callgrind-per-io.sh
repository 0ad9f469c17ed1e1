#!/bin/sh
# Instructions per I/O of the reactor loop (target + inline initiator) and of the initiator
# alone, measured with callgrind on `rtgt-bench --inline-initiator` (one thread does
# everything, so the counts repeat from run to run whatever the load on the machine).
#
#   bench/scripts/callgrind-per-io.sh [rtgt-bench options...]
#
# Prints: I/Os, Ir/I/O of the reactor loop, of the initiator, and their difference (target +
# the simulated fabric's work on the target's behalf). With `--transport srp` the SRP test
# initiator is measured instead of the NVMe host.
#
# The "whole run" figures divide everything the reactor did, connection setup included (the
# poll group's first resource set, ≈ 46 M instructions under valgrind), by the I/Os of one
# 3 s run. The "steady state" figures take a second pair of runs of 6 s and divide the
# difference in instructions by the difference in I/Os, so what is done once per run
# (setup, teardown) cancels out and only what is done per I/O (and per unit of time)
# remains (CG_DURATION sets the first run's seconds, 3 by default). CG_STEADY=0 skips the
# second pair. The "one profile" figure takes the 3 s loop
# profile alone: everything in the reactor loop minus the initiator's Driver::step and minus
# the connection's setup (`add_connection`, SRP `new_channel`), over its I/Os; it does not
# depend on how many I/Os valgrind managed, and repeats within ~1 % (the figure
# docs/performance.md reports).
set -e
BIN=${RTGT_BENCH:-${CARGO_TARGET_DIR:-target}/release/rtgt-bench}
OUT=${CG_OUT:-/tmp/rtgt-cg}
STEADY=${CG_STEADY:-1}
HOST=nvme
prev=
for a in "$@"; do
    case "$prev$a" in
        --transportsrp|--transport=srp) HOST=srp ;;
    esac
    prev=$a
done
: >"$OUT.log"
# run SUFFIX DURATION TOGGLE [rtgt-bench options]
run() {
    sfx=$1 dur=$2 tog=$3
    shift 3
    valgrind --tool=callgrind --collect-atstart=no "--toggle-collect=$tog" \
        --callgrind-out-file="$OUT.$sfx" "$BIN" --inline-initiator --duration "$dur" --warmup 1 \
        "$@" --quiet --json "$OUT.$sfx.json" >/dev/null 2>>"$OUT.log"
}
D=${CG_DURATION:-3}
run loop "$D" '*Reactor::run*' "$@"
run host "$D" "*$HOST::Driver::step*" "$@"
if [ "$STEADY" != 0 ]; then
    run loop2 $((2 * D)) '*Reactor::run*' "$@"
    run host2 $((2 * D)) "*$HOST::Driver::step*" "$@"
fi
python3 - "$OUT" "$HOST" "$STEADY" <<'PY'
import re, subprocess, sys
out, host, steady = sys.argv[1], sys.argv[2], sys.argv[3] != "0"
def total_and_ios(f):
    # I/Os = calls of the initiator's submit (one per command, from Driver::step).
    txt = subprocess.run(["callgrind_annotate", "--tree=caller", f], capture_output=True, text=True).stdout
    tot = int(re.search(r"([\d,]+) \(100.0%\)\s+PROGRAM TOTALS", txt).group(1).replace(",", ""))
    ios = 0
    for m in re.finditer(r"<[^\n]*?Driver::step \(([\d,]+)x\)[^\n]*\n[^\n]*\*\s+\S*rtgt_bench::" + host + "::submit ", txt):
        ios += int(m.group(1).replace(",", ""))
    return tot, ios
lt, li = total_and_ios(out + ".loop")
ht, hi = total_and_ios(out + ".host")
hio = max(hi, 1)
inc = subprocess.run(["callgrind_annotate", "--inclusive=yes", out + ".loop"], capture_output=True, text=True).stdout
def fn_incl(pat):
    best = 0
    for line in inc.splitlines():
        m = re.match(r"\s*([\d,]+) \([ \d.]+%\)\s+\S+?:(\S.*?)( \[.*\])?$", line)
        if m and re.search(pat, m.group(2)):
            best = max(best, int(m.group(1).replace(",", "")))
    return best
step = fn_incl(r"rtgt_bench::\w+::Driver::step$")
setup = fn_incl(r"::(add_connection|new_channel)$")
print(f"one profile: {li} I/Os; initiator {step / max(li,1):.0f}, setup {setup / max(li,1):.0f}; "
      f"target {(lt - step - setup) / max(li,1):.0f} Ir/I/O")
print("whole run (setup included):")
print(f"  loop: {li} I/Os, {lt / max(li,1):.0f} Ir/I/O (target + initiator)")
print(f"  initiator: {hi} I/Os, {ht / hio:.0f} Ir/I/O")
print(f"  target (loop - initiator): {lt / max(li,1) - ht / hio:.0f} Ir/I/O")
if steady:
    lt2, li2 = total_and_ios(out + ".loop2")
    ht2, hi2 = total_and_ios(out + ".host2")
    loop = (lt2 - lt) / max(li2 - li, 1)
    ini = (ht2 - ht) / max(hi2 - hi, 1)
    print("steady state (second run minus first):")
    print(f"  loop: {li2 - li} more I/Os, {loop:.0f} Ir/I/O (target + initiator)")
    print(f"  initiator: {hi2 - hi} more I/Os, {ini:.0f} Ir/I/O")
    print(f"  target (loop - initiator): {loop - ini:.0f} Ir/I/O")
PY
