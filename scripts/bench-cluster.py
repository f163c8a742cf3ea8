#!/usr/bin/env python3
"""The scale benchmark on the local control plane: N pods created at once.

  scripts/control-plane.sh up            # client QPS 200/400 for kube-scheduler and kcm
  cargo build --release -p capstan-cli
  scripts/bench-cluster.py [--pods 1000] [--runs 1]

Two measurements, each from a clean cluster:

- floor: N pods onto pre-created kwok nodes (room for all of them): the control plane's own
  time from creating the Deployment to the last pod bound (ReplicaSet controller + kube-scheduler);
- capstan: N pods on a cluster with no nodes, `capstan controller` running: from creating the
  Deployment to the last pod bound, through NodeClaims, FakeInstances, kwok Nodes and
  kube-scheduler; and capstan's own decision time (its `provisioned` log lines' plan_ms).

Prints one JSON object. Not a timed test: machines are noisy, compare within one run.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sh(*args, stdin=None, check=True):
    p = subprocess.run(args, input=stdin, capture_output=True, text=True)
    if check and p.returncode != 0:
        sys.exit(f"{' '.join(args)}: {p.stderr.strip()}")
    return p.stdout


class Cluster:
    def __init__(self, kubeconfig, kubectl):
        self.kc = kubeconfig
        self.kubectl = kubectl

    def k(self, *args, stdin=None, check=True):
        return sh(self.kubectl, "--kubeconfig", self.kc, *args, stdin=stdin, check=check)

    def apply(self, yaml):
        self.k("apply", "-f", "-", stdin=yaml)

    def reset(self):
        for kind in ["nodeclaims.capstan.dev", "nodes"]:
            names = self.k("get", kind, "-o", "name", check=False).split()
            for n in names:
                self.k("patch", n, "--type", "merge", "-p", '{"metadata":{"finalizers":null}}', check=False)
        for kind in ["nodeclaims.capstan.dev", "nodepools.capstan.dev", "fakenodeclasses.capstan.dev",
                     "fakeinstances.capstan.dev", "nodes"]:
            self.k("delete", kind, "--all", "--wait=false", check=False)
        self.k("delete", "namespace", "bench", "--ignore-not-found", "--wait=true", "--timeout=180s", check=False)
        self.k("delete", "lease", "capstan", "-n", "kube-system", "--ignore-not-found", check=False)
        for _ in range(240):
            left = len(self.k("get", "nodes", "-o", "name", check=False).split())
            left += len(self.k("get", "fakeinstances.capstan.dev", "-o", "name", check=False).split())
            if left == 0:
                return
            time.sleep(0.5)
        sys.exit("the cluster did not clean up")

    def deployment(self, n):
        self.k("create", "namespace", "bench", check=False)
        for _ in range(100):
            if self.k("-n", "bench", "get", "serviceaccount", "default", check=False):
                break
            time.sleep(0.1)
        self.apply(f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: bench, namespace: bench}}
spec:
  replicas: {n}
  selector: {{matchLabels: {{app: bench}}}}
  template:
    metadata: {{labels: {{app: bench}}}}
    spec:
      containers: [{{name: c, image: fake, resources: {{requests: {{cpu: 100m, memory: 128Mi}}}}}}]
""")

    def bound(self):
        out = self.k("-n", "bench", "get", "pods", "-o", "jsonpath={range .items[*]}{.spec.nodeName}{\"\\n\"}{end}")
        lines = out.splitlines()
        return len(lines), sum(1 for l in lines if l.strip())

    def wait_bound(self, n, start, timeout=600):
        while True:
            total, bound = self.bound()
            if total >= n and bound >= n:
                return time.time() - start
            if time.time() - start > timeout:
                sys.exit(f"only {bound} of {n} pods bound after {timeout} s")
            time.sleep(0.25)


def floor(c, n):
    c.reset()
    nodes = (n + 99) // 100
    docs = []
    for i in range(nodes):
        docs.append(f"""apiVersion: v1
kind: Node
metadata:
  name: floor-{i}
  annotations: {{kwok.x-k8s.io/node: fake}}
  labels: {{kubernetes.io/hostname: floor-{i}, kubernetes.io/os: linux, kubernetes.io/arch: amd64}}
status:
  capacity: {{cpu: "16", memory: 64Gi, pods: "110"}}
  allocatable: {{cpu: "16", memory: 64Gi, pods: "110"}}
""")
    c.apply("---\n".join(docs))
    for _ in range(240):
        out = c.k("get", "nodes", "-o", "jsonpath={range .items[*]}{.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}")
        if out.split().count("True") == nodes:
            break
        time.sleep(0.5)
    # kwok nodes come up NotReady-tainted until the node lifecycle controller sees them Ready.
    for _ in range(240):
        out = c.k("get", "nodes", "-o", "jsonpath={range .items[*]}{.spec.taints}{\"\\n\"}{end}")
        if "not-ready" not in out:
            break
        time.sleep(0.5)
    start = time.time()
    c.deployment(n)
    took = c.wait_bound(n, start)
    return {"seconds": round(took, 2), "nodes": nodes}


def with_capstan(c, n, capstan):
    c.reset()
    c.apply("""
apiVersion: capstan.dev/v1
kind: FakeNodeClass
metadata: {name: default}
spec: {bootDelay: 2s}
---
apiVersion: capstan.dev/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: capstan.dev, kind: FakeNodeClass, name: default}
      requirements:
      - {key: node.kubernetes.io/instance-type, operator: In, values: [m7i.4xlarge, m7i.8xlarge, c7i.4xlarge, c7i.8xlarge]}
""")
    log = tempfile.NamedTemporaryFile(prefix="capstan-bench-", suffix=".log", delete=False)
    env = dict(os.environ, RUST_LOG="info")
    proc = subprocess.Popen(
        [capstan, "controller", "--kubeconfig", c.kc, "--identity", "bench", "--health-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0",
         "--lease-namespace", "kube-system", "--kube-api-qps", "200", "--kube-api-burst", "400"],
        stdout=subprocess.DEVNULL, stderr=log, env=env)
    try:
        for _ in range(100):
            if "bench" in c.k("get", "lease", "capstan", "-n", "kube-system", "-o",
                               "jsonpath={.spec.holderIdentity}", check=False):
                break
            time.sleep(0.1)
        start = time.time()
        c.deployment(n)
        took = c.wait_bound(n, start)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    plans = []
    with open(log.name) as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("fields", {}).get("message") == "provisioned":
                plans.append(e["fields"])
    nodes = len(c.k("get", "nodeclaims.capstan.dev", "-o", "name").split())
    return {
        "seconds": round(took, 2),
        "nodes": nodes,
        "provisioning_passes": len(plans),
        "decision_ms_total": round(sum(p.get("plan_ms", 0.0) for p in plans), 1),
        "decision_ms_max": round(max((p.get("plan_ms", 0.0) for p in plans), default=0.0), 1),
        "boot_delay_seconds": 2,
        "log": log.name,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG", "/tmp/capstan-cp/kubeconfig"))
    ap.add_argument("--capstan", default=os.path.join(ROOT, "target/release/capstan"))
    a = ap.parse_args()
    bindir = sh("bash", os.path.join(ROOT, "scripts/control-plane.sh"), "bin").strip()
    c = Cluster(a.kubeconfig, os.path.join(bindir, "kubectl"))
    c.k("apply", "--server-side", "--force-conflicts", "-f", os.path.join(ROOT, "crds"))
    rows = []
    for _ in range(a.runs):
        f = floor(c, a.pods)
        k = with_capstan(c, a.pods, a.capstan)
        rows.append({"pods": a.pods, "floor": f, "capstan": k,
                     "ratio_to_floor": round(k["seconds"] / f["seconds"], 2)})
    c.reset()
    print(json.dumps(rows if a.runs > 1 else rows[0], indent=2))


if __name__ == "__main__":
    main()
