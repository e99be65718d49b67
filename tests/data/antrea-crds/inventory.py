#!/usr/bin/env python3
"""Writes fields.txt: the facts tollgate's CRD test needs from Antrea's CRDs.

Usage: inventory.py ANTREA_CHECKOUT > tests/data/antrea-crds/fields.txt
       inventory.py DIR COMMIT > ...   (DIR holds the six files of COMMIT)

Reads build/charts/antrea/crds/{KINDS}.yaml of the checkout and names its
commit in the first line. One tab-separated line per row of facts:

  KIND  -        -     name=.. group=.. scope=.. names.KEY=..  (the definition)
  KIND  VERSION  -     served=.. storage=..                     (each version)
  KIND  VERSION  PATH  type=.. enum=.. required ...             (each schema node)

PATH is the field path in the version's openAPIV3Schema (`.` the root,
`a.b` a property, `a[]` an array's items). Values are compact JSON; a bare
word is a flag: `required` (its parent lists it in `required`) and
`preserve-unknown-fields`. Descriptions are left out: only facts.
"""
import json
import os
import subprocess
import sys

import yaml

KINDS = ["tier", "clusternetworkpolicy", "networkpolicy", "clustergroup", "group", "externalentity"]
# The value checks the test compares, as the schema names them.
CHECKS = [
    "type", "enum", "pattern", "minimum", "maximum", "maxLength", "minLength",
    "minItems", "maxItems", "format", "anyOf", "oneOf", "additionalProperties",
]


def value(v):
    return json.dumps(v, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def nodes(schema, path, required, out):
    facts = [f"{k}={value(schema[k])}" for k in CHECKS if k in schema]
    if schema.get("x-kubernetes-preserve-unknown-fields") is True:
        facts.append("preserve-unknown-fields")
    if required:
        facts.append("required")
    out.append((path, facts))
    child = (lambda n: n) if path == "." else (lambda n: f"{path}.{n}")
    props = schema.get("properties") or {}
    names = schema.get("required") or []
    for name, sub in props.items():
        nodes(sub, child(name), name in names, out)
    for name in names:
        if name not in props:
            out.append((child(name), ["required"]))
    if "items" in schema:
        nodes(schema["items"], f"{path}[]", False, out)


def lines(crd):
    spec = crd["spec"]
    name = spec["names"]["kind"]
    facts = [f"name={value(crd['metadata']['name'])}", f"group={value(spec['group'])}", f"scope={value(spec['scope'])}"]
    facts += [f"names.{k}={value(v)}" for k, v in spec["names"].items()]
    rows = [(name, "-", "-", facts)]
    for version in spec["versions"]:
        v = version["name"]
        rows.append((name, v, "-", [f"served={value(version['served'])}", f"storage={value(version['storage'])}"]))
        found = []
        nodes(version["schema"]["openAPIV3Schema"], ".", False, found)
        rows += [(name, v, path, f) for path, f in found]
    return ["\t".join([n, v, p] + sorted(f)) for n, v, p, f in rows]


def main():
    root = sys.argv[1]
    charts = os.path.join(root, "build/charts/antrea/crds")
    if os.path.isdir(charts):
        folder = charts
        commit = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()
    else:
        folder, commit = root, sys.argv[2]
    out = []
    for kind in KINDS:
        with open(os.path.join(folder, f"{kind}.yaml")) as f:
            out += lines(yaml.safe_load(f))
    print(f"# Antrea {commit}, build/charts/antrea/crds: written by inventory.py (see README.md)")
    print("\n".join(sorted(out)))


main()
