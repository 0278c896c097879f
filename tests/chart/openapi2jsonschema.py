#!/usr/bin/env python3
# Ours, not a tool: kubeconform's own scripts/openapi2jsonschema.py (tools.sh uses it for the CRDs) converts CRDs only, and PyPI's openapi2jsonschema, which reads swagger.json, has had no release since 2019.
"""Turn the Kubernetes OpenAPI v2 document (api/openapi-spec/swagger.json of
k8s.io/kubernetes) into per-kind JSON schemas in kubeconform's layout.

    openapi2jsonschema.py SWAGGER_JSON OUT_DIR

writes OUT_DIR/standalone/<kind>-<group>-<version>.json (core kinds:
<kind>-<version>.json) and the same under OUT_DIR/standalone-strict/, where
every object with declared properties gets "additionalProperties": false
(what `kubeconform -strict` expects). Point kubeconform at them with

    -schema-location 'OUT_DIR/standalone{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json'

Each file is self-contained: the definitions it references (transitively)
are copied into its "definitions" and the $refs stay local, which keeps
recursive types finite. As in the usual openapi2jsonschema conversion:
int-or-string becomes string|integer, Quantity string|number, and optional
fields may be null (Helm renders empty values as null).
"""

import copy
import json
import os
import sys

REF_PREFIX = "#/definitions/"


def refs_in(node, out):
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(REF_PREFIX):
            out.add(ref[len(REF_PREFIX):])
        for value in node.values():
            refs_in(value, out)
    elif isinstance(node, list):
        for value in node:
            refs_in(value, out)


def closure(defs, name):
    seen = set()
    todo = [name]
    while todo:
        current = todo.pop()
        if current in seen or current not in defs:
            continue
        seen.add(current)
        found = set()
        refs_in(defs[current], found)
        todo.extend(found - seen)
    return seen


def fix(node, strict):
    """Return a converted copy of a schema node."""
    if isinstance(node, list):
        return [fix(v, strict) for v in node]
    if not isinstance(node, dict):
        return node
    if node.get("format") == "int-or-string":
        return {"oneOf": [{"type": "string"}, {"type": "integer"}]}
    out = {k: fix(v, strict) for k, v in node.items()}
    props = out.get("properties")
    if isinstance(props, dict):
        required = set(out.get("required", []))
        for key, prop in props.items():
            if key in required or not isinstance(prop, dict):
                continue
            kind = prop.get("type")
            if isinstance(kind, str):
                prop["type"] = [kind, "null"]
            elif "$ref" in prop:
                props[key] = {"oneOf": [{"$ref": prop["$ref"]}, {"type": "null"}]}
        if strict and "additionalProperties" not in out:
            out["additionalProperties"] = False
    return out


def kind_suffix(group, version):
    if group:
        return "-" + group.split(".")[0].lower() + "-" + version.lower()
    return "-" + version.lower()


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1], encoding="utf-8") as f:
        swagger = json.load(f)
    defs = swagger["definitions"]
    defs["io.k8s.apimachinery.pkg.api.resource.Quantity"] = {
        "oneOf": [{"type": "string"}, {"type": "number"}]
    }
    count = 0
    for strict, sub in ((False, "standalone"), (True, "standalone-strict")):
        out_dir = os.path.join(sys.argv[2], sub)
        os.makedirs(out_dir, exist_ok=True)
        for name, schema in defs.items():
            for gvk in schema.get("x-kubernetes-group-version-kind", []):
                needed = closure(defs, name) - {name}
                doc = fix(copy.deepcopy(schema), strict)
                doc["$schema"] = "http://json-schema.org/schema#"
                if needed:
                    doc["definitions"] = {n: fix(copy.deepcopy(defs[n]), strict) for n in sorted(needed)}
                # The top-level object refers to itself under its own name in
                # some recursive types: keep that name resolvable.
                if name in needed or f'"{REF_PREFIX}{name}"' in json.dumps(doc):
                    doc.setdefault("definitions", {})[name] = fix(copy.deepcopy(schema), strict)
                fname = gvk["kind"].lower() + kind_suffix(gvk.get("group", ""), gvk["version"]) + ".json"
                with open(os.path.join(out_dir, fname), "w", encoding="utf-8") as f:
                    json.dump(doc, f, separators=(",", ":"), sort_keys=True)
                count += 1
    print(f"openapi2jsonschema: wrote {count} schemas to {sys.argv[2]}", file=sys.stderr)


if __name__ == "__main__":
    main()
