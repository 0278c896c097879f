#!/usr/bin/env python3
"""Checks an OCI archive of images/build.sh against the image contract.

    images/oci_check.py ARCHIVE NAME CONTEXT REF

ARCHIVE: target/oci/kube-prestop-NAME.tar (a tar of an OCI image layout).
NAME: webhook | sidecar. CONTEXT: the build context (target/images) with
linux/<arch>/kube-prestop-NAME, the binaries the images must hold. REF: the
full reference the archive must name (org.opencontainers.image.ref.name).

Checked, one line each ("ok    ..." or "FAIL  ..."; exit 1 on any FAIL):
- index.json names one image index, by REF;
- the index has exactly the platforms linux/amd64 and linux/arm64;
- per platform: the config's os/architecture, entrypoint, user 65532:65532;
  the layers' files are exactly the contract's (webhook:
  /kube-prestop-webhook; sidecar: /kube-prestop-sidecar, that platform's
  binary, and /architectures/{amd64,arm64}/kube-prestop-sidecar, every
  architecture's), each a regular file, mode 0755, owner 0:0, with the
  sha256 of the binary in CONTEXT; the compressed layers add up to at most
  2 MiB (the sidecar image) and the figure is printed.
"""

import hashlib
import json
import sys
import tarfile

ARCHS = ("amd64", "arm64")
LAYER_LIMIT = 2 * 1024 * 1024
INDEX = "application/vnd.oci.image.index.v1+json"

failed = 0


def report(ok, what):
    global failed
    if not ok:
        failed += 1
    print(("ok    " if ok else "FAIL  ") + what)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def expected_files(name, arch, context):
    """Path in the image -> the binary (in CONTEXT) it must be."""
    binary = f"kube-prestop-{name}"
    files = {binary: f"{context}/linux/{arch}/{binary}"}
    if name == "sidecar":
        for a in ARCHS:
            files[f"architectures/{a}/{binary}"] = f"{context}/linux/{a}/{binary}"
    return files


def main():
    archive, name, context, ref = sys.argv[1:5]
    short = archive.rsplit("/", 1)[-1]
    with tarfile.open(archive) as t:
        members = {m.name.removeprefix("./"): m for m in t.getmembers()}

        def blob(digest):
            algo, hexd = digest.split(":", 1)
            return t.extractfile(members[f"blobs/{algo}/{hexd}"])

        def json_blob(digest):
            return json.load(blob(digest))

        top = json.load(t.extractfile(members["index.json"]))
        entries = top.get("manifests", [])
        report(
            len(entries) == 1
            and entries[0].get("mediaType") == INDEX
            and entries[0].get("annotations", {}).get("org.opencontainers.image.ref.name") == ref,
            f"{short}: index.json names one image index, {ref}",
        )
        if not entries:
            return
        index = json_blob(entries[0]["digest"])
        platforms = sorted(
            f"{m['platform']['os']}/{m['platform']['architecture']}" for m in index.get("manifests", [])
        )
        report(
            platforms == [f"linux/{a}" for a in ARCHS],
            f"{short}: image index {entries[0]['digest'][:19]} has platforms {', '.join(platforms)}",
        )
        for m in index.get("manifests", []):
            arch = m["platform"]["architecture"]
            manifest = json_blob(m["digest"])
            config = json_blob(manifest["config"]["digest"])
            cfg = config.get("config", {})
            report(
                config.get("os") == "linux"
                and config.get("architecture") == arch
                and cfg.get("Entrypoint") == [f"/kube-prestop-{name}"]
                and cfg.get("User") == "65532:65532",
                f"{short} linux/{arch}: config linux/{arch}, entrypoint /kube-prestop-{name}, user 65532:65532",
            )
            seen = {}
            compressed = 0
            for layer in manifest["layers"]:
                compressed += layer["size"]
                with tarfile.open(fileobj=blob(layer["digest"]), mode="r:*") as lt:
                    for f in lt.getmembers():
                        path = f.name.removeprefix("./").rstrip("/")
                        if f.isdir():
                            continue
                        ok = f.isreg() and f.mode & 0o7777 == 0o755 and f.uid == 0 and f.gid == 0
                        digest = hashlib.sha256(lt.extractfile(f).read()).hexdigest() if f.isreg() else ""
                        seen[path] = (ok, digest)
            want = expected_files(name, arch, context)
            report(
                sorted(seen) == sorted(want),
                f"{short} linux/{arch}: files {', '.join('/' + p for p in sorted(seen))}",
            )
            for path, binary in sorted(want.items()):
                ok, digest = seen.get(path, (False, ""))
                report(
                    ok and digest == sha256_file(binary),
                    f"{short} linux/{arch}: /{path} is {binary.removeprefix(context + '/')} "
                    "(regular file, 0755, 0:0, same sha256)",
                )
            figure = f"{compressed} bytes ({compressed / 1024:.0f} KiB) compressed in {len(manifest['layers'])} layer(s)"
            if name == "sidecar":
                report(compressed <= LAYER_LIMIT, f"{short} linux/{arch}: {figure}, limit 2 MiB")
            else:
                report(True, f"{short} linux/{arch}: {figure}")


if __name__ == "__main__":
    try:
        main()
    except (KeyError, OSError, ValueError, tarfile.TarError) as e:
        report(False, f"{sys.argv[1]}: cannot read the archive: {e!r}")
    sys.exit(1 if failed else 0)
