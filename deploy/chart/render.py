"""Renders capstan's Helm chart for every values file in values/ without the helm binary
(helm-python-sdk), validates every object strictly against the Kubernetes version's schemas
(kubernetes-validate), and writes golden/<values>.yaml; `--check` fails when a golden file
differs from a fresh rendering instead of writing it.

    python render.py [--check] [--kubernetes-version 1.34.4]
"""

import argparse
import pathlib
import sys

import helm_python as helm
import jsonschema
import kubernetes_validate
import yaml

HERE = pathlib.Path(__file__).resolve().parent
NAMESPACE = "kube-system"


def render(chart, values_file):
    values = yaml.safe_load(values_file.read_text()) or {}
    out = chart.render(values, name="capstan", namespace=NAMESPACE, is_install=True)
    docs = []
    for path in sorted(out):
        text = out[path]
        for doc in yaml.safe_load_all(text):
            if doc:
                docs.append((path, doc))
    return docs


# Kinds the chart makes that Kubernetes does not define, checked against the fields their
# operators document (kubernetes-validate knows only Kubernetes' own schemas). The same shape is
# the CRD `scripts/chart.sh apply` installs (testdata/servicemonitor-crd.yaml), so the server
# also checks the objects.
ENDPOINT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["port"],
    "properties": {
        "port": {"type": "string"},
        "path": {"type": "string"},
        "scheme": {"enum": ["http", "https"]},
        "interval": {"type": "string", "pattern": "^([0-9]+(ms|s|m|h))+$"},
        "scrapeTimeout": {"type": "string", "pattern": "^([0-9]+(ms|s|m|h))+$"},
        "honorLabels": {"type": "boolean"},
        "relabelings": {"type": "array", "items": {"type": "object"}},
        "metricRelabelings": {"type": "array", "items": {"type": "object"}},
    },
}
EXTRA_KINDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): {
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["selector", "endpoints"],
                "properties": {
                    "namespaceSelector": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {"matchNames": {"type": "array", "items": {"type": "string"}}},
                    },
                    "selector": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "matchLabels": {
                                "type": "object",
                                "additionalProperties": {"type": "string"},
                            }
                        },
                    },
                    "endpoints": {"type": "array", "minItems": 1, "items": ENDPOINT},
                },
            },
        },
    },
}


def validate(docs, version, where):
    for path, doc in docs:
        name = doc.get("metadata", {}).get("name")
        schema = EXTRA_KINDS.get((doc.get("apiVersion"), doc.get("kind")))
        if schema is not None:
            try:
                jsonschema.validate(doc, schema)
            except jsonschema.ValidationError as e:
                sys.exit(f"{where}: {path}: {doc.get('kind')} {name}: {e.message} at {list(e.path)}")
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            sys.exit(f"{where}: {path}: {doc.get('kind')} {name}: {e.message} at {list(e.path)}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--check", action="store_true")
    p.add_argument("--kubernetes-version", default="1.34.4")
    a = p.parse_args()
    chart = helm.Chart.load(HERE / "capstan")
    drift = []
    for values_file in sorted((HERE / "values").glob("*.yaml")):
        docs = render(chart, values_file)
        validate(docs, a.kubernetes_version, values_file.name)
        text = "".join(
            f"---\n# Source: {path}\n" + yaml.safe_dump(doc, sort_keys=True) for path, doc in docs
        )
        golden = HERE / "golden" / values_file.name
        if a.check:
            if not golden.exists() or golden.read_text() != text:
                drift.append(str(golden.relative_to(HERE)))
        else:
            golden.parent.mkdir(exist_ok=True)
            golden.write_text(text)
        print(f"{values_file.name}: {len(docs)} objects, valid for Kubernetes {a.kubernetes_version}")
    # Values that cannot work are refused at render time, naming the value.
    for bad, says in [
        ({"settings": {"clusterName": ""}}, "settings.clusterName is required"),
        ({"provider": "gcp"}, "provider must be aws or fake"),
        (
            {"settings": {"clusterName": "x", "featureGates": {"noSuchGate": True}}},
            "settings.featureGates.noSuchGate: capstan has no such feature gate",
        ),
        (
            {"settings": {"clusterName": "x", "featureGates": {"nodeRepair": True}}},
            "settings.featureGates.nodeRepair: capstan does not implement",
        ),
    ]:
        try:
            chart.render(bad, name="capstan", namespace=NAMESPACE, is_install=True)
        except helm.HelmError as e:
            if says not in str(e):
                sys.exit(f"rendering {bad}: expected {says!r}, got {e}")
        else:
            sys.exit(f"rendering {bad}: expected a failure naming {says!r}")
    if drift:
        sys.exit(
            "the chart's rendering changed: "
            + ", ".join(drift)
            + " (python deploy/chart/render.py rewrites them)"
        )


if __name__ == "__main__":
    main()
