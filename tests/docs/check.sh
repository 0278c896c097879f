#!/usr/bin/env bash
# Consistency checks of the user-facing documentation against the code, so
# that the names a reader copies cannot drift apart again (run by
# `make lint`):
#
#   1. the webhook's namespace: every `helm install/upgrade ... -n NS`,
#      `kubectl -n NS` for the webhook and `certs/gen.sh NAME.NS.svc` in the
#      docs uses the code's default (DEFAULT_WEBHOOK_NAMESPACE), which the
#      local install (tests/install-product.sh) uses too;
#   2. image names: the chart's default repositories are the published names
#      the webhook's own --install-image default uses (DEFAULT_INSTALL_IMAGE),
#      and every image name of ours in the docs is either such a published
#      name, a local build's name (images/build.sh) or a placeholder;
#   3. phrases known to be wrong (each with the reason), e.g. "exactly once"
#      for the hook guarantee, which is "never twice; once per exit except
#      the documented cases";
#   4. notes that must stay where a topic is described: every document that
#      describes rendering the chart offline for GitOps says that helm 3.14
#      renders no matchConditions without `--kube-version`; the README keeps
#      its "## Support" section and "## Run all tests" with `make test` (CI,
#      .ci/run, is that command);
#   5. every `make TARGET` the documents show is a target of the Makefile;
#   6. every relative Markdown link resolves: the file exists and, for a
#      `#fragment` into a Markdown file, a heading of that anchor exists
#      (GitHub's anchors: lower case, punctuation dropped, spaces as `-`);
#   7. the crate graph in docs/ARCHITECTURE.md (the ```text crate-graph
#      block, `a -> b c[dev]` lines) has exactly the dependency edges between
#      workspace crates that `cargo metadata` lists.
#
#   tests/docs/check.sh      prints one line per finding; exit 1 if any
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${repo}"

failed=0
finding() { failed=$((failed + 1)); printf 'FAIL  %s\n' "$*"; }

# The user-facing documents: every Markdown file outside tests' fixtures and
# the design record, the chart's values and notes, the examples.
mapfile -t docs < <(git ls-files --cached --others --exclude-standard -- '*.md' 'charts/*/values.yaml' 'charts/*/templates/NOTES.txt' \
    'examples/*' 'certs/*.sh' | grep -v -e '^tests/fixtures/' -e '^target/' | sort)
[[ ${#docs[@]} -gt 0 ]] || { echo "no documents found" >&2; exit 1; }

# --- what the code says ----------------------------------------------------
rust_const() {
    # rust_const NAME -> the string literal of `NAME: &str = "..."` (first
    # literal after it, also inside concat!()).
    local name="$1" value
    value="$(git ls-files -z -- '*.rs' | xargs -0 grep -h -A2 "${name}: &str =" |
        grep -o '"[^"]*"' | head -n1 | tr -d '"')"
    [[ -n "${value}" ]] || { echo "constant ${name} not found in the Rust sources" >&2; exit 1; }
    printf '%s' "${value}"
}
namespace="$(rust_const DEFAULT_WEBHOOK_NAMESPACE)"
install_image_prefix="$(rust_const DEFAULT_INSTALL_IMAGE)"   # e.g. ghcr.io/org/kube-prestop-sidecar:
published_sidecar="${install_image_prefix%:}"
published_base="${published_sidecar%/*}"                      # e.g. ghcr.io/org
published_webhook="${published_base}/kube-prestop-webhook"

# --- 1. namespace ----------------------------------------------------------
install_ns="$(grep -o 'KUBE_PRESTOP_NAMESPACE:-[^}]*' tests/install-product.sh | cut -d- -f2-)"
[[ "${install_ns}" == "${namespace}" ]] ||
    finding "tests/install-product.sh installs into '${install_ns}', the webhook's default namespace is '${namespace}'"

for doc in "${docs[@]}"; do
    # helm install/upgrade of our chart with a namespace other than ours.
    while IFS= read -r hit; do
        finding "${doc}:${hit%%:*}: installs into another namespace than '${namespace}': ${hit#*:}"
    done < <(grep -n -E 'helm (install|upgrade)[^#]*kube-prestop' "${doc}" |
        grep -E -- '(-n|--namespace)[ =]' |
        grep -v -E -- "(-n|--namespace)[ =]${namespace}( |\\\\|\$)" || true)
    # kubectl -n NS ... on the webhook's objects, and Service DNS names.
    while IFS= read -r hit; do
        finding "${doc}:${hit%%:*}: names the webhook's namespace other than '${namespace}': ${hit#*:}"
    done < <(grep -n -E -e 'kubectl -n [a-z0-9-]+ (create secret tls|get (deploy|pods?|secret) kube-prestop|logs (deploy/)?kube-prestop)' \
        -e 'kube-prestop\.[a-z0-9-]+\.svc' "${doc}" |
        grep -v -E -e "kubectl -n ${namespace} " -e "kube-prestop\\.${namespace}\\.svc" || true)
done

# --- 2. image names --------------------------------------------------------
values="charts/kube-prestop/values.yaml"
chart_repo() {
    # chart_repo SECTION -> repository: of that top-level section
    awk -v section="$1:" '$0 ~ "^" section { in_s = 1; next } /^[^ #]/ { in_s = 0 }
        in_s && $1 == "repository:" { print $2; exit }' "${values}"
}
[[ "$(chart_repo image)" == "${published_webhook}" ]] ||
    finding "${values}: image.repository is '$(chart_repo image)', the published webhook image is '${published_webhook}'"
[[ "$(chart_repo installImage)" == "${published_sidecar}" ]] ||
    finding "${values}: installImage.repository is '$(chart_repo installImage)', the webhook's --install-image default is '${published_sidecar}'"

# Our images as the docs may name them: published, local build, or a
# placeholder registry (REGISTRY/, registry.example...). Paths inside the
# sidecar image (/architectures/<arch>/kube-prestop-sidecar) are not images.
allowed_images="^(${published_webhook}|${published_sidecar}|localhost/kube-prestop/(webhook|sidecar|busybox)|REGISTRY/kube-prestop-(webhook|sidecar)|[a-z0-9.-]*example[a-z0-9.-]*(:[0-9]+)?(/[a-z0-9-]+)*/kube-prestop-(webhook|sidecar))\$"
for doc in "${docs[@]}"; do
    while IFS=: read -r line image; do
        image="${image%%:*}"
        [[ "${image}" =~ ${allowed_images} ]] ||
            finding "${doc}:${line}: image '${image}' is neither the published name (${published_base}/kube-prestop-{webhook,sidecar}) nor the local build's (localhost/kube-prestop/{webhook,sidecar})"
    done < <(grep -n -o -E '[A-Za-z0-9._:-]+(/[A-Za-z0-9._-]+)*/kube-prestop[-/](webhook|sidecar)\b(:[A-Za-z0-9.<>_-]+)?' "${doc}" |
        grep -v -E -e ':(target|\.|)/' -e ':\.kube-prestop/' -e ':[^:]*(/src/|/tests/|\.rs|\.sh|\.yaml|\.Dockerfile|\.tar)' \
            -e ':architectures/' || true)
done

# --- 3. phrases known to be wrong -----------------------------------------
# pattern (grep -E, case-insensitive) | why it is wrong
banned=(
    'exactly[- ]once|the guarantee is "never twice; once per exit except the documented cases" (docs/operations.md: The guarantee)'
    'exactly one hook run|a hook can be missed or abandoned: "at most one hook run per exit" (docs/operations.md: The guarantee)'
    'pasted into the README|docs/security.md is linked from the README, not pasted into it'
    'metadata only, by label|the sidecar-binary ConfigMap watch reads whole objects (binaryData is hashed and dropped), see webhook/cluster/src/sidecar_configmap'
    'never update, delete or read data|the sidecar-binary ConfigMap watch reads the data to hash it'
    '-c <sidecar>|name the sidecar: kube-prestop-<container>'
    'prestop-system|the webhook namespace is the code default (DEFAULT_WEBHOOK_NAMESPACE)'
    'sidecar/src/contract\.rs|the webhook/sidecar contract is the kube-prestop-contract crate (contract/src/), not a sidecar module'
    'sidecar::contract|the webhook/sidecar contract is the kube_prestop_contract crate, not a sidecar module'
)
for entry in "${banned[@]}"; do
    pattern="${entry%%|*}"
    why="${entry#*|}"
    for doc in "${docs[@]}"; do
        while IFS= read -r hit; do
            finding "${doc}:${hit%%:*}: '${pattern}': ${why}"
        done < <(grep -n -i -E -e "${pattern}" "${doc}" || true)
    done
done

# --- 4. notes that must stay ----------------------------------------------
for doc in "${docs[@]}"; do
    if grep -q -i 'gitops' "${doc}"; then
        if ! grep -q -e '--kube-version' "${doc}" || ! grep -q 'matchConditions' "${doc}"; then
            finding "${doc}: describes GitOps rendering without the note that helm 3.14 renders no matchConditions unless given --kube-version"
        fi
    fi
done
grep -q '^## Support$' README.md || finding "README.md: no '## Support' section (the matrix table lives there)"
awk '/^## Run all tests$/ { in_s = 1; next } in_s && /^## / { exit } in_s && /^make test$/ { found = 1 }
    END { exit !found }' README.md ||
    finding "README.md: no '## Run all tests' section showing 'make test' (.ci/run runs that command)"

# The oldest Kubernetes the README claims is the one check passes from.
tested_min="$(git ls-files -z -- 'webhook/tools/src/check/*.rs' | xargs -0 grep -h -o 'TESTED_MIN_MINOR: u32 = [0-9]*' | grep -o '[0-9]*$')"
grep -q "^Needs Kubernetes 1\.${tested_min} " README.md ||
    finding "README.md: 'Needs Kubernetes 1.N' does not name 1.${tested_min}, check's TESTED_MIN_MINOR (webhook/tools/src/check/mod.rs); change both with the Support table"

# --- 5. make targets -------------------------------------------------------
# `make X` in code spans and at the start of a code block's line.
# shellcheck disable=SC2016 # the backquotes are Markdown's, not the shell's
make_pattern='`make [a-z][a-z0-9_-]*|^ *make [a-z][a-z0-9_-]*'
declare -A targets=()
while IFS= read -r target; do targets["${target}"]=1; done < <(grep -o -E '^[a-zA-Z0-9_-]+:' Makefile | tr -d ':')
for doc in "${docs[@]}"; do
    while IFS=: read -r line target; do
        [[ -n "${targets[${target}]:-}" ]] ||
            finding "${doc}:${line}: 'make ${target}' is not a Makefile target"
    done < <(grep -n -o -E "${make_pattern}" "${doc}" |
        sed -E 's/^([0-9]+):.*make ([a-z0-9_-]+).*/\1:\2/' || true)
done

# --- 6. relative links -----------------------------------------------------
# Ours, not lychee (--offline --include-fragments finds the same broken files and anchors): `cargo install --locked lychee` 0.24.2 took 16 min cold here (813 CPU-s: over 6.5 min even on 2 idle cores) for a 24 MiB binary, too much of CI's 90 min.
while IFS= read -r hit; do
    finding "${hit}"
done < <(python3 - "${docs[@]}" <<'PY'
import os, re, sys

def anchors(path):
    # GitHub's heading anchors: lower case, punctuation except '-' and '_'
    # dropped, spaces as '-'; a repeated heading gets -1, -2, ...
    seen, out, fence = {}, set(), False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fence = not fence
        if fence or not line.startswith("#"):
            continue
        text = line.lstrip("#").strip()
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out

link = re.compile(r"\]\(([^)\s]+)\)")
for doc in sys.argv[1:]:
    if not doc.endswith(".md"):
        continue
    fence = False
    for number, line in enumerate(open(doc, encoding="utf-8"), 1):
        if line.startswith("```"):
            fence = not fence
        if fence:
            continue
        for target in link.findall(line):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, fragment = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
            if not os.path.exists(resolved):
                print(f"{doc}:{number}: link to {target}: no file {resolved}")
            elif fragment and resolved.endswith(".md") and fragment not in anchors(resolved):
                print(f"{doc}:{number}: link to {target}: {resolved} has no heading #{fragment}")
PY
)

# --- 7. crate graph -------------------------------------------------------
# Both sides as sorted `a -> b` lines, names without `kube-prestop-`, a
# non-normal dependency kind as a suffix (`[dev]`, `[build]`).
graph_doc="docs/ARCHITECTURE.md"
drawn="$(awk '/^```text crate-graph$/ { in_b = 1; next } in_b && /^```/ { exit }
    in_b && $2 == "->" { for (i = 3; i <= NF; i++) print $1 " -> " $i }' "${graph_doc}" | sort -u)"
# shellcheck disable=SC2016 # jq's variables, not the shell's
actual="$(cargo metadata --no-deps --format-version 1 --offline | jq -r '
    [.packages[].name] as $ws | .packages[] | .name as $from | .dependencies[]
    | select(.name | IN($ws[]))
    | "\($from | ltrimstr("kube-prestop-")) -> \(.name | ltrimstr("kube-prestop-"))\(if .kind then "[\(.kind)]" else "" end)"' | sort -u)"
[[ -n "${drawn}" ]] || finding "${graph_doc}: no \`\`\`text crate-graph block"
while IFS= read -r edge; do
    [[ -n "${edge}" ]] && finding "${graph_doc}: crate graph: ${edge}"
done < <(diff <(printf '%s\n' "${drawn}") <(printf '%s\n' "${actual}") |
    sed -n -e 's/^< \(.*\)/drawn but not in cargo metadata: \1/p' -e 's/^> \(.*\)/in cargo metadata but not drawn: \1/p' || true)

if [[ "${failed}" -gt 0 ]]; then
    printf 'docs: %d finding(s)\n' "${failed}"
    exit 1
fi
printf 'docs: %d documents consistent (namespace %s, images %s/kube-prestop-{webhook,sidecar})\n' \
    "${#docs[@]}" "${namespace}" "${published_base}"
