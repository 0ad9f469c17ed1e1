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
set -e
BIN=${RTGT_BENCH:-${CARGO_TARGET_DIR:-target}/release/rtgt-bench}
OUT=${CG_OUT:-/tmp/rtgt-cg}
HOST=nvme
prev=
for a in "$@"; do
    case "$prev$a" in
        --transportsrp|--transport=srp) HOST=srp ;;
    esac
    prev=$a
done
valgrind --tool=callgrind --collect-atstart=no '--toggle-collect=*Reactor::run*' \
    --callgrind-out-file="$OUT.loop" "$BIN" --inline-initiator --duration 3 --warmup 1 "$@" \
    --quiet --json "$OUT.json" >/dev/null 2>"$OUT.log"
valgrind --tool=callgrind --collect-atstart=no "--toggle-collect=*$HOST::Driver::step*" \
    --callgrind-out-file="$OUT.host" "$BIN" --inline-initiator --duration 3 --warmup 1 "$@" \
    --quiet --json "$OUT.host.json" >/dev/null 2>>"$OUT.log"
python3 - "$OUT" "$HOST" <<'PY'
import re, subprocess, sys
out, host = sys.argv[1], sys.argv[2]
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
print(f"loop: {li} I/Os, {lt / max(li,1):.0f} Ir/I/O (target + initiator)")
print(f"initiator: {hi} I/Os, {ht / hio:.0f} Ir/I/O")
print(f"target (loop - initiator): {lt / max(li,1) - ht / hio:.0f} Ir/I/O")
PY
