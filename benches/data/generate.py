#!/usr/bin/env python3
"""Writes the recorded pending-pod sets in this folder (PodList JSON, as `kubectl get pods -o json`
prints them). Deterministic: `python3 benches/data/generate.py` rewrites the same files."""
import json
import math
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


def write(name, items, compact=False):
    """Indented as kubectl prints; the big production-shaped sets one pod per line, to keep the
    repository small."""
    doc = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}
    if compact:
        body = ",\n".join(json.dumps(p, separators=(",", ":")) for p in items)
        text = '{"apiVersion":"v1","kind":"List","metadata":{"resourceVersion":""},"items":[\n' + body + "\n]}"
    else:
        text = json.dumps(doc, indent=1)
    (HERE / name).write_text(text + "\n")


def zipf_counts(rng, n_pods, n_shapes, s=1.1):
    """Heavy-tailed frequencies: every shape at least once, the rest drawn with weight 1/rank^s."""
    counts = [1] * n_shapes
    weights = [1.0 / (r + 1) ** s for r in range(n_shapes)]
    for i in rng.choices(range(n_shapes), weights, k=n_pods - n_shapes):
        counts[i] += 1
    return counts


def milli(cpu_m):
    return f"{cpu_m}m" if cpu_m % 1000 else str(cpu_m // 1000)


def mem(mib):
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def cpu_shapes(rng, n, big=False):
    """Distinct CPU-only shapes: CPU log-uniform from 100m to 16 (to 90 when big), memory 0.5 to 8
    GiB per core (to 12 when big), rounded as people write requests."""
    out = []
    seen = set()
    while len(out) < n:
        lo, hi = (16000, 90000) if big else (100, 16000)
        c = int(round(math.exp(rng.uniform(math.log(lo), math.log(hi))) / 50.0)) * 50
        per_core = math.exp(rng.uniform(math.log(512), math.log(12288 if big else 8192)))
        m = max(128, int(round(c / 1000.0 * per_core / 64.0)) * 64)
        if big:
            m = min(m, 720 * 1024)
        key = (c, m, 0)
        if key not in seen:
            seen.add(key)
            out.append(key)
    return out


def gpu_shapes(rng, n):
    """Distinct GPU shapes: 1, 2, 4 or 8 GPUs (half of them 1), 1 to 22 cores and 4 to 90 GiB per
    GPU, so CPU and memory per GPU vary several-fold; capped to what an 8-GPU node holds."""
    out = []
    seen = set()
    while len(out) < n:
        g = rng.choices([1, 2, 4, 8], [50, 20, 15, 15])[0]
        cpu_per = math.exp(rng.uniform(math.log(1000), math.log(22000)))
        mem_per = math.exp(rng.uniform(math.log(4096), math.log(92160)))
        c = min(int(round(g * cpu_per / 500.0)) * 500, 180000)
        m = min(int(round(g * mem_per / 1024.0)) * 1024, 720 * 1024)
        key = (c, m, g)
        if key not in seen:
            seen.add(key)
            out.append(key)
    return out


def production_set(rng, name, n_pods, shapes, shuffle=True):
    """Pods of the given (cpu millicores, memory MiB, gpus) shapes with heavy-tailed frequencies,
    one Deployment per shape, in arrival order (shuffled)."""
    rng.shuffle(shapes)
    counts = zipf_counts(rng, n_pods, len(shapes))
    items = []
    for k, ((c, m, g), n) in enumerate(zip(shapes, counts)):
        app = f"{'train' if g else 'svc'}-{k:03d}"
        ns = "ml" if g else f"team-{k % 7}"
        for i in range(n):
            items.append(pod(ns, app, i, milli(c), mem(m), g, False, rng))
    if shuffle:
        rng.shuffle(items)
    write(name, items, compact=True)


def recorded_pod(rng, ns, app, i, owner_kind, containers, init=None, gpu=0):
    """A pod as `kubectl get pods -o json` prints one that waits for a node: generateName, owner,
    service-account volume, several containers (and init containers), status with conditions."""
    h = "%010x" % rng.getrandbits(40)
    suffix = "".join(rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
    owner = f"{app}-{h[:10]}" if owner_kind == "ReplicaSet" else app
    name = f"{owner}-{suffix}" if owner_kind != "StatefulSet" else f"{app}-{i}"
    def ctr(cname, cpu, memory, port=None, g=0):
        c = {
            "name": cname,
            "image": f"registry.example.com/{app}/{cname}:2.{i % 3}.0",
            "imagePullPolicy": "IfNotPresent",
            "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory}},
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
            "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True}],
        }
        if g:
            c["resources"]["requests"]["nvidia.com/gpu"] = str(g)
            c["resources"]["limits"]["nvidia.com/gpu"] = str(g)
        if port:
            c["ports"] = [{"name": "http", "containerPort": port, "protocol": "TCP"}]
        return c
    spec = {
        "containers": [ctr(*c[:3], c[3] if len(c) > 3 else None, gpu if k == 0 else 0) for k, c in enumerate(containers)],
        "dnsPolicy": "ClusterFirst",
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
        "restartPolicy": "Never" if owner_kind == "Job" else "Always",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "serviceAccount": "default",
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        ],
        "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
        ]}}],
    }
    if init:
        spec["initContainers"] = [ctr(*c) for c in init]
    if gpu:
        spec["tolerations"].append({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"})
    if owner_kind == "StatefulSet":
        spec["hostname"] = name
        spec["subdomain"] = app
    meta = {
        "name": name,
        "namespace": ns,
        "uid": f"{rng.getrandbits(32):08x}-{rng.getrandbits(16):04x}-4{rng.getrandbits(12):03x}-8{rng.getrandbits(12):03x}-{rng.getrandbits(48):012x}",
        "resourceVersion": str(4_000_000 + rng.randrange(1_000_000)),
        "creationTimestamp": f"2026-11-30T09:{i // 60 % 60:02d}:{i % 60:02d}Z",
        "labels": {"app.kubernetes.io/name": app},
        "annotations": {"kubectl.kubernetes.io/default-container": containers[0][0]},
        "ownerReferences": [{"apiVersion": "batch/v1" if owner_kind == "Job" else "apps/v1", "kind": owner_kind,
                             "name": owner, "uid": f"{h[:8]}-{h[8:]}00-4000-8000-{h}{h[:2]}",
                             "controller": True, "blockOwnerDeletion": True}],
    }
    if owner_kind != "StatefulSet":
        meta["generateName"] = f"{owner}-"
    if owner_kind == "ReplicaSet":
        meta["labels"]["pod-template-hash"] = h[:10]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {
            "phase": "Pending",
            "qosClass": "Burstable",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                            "lastProbeTime": None, "lastTransitionTime": meta["creationTimestamp"],
                            "message": "0/12 nodes are available: 12 Insufficient cpu. preemption: 0/12 nodes are available: 12 No preemption victims found for incoming pod."}],
        },
    }


def recorded_set(rng, name, n_pods):
    """A cluster's pending pods as recorded: services with sidecars and init containers, jobs,
    stateful sets and GPU jobs, in namespaces of several teams."""
    kinds = [
        # (namespace, app, owner kind, weight, containers (name, cpu, memory, port), init containers, gpus)
        ("shop", "storefront", "ReplicaSet", 30, [("app", "500m", "768Mi", 8080), ("istio-proxy", "100m", "128Mi"), ("fluent-bit", "50m", "64Mi")], [("istio-init", "100m", "128Mi")], 0),
        ("shop", "checkout", "ReplicaSet", 12, [("app", "1", "2Gi", 8080), ("istio-proxy", "100m", "128Mi")], [("istio-init", "100m", "128Mi"), ("migrate", "2", "1Gi")], 0),
        ("search", "indexer", "StatefulSet", 6, [("opensearch", "3", "14Gi", 9200), ("exporter", "100m", "96Mi", 9114)], [("sysctl", "50m", "32Mi")], 0),
        ("data", "spark-exec", "ReplicaSet", 14, [("executor", "3500m", "12Gi")], None, 0),
        ("batch", "nightly-report", "Job", 10, [("report", "2", "3Gi")], [("fetch", "500m", "8Gi")], 0),
        ("ops", "otel-gateway", "ReplicaSet", 8, [("collector", "250m", "512Mi", 4317)], None, 0),
        ("ml", "finetune", "Job", 4, [("trainer", "22", "180Gi"), ("tensorboard", "500m", "1Gi", 6006)], [("download", "2", "4Gi")], 4),
        ("ml", "inference", "ReplicaSet", 8, [("server", "6", "28Gi", 8000), ("istio-proxy", "100m", "128Mi")], [("istio-init", "100m", "128Mi")], 1),
        ("ml", "notebook", "StatefulSet", 2, [("jupyter", "4", "30Gi", 8888)], None, 1),
    ]
    counts = [0] * len(kinds)
    items = []
    for k in rng.choices(range(len(kinds)), [x[3] for x in kinds], k=n_pods):
        ns, app, owner, _, ctrs, init, g = kinds[k]
        items.append(recorded_pod(rng, ns, app, counts[k], owner, ctrs, init, g))
        counts[k] += 1
    write(name, items, compact=True)


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

    # Production-shaped sets (issue 19): heavy-tailed mixes of many shapes, own seed so the sets
    # above stay as they were.
    prng = random.Random(20261202)
    production_set(prng, "prod-cpu-1100.json", 1_100, cpu_shapes(prng, 25))
    production_set(prng, "prod-gpu-2000.json", 2_000, gpu_shapes(prng, 64) + cpu_shapes(prng, 12))
    production_set(prng, "prod-gpu-7000.json", 7_000, gpu_shapes(prng, 87))
    production_set(prng, "prod-big-1000.json", 1_000, cpu_shapes(prng, 20, big=True) + [s for s in gpu_shapes(prng, 40) if s[2] == 8][:10])
    production_set(prng, "prod-mixed-5000.json", 5_000, cpu_shapes(prng, 60) + gpu_shapes(prng, 45) + cpu_shapes(prng, 15, big=True))
    production_set(prng, "prod-mixed-20000.json", 20_000, cpu_shapes(prng, 60) + gpu_shapes(prng, 45) + cpu_shapes(prng, 15, big=True))
    recorded_set(prng, "recorded-cluster-1500.json", 1_500)


if __name__ == "__main__":
    main()
