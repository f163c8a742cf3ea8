#!/usr/bin/env python3
"""Writes the recorded pending-pod sets in this folder (PodList JSON, as `kubectl get pods -o json`
prints them). Deterministic: `python3 benches/data/generate.py` rewrites the same files."""
import json
import random
from pathlib import Path

HERE = Path(__file__).parent


def pod(ns, app, i, cpu, mem, gpu=0, spread=False, uid_rng=None):
    requests = {"cpu": cpu, "memory": mem}
    limits = {"memory": mem}
    if gpu:
        requests["nvidia.com/gpu"] = str(gpu)
        limits["nvidia.com/gpu"] = str(gpu)
    spec = {
        "containers": [{
            "name": app,
            "image": f"registry.example.com/{app}:1.4.2",
            "resources": {"requests": requests, "limits": limits},
        }],
        "schedulerName": "default-scheduler",
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        ],
    }
    if gpu:
        spec["tolerations"].append({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"})
    if spread:
        spec["topologySpreadConstraints"] = [{
            "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": app}},
        }]
    h = "%010x" % uid_rng.getrandbits(40)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{app}-{h[:6]}-{h[6:]}{i % 10}",
            "namespace": ns,
            "labels": {"app": app, "pod-template-hash": h[:6]},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-{h[:6]}",
                                 "uid": f"{h}-0000-4000-8000-{h}00", "controller": True, "blockOwnerDeletion": True}],
            "uid": f"{uid_rng.getrandbits(32):08x}-{uid_rng.getrandbits(16):04x}-4{uid_rng.getrandbits(12):03x}-8{uid_rng.getrandbits(12):03x}-{uid_rng.getrandbits(48):012x}",
        },
        "spec": spec,
        "status": {
            "phase": "Pending",
            "qosClass": "Burstable",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                            "message": "0/3 nodes are available: 3 Insufficient cpu."}],
        },
    }


def deployments(rng, specs):
    """specs: (namespace, app, replicas, cpu, memory, gpu, spread)"""
    items = []
    for ns, app, n, cpu, mem, gpu, spread in specs:
        for i in range(n):
            items.append(pod(ns, app, i, cpu, mem, gpu, spread, rng))
    return items


def write(name, items):
    doc = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}
    (HERE / name).write_text(json.dumps(doc, indent=1) + "\n")


def main():
    rng = random.Random(20261130)
    # A uniform web tier: three deployments of a shop.
    write("web-tier.json", deployments(rng, [
        ("shop", "frontend", 120, "250m", "512Mi", 0, False),
        ("shop", "api", 80, "500m", "1Gi", 0, False),
        ("shop", "cart", 40, "1", "2Gi", 0, False),
    ]))
    # A mixed batch set: 600 jobs of eight sizes, drawn with weights.
    shapes = [("500m", "1Gi"), ("1", "2Gi"), ("2", "4Gi"), ("2", "8Gi"), ("4", "8Gi"), ("4", "16Gi"), ("8", "16Gi"), ("8", "32Gi")]
    weights = [20, 20, 15, 10, 12, 10, 8, 5]
    batch = []
    for i in range(600):
        cpu, mem = rng.choices(shapes, weights)[0]
        batch.append(pod("batch", f"job-{cpu.replace('m', 'm')}-{mem.lower()}", i, cpu, mem, 0, False, rng))
    write("batch-mixed.json", batch)
    # Memory-heavy: caches and JVMs.
    write("memory-heavy.json", deployments(rng, [
        ("data", "redis", 100, "1", "12Gi", 0, False),
        ("data", "elastic", 60, "2", "30Gi", 0, False),
        ("data", "jvm-worker", 40, "500m", "6Gi", 0, False),
    ]))
    # GPU inference: model servers with one GPU each, and their CPU front ends.
    write("gpu-inference.json", deployments(rng, [
        ("ml", "llm-server", 32, "4", "16Gi", 1, False),
        ("ml", "embedder", 16, "2", "8Gi", 1, False),
        ("ml", "gateway", 100, "500m", "1Gi", 0, False),
    ]))
    # A large cluster's backlog: twelve deployments, one spread across zones.
    large = [
        ("web", "storefront", 900, "250m", "512Mi", 0, False),
        ("web", "search", 600, "1", "2Gi", 0, False),
        ("web", "checkout", 400, "500m", "1Gi", 0, True),
        ("api", "graphql", 700, "500m", "768Mi", 0, False),
        ("api", "auth", 300, "250m", "256Mi", 0, False),
        ("api", "inventory", 400, "1", "1Gi", 0, False),
        ("data", "kafka-consumer", 500, "2", "4Gi", 0, False),
        ("data", "etl", 300, "4", "16Gi", 0, False),
        ("data", "cache", 200, "1", "8Gi", 0, False),
        ("ops", "log-shipper", 300, "100m", "128Mi", 0, False),
        ("ops", "metrics", 200, "250m", "1Gi", 0, False),
        ("ml", "feature-store", 400, "2", "8Gi", 0, False),
    ]
    write("large-5200.json", deployments(rng, large))
    # Small sets the exact solver proves optimal.
    write("small-web-60.json", deployments(rng, [
        ("shop", "frontend", 30, "250m", "512Mi", 0, False),
        ("shop", "api", 20, "500m", "1Gi", 0, False),
        ("shop", "cart", 10, "1", "2Gi", 0, False),
    ]))
    write("small-batch-100.json", [pod("batch", "job", i, *rng.choice(shapes[:6]), 0, False, rng) for i in range(100)])


if __name__ == "__main__":
    main()
