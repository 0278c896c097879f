#!/usr/bin/env python3
"""The results of `make e2e-matrix` (tests/matrix.sh): a cell's log and the
JUnit reports of its test steps counted into its JSON result, and the table
over all results.

    matrix_results.py result FILE CELL STATUS LOG [SECONDS]   write FILE (JSON) from LOG and its JUnit reports
    matrix_results.py table DIR                                the Markdown table of DIR/*.json
    matrix_results.py self-test                                parse tests/fixtures/matrix/*.log (and the
                                                               JUnit reports they name), compare with the
                                                               .json next to each

What a cell's log holds (tests/matrix.sh writes it): per step a line
`==> step: COMMAND`, the step's output, for a `cargo nextest run` step
`==> step junit: FILE` (its JUnit report, nextest's profile `matrix` in
.config/nextest.toml, FILE relative to the log's directory), then
`==> step exit N: COMMAND`. The tests' counts and failures come from the JUnit
reports (one <testsuite> per test binary, one <testcase> per test, Jenkins'
format as nextest writes it), parsed with the standard library's XML parser;
each test's stdout and stderr are stored in the report too (the profile
stores them for passing tests as well), and that is where the scenario lines
and skip reasons are read from. The log gives the steps' exit codes (a step
that failed without a failed test in a report, e.g. a build error or a step
that is not a test run, is named as a step) and the cluster time.
"""

import datetime
import glob
import json
import os
import re
import sys
import xml.etree.ElementTree as ET

STEP = re.compile(r"^==> step: (.+)$")
STEP_JUNIT = re.compile(r"^==> step junit: (.+)$")
STEP_EXIT = re.compile(r"^==> step exit (\d+): (.+)$")
# One line per scenario of the concurrent batch (tests/e2e/src/scenario.rs):
# "scenario NAME: passed|FAILED after N.Ns" as each ends, and the summary
# "SCENARIO NAME: pass|FAIL (N.Ns)..." after the batch.
SCENARIO = re.compile(r"^(?:scenario (\S+): (passed|FAILED) after|SCENARIO (\S+): (pass|FAIL) \()", re.M)
# A test's own line (tests/e2e/tests/kubelet_restarts.rs).
SKIPPED = re.compile(r"^SKIPPED: (.*)$", re.M)
CLUSTER_TIME = re.compile(r"^==> cluster time: (\d+) s", re.M)


def parse_junit(path):
    """The tests of one JUnit report: (passed, failed, ignored, failed test
    names, the tests' output). A test failed when its <testcase> holds a
    <failure> or an <error>; a failure that is not a plain test failure (a
    signal, a timeout) is named with nextest's message."""
    passed = failed = ignored = 0
    names, output = [], []
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')} {case.get('name')}"
        for tag in ("system-out", "system-err"):
            for node in case.iter(tag):
                output.append(node.text or "")
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is not None:
            failed += 1
            message = bad.get("message") or ""
            kind = bad.get("type") or ""
            plain = kind.startswith("test failure") or not message   # a panic, a non-zero exit
            names.append(name if plain else f"{name} ({message})")   # e.g. "process aborted with signal 6 (SIGABRT)"
        elif case.find("skipped") is not None:
            ignored += 1
        else:
            passed += 1
    return passed, failed, ignored, names, "\n".join(output)


def parse_log(text, log_dir):
    """The counts and failures of one cell: its log (see the module doc) and
    the JUnit reports it names, relative to log_dir."""
    passed = failed = ignored = 0
    failed_tests, steps_failed, outputs = [], [], []
    step, step_failures = None, 0   # the running step; failed tests its reports named
    for line in text.splitlines():
        m = STEP.match(line)
        if m:
            if step is not None:
                steps_failed.append(f"step {step} (did not finish)")
            step, step_failures = m.group(1), 0
            continue
        m = STEP_JUNIT.match(line)
        if m:
            report = os.path.join(log_dir, m.group(1))
            try:
                p, f, i, names, out = parse_junit(report)
            except (OSError, ET.ParseError) as e:
                failed_tests.append(f"step {step}: JUnit report {m.group(1)} unreadable ({e.__class__.__name__})")
                step_failures += 1
                continue
            passed, failed, ignored = passed + p, failed + f, ignored + i
            failed_tests += names
            step_failures += len(names)
            outputs.append(out)
            continue
        m = STEP_EXIT.match(line)
        if m:
            rc = int(m.group(1))
            if rc != 0 and step_failures == 0:
                steps_failed.append(f"step {m.group(2)} (exit {rc})")
            step, step_failures = None, 0
    if step is not None:
        steps_failed.append(f"step {step} (did not finish)")

    output = "\n".join(outputs)
    scenarios = {}
    for m in SCENARIO.finditer(output):
        name = m.group(1) or m.group(3)
        ok = (m.group(2) or m.group(4)) in ("passed", "pass")
        scenarios[name] = scenarios.get(name, True) and ok
    sc_failed = sorted(n for n, ok in scenarios.items() if not ok)
    cluster_time = CLUSTER_TIME.findall(text)
    return {
        "tests_passed": passed, "tests_failed": failed, "tests_ignored": ignored,
        "scenarios_passed": sum(1 for ok in scenarios.values() if ok),
        "scenarios_failed": len(sc_failed),
        "failed": failed_tests + steps_failed + ["scenario " + s for s in sc_failed],
        "skipped": SKIPPED.findall(output),
        # How long the cell held the cluster (up to check-clean), in seconds.
        "cluster_seconds": int(cluster_time[-1]) if cluster_time else None,
    }


def write_result(file, cell, status, logf, seconds=None):
    with open(logf, errors="replace") as f:
        r = parse_log(f.read(), os.path.dirname(os.path.abspath(logf)))
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
    if not rows:
        print(f"matrix_results: no cell results in {out_dir}: they are written by "
              "`make e2e-matrix` on this machine (the README's Support table is the "
              "last run's, committed by hand)", file=sys.stderr)
        return 1
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
    return 0


def self_test():
    """Every tests/fixtures/matrix/NAME.log (with the JUnit reports it names)
    parses to NAME.json."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "matrix")
    logs = sorted(glob.glob(os.path.join(here, "*.log")))
    if not logs:
        print(f"matrix_results: no fixtures in {here}", file=sys.stderr)
        return 1
    bad = 0
    for logf in logs:
        want = json.load(open(logf[:-4] + ".json"))
        got = parse_log(open(logf, errors="replace").read(), here)
        if got != want:
            bad += 1
            print(f"FAIL  {os.path.basename(logf)}:\n  want {json.dumps(want, sort_keys=True)}\n"
                  f"  got  {json.dumps(got, sort_keys=True)}")
    print(f"matrix_results: {len(logs) - bad} of {len(logs)} fixture cells (log and JUnit reports) parsed as expected")
    return 1 if bad else 0


def main(argv):
    if len(argv) >= 5 and argv[0] == "result":
        write_result(argv[1], argv[2], argv[3], argv[4], int(argv[5]) if len(argv) > 5 else None)
        return 0
    if len(argv) == 2 and argv[0] == "table":
        return table(argv[1])
    if argv == ["self-test"]:
        return self_test()
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
