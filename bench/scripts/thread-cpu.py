#!/usr/bin/env python3
"""Per-thread CPU and context switches per I/O of any RBD client (rbd bench, rtgt-bench,
bdev-rbd's rbd_bench example), and the OSD's CPU per I/O, over the same window.

    bench/scripts/thread-cpu.py T1 T2 OSD_PID LABEL -- CMD...

Runs CMD, reads /proc/PID/task/*/{comm,schedstat,status} of CMD's process and of OSD_PID at T1
and T2 seconds after the start (CMD must still run at T2), and prints one JSON line: IOPS (from
CMD's output), I/Os in the window (rbd bench: interpolated from its per-second lines; the others:
IOPS x window), CPU us per I/O by thread group (trailing digits, _ and - trimmed), voluntary and
involuntary context switches per I/O, the process's and the OSD's CPU per I/O, the load average.
Used for docs/performance.md "RBD end to end"."""
import json, os, re, subprocess, sys, threading, time

def snap(pid):
    out = {}
    base = f"/proc/{pid}/task"
    try:
        tids = os.listdir(base)
    except OSError:
        return out
    for t in tids:
        try:
            comm = open(f"{base}/{t}/comm").read().strip()
            ns = int(open(f"{base}/{t}/schedstat").read().split()[0])
            st = open(f"{base}/{t}/status").read()
            v = int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", st, re.M).group(1))
            nv = int(re.search(r"^nonvoluntary_ctxt_switches:\s+(\d+)", st, re.M).group(1))
        except (OSError, AttributeError):
            continue
        out[t] = (comm, ns, v, nv)
    return out

def group(name):
    return re.sub(r"[0-9_\-]+$", "", name)

def delta(a, b):
    g = {}
    for t, (comm, ns, v, nv) in b.items():
        ns0, v0, nv0 = (a[t][1], a[t][2], a[t][3]) if t in a else (0, 0, 0)
        k = group(comm)
        x = g.setdefault(k, [0, 0, 0])
        x[0] += ns - ns0; x[1] += v - v0; x[2] += nv - nv0
    return g

t1, t2, osd, label = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
cmd = sys.argv[sys.argv.index("--") + 1:]
lines = []
start = time.monotonic()
p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
def reader():
    for l in p.stdout:
        lines.append((time.monotonic() - start, l))
th = threading.Thread(target=reader); th.start()
time.sleep(max(0, t1 - (time.monotonic() - start)))
a = snap(p.pid); ao = snap(osd); ta = time.monotonic() - start
time.sleep(max(0, t2 - (time.monotonic() - start)))
b = snap(p.pid); bo = snap(osd); tb = time.monotonic() - start
p.wait(); th.join()
text = "".join(l for _, l in lines)
# IOPS: rbd bench's last line, rtgt-bench's "IOPS", rbd_bench example's
iops = None
m = re.findall(r"ops/sec:\s+([\d.]+)", text)
if m: iops = float(m[-1])
# rbd bench: interpolate cumulative ops at ta, tb from per-second lines
pts = [(ts, int(mm.group(1))) for ts, l in lines for mm in [re.match(r"^\s+\d+\s+(\d+)\s+[\d.]+\s", l)] if mm]
ops = None
if len(pts) >= 2:
    def at(t):
        prev = (0.0, 0)
        for ts, c in pts:
            if ts >= t:
                return prev[1] + (c - prev[1]) * (t - prev[0]) / max(1e-9, ts - prev[0])
            prev = (ts, c)
        return None
    oa, ob = at(ta), at(tb)
    if oa is not None and ob is not None:
        ops = ob - oa
if iops is None:
    m = re.findall(r"([\d.]+)\s*IOPS", text)
    if m: iops = float(m[-1])
if ops is None and iops:
    ops = iops * (tb - ta)
d = delta(a, b); do = delta(ao, bo)
res = {"label": label, "iops": iops, "window_s": tb - ta, "ops": ops,
       "loadavg": open("/proc/loadavg").read().split()[0],
       "per_io_us": {k: round(v[0] / ops / 1000, 1) for k, v in sorted(d.items()) if v[0] > 100 * ops} if ops else None,
       "vcs_nvcs_per_io": {k: (round(v[1] / ops, 2), round(v[2] / ops, 2)) for k, v in sorted(d.items()) if v[1] + v[2] > 0.01 * ops} if ops else None,
       "process_us": round(sum(v[0] for v in d.values()) / ops / 1000, 2) if ops else None,
       "process_cs": round(sum(v[1] + v[2] for v in d.values()) / ops, 3) if ops else None,
       "osd_us": round(sum(v[0] for v in do.values()) / ops / 1000, 2) if ops else None,
       "rc": p.returncode}
if p.returncode != 0 or not ops:
    res["tail"] = text[-1500:]
print(json.dumps(res))
