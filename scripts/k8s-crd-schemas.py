#!/usr/bin/env python3
"""Writes JSON schemas of the Prometheus Operator's ServiceMonitor and PrometheusRule
(monitoring.coreos.com/v1) for check-jsonschema, as scripts/validate-deploy uses them:

    k8s-crd-schemas.py OUT_DIR

The schemas come from the PyPI package cloudcoil-models-prometheus-operator (pydantic models
generated from the operator's CRDs, the package's version being the operator's: 0.80.1.0 =
v0.80.1), exported with pydantic's JSON schema. Made strict as kubernetes-validate --strict
makes the built-in kinds: an object with declared properties admits no others (a misspelt
field fails instead of being dropped by the API server), and apiVersion, kind and
metadata.name are required. A Go pattern's (?i) flag, which JSON schema's regular expressions
lack, is spelt out as [aA] classes. Writes servicemonitor.json and prometheusrule.json.
"""

import json
import re
import sys
from pathlib import Path

from cloudcoil.models.prometheus_operator import v1


def caseless(pattern):
    """A Go pattern with the flag (?i) as one that JSON schema's regular expressions (which
    have no inline flags) read the same: each ASCII letter becomes [xX]. Patterns with
    bracket expressions or other flags are refused by the caller."""
    out, i = [], 0
    pattern = pattern.replace("(?i)", "")
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if ch.isascii() and ch.isalpha():
            ch = f"[{ch.lower()}{ch.upper()}]"
        out.append(ch)
        i += 1
    return "".join(out)


def strict(node):
    if isinstance(node, dict):
        if node.get("type") == "object" and "properties" in node:
            node.setdefault("additionalProperties", False)
        if isinstance(node.get("pattern"), str) and "(?i)" in node["pattern"]:
            rest = node["pattern"].replace("(?i)", "")
            if re.search(r"\(\?[a-zA-Z]+[):]", rest) or "[" in rest:
                raise ValueError(f"an inline flag this cannot translate: {node['pattern']}")
            node["pattern"] = caseless(node["pattern"])
        for v in node.values():
            strict(v)
    elif isinstance(node, list):
        for v in node:
            strict(v)


def schema(model, kind):
    s = model.model_json_schema(by_alias=True, mode="validation")
    strict(s)
    s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    s["title"] = f"monitoring.coreos.com/v1 {kind}"
    s["required"] = sorted(set(s.get("required", [])) | {"apiVersion", "kind", "metadata"})
    s["properties"]["apiVersion"] = {"const": "monitoring.coreos.com/v1"}
    s["properties"]["kind"] = {"const": kind}
    s["properties"]["metadata"] = {
        "allOf": [{"$ref": s["properties"]["metadata"]["anyOf"][0]["$ref"]}],
        "required": ["name"],
    }
    return s


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for model, kind in ((v1.ServiceMonitor, "ServiceMonitor"), (v1.PrometheusRule, "PrometheusRule")):
        path = out / f"{kind.lower()}.json"
        path.write_text(json.dumps(schema(model, kind), indent=1, sort_keys=True), encoding="utf-8")
        print(f"  {path.name}: {kind} from cloudcoil-models-prometheus-operator")


if __name__ == "__main__":
    main()
