#!/usr/bin/env python3
"""Start-up time of an HTTPS server for `make bench`: exec -> first 200 from
GET /readyz on its metrics port (plain HTTP), polled every 1 ms with a
keep-alive-free urllib request. Repeats N times; prints the sorted times in ms.

Usage: startup.py N COMMAND... (the command prints `listening https=A metrics=B`)
"""
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request


def once(cmd):
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = p.stdout.readline()
        m = re.search(r"metrics=(\S+)", line)
        if not m:
            sys.exit(f"startup.py: no metrics address in {line!r}")
        url = f"http://{m.group(1)}/readyz"
        while True:
            try:
                with urllib.request.urlopen(url, timeout=1) as r:
                    if r.status == 200:
                        return (time.monotonic() - t0) * 1000
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if time.monotonic() - t0 > 30:
                sys.exit("startup.py: not ready within 30 s")
            time.sleep(0.001)
    finally:
        p.terminate()
        p.wait()


def main():
    n = int(sys.argv[1])
    times = sorted(once(sys.argv[2:]) for _ in range(n))
    print(" ".join(f"{t:.1f}" for t in times))


if __name__ == "__main__":
    main()
