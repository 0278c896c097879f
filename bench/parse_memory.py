#!/usr/bin/env python3
"""The webhook's peak memory under reviews whose pods are cheap to send and
costly to parse (docs/security.md, "The webhook port"): one review each of
100,000 volumes, 30,000 volumes, 9,000 containers and 120,000 env entries
(all answered without parsing the pod), one of 4,000 volumes (parsed and
injected), then 24 reviews of 2.7 MB at once and 24 of 5,000 env entries at
once. It starts the given webhook binary itself on loopback with
`--no-cluster` and the development certificates (certs/gen.sh), prints one
line per step with the HTTP statuses and the process's peak resident
memory (VmHWM, MiB), then stops it. A benchmark, not a test: it asserts
nothing.

    certs/gen.sh
    python3 bench/parse_memory.py target/images/linux/amd64/kube-prestop-webhook
    python3 bench/parse_memory.py target/release/kube-prestop-webhook --extra-args '--max-inflight-parsed-bytes 134217728'
"""

import argparse
import base64
import collections
import http.client
import json
import os
import shlex
import socket
import ssl
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CERTS = os.path.join(REPO, "certs", "out")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def review(change, uid="u"):
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "demo-", "namespace": "demo", "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "demo",
             "uid": "5d3c1f7e-0000-4000-8000-000000000001", "controller": True}]},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "work", "image": "busybox:1.36",
            "lifecycle": {"preStop": {"exec": {"command": ["true"]}}}}]},
    }
    change(pod["spec"])
    return json.dumps({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "demo", "operation": "CREATE", "userInfo": {"username": "x"},
            "object": pod,
        },
    }, separators=(",", ":")).encode()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binary")
    ap.add_argument("--extra-args", default="", help="more flags for `serve`")
    args = ap.parse_args()
    for f in ("ca.crt", "tls.crt", "tls.key"):
        if not os.path.exists(os.path.join(CERTS, f)):
            sys.exit(f"parse_memory: {CERTS}/{f} missing: run certs/gen.sh first")
    port, metrics = free_port(), free_port()
    proc = subprocess.Popen(
        [args.binary, "serve", "--listen-addr", f"127.0.0.1:{port}",
         "--metrics-addr", f"127.0.0.1:{metrics}",
         "--tls-cert-file", os.path.join(CERTS, "tls.crt"),
         "--tls-key-file", os.path.join(CERTS, "tls.key"), "--no-cluster",
         *shlex.split(args.extra_args)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ctx = ssl.create_default_context(cafile=os.path.join(CERTS, "ca.crt"))

    def hwm_mib():
        with open(f"/proc/{proc.pid}/status") as f:
            line = next(line for line in f if line.startswith("VmHWM"))
        return int(line.split()[1]) // 1024

    def post(body, out):
        try:
            c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=60)
            c.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
            decided = ""
            if r.status == 200:
                resp = json.loads(data)["response"]
                # A pod admitted without injection may still get a patch:
                # the kube-prestop.io/skipped annotation alone.
                ops = json.loads(base64.b64decode(resp["patch"])) if "patch" in resp else []
                if any(op.get("path", "").startswith("/spec") for op in ops):
                    decided = "injected"
                elif ops:
                    decided = "admitted-without-annotated"
                else:
                    decided = "admitted-without"
            out.append(f"{r.status}{'-' + decided if decided else ''}")
        except OSError as e:
            out.append(f"error:{e.__class__.__name__}")

    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    sys.exit("parse_memory: the webhook did not start listening")
                time.sleep(0.05)
        print(f"idle: VmHWM {hwm_mib()} MiB")
        one = {
            "100,000 volumes": lambda s: s.__setitem__("volumes", [{"name": f"v{i}"} for i in range(100_000)]),
            "30,000 volumes": lambda s: s.__setitem__("volumes", [{"name": f"v{i}"} for i in range(30_000)]),
            "9,000 containers": lambda s: s.__setitem__(
                "containers", s["containers"] + [{"name": f"c{i}", "image": "b"} for i in range(9_000)]),
            "120,000 env entries": lambda s: s["containers"][0].__setitem__(
                "env", [{"name": "a"} for _ in range(120_000)]),
            "4,000 volumes": lambda s: s.__setitem__(
                "volumes", [{"name": f"v{i}", "emptyDir": {}} for i in range(4_000)]),
        }
        for name, change in one.items():
            body, out = review(change), []
            post(body, out)
            print(f"one review, {name}, {len(body):,} bytes: {out[0]}; VmHWM {hwm_mib()} MiB")
        for name, n in (("24 at once, 70,000 env entries", 70_000), ("24 at once, 5,000 env entries", 5_000)):
            body = review(lambda s, n=n: s["containers"][0].__setitem__(
                "env", [{"name": f"E{i}", "value": "x" * 10} for i in range(n)]))
            out = []
            threads = [threading.Thread(target=post, args=(body, out)) for _ in range(24)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            counts = ", ".join(f"{k} x{v}" for k, v in sorted(collections.Counter(out).items()))
            print(f"{name}, {len(body):,} bytes each: {counts}; VmHWM {hwm_mib()} MiB")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
