#!/usr/bin/env python3
"""Seed corpora for the fuzz targets from the golden inputs.

admission/        one AdmissionReview (JSON) per engine/tests/golden/*/input.yaml,
                  as the API server sends it for a pod CREATE, plus a few
                  reviews for other resources and operations;
admission_pod/    the same pods alone (JSON);
inject_documents/ the golden inputs and examples as YAML, as JSON, and as one
                  multi-document stream.

Usage: make_seeds.py OUT_DIR   (needs PyYAML; scripts/fuzz.sh falls back to
the committed seeds in fuzz/seeds when it is missing).
"""
import json
import pathlib
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent


def review(uid, obj, resource="pods", operation="CREATE", group="", kind="Pod"):
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": "v1", "kind": kind},
            "resource": {"group": group, "version": "v1", "resource": resource},
            "requestKind": {"group": group, "version": "v1", "kind": kind},
            "requestResource": {"group": group, "version": "v1", "resource": resource},
            "namespace": ((obj or {}).get("metadata") or {}).get("namespace", "default"),
            "operation": operation,
            "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }


def main():
    out = pathlib.Path(sys.argv[1])
    adm = out / "admission"
    pods = out / "admission_pod"
    docs = out / "inject_documents"
    for d in (adm, pods, docs):
        d.mkdir(parents=True, exist_ok=True)
    inputs = sorted((ROOT / "engine/tests/golden").glob("*/input.yaml"))
    stream = []
    for i, path in enumerate(inputs):
        case = path.parent.name
        text = path.read_text()
        pod = yaml.safe_load(text)
        body = review(f"00000000-0000-4000-8000-{i:012d}", pod)
        (adm / f"{case}.json").write_text(json.dumps(body, separators=(",", ":")))
        (pods / f"{case}.json").write_text(json.dumps(pod, separators=(",", ":")))
        (docs / f"{case}.yaml").write_text(text)
        (docs / f"{case}.json").write_text(json.dumps(pod, indent=1))
        stream.append(text)
    first = yaml.safe_load(inputs[0].read_text()) if inputs else {}
    (adm / "update.json").write_text(json.dumps(review("u-update", first, operation="UPDATE")))
    (adm / "job.json").write_text(
        json.dumps(review("u-job", {"apiVersion": "batch/v1", "kind": "Job"},
                          resource="jobs", group="batch", kind="Job")))
    (adm / "no-object.json").write_text(json.dumps(review("u-none", None)))
    extra = sorted((ROOT / "webhook/tests/golden_inject").glob("*.input.yaml"))
    extra += sorted((ROOT / "examples").glob("*.yaml"))
    for path in extra:
        (docs / path.name).write_text(path.read_text())
        stream.append(path.read_text())
    (docs / "stream.yaml").write_text("---\n".join(stream))
    print(f"{len(list(adm.iterdir()))} admission seeds, {len(list(docs.iterdir()))} document seeds in {out}")


if __name__ == "__main__":
    main()
