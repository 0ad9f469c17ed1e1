#!/usr/bin/env python3
"""Callers of a function in a callgrind profile, by inclusive cost (a profiling helper).

    cg-callers.py callgrind.out FUNCTION_SUBSTRING [N]
"""
import re
import subprocess
import sys

out = subprocess.run(["callgrind_annotate", "--tree=caller", "--inclusive=yes", sys.argv[1]],
                     capture_output=True, text=True).stdout
want, n = sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 15
block = []
for line in out.splitlines():
    if not line.strip():
        block = []
        continue
    block.append(line)
    if "*  " in line and want in line:
        rows = []
        for b in block[:-1]:
            m = re.match(r"\s*([\d,]+) .*?<\s+(.*)", b)
            if m:
                rows.append((int(m.group(1).replace(",", "")), m.group(2)[-150:]))
        print(line[:200])
        for c, f in sorted(rows, reverse=True)[:n]:
            print(f"{c:>14,}  {f}")
        print()
