#!/usr/bin/env python3
"""The control channel of the Ceph e2e scenarios: what a scenario in the guest must do to the
host-side cluster that only the host side can (fence a client, stop a daemon, act as another
client, cut a guest address off). Started by netns/ceph.sh inside the guest's network namespace,
listening on the namespace's address only; lib.sh's `ceph_host` is the client.

Protocol: one TCP connection per command. The client sends one line, `COMMAND [ARG...]`; the
server runs the fixed command line that COMMAND stands for (never a shell; every argument must
match its pattern) and answers with the command's output lines, then `EXIT <status>`, and
closes. Commands run one at a time. See COMMANDS below, and tests/e2e/README.md.
"""
import argparse
import re
import socketserver
import subprocess
import sys
import threading
import time

ADDR = r"(v[12]:|any:)?\d{1,3}(\.\d{1,3}){3}(:\d{1,5}(/\d{1,10})?)?"  # a Ceph entity address
IPV4 = r"\d{1,3}(\.\d{1,3}){3}"
IMAGE = r"[A-Za-z0-9_.-]{1,64}"
SIZE = r"\d{1,7}[KMGT]?"
SECS = r"\d{1,7}"
FEATURES = r"[a-z-]{1,32}(,[a-z-]{1,32}){0,8}"


def ceph(*args):
    return ["timeout", "60", "ceph", "--conf", CONF, "--admin-socket=", *args]


def rbd(*args):
    return ["timeout", "60", "rbd", "--conf", CONF, "--admin-socket=", *args]


def cluster_sh(action):
    return [CLUSTER_SH, action, CLUSTER_DIR]


def nft(*args):
    return ["nft", *args]


# name: (argument patterns (the last ones may be optional: `?`), argv builder, help)
COMMANDS = {
    "ping": ([], lambda: ["echo", "pong"], "ping: answers pong"),
    "status": ([], lambda: cluster_sh("status"), "status: exit 0 if the cluster serves I/O"),
    "blocklist_add": ([ADDR, SECS + "?"],
                      lambda a, s=None: ceph("osd", "blocklist", "add", a, *([s] if s else [])),
                      "blocklist_add ADDR [SECONDS]: ceph osd blocklist add"),
    "blocklist_rm": ([ADDR], lambda a: ceph("osd", "blocklist", "rm", a),
                     "blocklist_rm ADDR: ceph osd blocklist rm"),
    "blocklist_ls": ([], lambda: ceph("osd", "blocklist", "ls"), "blocklist_ls: ceph osd blocklist ls"),
    "osd_stop": ([], lambda: cluster_sh("osd-stop"), "osd_stop: stop the OSD (its data is kept)"),
    "osd_start": ([], lambda: cluster_sh("osd-start"), "osd_start: start it, wait until the pool serves I/O"),
    "mon_stop": ([], lambda: cluster_sh("mon-stop"), "mon_stop: stop the monitor"),
    "mon_start": ([], lambda: cluster_sh("mon-start"), "mon_start: start it"),
    "rbd_create": ([IMAGE, SIZE, FEATURES + "?"],
                   lambda i, s, f=None: rbd("create", "rbd/" + i, "--size", s,
                                            *(["--image-feature", f] if f else [])),
                   "rbd_create IMAGE SIZE [FEATURES]: rbd create rbd/IMAGE --size SIZE [--image-feature FEATURES]"),
    "rbd_resize": ([IMAGE, SIZE], lambda i, s: rbd("resize", "rbd/" + i, "--size", s, "--allow-shrink"),
                   "rbd_resize IMAGE SIZE: rbd resize, as another client than the guest's"),
    "rbd_rm": ([IMAGE], lambda i: rbd("rm", "--no-progress", "rbd/" + i), "rbd_rm IMAGE: rbd rm"),
    "rbd_info": ([IMAGE], lambda i: rbd("info", "--format", "json", "rbd/" + i), "rbd_info IMAGE: rbd info (JSON)"),
    "rbd_status": ([IMAGE], lambda i: rbd("status", "rbd/" + i), "rbd_status IMAGE: rbd status (the watchers)"),
    "rbd_ls": ([], lambda: rbd("ls", "rbd"), "rbd_ls: rbd ls rbd"),
    "partition": ([IPV4], lambda a: nft("add", "element", "inet", "rtgt_e2e", "partitioned", "{ %s }" % a),
                  "partition IPV4: drop all traffic between that guest address and the namespace"),
    "heal": ([IPV4 + "|all"],
             lambda a: (nft("flush", "set", "inet", "rtgt_e2e", "partitioned") if a == "all" else
                        nft("delete", "element", "inet", "rtgt_e2e", "partitioned", "{ %s }" % a)),
             "heal IPV4|all: undo partition"),
    "partitions": ([], lambda: nft("list", "table", "inet", "rtgt_e2e"),
                   "partitions: the partitioned addresses and the packets dropped (nft)"),
}

LOCK = threading.Lock()


def parse(line):
    """(argv, None) or (None, error message)."""
    words = line.split()
    if not words:
        return None, "empty command"
    if words[0] == "help":
        return ["echo", "\n".join(c[2] for _, c in sorted(COMMANDS.items()))], None
    cmd = COMMANDS.get(words[0])
    if cmd is None:
        return None, "unknown command %r (help lists them)" % words[0]
    patterns, build, _ = cmd
    args = words[1:]
    required = [p for p in patterns if not p.endswith("?")]
    if not len(required) <= len(args) <= len(patterns):
        return None, "%s takes %d to %d arguments" % (words[0], len(required), len(patterns))
    for a, p in zip(args, patterns):
        if not re.fullmatch(p.rstrip("?"), a):
            return None, "%s: argument %r is not allowed" % (words[0], a)
    if words[0] in ("partition", "heal") and args[0] == LISTEN:
        return None, "%s: %s is the cluster's own address" % (words[0], args[0])
    return build(*args), None


class Handler(socketserver.StreamRequestHandler):
    timeout = 30

    def handle(self):
        line = self.rfile.readline(512).decode("utf-8", "replace").strip()
        argv, err = parse(line)
        t0 = time.time()
        if err:
            out, rc = err + "\n", 2
        else:
            with LOCK:
                try:
                    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, timeout=120)
                    out, rc = p.stdout.decode("utf-8", "replace"), p.returncode
                except subprocess.TimeoutExpired:
                    out, rc = "timed out after 120 s\n", 124
        if out and not out.endswith("\n"):
            out += "\n"
        print("%s from %s: %r -> %s in %.1fs%s" % (
            time.strftime("%T"), self.client_address[0], line, rc, time.time() - t0,
            "" if rc == 0 else ": " + out.strip().replace("\n", " | ")[:300]), flush=True)
        self.wfile.write((out + "EXIT %d\n" % rc).encode())


def main():
    global CONF, CLUSTER_SH, CLUSTER_DIR, LISTEN
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--conf", required=True)
    ap.add_argument("--cluster-sh", required=True)
    ap.add_argument("--cluster-dir", required=True)
    a = ap.parse_args()
    CONF, CLUSTER_SH, CLUSTER_DIR, LISTEN = a.conf, a.cluster_sh, a.cluster_dir, a.listen
    socketserver.ThreadingTCPServer.allow_reuse_address = True
    socketserver.ThreadingTCPServer.daemon_threads = True
    srv = socketserver.ThreadingTCPServer((a.listen, a.port), Handler)
    print("control channel on %s:%d" % (a.listen, a.port), flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
