#!/usr/bin/env python3
"""Inclusive and self instruction counts per I/O of the busiest functions in a callgrind
profile (a profiling helper for rtgt-bench --inline-initiator runs).

    cg-per-io.py callgrind.out IOS [N] [FILTER]

IOS is the number of I/Os the profiled run did in total (warm-up included), e.g. the call
count of transport_rdma::pg::RdmaPg::start.
"""
import re
import subprocess
import sys

path, ios = sys.argv[1], float(sys.argv[2])
n = int(sys.argv[3]) if len(sys.argv) > 3 else 40
flt = sys.argv[4] if len(sys.argv) > 4 else ""


def table(inclusive):
    args = ["callgrind_annotate", f"--inclusive={'yes' if inclusive else 'no'}", "--threshold=100", path]
    out = subprocess.run(args, capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \([ \d.]+%\)\s+(\S.*?):(\S.*?)( \[.*\])?$", line)
        if m and not re.search(r"\([\d,]+x\)\s*(\[.*\])?$", line):
            fn = m.group(3)
            rows[fn] = rows.get(fn, 0) + int(m.group(1).replace(",", ""))
    return rows


inc, slf = table(True), table(False)
print(f"{'incl/IO':>9} {'self/IO':>9}  function")
for fn, c in sorted(inc.items(), key=lambda kv: -kv[1]):
    if flt and not re.search(flt, fn):
        continue
    print(f"{c / ios:>9.0f} {slf.get(fn, 0) / ios:>9.0f}  {fn[:150]}")
    n -= 1
    if n == 0:
        break
