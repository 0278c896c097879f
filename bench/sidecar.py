#!/usr/bin/env python3
"""Sidecar figures for `make bench` (root; util-linux unshare/nsenter).

Builds the pod stand-in of sidecar/tests/common/mod.rs out of real namespaces
(a PID namespace whose init is `sleep`, the sidecar entered with nsenter, each
"main container" made like runc makes one: its own mount namespace, the pod's
/proc, the identifying bind mount, a dozen more mounts, then a FIFO gate), and
measures:

  idle:    the sidecar's resident memory, CPU time and context switches
           (voluntary + involuntary, i.e. wake-ups) over IDLE seconds while
           the watched container runs (`sleep`);
  latency: RUNS times, a container whose payload is `date +%s%N` (it prints
           the time and exits: that is the watched process's exit, give or
           take date's own exit path) and the hook `date +%s%N` run directly
           by the sidecar (no shell): hook_time - exit_time is the latency from
           the exit to the hook's first output, which includes the sidecar's
           fork+exec of date and date's dynamic loading (~0.3-1 ms here).
           Stops early after BUDGET seconds and says how many runs it made.

Prints key=value lines on stdout.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def ppid_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
        return int(s[s.rfind(")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def wait_for(what, cond, timeout=20.0, step=0.001):
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > end:
            sys.exit(f"sidecar.py: timed out waiting for {what}")
        time.sleep(step)


def child_of(parent):
    def find():
        for e in os.listdir("/proc"):
            if e.isdigit() and ppid_of(int(e)) == parent:
                return int(e)
        return None
    return wait_for(f"a child of {parent}", find)


def status_fields(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    fields = s[s.rfind(")") + 2:].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def kib(v):
    return int(v.split()[0])


class Pod:
    def __init__(self, bin_path):
        self.bin = bin_path
        self.dir = tempfile.mkdtemp(prefix="kps-bench-")
        for d in ["vol", "idsrc", "out"] + [f"rootfs/{i}" for i in range(12)]:
            os.makedirs(os.path.join(self.dir, d), exist_ok=True)
        self.unshare = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", "--propagation", "private",
             "sleep", "infinity"], stdin=subprocess.DEVNULL)
        self.init = child_of(self.unshare.pid)
        wait_for("pod init", lambda: open(f"/proc/{self.init}/cmdline").read().startswith("sleep"))
        self.n = 0
        self.state = os.path.join(self.dir, "vol/state/main")

    def p(self, *parts):
        return os.path.join(self.dir, *parts)

    def sidecar(self, hook):
        self.hooks = self.p("out", "hooks")
        out = open(self.hooks, "ab")
        err = open(self.p("out", "sidecar.log"), "ab")
        self.sc = subprocess.Popen(
            ["nsenter", f"--target={self.init}", "--pid", "--mount", "--", self.bin,
             "watch", "--container", "main", "--root", self.p("vol"), "--"] + hook,
            stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        self.sc_pid = child_of(self.sc.pid)
        wait_for("the sidecar to arm", lambda: os.path.exists(os.path.join(self.state, "armed")))

    def seen(self):
        try:
            return sum(1 for n in os.listdir(self.state) if n.startswith("seen-"))
        except OSError:
            return 0

    def create_main(self, payload, stdout):
        self.n += 1
        fifo = self.p(f"start-{self.n}")
        os.mkfifo(fifo, 0o600)
        # The identifying mount point inside main's state directory, made
        # as the runtime makes it (docs/facts.md K18).
        mp = self.p("vol", "state", "main", "created")
        setup = f"mount -t proc proc /proc && mkdir -p {mp} && mount --bind {self.p('idsrc')} {mp} || exit 99"
        for i in range(12):
            setup += f"; mount -t tmpfs m{i} {self.p('rootfs', str(i))} || exit 98"
        script = f'{setup}; read _ < {fifo}; exec "$@"'
        proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "--", "nsenter",
             f"--pid=/proc/{self.init}/ns/pid", "--", "sh", "-c", script, "main"] + payload,
            stdin=subprocess.DEVNULL, stdout=stdout)
        pid = child_of(proc.pid)
        mp = f" {self.p('vol', 'state', 'main', 'created')} "
        wait_for("the identifying mount", lambda: mp in open(f"/proc/{pid}/mountinfo").read())
        return proc, pid, fifo

    def close(self):
        try:
            os.kill(self.init, signal.SIGKILL)
        except OSError:
            pass
        self.unshare.kill()
        self.unshare.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def hook_lines(path):
    with open(path) as f:
        return f.read().split()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--idle", type=float, default=60)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--budget", type=float, default=300)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("sidecar.py: needs root (namespaces, mounts)")
    hz = os.sysconf("SC_CLK_TCK")
    pod = Pod(a.bin)
    try:
        pod.sidecar(["date", "+%s%N"])
        # --- idle: watching a running container ---
        if a.idle > 0:
            before_seen = pod.seen()
            proc, main_pid, fifo = pod.create_main(["sleep", str(int(a.idle) + 30)], subprocess.DEVNULL)
            with open(fifo, "w") as f:
                f.write("go\n")
            wait_for("the sidecar to see the container", lambda: pod.seen() > before_seen)
            time.sleep(1.0)  # let it settle into poll
            s0, c0, t0 = status_fields(pod.sc_pid), cpu_ticks(pod.sc_pid), time.monotonic()
            time.sleep(a.idle)
            s1, c1, t1 = status_fields(pod.sc_pid), cpu_ticks(pod.sc_pid), time.monotonic()
            dt = t1 - t0
            sw = lambda s: int(s["voluntary_ctxt_switches"]) + int(s["nonvoluntary_ctxt_switches"])
            print(f"idle_seconds={dt:.1f}")
            print(f"idle_ctxt_switches={sw(s1) - sw(s0)}")
            print(f"idle_wakeups_per_s={(sw(s1) - sw(s0)) / dt:.3f}")
            print(f"idle_cpu_ticks={c1 - c0}")
            print(f"idle_cpu_percent={100.0 * (c1 - c0) / hz / dt:.3f}")
            print(f"idle_rss_kib={kib(s1['VmRSS'])}")
            print(f"idle_hwm_kib={kib(s1['VmHWM'])}")
            n0 = len(hook_lines(pod.hooks))
            os.kill(main_pid, signal.SIGKILL)  # the container process (sh exec'd sleep)
            proc.wait()
            wait_for("the idle run's hook", lambda: len(hook_lines(pod.hooks)) > n0)
        # --- latency: exit -> hook ---
        lat_us = []
        main_out = pod.p("out", "main")
        start = time.monotonic()
        for i in range(a.runs):
            if time.monotonic() - start > a.budget:
                break
            before_seen = pod.seen()
            n0 = len(hook_lines(pod.hooks))
            with open(main_out, "wb") as out:
                proc, _, fifo = pod.create_main(["date", "+%s%N"], out)
            wait_for("the sidecar to see the container", lambda: pod.seen() > before_seen)
            with open(fifo, "w") as f:
                f.write("go\n")
            proc.wait()
            lines = wait_for("the hook", lambda: (lambda l: l if len(l) > n0 else None)(hook_lines(pod.hooks)),
                             step=0.002)
            t_exit = int(open(main_out).read().split()[0])
            t_hook = int(lines[n0])
            lat_us.append((t_hook - t_exit) / 1000.0)
            os.unlink(fifo)
        lat_us.sort()
        n = len(lat_us)
        pct = lambda q: lat_us[min(n - 1, max(0, int(round(q * n)) - 1))]
        print(f"latency_runs={n}")
        print(f"latency_requested={a.runs}")
        print(f"latency_seconds={time.monotonic() - start:.0f}")
        if n:
            print(f"latency_p50_ms={pct(0.50) / 1000:.2f}")
            print(f"latency_p99_ms={pct(0.99) / 1000:.2f}")
            print(f"latency_max_ms={lat_us[-1] / 1000:.2f}")
            print(f"latency_min_ms={lat_us[0] / 1000:.2f}")
        st = status_fields(pod.sc_pid)
        print(f"after_hwm_kib={kib(st['VmHWM'])}")
    finally:
        try:
            pod.sc.kill()
        except Exception:
            pass
        pod.close()


if __name__ == "__main__":
    main()
