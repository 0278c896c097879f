#!/usr/bin/env python3
"""The results of `make e2e-matrix` (tests/matrix.sh): a cell's log counted into
its JSON result, and the table over all results.

    matrix_results.py result FILE CELL STATUS LOG [SECONDS]   write FILE (JSON) from LOG
    matrix_results.py table DIR                                the Markdown table of DIR/*.json
    matrix_results.py self-test                                parse tests/fixtures/matrix/*.log,
                                                               compare with the .json next to each

What a cell's log holds (tests/matrix.sh writes it): per test step a line
`==> step: COMMAND`, the step's output, then `==> step exit N: COMMAND`. A cargo
test step has, per test binary, cargo's `Running tests/X.rs (...)` line and
libtest's output; the tests run with --nocapture, so a test's own output is
interleaved with libtest's `test NAME ... ok|FAILED` lines (a `FAILED` often
lands at the end of the test's last line of output, or alone on a line).
What is reliable is libtest's summary at the end of each binary's run: a
`failures:` block listing every failed test, one per line, indented by four
spaces, then `test result: ...` with the counts. That block is what failed
tests are read from; output of processes that outlive a test can still land
inside it, so lines that are not an indented name are skipped.
"""

import datetime
import glob
import json
import os
import re
import sys

RESULT = re.compile(r"test result: (\w+)\. (\d+) passed; (\d+) failed; (\d+) ignored")
RUNNING = re.compile(r"^\s+Running (\S+)(?: \S+)? \(")
STEP = re.compile(r"^==> step: (.+)$")
STEP_EXIT = re.compile(r"^==> step exit (\d+): (.+)$")
FAILED_NAME = re.compile(r"^    (\S+)$")
# One line per scenario of the concurrent batch (tests/e2e/src/scenario.rs):
# "scenario NAME: passed|FAILED after N.Ns" as each ends, and the summary
# "SCENARIO NAME: pass|FAIL (N.Ns)..." after the batch.
SCENARIO = re.compile(
    r"^(?:test \S+ \.\.\. )?(?:scenario (\S+): (passed|FAILED) after|SCENARIO (\S+): (pass|FAIL) \()", re.M)
# A test's own line; often right after libtest's "test NAME ... " (no newline).
SKIPPED = re.compile(r"^(?:test \S+ \.\.\. )?SKIPPED: (.*)$", re.M)
CLUSTER_TIME = re.compile(r"^==> cluster time: (\d+) s", re.M)


def summary_failures(lines, result_index):
    """The names in the `failures:` block that ends just before line
    `result_index` (a `test result:` line): walk back to the block's
    `failures:` line (at most 1,000 lines), keeping indented names."""
    names = []
    for i in range(result_index - 1, max(-1, result_index - 1000), -1):
        line = lines[i]
        if line == "failures:":
            return list(reversed(names))
        m = FAILED_NAME.match(line)
        if m:
            names.append(m.group(1))
        # Anything else (a blank line, output of a process still running)
        # is skipped.
    return list(reversed(names))


def parse_log(text):
    """The counts and failures of one cell's log (see the module doc)."""
    lines = text.splitlines()
    passed = failed = ignored = 0
    failed_tests = []
    steps_failed = []
    binary = None          # the test binary cargo is running ("tests/scenarios.rs")
    binary_result = True   # whether that binary printed a `test result:` line
    step = None
    step_failures = 0      # failed tests named within the current step

    def binary_ended():
        # A binary that printed no result died (a crash, a kill, a timeout).
        if binary is not None and not binary_result:
            failed_tests.append(f"{binary}: no test result (the test binary died; see the log)")
            return 1
        return 0

    for i, line in enumerate(lines):
        m = STEP_EXIT.match(line)
        if m:
            step_failures += binary_ended()
            binary, binary_result = None, True
            rc = int(m.group(1))
            if rc != 0 and step_failures == 0:
                steps_failed.append(f"step {m.group(2)} (exit {rc})")
            step, step_failures = None, 0
            continue
        m = STEP.match(line)
        if m:
            step_failures += binary_ended()
            binary, binary_result = None, True
            step, step_failures = m.group(1), 0
            continue
        m = RUNNING.match(line)
        if m:
            step_failures += binary_ended()
            binary, binary_result = m.group(1), False
            continue
        m = RESULT.search(line)
        if m:
            binary_result = True
            passed += int(m.group(2))
            failed += int(m.group(3))
            ignored += int(m.group(4))
            if int(m.group(3)):
                names = summary_failures(lines, i)
                where = f"{binary}: " if binary else ""
                failed_tests += [where + n for n in names]
                step_failures += len(names)
                if len(names) < int(m.group(3)):
                    failed_tests.append(
                        f"{where}{int(m.group(3)) - len(names)} more failed test(s), not named in the summary")
    binary_ended()
    if step is not None:
        steps_failed.append(f"step {step} (did not finish)")

    scenarios = {}
    for m in SCENARIO.finditer(text):
        name = m.group(1) or m.group(3)
        ok = (m.group(2) or m.group(4)) in ("passed", "pass")
        scenarios[name] = scenarios.get(name, True) and ok
    sc_failed = sorted(n for n, ok in scenarios.items() if not ok)
    return {
        "tests_passed": passed, "tests_failed": failed, "tests_ignored": ignored,
        "scenarios_passed": sum(1 for ok in scenarios.values() if ok),
        "scenarios_failed": len(sc_failed),
        "failed": failed_tests + steps_failed + ["scenario " + s for s in sc_failed],
        "skipped": SKIPPED.findall(text),
        # How long the cell held the cluster (up to check-clean), in seconds.
        "cluster_seconds": int(CLUSTER_TIME.findall(text)[-1]) if CLUSTER_TIME.search(text) else None,
    }


def write_result(file, cell, status, logf, seconds=None):
    with open(logf, errors="replace") as f:
        r = parse_log(f.read())
    k8s, runtime = cell.split("/", 1)
    with open(file, "w") as f:
        json.dump({
            "cell": cell, "kubernetes": k8s, "runtime": runtime,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "status": status,
            "seconds": seconds,
            **r,
            "log": logf,
        }, f, indent=1)


def table(out_dir, default_cell="v1.37.2/containerd2-runc"):
    rows = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(out_dir, "*.json")))]
    rows.sort(key=lambda r: (r["cell"] != default_cell,
                             [-int(x) for x in r["kubernetes"][1:].split(".")], r["runtime"]))
    print("| Kubernetes | runtime | date | result | tests passed / failed | scenarios passed / failed | failed (log) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        failed = ", ".join(r["failed"]) or "-"
        if r["status"] != "pass":
            failed += f" ({os.path.relpath(r['log'])})"
        if r.get("skipped"):
            failed += "; skipped: " + "; ".join(r["skipped"])
        print(f"| {r['kubernetes']} | {r['runtime']} | {r['date']} | {r['status']} | "
              f"{r['tests_passed']} / {r['tests_failed']} | {r['scenarios_passed']} / {r['scenarios_failed']} | {failed} |")


def self_test():
    """Every tests/fixtures/matrix/NAME.log parses to NAME.json."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "matrix")
    logs = sorted(glob.glob(os.path.join(here, "*.log")))
    if not logs:
        print(f"matrix_results: no fixtures in {here}", file=sys.stderr)
        return 1
    bad = 0
    for logf in logs:
        want = json.load(open(logf[:-4] + ".json"))
        got = parse_log(open(logf, errors="replace").read())
        if got != want:
            bad += 1
            print(f"FAIL  {os.path.basename(logf)}:\n  want {json.dumps(want, sort_keys=True)}\n"
                  f"  got  {json.dumps(got, sort_keys=True)}")
    print(f"matrix_results: {len(logs) - bad} of {len(logs)} fixture logs parsed as expected")
    return 1 if bad else 0


def main(argv):
    if len(argv) >= 5 and argv[0] == "result":
        write_result(argv[1], argv[2], argv[3], argv[4], int(argv[5]) if len(argv) > 5 else None)
        return 0
    if len(argv) == 2 and argv[0] == "table":
        table(argv[1])
        return 0
    if argv == ["self-test"]:
        return self_test()
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
