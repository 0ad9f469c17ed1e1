#!/usr/bin/env python3
"""Turns the wire dumps of an rtgt log (trace level, target `rtgt_wire`) into capture files
for gen_seeds: nvme-NNN.bin (SQE + in-capsule data), connect-NNN.bin (Connect SQE + data),
cm-NNN.bin (NVMe/RDMA CM private data), srp-login-NNN.bin, srp-iu-NNN.bin.

Usage: extract.py RTGT_LOG [OUT_DIR]   (OUT_DIR defaults to wire/ next to this script)
"""
import os
import re
import sys

log = sys.argv[1]
out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "wire")
os.makedirs(out, exist_ok=True)
names = {"nvme_capsule": "nvme", "nvme_connect": "connect", "nvme_rdma_cm": "cm",
         "srp_login": "srp-login", "srp_iu": "srp-iu"}
count = {}
seen = set()
for line in open(log, errors="replace"):
    if "rtgt_wire" not in line:
        continue
    m = re.search(r'kind="([a-z_]+)"', line)
    if not m or m.group(1) not in names:
        continue
    fields = dict(re.findall(r'(sqe|data)=([0-9a-f]*)', line))
    blob = bytes.fromhex(fields.get("sqe", "") + fields.get("data", ""))
    # The same bytes twice (e.g. a Connect parsed once per queue) are one seed.
    if (m.group(1), blob) in seen:
        continue
    seen.add((m.group(1), blob))
    n = count.get(m.group(1), 0)
    count[m.group(1)] = n + 1
    with open(os.path.join(out, "%s-%03d.bin" % (names[m.group(1)], n)), "wb") as f:
        f.write(blob)
print("extracted:", ", ".join("%s %d" % kv for kv in sorted(count.items())))
