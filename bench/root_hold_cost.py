#!/usr/bin/env python3
"""What holding an exited container's root costs the node (issue 16).

The sidecar keeps `/proc/<pid>/ns/mnt` and `/proc/<pid>/root` open from the
moment the watched container's process is inside its root file system until
the hook ends. This makes N "containers" (a private mount namespace with M
tmpfs mounts each, like a container's /dev, /dev/shm, /proc, binds...),
optionally holds the same two descriptors on each, lets every process exit,
and prints the kernel slab growth (/proc/meminfo) after the exits and after
the descriptors are closed. Needs root; not part of `make bench` (a
one-off figure for the README; run each case twice, the first run warms the
caches). Usage: bench/root_hold_cost.py N M
"""
import os
import subprocess
import sys
import tempfile
import time

N, M = int(sys.argv[1]), int(sys.argv[2])
base = tempfile.mkdtemp(prefix="kps-hold-")
for j in range(M):
    os.makedirs(f"{base}/{j}")
SCRIPT = "; ".join(f"mount -t tmpfs t{j} {base}/{j}" for j in range(M)) + "; echo ok; read x"


def slab():
    m = {}
    for line in open("/proc/meminfo"):
        k, v = line.split(":")
        m[k] = int(v.split()[0])
    return m["Slab"], m["SUnreclaim"]


def run(hold):
    procs, fds = [], []
    s0 = slab()
    for _ in range(N):
        p = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", SCRIPT],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        p.stdout.readline()
        if hold:
            fds.append(os.open(f"/proc/{p.pid}/ns/mnt", os.O_RDONLY))
            fds.append(os.open(f"/proc/{p.pid}/root", os.O_PATH | os.O_DIRECTORY))
        procs.append(p)
    for p in procs:
        p.stdin.close()
        p.wait()
    time.sleep(1)
    s1 = slab()
    for f in fds:
        os.close(f)
    time.sleep(1)
    s2 = slab()
    return s0, s1, s2


for hold in (False, True, False, True):
    s0, s1, s2 = run(hold)
    print(f"hold={hold} N={N} mounts={M}: slab after the exits {s1[0] - s0[0]:+d} KiB "
          f"(unreclaimable {s1[1] - s0[1]:+d}), after closing {s2[0] - s0[0]:+d} KiB "
          f"(unreclaimable {s2[1] - s0[1]:+d})")
for j in range(M):
    os.rmdir(f"{base}/{j}")
os.rmdir(base)
