//! `pkg/controllers/disruption/emptiness_test.go`, run through `capstan consolidate` as a user
//! would: the suite's `fake.InstanceTypesAssorted()` as the catalog, its NodePools as
//! `karpenter.sh/v1` files, and the cluster as `kubectl get nodes,nodeclaims,pods -o json`
//! shows it — nodes with their NodeClaims, initialized (`ExpectMakeNodesAndNodeClaims
//! InitializedAndStateUpdated`) and `Consolidatable` unless a case says otherwise. A node
//! Karpenter deletes is one a command of `consolidate` names as a candidate.

use super::topology::default_offerings;
use super::*;
use std::collections::BTreeSet;
use std::path::Path;

pub const EMPTINESS: &str = "pkg/controllers/disruption/emptiness_test.go";
pub const DRIFT: &str = "pkg/controllers/disruption/drift_test.go";
pub const CONSOLIDATION: &str = "pkg/controllers/disruption/consolidation_test.go";
pub const SUITE: &str = "pkg/controllers/disruption/suite_test.go";
pub const NODECLAIM_DRIFT: &str = "pkg/controllers/nodeclaim/disruption/drift_test.go";
pub const EXPIRATION: &str = "pkg/controllers/nodeclaim/expiration/suite_test.go";

/// Its of these files `capstan consolidate` cannot be asked, with the reason.
pub const NOT_RUN: &[(&str, &str)] = &[
    (
        "suite: Metrics (6 Its), should stop multi-node consolidation after context deadline is reached",
        "Karpenter's metric counters and its pass's deadline (capstan's /metrics are tested in \
         controller::metrics; its multi-node search is bounded by a binary search, not a clock)",
    ),
    (
        "suite: Disruption Taints (2 Its); Candidate Filtering: should not consider candidates that are nominated / MarkedForDeletion / actively being processed in the queue",
        "Karpenter's queue and in-memory cluster state (nominations, marks, commands in flight); \
         capstan's controller taints and un-taints candidates and skips nodes in a command, \
         tested in controller::disruption",
    ),
    (
        "consolidation: should not mark (empty|multi node|single node) consolidated if (the|all) candidates can't be disrupted due to budgets (6 Its)",
        "whether Karpenter's cluster state marks its NodePools consolidated after a pass is \
         its queue's bookkeeping (capstan re-evaluates on every change)",
    ),
    (
        "consolidation: Delete: does not delete nodes with pod churn, deletes nodes without pod churn",
        "a test validator that binds a pod during Karpenter's validation wait: queue \
         mechanics (capstan's controller re-checks a command against the API server before it \
         starts, tested in controller::disruption)",
    ),
    (
        "consolidation: Events (6 Its) and Metrics (eligible nodes; invalidated commands, 2 entries)",
        "Karpenter's events and metric counters (capstan's blocked reasons are the \
         `blocked` entries of `consolidate`'s output, its events and /metrics tested in \
         controller::disruption and controller::metrics)",
    ),
    (
        "consolidation: TTL (7 Its); Multi-NodeClaim: should continue to single nodeclaim consolidation when multi-nodeclaim consolidation fails validation after the node ttl",
        "what changes in the cluster during Karpenter's 15 s validation wait inside one pass \
         is queue mechanics (capstan's controller re-checks a command against the API server \
         just before it starts, tested in controller::disruption)",
    ),
    (
        "consolidation: Parallelization (2 Its)",
        "the provisioner and the disruption queue running at once against one cluster state: \
         the controller's loops interleaved, not a decision `consolidate` can be asked",
    ),
    (
        "drift: Metrics: should correctly report eligible drifted nodes",
        "a Karpenter metric gauge",
    ),
    (
        "drift: should untaint nodes when drift replacement fails",
        "a replacement deleted while its command waits is queue mechanics (capstan's \
         controller removes the disrupted taint when a command fails, tested in \
         controller::disruption)",
    ),
    (
        "emptiness: Metrics: should correctly report eligible nodes",
        "a Karpenter metric gauge (capstan's /metrics are tested in controller::metrics)",
    ),
    (
        "emptiness: should wait for the node TTL for empty nodes before consolidating",
        "the 15 s validation wait inside one disruption pass is queue mechanics (capstan's \
         controller re-checks a command against the API server before it starts, tested in \
         controller::disruption)",
    ),
    (
        "nodeclaim drift: Drift: should ignore drift for NodeClaims not managed by this instance of Karpenter; expiration: should ignore expired NodeClaims that are not managed by this Karpenter instance",
        "which NodeClass kinds are this Karpenter's is its cloud provider's answer \
         (GetSupportedNodeClasses); `consolidate` has no provider to ask",
    ),
    (
        "nodeclaim drift: NodePool Static Drift (7 entries, 4 Its), should detect static drift before cloud provider drift",
        "Karpenter's `karpenter.sh/nodepool-hash` is hashstructure over its Go types, written \
         by its NodePool hash controller; capstan hashes the template fields itself \
         (`capstan.dev/nodepool-hash`, which fields drift tested in model::nodepool and \
         disrupt's drift tests)",
    ),
    (
        "nodeclaim drift: should detect node requirement drift before cloud provider drift; should remove the status condition from the nodeClaim if the nodeClaim is no longer drifted",
        "the Drifted condition's reason, and clearing it, are the NodeClaim controller's \
         bookkeeping; a snapshot's Drifted=True is the what-if's only word on provider drift \
         (capstan's controller recomputes drift every evaluation, tested in disrupt)",
    ),
    (
        "nodeclaim drift: Reserved Capacity (5 entries)",
        "capstan refuses the ReservedCapacity feature gate: no reserved offerings",
    ),
    (
        "expiration: Metrics (3 Its); should return the requeue interval ...; shouldn't expire the same NodeClaim multiple times",
        "metric counters and the controller's requeue (capstan's expiry is a command of every \
         evaluation, tested in controller::disruption)",
    ),
    (
        "emptiness: Buffer pod protection: 6 Its",
        "Karpenter's virtual buffer pods (its capacity-buffer feature) have no counterpart \
         in capstan",
    ),
];

const NOW: &str = "2026-01-01T12:00:00Z";
const AN_HOUR_AGO: &str = "2026-01-01T11:00:00Z";

/// A cluster for `capstan consolidate`.
pub struct Cluster {
    dir: PathBuf,
    /// `--now`.
    pub now: &'static str,
    /// More arguments to `consolidate` (feature gates).
    pub flags: Vec<&'static str>,
    /// The catalog's entries, when not `fake.InstanceTypesAssorted()`.
    pub catalog: Option<Vec<Value>>,
    pub pools: Vec<Value>,
    nodes: Vec<Value>,
    claims: Vec<Value>,
    pods: Vec<Value>,
}

/// What a node is made of (`test.NodeClaimsAndNodes`' options).
#[derive(Clone)]
pub struct NodeSpec {
    pub pool: String,
    pub itype: String,
    pub capacity_type: &'static str,
    pub zone: &'static str,
    pub cpu: &'static str,
    pub pods: &'static str,
    /// The NodeClaim's `Consolidatable` condition: Some(status), or none at all.
    pub consolidatable: Option<bool>,
    /// The NodeClaim's `Drifted` condition: its status and when it turned so.
    pub drifted: Option<(bool, &'static str)>,
    pub node_annotations: Value,
    /// When the NodeClaim turned `Initialized` (the node labelled so); none: not yet.
    pub initialized: Option<&'static str>,
    /// The node's and NodeClaim's creationTimestamp.
    pub created: &'static str,
}

/// `leastExpensiveInstance` of `fake.InstanceTypesAssorted()` (on-demand; with `spot`, the
/// spot one), its offering's zone, 32 CPUs and 100 pods allocatable, as the suite's nodes.
pub fn cheapest(pool: &str, spot: bool) -> NodeSpec {
    let ct = if spot { "spot" } else { "on-demand" };
    NodeSpec {
        pool: pool.into(),
        itype: format!("1-cpu-1-mem-amd64-linux-test-zone-1-{ct}"),
        capacity_type: ct,
        zone: "test-zone-1",
        cpu: "32",
        pods: "100",
        consolidatable: Some(true),
        drifted: None,
        node_annotations: json!({}),
        initialized: Some(AN_HOUR_AGO),
        created: AN_HOUR_AGO,
    }
}

impl Cluster {
    pub fn new(dir: &Path) -> Cluster {
        Cluster {
            dir: dir.to_path_buf(),
            now: NOW,
            flags: Vec::new(),
            catalog: None,
            pools: Vec::new(),
            nodes: Vec::new(),
            claims: Vec::new(),
            pods: Vec::new(),
        }
    }

    /// A node and its NodeClaim; returns the node's name.
    pub fn node(&mut self, spec: &NodeSpec) -> String {
        let i = self.nodes.len();
        let name = format!("node-{i}");
        let labels = json!({
            "karpenter.sh/nodepool": spec.pool,
            "node.kubernetes.io/instance-type": spec.itype,
            "karpenter.sh/capacity-type": spec.capacity_type,
            "topology.kubernetes.io/zone": spec.zone,
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
            "kubernetes.io/hostname": name,
            "karpenter.sh/registered": "true",
        });
        let mut labels = labels;
        if spec.initialized.is_some() {
            labels["karpenter.sh/initialized"] = json!("true");
        }
        let provider = format!("fake:///{name}");
        let allocatable = json!({"cpu": spec.cpu, "pods": spec.pods, "memory": "64Gi"});
        self.nodes.push(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels, "annotations": spec.node_annotations,
                "creationTimestamp": spec.created},
            "spec": {"providerID": provider},
            "status": {"allocatable": allocatable, "capacity": allocatable,
                "conditions": [{"type": "Ready", "status": "True"}]},
        }));
        let cond_at = |kind: &str, status: bool, at: &str| {
            json!({"type": kind, "status": if status { "True" } else { "False" },
                "reason": kind, "lastTransitionTime": at})
        };
        let cond = |kind: &str, status: bool| cond_at(kind, status, AN_HOUR_AGO);
        let mut conditions = vec![cond("Launched", true), cond("Registered", true)];
        if let Some(at) = spec.initialized {
            conditions.push(cond_at("Initialized", true, at));
        }
        if let Some(c) = spec.consolidatable {
            conditions.push(cond("Consolidatable", c));
        }
        if let Some((status, at)) = spec.drifted {
            conditions.push(cond_at("Drifted", status, at));
        }
        self.claims.push(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": format!("nodeclaim-{i}"), "labels": labels,
                "creationTimestamp": spec.created},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": []},
            "status": {"nodeName": name, "providerID": provider, "conditions": conditions},
        }));
        name
    }

    /// A node no NodePool manages (no NodeClaim, no NodePool label): 32 CPUs, 100 pods.
    pub fn unmanaged_node(&mut self) -> String {
        let name = format!("unmanaged-{}", self.nodes.len());
        let allocatable = json!({"cpu": "32", "pods": "100", "memory": "64Gi"});
        self.nodes.push(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "creationTimestamp": AN_HOUR_AGO, "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux", "topology.kubernetes.io/zone": "test-zone-1"}},
            "spec": {"providerID": format!("fake:///{name}")},
            "status": {"allocatable": allocatable, "capacity": allocatable,
                "conditions": [{"type": "Ready", "status": "True"}]},
        }));
        name
    }

    /// `n` nodes alike.
    pub fn nodes(&mut self, n: usize, spec: &NodeSpec) -> Vec<String> {
        (0..n).map(|_| self.node(spec)).collect()
    }

    /// A pod bound to `node` (`ExpectManualBinding`), owned by `owner` (kind, name) if any,
    /// terminating if `deleting`.
    pub fn bind(&mut self, node: &str, owner: Option<(&str, &str)>, deleting: bool) {
        self.bind_pod(node, owner, deleting, None, json!({}), json!({}));
    }

    /// As `bind`, with a CPU request, annotations and labels.
    pub fn bind_pod(
        &mut self,
        node: &str,
        owner: Option<(&str, &str)>,
        deleting: bool,
        cpu: Option<&str>,
        annotations: Value,
        labels: Value,
    ) {
        let i = self.pods.len();
        let mut md =
            json!({"name": format!("pod-{i}"), "namespace": "default", "uid": format!("uid-{i}")});
        if let Some((kind, name)) = owner {
            md["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": kind, "name": name,
                "uid": format!("{name}-uid"), "controller": true}]);
        }
        if deleting {
            md["deletionTimestamp"] = json!(NOW);
        }
        md["annotations"] = annotations;
        md["labels"] = labels;
        let mut container = json!({"name": "c", "image": "pause"});
        if let Some(cpu) = cpu {
            container["resources"] = json!({"requests": {"cpu": cpu}});
        }
        self.pods.push(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": md,
            "spec": {"nodeName": node, "containers": [container]},
            "status": {"phase": "Running", "startTime": NOW,
                "conditions": [{"type": "Ready", "status": "True"}]},
        }));
    }

    /// `capstan consolidate` on the cluster: its JSON.
    pub fn consolidate(&self) -> Result<Value, String> {
        let mut cmd = self.command("consolidate");
        cmd.args(["--now", self.now]).args(&self.flags);
        run_json(cmd, "consolidate")
    }

    /// `capstan plan --cluster` on the cluster (no other pending pods): its JSON.
    pub fn plan(&self) -> Result<Value, String> {
        let none = self.dir.join("no-pods.json");
        std::fs::create_dir_all(&self.dir).unwrap();
        std::fs::write(&none, r#"{"apiVersion":"v1","kind":"List","items":[]}"#).unwrap();
        let mut cmd = self.command("plan");
        cmd.arg("--pods").arg(none);
        run_json(cmd, "plan")
    }

    /// `capstan SUB --catalog .. --cluster .. --nodepool ..  --output json`, the files written.
    fn command(&self, sub: &str) -> Command {
        std::fs::create_dir_all(&self.dir).unwrap();
        let catalog = self.dir.join("catalog.json");
        let entries: Vec<Value> = match &self.catalog {
            Some(e) => e.clone(),
            None => assorted().iter().map(FakeType::entry).collect(),
        };
        std::fs::write(
            &catalog,
            json!({"meta": {"region": "test"}, "instance_types": entries}).to_string(),
        )
        .unwrap();
        let cluster = self.dir.join("cluster.json");
        let items: Vec<&Value> = self
            .nodes
            .iter()
            .chain(&self.claims)
            .chain(&self.pods)
            .collect();
        std::fs::write(
            &cluster,
            json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string(),
        )
        .unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_capstan"));
        cmd.args([sub, "--catalog"])
            .arg(&catalog)
            .arg("--cluster")
            .arg(&cluster)
            .args(["--output", "json"]);
        for (i, p) in self.pools.iter().enumerate() {
            let f = self.dir.join(format!("nodepool-{i}.json"));
            std::fs::write(&f, p.to_string()).unwrap();
            cmd.arg("--nodepool").arg(f);
        }
        cmd
    }

    /// The nodes `consolidate`'s commands delete or replace.
    pub fn disrupted(&self) -> Result<BTreeSet<String>, String> {
        let v = self.consolidate()?;
        Ok(v["commands"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|c| c["candidates"].as_array().cloned().unwrap_or_default())
            .map(|n| n.as_str().unwrap().to_string())
            .collect())
    }
}

fn run_json(mut cmd: Command, what: &str) -> Result<Value, String> {
    let out = cmd.output().unwrap();
    if !out.status.success() {
        return Err(format!(
            "capstan {what} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
}

/// The suite's NodePool: `consolidateAfter: 0s`, `WhenEmpty`, budget `nodes: 100%`.
pub fn empty_pool(name: &str, budget: &str, after: &str) -> Value {
    let mut p = nodepool(name, vec![]);
    p["spec"]["disruption"] = json!({
        "consolidateAfter": after,
        "consolidationPolicy": "WhenEmpty",
        "budgets": [{"nodes": budget}],
    });
    p
}

type DisruptionBody = fn(&mut Cluster) -> Result<(), String>;

fn add(out: &mut Vec<Scenario>, it: &'static str, run: DisruptionBody) {
    add_in(out, EMPTINESS, it, run);
}

fn add_in(out: &mut Vec<Scenario>, file: &'static str, it: &'static str, run: DisruptionBody) {
    out.push(Scenario {
        file,
        it,
        run: Box::new(move |dir: &PathBuf| run(&mut Cluster::new(dir))),
    });
}

fn deleted(c: &Cluster, want: &[String]) -> Result<(), String> {
    let got = c.disrupted()?;
    let want: BTreeSet<String> = want.iter().cloned().collect();
    ensure(
        got == want,
        format!("deleted {got:?}, Karpenter deletes {want:?}"),
    )
}

fn deleted_count(c: &Cluster, n: usize) -> Result<(), String> {
    let got = c.disrupted()?;
    ensure(
        got.len() == n,
        format!(
            "{} nodes deleted ({got:?}), Karpenter deletes {n}",
            got.len()
        ),
    )
}

pub fn cases() -> Vec<Scenario> {
    let mut out = Vec::new();
    // Budgets: ten empty nodes.
    for (it, budget, n) in [
        ("should allow all empty nodes to be disrupted", "100%", 10),
        ("should allow no empty nodes to be disrupted", "0%", 0),
        ("should only allow 3 empty nodes to be disrupted", "3", 3),
    ] {
        out.push(Scenario {
            file: EMPTINESS,
            it,
            run: Box::new(move |dir: &PathBuf| {
                let c = &mut Cluster::new(dir);
                c.pools = vec![empty_pool("default", budget, "0s")];
                c.nodes(10, &cheapest("default", false));
                deleted_count(c, n)
            }),
        });
    }
    for (it, budget, per_pool) in [
        (
            "should allow 2 nodes from each nodePool to be deleted",
            "50%",
            2,
        ),
        (
            "should allow all nodes from each nodePool to be deleted",
            "100%",
            3,
        ),
    ] {
        out.push(Scenario {
            file: EMPTINESS,
            it,
            run: Box::new(move |dir: &PathBuf| {
                let c = &mut Cluster::new(dir);
                c.pools.push(empty_pool("default", "100%", "0s"));
                for p in 0..10 {
                    let name = format!("nodepool-{p}");
                    c.pools.push(empty_pool(&name, budget, "30s"));
                    c.nodes(3, &cheapest(&name, false));
                }
                let got = c.disrupted()?;
                let mut per: BTreeMap<usize, usize> = BTreeMap::new();
                for n in &got {
                    let i: usize = n.trim_start_matches("node-").parse().unwrap();
                    *per.entry(i / 3).or_default() += 1;
                }
                ensure(
                    per.len() == 10 && per.values().all(|&k| k == per_pool),
                    format!("deleted per NodePool {per:?}, Karpenter {per_pool} from each"),
                )
            }),
        });
    }
    add(&mut out, "can delete empty nodes", |c| {
        c.pools = vec![empty_pool("default", "100%", "0s")];
        let n = c.node(&cheapest("default", true));
        deleted(c, &[n])
    });
    add(&mut out, "can delete empty and drifted nodes", |c| {
        c.pools = vec![empty_pool("default", "100%", "0s")];
        let mut s = cheapest("default", true);
        s.drifted = Some((true, AN_HOUR_AGO));
        let n = c.node(&s);
        deleted(c, &[n])
    });
    add(
        &mut out,
        "should ignore nodes without the consolidatable status condition",
        |c| {
            c.pools = vec![empty_pool("default", "100%", "0s")];
            let mut s = cheapest("default", true);
            s.consolidatable = None;
            c.node(&s);
            deleted(c, &[])
        },
    );
    add(
        &mut out,
        "should ignore nodes with the karpenter.sh/do-not-disrupt annotation",
        |c| {
            c.pools = vec![empty_pool("default", "100%", "0s")];
            let mut s = cheapest("default", true);
            s.node_annotations = json!({"karpenter.sh/do-not-disrupt": "true"});
            c.node(&s);
            deleted(c, &[])
        },
    );
    add(
        &mut out,
        "should delete nodes with the karpenter.sh/do-not-disrupt annotation set to false",
        |c| {
            c.pools = vec![empty_pool("default", "100%", "0s")];
            let mut s = cheapest("default", true);
            s.node_annotations = json!({"karpenter.sh/do-not-disrupt": "false"});
            let n = c.node(&s);
            deleted(c, &[n])
        },
    );
    add(&mut out, "should ignore nodes that have pods", |c| {
        c.pools = vec![empty_pool("default", "100%", "0s")];
        let n = c.node(&cheapest("default", true));
        c.bind(&n, None, false);
        deleted(c, &[])
    });
    add(
        &mut out,
        "should ignore nodes with the consolidatable status condition set to false",
        |c| {
            c.pools = vec![empty_pool("default", "100%", "0s")];
            let mut s = cheapest("default", true);
            s.consolidatable = Some(false);
            c.node(&s);
            deleted(c, &[])
        },
    );
    add(&mut out, "can delete multiple empty nodes", |c| {
        c.pools = vec![empty_pool("default", "100%", "0s")];
        let nodes = c.nodes(2, &cheapest("default", true));
        deleted(c, &nodes)?;
        let k = c.consolidate()?["commands"].as_array().map_or(0, Vec::len);
        ensure(k == 1, format!("{k} commands, Karpenter makes one"))
    });
    add(&mut out, "considers pending pods when consolidating", |c| {
        c.pools = vec![empty_pool("default", "100%", "0s")];
        let mut s = cheapest("default", false);
        s.itype = "64-cpu-1-mem-amd64-linux-test-zone-1-on-demand".into();
        s.cpu = "64";
        let n = c.node(&s);
        c.bind(&n, None, false);
        deleted(c, &[])
    });
    add(
        &mut out,
        "will consider a node with a DaemonSet pod as empty",
        |c| {
            c.pools = vec![empty_pool("default", "100%", "0s")];
            let n = c.node(&cheapest("default", false));
            c.bind(&n, Some(("DaemonSet", "ds")), false);
            deleted(c, std::slice::from_ref(&n))
        },
    );
    add(
        &mut out,
        "will consider a node with terminating Deployment pods as empty",
        |c| {
            c.pools = vec![empty_pool("default", "100%", "0s")];
            let n = c.node(&cheapest("default", false));
            for _ in 0..3 {
                c.bind(&n, Some(("ReplicaSet", "rs")), true);
            }
            deleted(c, std::slice::from_ref(&n))
        },
    );
    add(
        &mut out,
        "will not consider a node with a terminating StatefulSet pod as empty",
        |c| {
            c.pools = vec![empty_pool("default", "100%", "0s")];
            let n = c.node(&cheapest("default", false));
            c.bind(&n, Some(("StatefulSet", "ss")), true);
            deleted(c, &[])
        },
    );
    drift(&mut out);
    consolidation_budgets(&mut out);
    consolidation_delete(&mut out);
    consolidation_delete_more(&mut out);
    consolidation_replace(&mut out);
    consolidation_spot_to_spot(&mut out);
    consolidation_preferences(&mut out);
    nodeclaim_drift(&mut out);
    expiration(&mut out);
    consolidation_multi(&mut out);
    consolidation_lifetime_and_topology(&mut out);
    candidate_filtering(&mut out);
    simulate_scheduling(&mut out);
    budget_mapping(&mut out);
    eviction_cost(&mut out);
    add(
        &mut out,
        "should not consolidate static NodePool nodes",
        |c| {
            let mut p = nodepool("static", vec![]);
            p["spec"]["replicas"] = json!(2);
            c.pools = vec![p];
            c.nodes(2, &cheapest("static", false));
            deleted(c, &[])
        },
    );
    out
}

/// The drift suite's NodePool: `consolidateAfter: 1h` (or `after`), budget `nodes: 100%` (or
/// `budget`), Karpenter's default consolidation policy.
fn drift_pool(name: &str, budget: &str, after: &str) -> Value {
    let mut p = nodepool(name, vec![]);
    p["spec"]["disruption"] = json!({"consolidateAfter": after, "budgets": [{"nodes": budget}]});
    p
}

/// `mostExpensiveInstance`, drifted just now, with no `Consolidatable` condition (the Drift
/// context's BeforeEach).
fn drifted(pool: &str) -> NodeSpec {
    let mut s = cheapest(pool, false);
    s.itype = "64-cpu-128-mem-amd64-linux-test-zone-1-on-demand".into();
    s.consolidatable = None;
    s.drifted = Some((true, NOW));
    s
}

/// A node like `drifted`'s that has not drifted.
fn not_drifted(pool: &str) -> NodeSpec {
    let mut s = drifted(pool);
    s.drifted = None;
    s
}

fn rs_pod(c: &mut Cluster, node: &str, cpu: Option<&str>, annotations: Value) {
    c.bind_pod(
        node,
        Some(("ReplicaSet", "rs")),
        false,
        cpu,
        annotations,
        json!({"app": "test"}),
    );
}

/// The first command's replacements.
fn replacements(c: &Cluster) -> Result<usize, String> {
    let v = c.consolidate()?;
    Ok(v["commands"][0]["replacements"]
        .as_array()
        .map_or(0, Vec::len))
}

/// `drift_test.go`.
fn drift(out: &mut Vec<Scenario>) {
    let mut add = |it, run: DisruptionBody| add_in(out, DRIFT, it, run);
    add(
        "should only consider 3 nodes allowed to be disrupted because of budgets",
        |c| {
            c.pools = vec![drift_pool("default", "30%", "1h")];
            let mut s = drifted("default");
            s.drifted = Some((true, AN_HOUR_AGO));
            c.nodes(10, &s);
            deleted_count(c, 3)
        },
    );
    add(
        "should disrupt 3 nodes, taking into account commands in progress",
        |c| {
            // Ten nodes, the first five drifted and holding a 1-CPU pod each; budget 30%.
            // Five passes, each pass's commands left in flight (their nodes tainted): three
            // nodes are disrupted in all.
            c.pools = vec![drift_pool("default", "30%", "1h")];
            for i in 0..10 {
                let n = c.node(&if i < 5 {
                    drifted("default")
                } else {
                    not_drifted("default")
                });
                if i < 5 {
                    rs_pod(c, &n, Some("1"), json!({}));
                }
            }
            for _ in 0..5 {
                for (names, _) in commands(c)? {
                    for n in names {
                        in_flight(c, node_index(&n));
                    }
                }
            }
            let tainted: Vec<usize> = (0..10)
                .filter(|&i| c.nodes[i]["spec"]["taints"].is_array())
                .collect();
            ensure(
                tainted.len() == 3 && tainted.iter().all(|&i| i < 5),
                format!(
                    "nodes {tainted:?} disrupted after five passes; Karpenter three drifted ones"
                ),
            )
        },
    );
    add("should respect budgets for multiple nodepools", |c| {
        c.pools.push(drift_pool("default", "100%", "1h"));
        for p in 0..10 {
            let name = format!("nodepool-{p}");
            let mut np = drift_pool(&name, "1", "Never");
            np["spec"]["template"]["spec"]["expireAfter"] = json!("Never");
            c.pools.push(np);
            let nodes = c.nodes(3, &drifted(&name));
            for n in &nodes[..2] {
                rs_pod(c, n, Some("1"), json!({}));
            }
        }
        let got = c.disrupted()?;
        let mut per: BTreeMap<usize, usize> = BTreeMap::new();
        for n in &got {
            let i: usize = n.trim_start_matches("node-").parse().unwrap();
            *per.entry(i / 3).or_default() += 1;
        }
        ensure(
            per.len() == 10 && per.values().all(|&k| k == 1),
            format!("disrupted per NodePool {per:?}, Karpenter one from each"),
        )
    });
    add(
        "should continue to the next drifted node if the first cannot reschedule all pods",
        |c| {
            c.pools = vec![drift_pool("default", "100%", "1h")];
            let big = c.node(&drifted("default"));
            c.bind_pod(&big, None, false, Some("150"), json!({}), json!({}));
            let mut s = drifted("default");
            s.cpu = "1";
            let small = c.node(&s);
            c.bind_pod(&small, None, false, Some("1"), json!({}), json!({}));
            deleted(c, &[small])
        },
    );
    add(
        "should ignore nodes without the drifted status condition",
        |c| {
            c.pools = vec![drift_pool("default", "100%", "1h")];
            c.node(&not_drifted("default"));
            deleted(c, &[])
        },
    );
    add(
        "should ignore nodes with the drifted status condition set to false",
        |c| {
            c.pools = vec![drift_pool("default", "100%", "1h")];
            let mut s = drifted("default");
            s.drifted = Some((false, NOW));
            c.node(&s);
            deleted(c, &[])
        },
    );
    add(
        "should ignore nodes with the karpenter.sh/do-not-disrupt annotation set to true",
        |c| {
            c.pools = vec![drift_pool("default", "100%", "1h")];
            let mut s = drifted("default");
            s.node_annotations = json!({"karpenter.sh/do-not-disrupt": "true"});
            c.node(&s);
            deleted(c, &[])
        },
    );
    add(
        "should delete drifted nodes with the karpenter.sh/do-not-disrupt annotation set to false",
        |c| {
            c.pools = vec![drift_pool("default", "100%", "1h")];
            let mut s = drifted("default");
            s.node_annotations = json!({"karpenter.sh/do-not-disrupt": "false"});
            let n = c.node(&s);
            c.node(&not_drifted("default"));
            rs_pod(c, &n, None, json!({}));
            deleted(c, std::slice::from_ref(&n))
        },
    );
    for it in [
        "should not create replacements for drifted nodes that have pods with the karpenter.sh/do-not-disrupt annotation set to true",
        "should not create replacements for drifted nodes that have pods with the karpenter.sh/do-not-disrupt annotation set to true when the NodePool's TerminationGracePeriod is not nil",
    ] {
        add(it, |c| {
            c.pools = vec![drift_pool("default", "100%", "1h")];
            let n = c.node(&drifted("default"));
            c.bind_pod(
                &n,
                None,
                false,
                None,
                json!({"karpenter.sh/do-not-disrupt": "true"}),
                json!({}),
            );
            deleted(c, &[])
        });
    }
    add(
        "should not create replacements for drifted nodes that have pods with the blocking PDBs when the NodePool's TerminationGracePeriod is not nil",
        |c| {
            c.pools = vec![drift_pool("default", "100%", "1h")];
            let n = c.node(&drifted("default"));
            c.bind_pod(&n, None, false, None, json!({}), json!({"test": "value"}));
            c.pods.push(json!({
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": "pdb", "namespace": "default"},
                "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"test": "value"}}},
                "status": {"currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1,
                    "disruptionsAllowed": 0},
            }));
            deleted(c, &[])
        },
    );
    add(
        "should not drift nodes with pods that have a duration-based do-not-disrupt annotation that is still active",
        |c| {
            c.pools = vec![drift_pool("default", "100%", "1h")];
            let n = c.node(&drifted("default"));
            c.bind_pod(
                &n,
                None,
                false,
                None,
                json!({"karpenter.sh/do-not-disrupt": "2m"}),
                json!({}),
            );
            deleted(c, &[])?;
            c.now = "2026-01-01T12:03:00Z";
            deleted(c, &[n])
        },
    );
    add(
        "should drift nodes with pods that have an invalid do-not-disrupt annotation format",
        |c| {
            c.pools = vec![drift_pool("default", "100%", "1h")];
            let n = c.node(&drifted("default"));
            c.node(&not_drifted("default"));
            rs_pod(
                c,
                &n,
                None,
                json!({"karpenter.sh/do-not-disrupt": "invalid-format"}),
            );
            deleted(c, &[n])
        },
    );
    add(
        "should not drift nodes until the longest duration-based do-not-disrupt grace period expires across multiple pods",
        |c| {
            c.pools = vec![drift_pool("default", "100%", "1h")];
            let n = c.node(&drifted("default"));
            for d in ["1m", "3m"] {
                c.bind_pod(
                    &n,
                    None,
                    false,
                    None,
                    json!({"karpenter.sh/do-not-disrupt": d}),
                    json!({}),
                );
            }
            deleted(c, &[])?;
            c.now = "2026-01-01T12:02:00Z";
            deleted(c, &[])?;
            c.now = "2026-01-01T12:04:00Z";
            deleted(c, &[n])
        },
    );
    add("should replace drifted nodes", |c| {
        c.pools = vec![drift_pool("default", "100%", "1h")];
        let n = c.node(&drifted("default"));
        rs_pod(c, &n, None, json!({}));
        deleted(c, &[n])?;
        let r = replacements(c)?;
        ensure(r == 1, format!("{r} replacements, Karpenter makes one"))
    });
    add("should delete drifted nodes", |c| {
        c.pools = vec![drift_pool("default", "100%", "1h")];
        let n = c.node(&drifted("default"));
        c.node(&not_drifted("default"));
        rs_pod(c, &n, None, json!({}));
        deleted(c, &[n])?;
        let r = replacements(c)?;
        ensure(r == 0, format!("{r} replacements, Karpenter makes none"))
    });
    add(
        "should delete drifted nodes when they are empty and consolidation is disabled",
        |c| {
            c.pools = vec![drift_pool("default", "100%", "Never")];
            let n = c.node(&drifted("default"));
            deleted(c, &[n])
        },
    );
    add("should drift empty nodes before non-empty nodes", |c| {
        c.pools = vec![drift_pool("default", "100%", "Never")];
        let busy = c.node(&drifted("default"));
        let empty = c.node(&drifted("default"));
        rs_pod(c, &busy, None, json!({}));
        deleted(c, &[empty])
    });
    add(
        "should delete drifted nodes when they are empty and consolidatable",
        |c| {
            c.pools = vec![drift_pool("default", "100%", "1h")];
            let mut s = drifted("default");
            s.consolidatable = Some(true);
            let n = c.node(&s);
            deleted(c, &[n])
        },
    );
    add(
        "should drift one non-empty node at a time, starting with the earliest drift",
        |c| {
            c.pools = vec![drift_pool("default", "100%", "1h")];
            let late = c.node(&drifted("default"));
            let mut s = drifted("default");
            s.drifted = Some((true, AN_HOUR_AGO));
            s.cpu = "32";
            let early = c.node(&s);
            rs_pod(c, &late, Some("30"), json!({}));
            rs_pod(c, &early, Some("30"), json!({}));
            deleted(c, &[early])
        },
    );
    add("can replace drifted nodes with multiple nodes", |c| {
        // `current-on-demand` (4 CPUs, its one offering unavailable) and a 3-CPU
        // `replacement-on-demand` at $0.30, both in test-zone-1a; three 2-CPU pods.
        let entry = |name: &str, cpu: f64, price: f64, available: bool| {
            let mut e = FakeType::new(name, "amd64", cpu, 4.0)
                .offering("on-demand", "test-zone-1a", price)
                .entry();
            e["offerings"][0]["available"] = json!(available);
            e
        };
        c.catalog = Some(vec![
            entry("current-on-demand", 4.0, 0.5, false),
            entry("replacement-on-demand", 3.0, 0.3, true),
        ]);
        c.pools = vec![drift_pool("default", "100%", "1h")];
        let mut s = drifted("default");
        s.itype = "current-on-demand".into();
        s.zone = "test-zone-1a";
        s.cpu = "8";
        let n = c.node(&s);
        for _ in 0..3 {
            rs_pod(c, &n, Some("2"), json!({}));
        }
        deleted(c, &[n])?;
        let r = replacements(c)?;
        ensure(r == 3, format!("{r} replacements, Karpenter makes three"))
    });
    add("should not consider static nodepool for drift", |c| {
        let mut p = nodepool("static", vec![]);
        p["spec"]["replicas"] = json!(2);
        c.pools = vec![p];
        c.nodes(2, &drifted("static"));
        deleted(c, &[])
    });
}

/// The consolidation suite's NodePool: `WhenEmptyOrUnderutilized`, `consolidateAfter: 0s`.
fn consolidation_pool(name: &str, budget: &str) -> Value {
    let mut p = nodepool(name, vec![]);
    p["spec"]["disruption"] = json!({"consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": "0s", "budgets": [{"nodes": budget}]});
    p
}

/// The suite's Budgets nodes: `mostExpensiveInstance`, 32 CPUs, Consolidatable.
fn expensive(pool: &str) -> NodeSpec {
    let mut s = drifted(pool);
    s.drifted = None;
    s.consolidatable = Some(true);
    s
}

/// `consolidation_test.go`, `Budgets` (lines 336–1004).
fn consolidation_budgets(out: &mut Vec<Scenario>) {
    for (it, budget, pod_cpu, n) in [
        (
            "should only allow 3 empty nodes to be disrupted",
            "30%",
            None,
            3,
        ),
        (
            "should allow all empty nodes to be disrupted",
            "100%",
            None,
            10,
        ),
        ("should allow no empty nodes to be disrupted", "0%", None, 0),
        (
            "should only allow 3 nodes to be deleted in multi node consolidation delete",
            "30%",
            Some("100m"),
            3,
        ),
        (
            "should only allow 3 nodes to be deleted in single node consolidation delete",
            "30%",
            Some("15"),
            3,
        ),
    ] {
        out.push(Scenario {
            file: CONSOLIDATION,
            it,
            run: Box::new(move |dir: &PathBuf| {
                let c = &mut Cluster::new(dir);
                c.pools = vec![consolidation_pool("default", budget)];
                let nodes = c.nodes(10, &expensive("default"));
                if let Some(cpu) = pod_cpu {
                    for n in &nodes {
                        rs_pod(c, n, Some(cpu), json!({}));
                    }
                }
                deleted_count(c, n)
            }),
        });
    }
    for (it, budget, per_pool) in [
        (
            "should allow 2 nodes from each nodePool to be deleted",
            "50%",
            2,
        ),
        (
            "should allow all nodes from each nodePool to be deleted",
            "100%",
            3,
        ),
        (
            "should allow no nodes from each nodePool to be deleted",
            "0%",
            0,
        ),
    ] {
        out.push(Scenario {
            file: CONSOLIDATION,
            it,
            run: Box::new(move |dir: &PathBuf| {
                let c = &mut Cluster::new(dir);
                c.pools.push(consolidation_pool("default", "100%"));
                for p in 0..10 {
                    let name = format!("nodepool-{p}");
                    c.pools.push(consolidation_pool(&name, budget));
                    c.nodes(3, &expensive(&name));
                }
                let got = c.disrupted()?;
                let mut per: BTreeMap<usize, usize> = BTreeMap::new();
                for n in &got {
                    let i: usize = n.trim_start_matches("node-").parse().unwrap();
                    *per.entry(i / 3).or_default() += 1;
                }
                ensure(
                    (0..10).all(|p| per.get(&p).copied().unwrap_or(0) == per_pool),
                    format!("deleted per NodePool {per:?}, Karpenter {per_pool} from each"),
                )
            }),
        });
    }
}

/// The Delete context's two nodes: `leastExpensiveInstance`, 32 CPUs, 100 pods, Consolidatable;
/// three ReplicaSet pods, two on the first node and one on the second, the third with these
/// annotations and labels.
fn two_and_one(c: &mut Cluster, third: Value, third_labels: Value) -> (String, String) {
    c.pools.push(consolidation_pool("default", "100%"));
    let a = c.node(&cheapest("default", false));
    let b = c.node(&cheapest("default", false));
    rs_pod(c, &a, None, json!({}));
    rs_pod(c, &a, None, json!({}));
    c.bind_pod(
        &b,
        Some(("ReplicaSet", "rs")),
        false,
        None,
        third,
        third_labels,
    );
    (a, b)
}

/// `consolidation_test.go`, `Delete` (lines 2396–3543).
fn consolidation_delete(out: &mut Vec<Scenario>) {
    let mut add = |it, run: DisruptionBody| add_in(out, CONSOLIDATION, it, run);
    add("can delete nodes", |c| {
        let (_, b) = two_and_one(c, json!({}), json!({"app": "test"}));
        deleted(c, &[b])
    });
    add(
        "can delete nodes if another nodePool has no node template",
        |c| {
            let (_, b) = two_and_one(c, json!({}), json!({"app": "test"}));
            let mut other = nodepool("other", vec![]);
            if let Some(spec) = other["spec"]["template"]["spec"].as_object_mut() {
                spec.remove("nodeClassRef");
            }
            c.pools.push(other);
            deleted(c, &[b])
        },
    );
    add(
        "can delete nodes, when non-Karpenter capacity can fit pods",
        |c| {
            c.pools.push(consolidation_pool("default", "100%"));
            let a = c.node(&cheapest("default", false));
            c.unmanaged_node();
            for _ in 0..3 {
                rs_pod(c, &a, None, json!({}));
            }
            deleted(c, &[a])
        },
    );
    add("can delete nodes, considers PDB", |c| {
        let (a, _) = two_and_one(c, json!({}), json!({"app": "test"}));
        // Only the third pod carries the label the PDB selects.
        for p in c.pods.iter_mut().take(2) {
            p["metadata"]["labels"] = json!({});
        }
        c.pods.push(json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "pdb", "namespace": "default"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "test"}}},
            "status": {"currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1,
                "disruptionsAllowed": 0, "observedGeneration": 1},
        }));
        deleted(c, &[a])
    });
    add(
        "can delete nodes, considers karpenter.sh/do-not-disrupt set to true on nodes",
        |c| {
            c.pools.push(consolidation_pool("default", "100%"));
            let a = c.node(&cheapest("default", false));
            let mut s = cheapest("default", false);
            s.node_annotations = json!({"karpenter.sh/do-not-disrupt": "true"});
            let b = c.node(&s);
            rs_pod(c, &a, None, json!({}));
            rs_pod(c, &a, None, json!({}));
            rs_pod(c, &b, None, json!({}));
            deleted(c, &[a])
        },
    );
    add(
        "can delete nodes, considers karpenter.sh/do-not-disrupt set to true on pods",
        |c| {
            let (a, _) = two_and_one(
                c,
                json!({"karpenter.sh/do-not-disrupt": "true"}),
                json!({"app": "test"}),
            );
            deleted(c, &[a])
        },
    );
}

/// The pods of `two_and_one`, all with these annotations, and a 300 s terminationGracePeriod
/// in the NodePool (Karpenter's test sets it on both NodeClaims, which take it from there).
fn two_and_one_with_grace(c: &mut Cluster, annotations: Value) -> (String, String) {
    let (a, b) = two_and_one(c, annotations.clone(), json!({"app": "test"}));
    c.pools[0]["spec"]["template"]["spec"]["terminationGracePeriod"] = json!("300s");
    for p in c.pods.iter_mut() {
        p["metadata"]["annotations"] = annotations.clone();
    }
    (a, b)
}

/// `consolidation_test.go`, `Delete` (lines 2729–3543).
fn consolidation_delete_more(out: &mut Vec<Scenario>) {
    let mut add = |it, run: DisruptionBody| add_in(out, CONSOLIDATION, it, run);
    add(
        "does not consolidate nodes with karpenter.sh/do-not-disrupt set to true on pods when the NodePool's TerminationGracePeriod is not nil",
        |c| {
            two_and_one_with_grace(c, json!({"karpenter.sh/do-not-disrupt": "true"}));
            deleted(c, &[])
        },
    );
    add(
        "does not consolidate nodes with pods with blocking PDBs when the NodePool's TerminationGracePeriod is not nil",
        |c| {
            two_and_one_with_grace(c, json!({}));
            c.pods.push(json!({
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": "pdb", "namespace": "default"},
                "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "test"}}},
                "status": {"currentHealthy": 3, "desiredHealthy": 3, "expectedPods": 3,
                    "disruptionsAllowed": 0, "observedGeneration": 1},
            }));
            deleted(c, &[])
        },
    );
    add(
        "does not consolidate nodes with pods that have a duration-based do-not-disrupt annotation that is still active",
        |c| {
            // The pods started now; the third one's two minutes have not passed.
            let (a, _) = two_and_one(
                c,
                json!({"karpenter.sh/do-not-disrupt": "2m"}),
                json!({"app": "test"}),
            );
            deleted(c, &[a])
        },
    );
    add(
        "can consolidate nodes after duration-based do-not-disrupt annotation expires",
        |c| {
            two_and_one(
                c,
                json!({"karpenter.sh/do-not-disrupt": "2m"}),
                json!({"app": "test"}),
            );
            for p in c.pods.iter_mut().take(2) {
                p["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "2m"});
            }
            deleted(c, &[])?;
            // Three minutes on.
            c.now = "2026-01-01T12:03:00Z";
            let k = c.consolidate()?["commands"].as_array().map_or(0, Vec::len);
            ensure(
                k == 1,
                format!("{k} commands after 3 minutes, Karpenter makes one"),
            )
        },
    );
    add(
        "can delete nodes, considers invalid do-not-disrupt annotation format as not blocking",
        |c| {
            let (_, b) = two_and_one(
                c,
                json!({"karpenter.sh/do-not-disrupt": "invalid-format"}),
                json!({"app": "test"}),
            );
            deleted(c, &[b])
        },
    );
    add("can delete nodes, evicts pods without an ownerRef", |c| {
        c.pools.push(consolidation_pool("default", "100%"));
        let a = c.node(&cheapest("default", false));
        let b = c.node(&cheapest("default", false));
        for _ in 0..2 {
            c.bind(&a, Some(("ReplicaSet", "rs")), false);
        }
        c.bind(&b, None, false);
        deleted(c, &[b])
    });
    add(
        "won't delete node if it would require pods to schedule on an uninitialized node",
        |c| {
            c.pools.push(consolidation_pool("default", "100%"));
            let mut s = cheapest("default", false);
            s.initialized = None;
            let a = c.node(&s);
            let b = c.node(&cheapest("default", false));
            rs_pod(c, &a, None, json!({}));
            rs_pod(c, &a, None, json!({}));
            rs_pod(c, &b, None, json!({}));
            deleted(c, &[])
        },
    );
    add(
        "should not consolidate pods onto a destination node that is under its consolidateAfter window",
        |c| {
            // Both nodes initialized just now (their NodeClaims marked Consolidatable by the
            // test), consolidateAfter 1m: the only move, b's pod onto a, waits for a's window.
            let mut p = consolidation_pool("default", "100%");
            p["spec"]["disruption"]["consolidateAfter"] = json!("1m");
            c.pools.push(p);
            let mut s = cheapest("default", false);
            s.initialized = Some(NOW);
            let a = c.node(&s);
            let b = c.node(&s);
            rs_pod(c, &a, None, json!({}));
            rs_pod(c, &a, None, json!({}));
            rs_pod(c, &b, None, json!({}));
            deleted(c, &[])?;
            c.now = "2026-01-01T12:02:00Z";
            deleted(c, &[b])
        },
    );
    add(
        "should consolidate pods onto a destination node with consolidateAfter set to Never",
        |c| {
            c.pools.push(consolidation_pool("default", "100%"));
            let mut dest = consolidation_pool("destination", "100%");
            dest["spec"]["disruption"]["consolidateAfter"] = json!("Never");
            c.pools.push(dest);
            let mut s = cheapest("default", false);
            s.initialized = Some(NOW);
            let a = c.node(&s);
            let mut d = cheapest("destination", false);
            d.initialized = Some(NOW);
            c.node(&d);
            rs_pod(c, &a, None, json!({}));
            deleted(c, &[a])
        },
    );
    add(
        "should replace a node with a cheaper one even when consolidateAfter has not expired",
        |c| {
            let mut p = consolidation_pool("default", "100%");
            p["spec"]["disruption"]["consolidateAfter"] = json!("1m");
            c.pools.push(p);
            let mut s = expensive("default");
            s.initialized = Some(NOW);
            let n = c.node(&s);
            rs_pod(c, &n, None, json!({}));
            c.now = "2026-01-01T12:02:00Z";
            deleted(c, std::slice::from_ref(&n))?;
            let r = replacements(c)?;
            ensure(r == 1, format!("{r} replacements, Karpenter launches one"))
        },
    );
    add(
        "should consider initialized nodes before uninitialized nodes",
        |c| {
            let mut default =
                default_offerings(FakeType::new("default-instance-type", "amd64", 3.0, 3.0));
            default.pods = 110;
            let mut small =
                default_offerings(FakeType::new("small-instance-type", "amd64", 1.0, 1.0));
            small.pods = 10;
            c.catalog = Some(vec![default.entry(), small.entry()]);
            c.pools.push(consolidation_pool("default", "100%"));
            // A hundred nodes of the default type, each with a 2-CPU pod; only one (Karpenter
            // picks it at random) initialized.
            for i in 0..100 {
                let mut s = cheapest("default", true);
                s.itype = "default-instance-type".into();
                s.cpu = "3";
                s.initialized = (i == 37).then_some(AN_HOUR_AGO);
                let n = c.node(&s);
                c.bind_pod(
                    &n,
                    Some(("ReplicaSet", "rs")),
                    false,
                    Some("2"),
                    json!({}),
                    json!({"app": "test"}),
                );
            }
            let mut s = cheapest("default", true);
            s.itype = "small-instance-type".into();
            s.cpu = "1";
            let small = c.node(&s);
            c.bind_pod(
                &small,
                Some(("ReplicaSet", "rs2")),
                false,
                Some("1"),
                json!({}),
                json!({"app": "test"}),
            );
            deleted(c, &[small])
        },
    );
    add("can delete nodes with a permanently pending pod", |c| {
        let (_, b) = two_and_one(c, json!({}), json!({"app": "test"}));
        c.pods.push(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "pending", "namespace": "default", "uid": "pending-uid"},
            "spec": {"nodeSelector": {"non-existent": "node-label"},
                "containers": [{"name": "c", "image": "pause"}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled",
                "status": "False", "reason": "Unschedulable"}]},
        }));
        deleted(c, &[b])
    });
    add(
        "won't delete nodes if it would make a non-pending pod go pending",
        |c| {
            two_and_one(c, json!({}), json!({"app": "test"}));
            for (i, v) in ["1", "2"].into_iter().enumerate() {
                c.nodes[i]["metadata"]["labels"]["foo"] = json!(v);
                c.claims[i]["metadata"]["labels"]["foo"] = json!(v);
            }
            for (i, v) in ["1", "1", "2"].into_iter().enumerate() {
                c.pods[i]["spec"]["nodeSelector"] = json!({"foo": v});
            }
            deleted(c, &[])
        },
    );
    add("can delete nodes while an invalid node pool exists", |c| {
        let (_, b) = two_and_one(c, json!({}), json!({"app": "test"}));
        let mut bad = nodepool("bad-nodepool", vec![]);
        bad["spec"]["template"]["spec"]["nodeClassRef"] =
            json!({"group": "karpenter.test.sh", "kind": "TestNodeClass", "name": "non-existent"});
        c.pools.push(bad);
        deleted(c, &[b])
    });
}

/// The consolidation suite's `node` (on-demand `mostExpensiveInstance`) or `spotNode` (spot
/// `mostExpensiveSpotInstance`), 32 CPUs, Consolidatable; with Karpenter's suite-wide
/// `SpotToSpotConsolidation=true`.
fn replace_node(c: &mut Cluster, spot: bool) -> NodeSpec {
    c.flags = vec!["--feature-gates", "SpotToSpotConsolidation=true"];
    let mut s = expensive("default");
    if spot {
        s.itype = "64-cpu-128-mem-amd64-linux-test-zone-1-spot".into();
        s.capacity_type = "spot";
    }
    s
}

/// One command that replaces exactly `node` with one new node not of `node`'s type.
fn replaced_by_another_type(c: &Cluster, node: &str, itype: &str) -> Result<(), String> {
    deleted(c, &[node.to_string()])?;
    let v = c.consolidate()?;
    let r = v["commands"][0]["replacements"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    ensure(
        r.len() == 1 && r[0]["instance_type"] != json!(itype),
        format!("replacements {r:?}, Karpenter launches one that is not {itype}"),
    )
}

/// `consolidation_test.go`, `Replace` (lines 1005–2395), each `DescribeTable` run for an
/// on-demand and a spot candidate.
fn consolidation_replace(out: &mut Vec<Scenario>) {
    let tables: [(&'static str, TableBody); 7] = [
        ("can replace node", |c, spot| {
            c.pools.push(consolidation_pool("default", "100%"));
            let s = replace_node(c, spot);
            let n = c.node(&s);
            rs_pod(c, &n, None, json!({}));
            replaced_by_another_type(c, &n, &s.itype)
        }),
        (
            "can replace nodes if another nodePool returns no instance types",
            |c, spot| {
                c.pools.push(consolidation_pool("default", "100%"));
                // Karpenter's cloud provider gives the second NodePool no instance types; here
                // its requirements allow none.
                c.pools.push(nodepool(
                    "nodepool-2",
                    vec![req(
                        "node.kubernetes.io/instance-type",
                        "In",
                        &["no-such-type"],
                    )],
                ));
                let s = replace_node(c, spot);
                let n = c.node(&s);
                rs_pod(c, &n, None, json!({}));
                replaced_by_another_type(c, &n, &s.itype)
            },
        ),
        ("can replace nodes, considers PDB", |c, spot| {
            c.pools.push(consolidation_pool("default", "100%"));
            let s = replace_node(c, spot);
            let n = c.node(&s);
            for _ in 0..3 {
                rs_pod(c, &n, None, json!({}));
            }
            c.pods.push(pdb("default", json!({}), 1));
            deleted(c, &[])
        }),
        ("can replace nodes, considers PDB policy", |c, spot| {
            // The pods are not Ready and the PDB lets unhealthy pods go (AlwaysAllow).
            c.pools.push(consolidation_pool("default", "100%"));
            let s = replace_node(c, spot);
            let n = c.node(&s);
            for _ in 0..3 {
                rs_pod(c, &n, None, json!({}));
            }
            for p in c.pods.iter_mut() {
                p["status"]["conditions"] = json!([{"type": "Ready", "status": "False"}]);
            }
            c.pods.push(pdb(
                "default",
                json!({"unhealthyPodEvictionPolicy": "AlwaysAllow"}),
                1,
            ));
            deleted(c, &[n])
        }),
        ("can replace nodes, PDB namespace must match", |c, spot| {
            c.pools.push(consolidation_pool("default", "100%"));
            let s = replace_node(c, spot);
            let n = c.node(&s);
            rs_pod(c, &n, None, json!({}));
            c.pods.push(pdb("other-namespace", json!({}), 1));
            deleted(c, &[n])
        }),
        (
            "can replace nodes, considers karpenter.sh/do-not-disrupt set to true on nodes",
            |c, spot| {
                c.pools.push(consolidation_pool("default", "100%"));
                let s = replace_node(c, spot);
                let n = c.node(&s);
                let mut a = s.clone();
                a.cpu = "5";
                a.node_annotations = json!({"karpenter.sh/do-not-disrupt": "true"});
                let annotated = c.node(&a);
                rs_pod(c, &n, Some("2"), json!({}));
                rs_pod(c, &n, Some("2"), json!({}));
                rs_pod(c, &annotated, Some("2"), json!({}));
                deleted(c, &[n])
            },
        ),
        (
            "can replace nodes, considers karpenter.sh/do-not-disrupt set to true on pods",
            |c, spot| {
                c.pools.push(consolidation_pool("default", "100%"));
                let s = replace_node(c, spot);
                let n = c.node(&s);
                let mut s2 = s.clone();
                s2.cpu = "5";
                let n2 = c.node(&s2);
                rs_pod(c, &n, Some("2"), json!({}));
                rs_pod(c, &n, Some("2"), json!({}));
                rs_pod(
                    c,
                    &n2,
                    Some("2"),
                    json!({"karpenter.sh/do-not-disrupt": "true"}),
                );
                deleted(c, &[n])
            },
        ),
    ];
    entries(out, tables);
    let mut add = |it, run: DisruptionBody| add_in(out, CONSOLIDATION, it, run);
    add(
        "cannot replace spot with spot if the spotToSpotConsolidation is disabled",
        |c| {
            c.pools.push(consolidation_pool("default", "100%"));
            let s = replace_node(c, true);
            c.flags.clear();
            let n = c.node(&s);
            rs_pod(c, &n, None, json!({}));
            deleted(c, &[])
        },
    );
    add(
        "should handle failing filterOutSameInstanceType correctly (without a panic) when minValues isn't satisfied",
        |c| {
            let five = |name: &str, price: f64| {
                FakeType::new(name, "amd64", 5.0, 4.0)
                    .offering("on-demand", "test-zone-1a", price)
                    .entry()
            };
            c.catalog = Some(vec![
                five("current-on-demand", 0.5),
                five("other-on-demand", 0.4),
            ]);
            let mut p = consolidation_pool("default", "100%");
            p["spec"]["template"]["spec"]["requirements"] = json!([
                {"key": "node.kubernetes.io/instance-type", "operator": "Exists", "minValues": 2},
                req("karpenter.sh/capacity-type", "In", &["on-demand"]),
            ]);
            c.pools.push(p);
            let mut s = cheapest("default", false);
            s.itype = "current-on-demand".into();
            s.zone = "test-zone-1a";
            s.cpu = "4";
            let nodes = c.nodes(3, &s);
            for n in [&nodes[0], &nodes[1], &nodes[2], &nodes[2]] {
                c.bind_pod(n, None, false, Some("2"), json!({}), json!({}));
            }
            let v = c.consolidate()?;
            let cmds = v["commands"].as_array().cloned().unwrap_or_default();
            let gone: usize = cmds
                .iter()
                .map(|c| c["candidates"].as_array().map_or(0, Vec::len))
                .sum();
            let new: usize = cmds
                .iter()
                .map(|c| c["replacements"].as_array().map_or(0, Vec::len))
                .sum();
            let left = 3 + new - gone;
            ensure(
                cmds.len() == 1 && left == 2,
                format!(
                    "{} commands leaving {left} nodes; Karpenter: one, leaving 2",
                    cmds.len()
                ),
            )
        },
    );
    add(
        "won't replace node if any spot replacement is more expensive",
        |c| {
            c.catalog = Some(vec![
                replace_priced(
                    "current-on-demand",
                    &[("on-demand", "test-zone-1a", 0.5, false)],
                ),
                replace_priced(
                    "potential-spot-replacement",
                    &[
                        ("spot", "test-zone-1a", 1.0, true),
                        ("spot", "test-zone-1b", 0.2, true),
                        ("spot", "test-zone-1c", 0.4, true),
                    ],
                ),
            ]);
            c.pools.push(consolidation_pool("default", "100%"));
            c.flags = vec!["--feature-gates", "SpotToSpotConsolidation=true"];
            replace_current(c);
            deleted(c, &[])
        },
    );
    add(
        "won't replace on-demand node if on-demand replacement is more expensive",
        |c| {
            c.catalog = Some(vec![
                replace_priced(
                    "current-on-demand",
                    &[("on-demand", "test-zone-1a", 0.5, false)],
                ),
                replace_priced(
                    "on-demand-replacement",
                    &[
                        ("on-demand", "test-zone-1a", 0.6, true),
                        ("on-demand", "test-zone-1b", 0.6, true),
                        ("spot", "test-zone-1b", 0.2, true),
                        ("spot", "test-zone-1c", 0.3, true),
                    ],
                ),
            ]);
            let mut p = consolidation_pool("default", "100%");
            p["spec"]["template"]["spec"]["requirements"] =
                json!([req("karpenter.sh/capacity-type", "In", &["on-demand"])]);
            c.pools.push(p);
            c.flags = vec!["--feature-gates", "SpotToSpotConsolidation=true"];
            replace_current(c);
            deleted(c, &[])
        },
    );
}

/// `fake.NewInstanceType` with only these offerings (capacity type, zone, price, available):
/// 4 CPUs, 4 GiB.
fn replace_priced(name: &str, offerings: &[(&'static str, &'static str, f64, bool)]) -> Value {
    let mut t = FakeType::new(name, "amd64", 4.0, 4.0);
    for (ct, zone, price, _) in offerings {
        t = t.offering(ct, zone, *price);
    }
    let mut e = t.entry();
    for (i, (_, _, _, available)) in offerings.iter().enumerate() {
        e["offerings"][i]["available"] = json!(available);
    }
    e
}

/// The `current-on-demand` node (zone test-zone-1a, 32 CPUs) with one pod.
fn replace_current(c: &mut Cluster) {
    let mut s = cheapest("default", false);
    s.itype = "current-on-demand".into();
    s.zone = "test-zone-1a";
    let n = c.node(&s);
    rs_pod(c, &n, None, json!({}));
}

/// A PodDisruptionBudget in `namespace` selecting `app: test`, `maxUnavailable: 0`, with
/// `extra` in its spec and the status Karpenter's test gives it.
fn pdb(namespace: &str, extra: Value, healthy: i64) -> Value {
    let mut spec = json!({"maxUnavailable": 0, "selector": {"matchLabels": {"app": "test"}}});
    if let Value::Object(m) = extra {
        for (k, v) in m {
            spec[k] = v;
        }
    }
    json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "pdb", "namespace": namespace},
        "spec": spec,
        "status": {"currentHealthy": healthy, "desiredHealthy": healthy, "expectedPods": healthy,
            "disruptionsAllowed": 0, "observedGeneration": 1},
    })
}

/// `consolidation_test.go`, `Multi-NodeClaim` (lines 3936–4399), each `DescribeTable` for an
/// on-demand and a spot candidate.
fn consolidation_multi(out: &mut Vec<Scenario>) {
    let tables: [(&'static str, TableBody); 4] = [
        ("can merge 3 nodes into 1", |c, spot| {
            c.pools.push(consolidation_pool("default", "100%"));
            let s = replace_node(c, spot);
            let nodes = c.nodes(3, &s);
            for n in &nodes {
                rs_pod(c, n, None, json!({}));
            }
            deleted(c, &nodes)?;
            let r = replacements(c)?;
            ensure(r == 1, format!("{r} replacements, Karpenter launches one"))
        }),
        ("won't merge 2 nodes into 1 of the same type", |c, spot| {
            // As Karpenter's table: the on-demand entry runs spot nodes and the spot one
            // on-demand nodes, both of the cheapest type; one pod on the first, two on the
            // second.
            c.pools.push(consolidation_pool("default", "100%"));
            replace_node(c, spot);
            let nodes = c.nodes(2, &cheapest("default", !spot));
            rs_pod(c, &nodes[0], None, json!({}));
            rs_pod(c, &nodes[1], None, json!({}));
            rs_pod(c, &nodes[1], None, json!({}));
            deleted(c, &nodes[..1])
        }),
        (
            "should wait for the node TTL for non-empty nodes before consolidating (multi-node)",
            |c, spot| {
                // The 30 s validation wait is Karpenter's queue; the decision after it is
                // checked: both nodes go for one new node (spot nodes for the on-demand entry,
                // as Karpenter's table has it).
                c.pools.push(consolidation_pool("default", "100%"));
                let s = replace_node(c, !spot);
                let nodes = c.nodes(2, &s);
                rs_pod(c, &nodes[0], None, json!({}));
                rs_pod(c, &nodes[0], None, json!({}));
                rs_pod(c, &nodes[1], None, json!({}));
                deleted(c, &nodes)?;
                let r = replacements(c)?;
                ensure(r == 1, format!("{r} replacements, Karpenter launches one"))
            },
        ),
        (
            "should consolidate multiple empty nodes via multi-nodeclaim consolidation",
            |c, spot| {
                // The test's three pods are never bound (nor marked unschedulable): the nodes
                // are empty.
                c.pools.push(consolidation_pool("default", "100%"));
                let s = replace_node(c, !spot);
                let nodes = c.nodes(3, &s);
                for i in 0..3 {
                    c.pods.push(json!({
                        "apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": format!("unbound-{i}"), "namespace": "default",
                            "labels": {"app": "test"}},
                        "spec": {"containers": [{"name": "c", "image": "pause"}]},
                        "status": {"phase": "Pending"},
                    }));
                }
                deleted(c, &nodes)?;
                let k = c.consolidate()?["commands"].as_array().map_or(0, Vec::len);
                ensure(k == 1, format!("{k} commands, Karpenter makes one"))
            },
        ),
    ];
    entries(out, tables);
    add_in(
        out,
        CONSOLIDATION,
        "can merge 3 nodes into 1 if the candidates have both spot and on-demand",
        |c| {
            c.pools.push(consolidation_pool("default", "100%"));
            let od = replace_node(c, false);
            let spot = replace_node(c, true);
            let mut nodes = c.nodes(2, &od);
            nodes.push(c.node(&spot));
            for n in &nodes {
                rs_pod(c, n, None, json!({}));
            }
            deleted(c, &nodes)?;
            let r = replacements(c)?;
            ensure(r == 1, format!("{r} replacements, Karpenter launches one"))
        },
    );
}

/// `consolidation_test.go`, `Node Lifetime Consideration` and `Topology Consideration` (lines
/// 4400–4658).
fn consolidation_lifetime_and_topology(out: &mut Vec<Scenario>) {
    let mut add = |it, run: DisruptionBody| add_in(out, CONSOLIDATION, it, run);
    add(
        "should consolidate the node with best savings ratio first",
        |c| {
            // expireAfter 3s; the first node made two seconds before the second, which is
            // made now.
            let mut p = consolidation_pool("default", "100%");
            p["spec"]["template"]["spec"]["expireAfter"] = json!("3s");
            c.pools.push(p);
            let mut s = cheapest("default", false);
            s.created = "2026-01-01T11:59:58Z";
            s.initialized = Some("2026-01-01T11:59:58Z");
            let a = c.node(&s);
            s.created = NOW;
            s.initialized = Some(NOW);
            let b = c.node(&s);
            rs_pod(c, &a, None, json!({}));
            rs_pod(c, &a, None, json!({}));
            rs_pod(c, &b, None, json!({}));
            deleted(c, &[b])
        },
    );
    add("can replace node maintaining zonal topology spread", |c| {
        c.pools.push(consolidation_pool("default", "100%"));
        let nodes = zonal_nodes(c, "64-cpu-128-mem-amd64-linux-test-zone-2-on-demand");
        for n in &nodes {
            c.bind_pod(
                n,
                Some(("ReplicaSet", "rs")),
                false,
                Some("1"),
                json!({}),
                json!({"app": "test-zonal-spread"}),
            );
        }
        for p in c.pods.iter_mut() {
            p["spec"]["topologySpreadConstraints"] = json!([{"maxSkew": 1,
                    "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "test-zonal-spread"}}}]);
        }
        deleted(c, &nodes[1..2])?;
        let v = c.consolidate()?;
        let r = v["commands"][0]["replacements"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        ensure(
            r.len() == 1 && r[0]["zone"] == json!("test-zone-2"),
            format!("replacements {r:?}, Karpenter launches one in test-zone-2"),
        )
    });
    add(
        "won't delete node if it would violate pod anti-affinity",
        |c| {
            c.pools.push(consolidation_pool("default", "100%"));
            let nodes = zonal_nodes(c, "1-cpu-1-mem-amd64-linux-test-zone-2-on-demand");
            for n in &nodes {
                c.bind_pod(
                    n,
                    Some(("ReplicaSet", "rs")),
                    false,
                    Some("1"),
                    json!({}),
                    json!({"app": "test"}),
                );
            }
            for p in c.pods.iter_mut() {
                p["spec"]["affinity"] = json!({"podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [{
                        "labelSelector": {"matchLabels": {"app": "test"}},
                        "topologyKey": "kubernetes.io/hostname"}]}});
            }
            deleted(c, &[])
        },
    );
}

/// The Topology context's three nodes, 1 CPU allocatable each: the cheapest on-demand type in
/// test-zone-1 and test-zone-3, and `zone2_type` in test-zone-2.
fn zonal_nodes(c: &mut Cluster, zone2_type: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (zone, itype) in [
        (
            "test-zone-1",
            "1-cpu-1-mem-amd64-linux-test-zone-1-on-demand",
        ),
        ("test-zone-2", zone2_type),
        (
            "test-zone-3",
            "1-cpu-1-mem-amd64-linux-test-zone-3-on-demand",
        ),
    ] {
        let mut s = cheapest("default", false);
        s.zone = zone;
        s.itype = itype.into();
        s.cpu = "1";
        out.push(c.node(&s));
    }
    out
}

/// A `DescribeTable` body of the consolidation suite, run with `spot` false and true.
type TableBody = fn(&mut Cluster, bool) -> Result<(), String>;

/// Each table's two entries as two cases, as Ginkgo counts them: `<description> if the
/// candidate is on-demand node` and `… spot node`.
fn entries<const N: usize>(out: &mut Vec<Scenario>, tables: [(&'static str, TableBody); N]) {
    for (it, body) in tables {
        for spot in [false, true] {
            let name: &'static str = Box::leak(
                format!(
                    "{it} if the candidate is {} node",
                    if spot { "spot" } else { "on-demand" }
                )
                .into_boxed_str(),
            );
            out.push(Scenario {
                file: CONSOLIDATION,
                it: name,
                run: Box::new(move |dir: &PathBuf| body(&mut Cluster::new(dir), spot)),
            });
        }
    }
}

/// Karpenter's disruption classes: graceful (emptiness, consolidation) and eventual (drift,
/// expiry: they go past do-not-disrupt pods and PDBs when the NodeClaim has a
/// terminationGracePeriod).
#[derive(Clone, Copy, PartialEq)]
enum Class {
    Graceful,
    Eventual,
}

/// The `Candidate Filtering` node: one `mostExpensiveInstance` node of NodePool `default`.
/// Graceful: the consolidation suite's NodePool — a cheaper type holds what the node runs, so
/// as a candidate it is replaced (or deleted, empty). Eventual: drifted, in the drift suite's
/// NodePool. `grace`: the NodeClaims get a 300 s terminationGracePeriod (from the NodePool's
/// template, where a NodeClaim's comes from).
fn filtering(c: &mut Cluster, class: Class, grace: bool) -> String {
    let (mut pool, spec) = match class {
        Class::Graceful => (consolidation_pool("default", "100%"), expensive("default")),
        Class::Eventual => (drift_pool("default", "100%", "1h"), drifted("default")),
    };
    if grace {
        pool["spec"]["template"]["spec"]["terminationGracePeriod"] = json!("300s");
    }
    c.pools.push(pool);
    c.node(&spec)
}

/// `NewCandidate` succeeds (`want`) or fails: as `consolidate` shows it, the node is disrupted,
/// or it is not and its `blocked` entry says why.
fn candidate(c: &Cluster, node: &str, want: bool) -> Result<(), String> {
    let v = c.consolidate()?;
    let disrupted = v["commands"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["candidates"].as_array().cloned().unwrap_or_default())
        .any(|n| n == node);
    let why = v["blocked"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|b| b["node"] == node)
        .map(|b| b["reason"].to_string());
    if want {
        ensure(
            disrupted,
            format!("{node} is not disrupted ({why:?}); Karpenter takes it as a candidate"),
        )
    } else {
        ensure(
            !disrupted,
            format!("{node} is disrupted; Karpenter does not take it as a candidate"),
        )
    }
}

fn dnd() -> Value {
    json!({"karpenter.sh/do-not-disrupt": "true"})
}

/// One pod on `node`, labelled `app: test`, with `annotations`, owned by `owner`.
fn filtering_pod(c: &mut Cluster, node: &str, owner: Option<(&str, &str)>, annotations: Value) {
    c.bind_pod(
        node,
        owner,
        false,
        Some("1"),
        annotations,
        json!({"app": "test"}),
    );
}

fn last_pod(c: &mut Cluster) -> &mut Value {
    c.pods
        .iter_mut()
        .rev()
        .find(|p| p["kind"] == "Pod")
        .expect("a pod")
}

/// `suite_test.go`, `Candidate Filtering` (lines 909–1939): which nodes are candidates for
/// which class of disruption.
fn candidate_filtering(out: &mut Vec<Scenario>) {
    use Class::*;
    let mut add = |it: &'static str, run: DisruptionBody| add_in(out, SUITE, it, run);
    add(
        "should not consider candidates that have do-not-disrupt pods scheduled and no terminationGracePeriod",
        |c| {
            let n = filtering(c, Graceful, false);
            filtering_pod(c, &n, None, dnd());
            candidate(c, &n, false)
        },
    );
    add(
        "should not consider candidates that have do-not-disrupt mirror pods scheduled",
        |c| {
            let n = filtering(c, Graceful, false);
            filtering_pod(c, &n, Some(("Node", "node-0")), dnd());
            candidate(c, &n, false)
        },
    );
    add(
        "should not consider candidates that have do-not-disrupt daemonset pods scheduled",
        |c| {
            let n = filtering(c, Graceful, false);
            filtering_pod(c, &n, Some(("DaemonSet", "ds")), dnd());
            candidate(c, &n, false)
        },
    );
    add(
        "should consider candidates that have do-not-disrupt pods scheduled with a terminationGracePeriod set for eventual disruption",
        |c| {
            let n = filtering(c, Eventual, true);
            filtering_pod(c, &n, None, dnd());
            candidate(c, &n, true)
        },
    );
    add(
        "should consider candidates that have PDB-blocked pods scheduled with a terminationGracePeriod set for eventual disruption",
        |c| {
            let n = filtering(c, Eventual, true);
            filtering_pod(c, &n, None, json!({}));
            c.pods.push(pdb("default", json!({}), 1));
            candidate(c, &n, true)
        },
    );
    add(
        "should not consider candidates that have do-not-disrupt pods scheduled with a terminationGracePeriod set for graceful disruption",
        |c| {
            let n = filtering(c, Graceful, true);
            filtering_pod(c, &n, None, dnd());
            candidate(c, &n, false)
        },
    );
    add(
        "should not consider candidates that have PDB-blocked pods scheduled with a terminationGracePeriod set for graceful disruption",
        |c| {
            let n = filtering(c, Graceful, true);
            filtering_pod(c, &n, None, json!({}));
            c.pods.push(pdb("default", json!({}), 1));
            candidate(c, &n, false)
        },
    );
    add(
        "should not consider candidates that have do-not-disrupt pods scheduled without a terminationGracePeriod set for eventual disruption",
        |c| {
            let n = filtering(c, Eventual, false);
            filtering_pod(c, &n, None, dnd());
            candidate(c, &n, false)
        },
    );
    add(
        "should not consider candidates that have PDB-blocked pods scheduled without a terminationGracePeriod set for eventual disruption",
        |c| {
            let n = filtering(c, Eventual, false);
            filtering_pod(c, &n, None, json!({}));
            c.pods.push(pdb("default", json!({}), 1));
            candidate(c, &n, false)
        },
    );
    add(
        "should consider candidates that have do-not-disrupt terminating pods",
        |c| {
            let n = filtering(c, Graceful, false);
            c.bind_pod(&n, None, true, Some("1"), dnd(), json!({"app": "test"}));
            candidate(c, &n, true)
        },
    );
    add(
        "should consider candidates that have do-not-disrupt terminal pods",
        |c| {
            let n = filtering(c, Graceful, false);
            for phase in ["Succeeded", "Failed"] {
                filtering_pod(c, &n, None, dnd());
                last_pod(c)["status"]["phase"] = json!(phase);
            }
            candidate(c, &n, true)
        },
    );
    add(
        "should not consider candidates that have do-not-disrupt on nodes",
        |c| {
            let mut spec = expensive("default");
            spec.node_annotations = dnd();
            c.pools.push(consolidation_pool("default", "100%"));
            let n = c.node(&spec);
            candidate(c, &n, false)
        },
    );
    add(
        "should not consider candidates that have multiple PDBs on the same pod",
        |c| {
            let n = filtering(c, Graceful, false);
            filtering_pod(c, &n, None, json!({}));
            for name in ["pdb1", "pdb2"] {
                let mut b = pdb("default", json!({}), 1);
                b["metadata"]["name"] = json!(name);
                c.pods.push(b);
            }
            candidate(c, &n, false)
        },
    );
    add(
        "should not consider candidates that have fully blocking PDBs",
        |c| {
            let n = filtering(c, Graceful, false);
            filtering_pod(c, &n, None, json!({}));
            c.pods.push(pdb("default", json!({}), 1));
            candidate(c, &n, false)
        },
    );
    add(
        "should not consider candidates that have fully blocking PDBs on daemonset pods",
        |c| {
            let n = filtering(c, Graceful, false);
            filtering_pod(c, &n, Some(("DaemonSet", "ds")), json!({}));
            c.pods.push(pdb("default", json!({}), 1));
            candidate(c, &n, false)
        },
    );
    add(
        "should consider candidates that have fully blocking PDBs on mirror pods",
        |c| {
            let n = filtering(c, Graceful, false);
            filtering_pod(c, &n, Some(("Node", "node-0")), json!({}));
            c.pods.push(pdb("default", json!({}), 1));
            candidate(c, &n, true)
        },
    );
    add(
        "should not consider candidates that have do-not-disrupt pods without a terminationGracePeriod set for graceful disruption",
        |c| {
            let n = filtering(c, Graceful, false);
            filtering_pod(c, &n, None, dnd());
            candidate(c, &n, false)
        },
    );
    add(
        "should not consider candidates that have fully blocking PDBs without a terminationGracePeriod set for graceful disruption",
        |c| {
            let n = filtering(c, Graceful, false);
            filtering_pod(c, &n, None, json!({}));
            c.pods.push(pdb("default", json!({}), 1));
            candidate(c, &n, false)
        },
    );
    add(
        "should consider candidates that have fully blocking PDBs on terminal pods",
        |c| {
            let n = filtering(c, Graceful, false);
            for phase in ["Succeeded", "Failed"] {
                filtering_pod(c, &n, None, json!({}));
                last_pod(c)["status"]["phase"] = json!(phase);
            }
            c.pods.push(pdb("default", json!({}), 1));
            candidate(c, &n, true)
        },
    );
    add(
        "should consider candidates that have fully blocking PDBs on terminating pods",
        |c| {
            let n = filtering(c, Graceful, false);
            c.bind_pod(&n, None, true, Some("1"), json!({}), json!({"app": "test"}));
            c.pods.push(pdb("default", json!({}), 1));
            candidate(c, &n, true)
        },
    );
    add(
        "should not consider candidates that has just a Node representation",
        |c| {
            let n = filtering(c, Graceful, false);
            c.claims.clear();
            candidate(c, &n, false)
        },
    );
    add(
        "should not consider candidate that has just a NodeClaim representation",
        |c| {
            let n = filtering(c, Graceful, false);
            c.nodes.clear();
            // Nothing to consolidate: consolidate needs a node; the NodeClaim alone is no candidate.
            c.unmanaged_node();
            candidate(c, &n, false)
        },
    );
    add("should not consider candidates that are deleting", |c| {
        let n = filtering(c, Graceful, false);
        let node = c.nodes.last_mut().unwrap();
        node["metadata"]["deletionTimestamp"] = json!(NOW);
        node["metadata"]["finalizers"] = json!(["karpenter.sh/termination"]);
        candidate(c, &n, false)
    });
    add(
        "should not consider candidates that aren't yet initialized",
        |c| {
            let mut spec = expensive("default");
            spec.initialized = None;
            c.pools.push(consolidation_pool("default", "100%"));
            let n = c.node(&spec);
            candidate(c, &n, false)
        },
    );
    add(
        "should not consider candidates that are not owned by a NodePool (no karpenter.sh/nodepool label)",
        |c| {
            c.pools.push(consolidation_pool("default", "100%"));
            let n = c.unmanaged_node();
            candidate(c, &n, false)
        },
    );
    add(
        "should not consider candidates that are have a non-existent NodePool",
        |c| {
            let n = filtering(c, Graceful, false);
            c.pools[0]["metadata"]["name"] = json!("other");
            candidate(c, &n, false)
        },
    );
    // Without a label (or with a type the catalog does not know), the node is still a
    // candidate: empty, it goes.
    type Change = fn(&mut Value);
    let unlabelled: [(&'static str, Change); 4] = [
        (
            "should consider candidates that do not have the karpenter.sh/capacity-type label",
            |l| {
                drop(
                    l.as_object_mut()
                        .unwrap()
                        .remove("karpenter.sh/capacity-type"),
                )
            },
        ),
        (
            "should consider candidates that do not have the topology.kubernetes.io/zone label",
            |l| {
                drop(
                    l.as_object_mut()
                        .unwrap()
                        .remove("topology.kubernetes.io/zone"),
                )
            },
        ),
        (
            "should consider candidates that do not have the node.kubernetes.io/instance-type label",
            |l| {
                drop(
                    l.as_object_mut()
                        .unwrap()
                        .remove("node.kubernetes.io/instance-type"),
                )
            },
        ),
        (
            "should consider candidates that have an instance type that cannot be resolved",
            |l| l["node.kubernetes.io/instance-type"] = json!("unknown-instance-type"),
        ),
    ];
    for (it, change) in unlabelled {
        out.push(Scenario {
            file: SUITE,
            it,
            run: Box::new(move |dir: &PathBuf| {
                let c = &mut Cluster::new(dir);
                let n = filtering(c, Graceful, false);
                change(&mut c.nodes[0]["metadata"]["labels"]);
                change(&mut c.claims[0]["metadata"]["labels"]);
                candidate(c, &n, true)
            }),
        });
    }
}

/// Marks node `i` as Karpenter's `MarkForDeletion` does while a command runs: the disrupted
/// taint capstan's controller (and Karpenter's) puts on a node it is disrupting.
fn in_flight(c: &mut Cluster, i: usize) {
    c.nodes[i]["spec"]["taints"] =
        json!([{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]);
}

/// Node `i` and its NodeClaim deleted (`env.Client.Delete`: both have finalizers).
fn deleting(c: &mut Cluster, i: usize) {
    for o in [&mut c.nodes[i], &mut c.claims[i]] {
        o["metadata"]["deletionTimestamp"] = json!(NOW);
        o["metadata"]["finalizers"] = json!(["karpenter.sh/termination"]);
    }
}

/// A command's candidates and the replacements it launches.
type Cmd = (Vec<String>, Vec<Value>);

/// The candidates of `consolidate`'s commands, in order, and the replacements they launch.
fn commands(c: &Cluster) -> Result<Vec<Cmd>, String> {
    let v = c.consolidate()?;
    Ok(v["commands"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|cmd| {
            let names = cmd["candidates"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|n| n.as_str().unwrap_or_default().to_string())
                .collect();
            let repl = cmd["replacements"].as_array().cloned().unwrap_or_default();
            (names, repl)
        })
        .collect())
}

fn node_index(name: &str) -> usize {
    name.trim_start_matches("node-").parse().unwrap()
}

/// `suite_test.go`, `Simulate Scheduling` (lines 182–538).
fn simulate_scheduling(out: &mut Vec<Scenario>) {
    let mut add = |it: &'static str, run: DisruptionBody| add_in(out, SUITE, it, run);
    add(
        "should allow pods on deleting nodes to reschedule to uninitialized nodes",
        |c| {
            // Ten `mostExpensiveInstance` nodes of 3 CPUs; node 0 holds a 2-CPU pod, the
            // others are being disrupted. SimulateScheduling finds the pod a place: as
            // `consolidate` shows it, node 0 is replaced by a cheaper node.
            c.pools.push(consolidation_pool("default", "100%"));
            let mut spec = expensive("default");
            spec.cpu = "3";
            let nodes = c.nodes(10, &spec);
            c.bind_pod(&nodes[0], None, false, Some("2"), json!({}), json!({}));
            for i in 1..10 {
                in_flight(c, i);
            }
            let cmds = commands(c)?;
            ensure(
                cmds.iter()
                    .any(|(names, repl)| names == &[nodes[0].clone()] && repl.len() == 1),
                format!("commands {cmds:?}; Karpenter finds node-0's pod a place on a new node"),
            )
        },
    );
    add(
        "should allow multiple replace operations to happen successively",
        |c| {
            // Ten drifted 3-CPU nodes, each holding one 100m pod that selects the node's own
            // `test-partition`; budget 3, consolidation Never. Pass by pass, each replacement
            // deployed and its candidate in flight: Karpenter makes one replacement a pass
            // until three are in flight, then none.
            let mut pool = drift_pool("default", "3", "Never");
            pool["spec"]["disruption"]["consolidationPolicy"] = json!("WhenEmptyOrUnderutilized");
            pool["spec"]["template"]["spec"]["requirements"] =
                json!([{"key": "test-partition", "operator": "Exists"}]);
            c.pools.push(pool);
            let mut spec = expensive("default");
            spec.cpu = "3";
            spec.consolidatable = None;
            spec.drifted = Some((true, AN_HOUR_AGO));
            let nodes = c.nodes(10, &spec);
            for (i, n) in nodes.iter().enumerate() {
                for o in [&mut c.nodes[i], &mut c.claims[i]] {
                    o["metadata"]["labels"]["test-partition"] = json!(i.to_string());
                }
                c.bind_pod(n, None, false, Some("100m"), json!({}), json!({}));
                last_pod(c)["spec"]["nodeSelector"] = json!({"test-partition": i.to_string()});
            }
            let mut made = Vec::new();
            for want in [1, 1, 1, 0] {
                let cmds = commands(c)?;
                let new: usize = cmds.iter().map(|(_, r)| r.len()).sum();
                made.push(new);
                ensure(
                    new == want,
                    format!(
                        "replacements made pass by pass {made:?}; Karpenter makes [1, 1, 1, 0]"
                    ),
                )?;
                for (names, repl) in cmds {
                    let part = node_index(&names[0]).to_string();
                    in_flight(c, node_index(&names[0]));
                    for r in repl {
                        let mut s = cheapest("default", false);
                        s.itype = r["instance_type"].as_str().unwrap().to_string();
                        s.consolidatable = None;
                        let at = c.nodes.len();
                        c.node(&s);
                        for o in [&mut c.nodes[at], &mut c.claims[at]] {
                            o["metadata"]["labels"]["test-partition"] = json!(part);
                        }
                    }
                }
            }
            Ok(())
        },
    );
    add(
        "can replace node with a local PV (ignoring hostname affinity)",
        |c| {
            // A StatefulSet's pod whose volume is a local PV bound to this node by hostname:
            // the node is replaced all the same (the affinity to a node going away is not held
            // against the replacement).
            c.pools.push(consolidation_pool("default", "100%"));
            let n = c.node(&expensive("default"));
            c.bind_pod(
                &n,
                Some(("StatefulSet", "ss")),
                false,
                None,
                json!({}),
                json!({"app": "test"}),
            );
            last_pod(c)["spec"]["volumes"] =
                json!([{"name": "data", "persistentVolumeClaim": {"claimName": "pvc-0"}}]);
            c.pods.push(
                json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                "metadata": {"name": "local-path"}, "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer"}),
            );
            c.pods
                .push(json!({"apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": "pv-0"},
                "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                    "local": {"path": "/mnt/local-disks"},
                    "claimRef": {"namespace": "default", "name": "pvc-0"},
                    "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "kubernetes.io/hostname", "operator": "In", "values": [n]}]}]}}},
                "status": {"phase": "Bound"}}));
            c.pods.push(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "pvc-0", "namespace": "default"},
                "spec": {"volumeName": "pv-0", "storageClassName": "local-path",
                    "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}},
                "status": {"phase": "Bound"}}));
            let cmds = commands(c)?;
            ensure(
                cmds.len() == 1 && cmds[0].0 == [n.clone()] && cmds[0].1.len() == 1,
                format!("commands {cmds:?}; Karpenter replaces {n} with one new node"),
            )
        },
    );
    add(
        "should ensure that we do not duplicate capacity for disrupted nodes with provisioning",
        |c| {
            // A drifted node whose replacement is still being launched: tainted, not yet
            // deleting. The provisioner plans nothing for its pod meanwhile.
            c.pools.push(consolidation_pool("default", "100%"));
            let mut spec = expensive("default");
            spec.drifted = Some((true, AN_HOUR_AGO));
            let n = c.node(&spec);
            rs_pod(c, &n, None, json!({}));
            in_flight(c, 0);
            let v = c.plan()?;
            let claims = v["nodeclaims"].as_array().map_or(0, Vec::len);
            ensure(
                claims == 0,
                format!("plan launches {claims} NodeClaims ({v}); Karpenter's provisioner none"),
            )
        },
    );
}

/// `suite_test.go`, `BuildDisruptionBudgetMapping` (lines 677–853): ten empty initialized
/// `mostExpensiveInstance` nodes of NodePool `default`, and how many may be disrupted, as the
/// emptiness command `consolidate` makes shows it. Each case runs at Karpenter's budget and
/// again at 50%, where a node wrongly counted in the total would show (at 100% every
/// candidate goes either way).
fn budget_mapping(out: &mut Vec<Scenario>) {
    // (It, Karpenter's budget, the change, nodes counted, of those disrupting, candidates)
    type Change = fn(&mut Cluster);
    let cases: [(&'static str, &'static str, Change, u32, u32, usize); 6] = [
        (
            "should not consider nodes that are not managed as part of disruption count",
            "100%",
            |c| drop(c.unmanaged_node()),
            10,
            0,
            10,
        ),
        (
            "should not consider nodes that are not initialized as part of disruption count",
            "100%",
            |c| {
                let mut s = expensive("default");
                s.initialized = None;
                c.node(&s);
            },
            10,
            0,
            10,
        ),
        (
            "should not consider nodes that have the terminating status condition as part of disruption count",
            "100%",
            |c| {
                let mut s = expensive("default");
                s.initialized = None;
                c.node(&s);
                let claim = c.claims.last_mut().unwrap();
                claim["status"]["conditions"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({
                    "type": "InstanceTerminating", "status": "True",
                    "reason": "InstanceTerminating", "lastTransitionTime": NOW}));
            },
            10,
            0,
            10,
        ),
        (
            "should not return a negative disruption value",
            "10%",
            |c| {
                for i in 0..10 {
                    deleting(c, i);
                }
            },
            10,
            10,
            0,
        ),
        (
            "should consider nodes with a deletion timestamp set and MarkedForDeletion to the disruption count",
            "100%",
            |c| {
                deleting(c, 0);
                in_flight(c, 1);
            },
            10,
            2,
            8,
        ),
        (
            "should consider not ready nodes to the disruption count",
            "100%",
            |c| {
                for i in 0..2 {
                    c.nodes[i]["status"]["conditions"] = json!([{"type": "Ready",
                        "status": "False", "reason": "NotReady", "lastTransitionTime": NOW}]);
                }
            },
            10,
            2,
            8,
        ),
    ];
    for (it, budget, change, total, disrupting, candidates) in cases {
        out.push(Scenario {
            file: SUITE,
            it,
            run: Box::new(move |dir: &PathBuf| {
                let c = &mut Cluster::new(dir);
                c.pools = vec![empty_pool("default", budget, "0s")];
                c.nodes(10, &expensive("default"));
                change(c);
                for b in [budget, "50%"] {
                    let pct: u32 = b.trim_end_matches('%').parse().unwrap();
                    let allowed = (pct * total).div_ceil(100).saturating_sub(disrupting) as usize;
                    let want = allowed.min(candidates);
                    c.pools = vec![empty_pool("default", b, "0s")];
                    let got = c.disrupted()?;
                    ensure(
                        got.len() == want,
                        format!(
                            "budget {b}: {} nodes disrupted ({got:?}); Karpenter allows {allowed} \
                             ({total} nodes counted, {disrupting} disrupting) of {candidates} candidates",
                            got.len()
                        ),
                    )?;
                }
                Ok(())
            }),
        });
    }
}

/// `suite_test.go`, `Pod Eviction Cost` (lines 855–908): Karpenter's `EvictionCost` of one pod
/// against another, as capstan's consolidation order shows it — two `mostExpensiveInstance`
/// nodes with one 1-CPU pod each and a budget of one node: the node whose pod costs less to
/// evict goes.
fn eviction_cost(out: &mut Vec<Scenario>) {
    type PodChange = fn(&mut Value);
    type Pair = (Box<dyn Fn(&mut Value)>, Box<dyn Fn(&mut Value)>, usize);
    fn deletion_cost(v: &'static str) -> impl Fn(&mut Value) {
        move |p: &mut Value| {
            p["metadata"]["annotations"]["controller.kubernetes.io/pod-deletion-cost"] = json!(v)
        }
    }
    let standard: PodChange = |_| {};
    // (It, [(pod a, pod b, the pod Karpenter finds cheaper to evict: 0 or 1)])
    let cases: Vec<(&'static str, Vec<Pair>)> = vec![
        (
            "should have a standard disruptionCost for a pod with no priority or disruptionCost specified",
            // Alike: the standard cost on both; the first node goes (in order, as Karpenter's
            // stable sort leaves equal candidates).
            vec![(Box::new(standard), Box::new(standard), 0)],
        ),
        (
            "should have a higher disruptionCost for a pod with a positive deletion disruptionCost",
            vec![(Box::new(deletion_cost("100")), Box::new(standard), 1)],
        ),
        (
            "should have a lower disruptionCost for a pod with a positive deletion disruptionCost",
            vec![(Box::new(standard), Box::new(deletion_cost("-100")), 1)],
        ),
        (
            "should have higher costs for higher deletion costs",
            vec![
                (
                    Box::new(deletion_cost("101")),
                    Box::new(deletion_cost("100")),
                    1,
                ),
                (
                    Box::new(deletion_cost("100")),
                    Box::new(deletion_cost("99")),
                    1,
                ),
            ],
        ),
        (
            "should have a higher disruptionCost for a pod with a higher priority",
            vec![(
                Box::new(|p: &mut Value| p["spec"]["priority"] = json!(1)),
                Box::new(standard),
                1,
            )],
        ),
        (
            "should have a lower disruptionCost for a pod with a lower priority",
            vec![(
                Box::new(standard),
                Box::new(|p: &mut Value| p["spec"]["priority"] = json!(-1)),
                1,
            )],
        ),
    ];
    for (it, pairs) in cases {
        out.push(Scenario {
            file: SUITE,
            it,
            run: Box::new(move |dir: &PathBuf| {
                for (k, (a, b, cheaper)) in pairs.iter().enumerate() {
                    let c = &mut Cluster::new(&dir.join(k.to_string()));
                    c.pools = vec![consolidation_pool("default", "1")];
                    let nodes = c.nodes(2, &expensive("default"));
                    for (n, change) in nodes.iter().zip([a, b]) {
                        rs_pod(c, n, Some("1"), json!({}));
                        change(last_pod(c));
                    }
                    let got = c.disrupted()?;
                    let want = BTreeSet::from([nodes[*cheaper].clone()]);
                    ensure(
                        got == want,
                        format!(
                            "pair {k}: {got:?} disrupted; Karpenter's eviction cost takes {want:?} first"
                        ),
                    )?;
                }
                Ok(())
            }),
        });
    }
}

/// `fake.InstanceTypesAssorted()` as catalog entries, in Karpenter's order.
fn assorted_entries() -> Vec<Value> {
    assorted().iter().map(FakeType::entry).collect()
}

fn is_spot(e: &Value) -> bool {
    e["offerings"][0]["capacity_type"] == "spot"
}

fn entry_price(e: &Value) -> f64 {
    e["offerings"][0]["price_usd_per_hour"].as_f64().unwrap()
}

/// Entries sorted by their (one) offering's price, stably.
fn by_price(mut v: Vec<Value>) -> Vec<Value> {
    v.sort_by(|a, b| entry_price(a).total_cmp(&entry_price(b)));
    v
}

/// The spot node of the Replace context, of catalog entry `e` (its type, zone, spot).
fn spot_node_of(c: &mut Cluster, e: &Value) -> String {
    c.flags = vec!["--feature-gates", "SpotToSpotConsolidation=true"];
    let mut s = expensive("default");
    s.itype = e["name"].as_str().unwrap().to_string();
    s.capacity_type = "spot";
    s.zone = match e["offerings"][0]["zone"].as_str().unwrap() {
        "test-zone-1" => "test-zone-1",
        "test-zone-2" => "test-zone-2",
        _ => "test-zone-3",
    };
    let n = c.node(&s);
    rs_pod(c, &n, None, json!({}));
    n
}

/// The spot-to-spot flexibility Its of `Replace`: 18 spot types priced 1.00, 1.10, … in
/// Karpenter's order, the 17th made the cheapest ($0.001); the node is the 18th. The
/// replacement is launched over the `keep` cheapest types (`instance_type_options`), the 17th
/// among them, the node's own not.
fn spot_truncation(c: &mut Cluster, min_values: Option<u32>, keep: usize) -> Result<(), String> {
    let mut spot: Vec<Value> = assorted_entries()
        .into_iter()
        .filter(is_spot)
        .take(18)
        .collect();
    for (i, e) in spot.iter_mut().enumerate() {
        e["offerings"][0]["price_usd_per_hour"] = json!(1.0 + i as f64 * 0.1);
    }
    spot[16]["offerings"][0]["price_usd_per_hour"] = json!(0.001);
    let mut pool = consolidation_pool("default", "100%");
    if let Some(m) = min_values {
        pool["spec"]["template"]["spec"]["requirements"] = json!([{
            "key": "node.kubernetes.io/instance-type", "operator": "Exists", "minValues": m}]);
    }
    c.pools.push(pool);
    c.catalog = Some(spot.clone());
    let n = spot_node_of(c, &spot[17]);
    let want: BTreeSet<String> = by_price(spot.clone())
        .iter()
        .take(keep)
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    let cmds = commands(c)?;
    let [(names, repl)] = cmds.as_slice() else {
        return Err(format!(
            "commands {cmds:?}; Karpenter makes one replace command"
        ));
    };
    ensure(
        names == std::slice::from_ref(&n) && repl.len() == 1,
        format!(
            "command {names:?} with {} replacements; Karpenter replaces {n} with one",
            repl.len()
        ),
    )?;
    let got: BTreeSet<String> = repl[0]["instance_type_options"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    ensure(
        got == want,
        format!(
            "the replacement may launch as {} types {got:?}; Karpenter's NodeClaim requests the {keep} cheapest {want:?}",
            got.len()
        ),
    )
}

/// `consolidation_test.go`, `Replace`: spot-to-spot flexibility (lines 1061–1776).
fn consolidation_spot_to_spot(out: &mut Vec<Scenario>) {
    let mut add = |it: &'static str, run: DisruptionBody| add_in(out, CONSOLIDATION, it, run);
    add(
        "cannot replace spot with spot if less than minimum InstanceTypes flexibility",
        |c| {
            // The first five types, the first made the cheapest ($0.001): one spot type is
            // cheaper than the node (the dearest spot one), not 15.
            let mut types: Vec<Value> = assorted_entries().into_iter().take(5).collect();
            types[0]["offerings"][0]["price_usd_per_hour"] = json!(0.001);
            let spot = by_price(types.iter().filter(|e| is_spot(e)).cloned().collect());
            c.catalog = Some(types);
            c.pools.push(consolidation_pool("default", "100%"));
            let n = spot_node_of(c, spot.last().unwrap());
            candidate(c, &n, false)
        },
    );
    add(
        "cannot replace spot with spot if it is part of the 15 cheapest instance types.",
        |c| {
            let mut types: Vec<Value> = assorted_entries().into_iter().take(20).collect();
            types[0]["offerings"][0]["price_usd_per_hour"] = json!(0.001);
            let types = by_price(types);
            let spot: Vec<Value> = types.iter().filter(|e| is_spot(e)).cloned().collect();
            c.catalog = Some(types);
            c.pools.push(consolidation_pool("default", "100%"));
            let n = spot_node_of(c, &spot[1]);
            candidate(c, &n, false)
        },
    );
    add(
        "spot to spot consolidation should order the instance types by price before enforcing minimum flexibility.",
        |c| spot_truncation(c, None, 15),
    );
    add(
        "spot to spot consolidation should consider the max of default and minimum number of instanceTypeOptions from minValues in requirement for truncation if minimum number of instanceTypeOptions from minValues in requirement is greater than 15.",
        |c| spot_truncation(c, Some(16), 16),
    );
    add(
        "spot to spot consolidation should consider the default for truncation if minimum number of instanceTypeOptions from minValues in requirement is less than 15.",
        |c| spot_truncation(c, Some(10), 15),
    );
    // As Karpenter's table, both entries apply the spot node (the sixteenth spot type by
    // price, so fewer than 16 types are cheaper) with minValues 16 for instance types: no
    // replacement.
    entries(
        out,
        [(
            "Consolidation should fail if filterByPrice breaks the minimum requirement from the NodePools.",
            |c, _spot| {
                let types = assorted_entries();
                let spot = by_price(types.iter().filter(|e| is_spot(e)).cloned().collect());
                c.catalog = Some(types);
                let mut pool = consolidation_pool("default", "100%");
                pool["spec"]["template"]["spec"]["requirements"] = json!([{
                    "key": "node.kubernetes.io/instance-type", "operator": "Exists", "minValues": 16}]);
                c.pools.push(pool);
                let n = spot_node_of(c, &spot[15]);
                candidate(c, &n, false)
            },
        )],
    );
}

/// `consolidation_test.go`, `Preferences` and `MinValuesPolicy` (lines 4951–5145).
fn consolidation_preferences(out: &mut Vec<Scenario>) {
    let mut add = |it: &'static str, run: DisruptionBody| add_in(out, CONSOLIDATION, it, run);
    add(
        "should consolidate a node through deletion when ignoring preferences",
        |c| {
            // Two `leastExpensiveInstance` nodes of 5 CPUs; three `app: foo` pods that prefer
            // not to share a host, two on the first node, one on the second.
            c.pools.push(consolidation_pool("default", "100%"));
            let mut s = cheapest("default", false);
            s.cpu = "5";
            let nodes = c.nodes(2, &s);
            for n in [&nodes[0], &nodes[0], &nodes[1]] {
                c.bind_pod(n, None, false, None, json!({}), json!({"app": "foo"}));
                last_pod(c)["spec"]["affinity"] = json!({"podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1,
                        "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {"app": "foo"}}}}]}});
            }
            c.flags = vec!["--preference-policy", "Ignore"];
            let cmds = commands(c)?;
            ensure(
                cmds.len() == 1
                    && cmds[0].0 == std::slice::from_ref(&nodes[1])
                    && cmds[0].1.is_empty(),
                format!(
                    "commands {cmds:?}; Karpenter deletes {} and launches nothing",
                    nodes[1]
                ),
            )
        },
    );
    add(
        "should consolidate a node through replacement when ignoring preferences",
        |c| {
            // The on-demand `mostExpensiveInstance` node; its pod prefers that very type.
            c.pools.push(consolidation_pool("default", "100%"));
            let s = expensive("default");
            let n = c.node(&s);
            c.bind_pod(&n, None, false, None, json!({}), json!({"app": "foo"}));
            last_pod(c)["spec"]["affinity"] = json!({"nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1,
                    "preference": {"matchExpressions": [{"key": "node.kubernetes.io/instance-type",
                        "operator": "In", "values": [s.itype]}]}}]}});
            c.flags = vec!["--preference-policy", "Ignore"];
            replaced_by_another_type(c, &n, &s.itype)?;
            c.flags.clear();
            let cmds = commands(c)?;
            ensure(
                cmds.is_empty(),
                format!("respecting preferences, commands {cmds:?}; Karpenter makes none"),
            )
        },
    );
    add(
        "should not consolidate a node by relaxing min values when policy is set to BestEffort",
        |c| {
            // A NodePool asking for three instance types (minValues) where the cloud offers two:
            // consolidation never lowers minValues, whatever the MinValuesPolicy (capstan's
            // controller applies BestEffort to provisioning only; `consolidate` has no such flag).
            let types: Vec<Value> = assorted_entries();
            let names: Vec<Value> = types.iter().map(|e| e["name"].clone()).collect();
            let keep = [
                "1-cpu-1-mem-amd64-linux-test-zone-1-on-demand",
                "64-cpu-128-mem-amd64-linux-test-zone-1-on-demand",
            ];
            c.catalog = Some(
                types
                    .into_iter()
                    .filter(|e| keep.contains(&e["name"].as_str().unwrap()))
                    .collect(),
            );
            let mut pool = consolidation_pool("nodepool-min-values", "100%");
            pool["spec"]["weight"] = json!(100);
            pool["spec"]["template"]["spec"]["requirements"] = json!([{
                "key": "node.kubernetes.io/instance-type", "operator": "In", "values": names,
                "minValues": 3}]);
            c.pools.push(pool);
            let mut s = expensive("nodepool-min-values");
            s.cpu = "5";
            let n = c.node(&s);
            c.bind_pod(&n, None, false, None, json!({}), json!({}));
            candidate(c, &n, false)
        },
    );
}

/// The reasons of the commands that disrupt `node`.
fn reasons_for(c: &Cluster, node: &str) -> Result<Vec<String>, String> {
    let v = c.consolidate()?;
    Ok(v["commands"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|cmd| {
            cmd["candidates"]
                .as_array()
                .is_some_and(|a| a.iter().any(|n| n == node))
        })
        .map(|cmd| cmd["reason"].as_str().unwrap_or_default().to_string())
        .collect())
}

/// Whether `consolidate` finds `node` drifted (a drift command for it) as Karpenter does.
fn drift_found(c: &Cluster, node: &str, want: bool) -> Result<(), String> {
    let reasons = reasons_for(c, node)?;
    let got = reasons.iter().any(|r| r == "drifted");
    ensure(
        got == want,
        format!(
            "{node}: commands {reasons:?}; Karpenter finds it {}",
            if want { "drifted" } else { "not drifted" }
        ),
    )
}

/// The NodeClaim drift suite's setup: one NodeClaim (and node) of the suite's instance type
/// (100 CPUs, spot and on-demand in test-zone-1a), spot in test-zone-1a, launched; labels
/// exactly those the test gives (none of the harness's arch and OS labels), the NodePool
/// `default` with `requirements`, consolidation off (drift alone decides).
fn drift_claim(c: &mut Cluster, requirements: Value, labels: &[(&str, &str)]) -> String {
    let it = FakeType::new("drift-suite-type", "amd64", 100.0, 100.0)
        .offering("spot", "test-zone-1a", 1.0)
        .offering("on-demand", "test-zone-1a", 1.0);
    c.catalog = Some(vec![it.entry()]);
    let mut pool = drift_pool("default", "100%", "Never");
    pool["spec"]["template"]["spec"]["requirements"] = requirements;
    c.pools = vec![pool];
    let n = c.node(&drift_suite_node(true));
    let i = c.nodes.len() - 1;
    for o in [&mut c.nodes[i], &mut c.claims[i]] {
        let l = o["metadata"]["labels"].as_object_mut().unwrap();
        l.remove("kubernetes.io/arch");
        l.remove("kubernetes.io/os");
        for (k, v) in labels {
            l.insert(k.to_string(), json!(v));
        }
    }
    n
}

const TWO_HOURS_AGO: &str = "2026-01-01T10:00:00Z";

/// A node of the NodeClaim drift suite's instance type in test-zone-1a, two hours old.
fn drift_suite_node(spot: bool) -> NodeSpec {
    let mut s = cheapest("default", spot);
    s.itype = "drift-suite-type".into();
    s.zone = "test-zone-1a";
    s.consolidatable = None;
    s.created = TWO_HOURS_AGO;
    s
}

fn set_condition(claim: &mut Value, kind: &str, status: &str) {
    let conds = claim["status"]["conditions"].as_array_mut().unwrap();
    conds.retain(|c| c["type"] != kind);
    conds.push(json!({"type": kind, "status": status, "reason": kind,
        "lastTransitionTime": AN_HOUR_AGO}));
}

fn reqs(rs: &[(&str, &str, &[&str])]) -> Value {
    Value::Array(rs.iter().map(|(k, op, vs)| req(k, op, vs)).collect())
}

/// `pkg/controllers/nodeclaim/disruption/drift_test.go`: when a NodeClaim is drifted, as the
/// drift command `consolidate` makes (or does not) for its node shows it.
fn nodeclaim_drift(out: &mut Vec<Scenario>) {
    let mut add = |it: &'static str, run: DisruptionBody| add_in(out, NODECLAIM_DRIFT, it, run);
    add("should detect drift", |c| {
        // The cloud provider's verdict (`cp.Drifted`), as a snapshot carries it: the
        // launched NodeClaim's Drifted condition.
        let n = drift_claim(c, json!([]), &[]);
        set_condition(&mut c.claims[0], "Drifted", "True");
        drift_found(c, &n, true)
    });
    add(
        "should detect stale instance type drift if the instance type label doesn't exist",
        |c| {
            let n = drift_claim(c, json!([]), &[]);
            for o in [&mut c.nodes[0], &mut c.claims[0]] {
                o["metadata"]["labels"]
                    .as_object_mut()
                    .unwrap()
                    .remove("node.kubernetes.io/instance-type");
            }
            drift_found(c, &n, true)
        },
    );
    add(
        "should detect stale instance type drift if the instance type doesn't exist",
        |c| {
            let n = drift_claim(c, json!([]), &[]);
            // The cloud lists no type of that name any more.
            let other = FakeType::new("another-type", "amd64", 100.0, 100.0).offering(
                "spot",
                "test-zone-1a",
                1.0,
            );
            c.catalog = Some(vec![other.entry()]);
            drift_found(c, &n, true)
        },
    );
    add(
        "should detect stale instance type drift if the instance type offerings doesn't exist",
        |c| {
            let n = drift_claim(c, json!([]), &[]);
            let bare = FakeType::new("drift-suite-type", "amd64", 100.0, 100.0);
            c.catalog = Some(vec![bare.entry()]);
            drift_found(c, &n, true)
        },
    );
    add(
        "should detect stale instance type drift if the instance type offerings aren't compatible with the nodeclaim",
        |c| {
            let n = drift_claim(c, json!([]), &[]);
            let elsewhere = FakeType::new("drift-suite-type", "amd64", 100.0, 100.0)
                .offering("spot", "zone-x7rq2", 1.0)
                .offering("on-demand", "zone-x7rq2", 1.0);
            c.catalog = Some(vec![elsewhere.entry()]);
            drift_found(c, &n, true)
        },
    );
    for (it, status) in [
        (
            "should remove the status condition from the nodeClaim when the nodeClaim launch condition is unknown",
            "Unknown",
        ),
        (
            "should remove the status condition from the nodeClaim when the nodeClaim launch condition is false",
            "False",
        ),
    ] {
        out.push(Scenario {
            file: NODECLAIM_DRIFT,
            it,
            run: Box::new(move |dir: &PathBuf| {
                let c = &mut Cluster::new(dir);
                let n = drift_claim(c, json!([]), &[]);
                set_condition(&mut c.claims[0], "Drifted", "True");
                set_condition(&mut c.claims[0], "Launched", status);
                drift_found(c, &n, false)
            }),
        });
    }
    out.push(Scenario {
        file: NODECLAIM_DRIFT,
        it: "should not detect drift if the nodePool does not exist",
        run: Box::new(|dir: &PathBuf| {
            let c = &mut Cluster::new(dir);
            let n = drift_claim(c, json!([]), &[]);
            set_condition(&mut c.claims[0], "Drifted", "True");
            c.pools[0]["metadata"]["name"] = json!("another-nodepool");
            drift_found(c, &n, false)
        }),
    });
    // NodeRequirement Drift: the NodeClaim is not drifted under the old requirements; is it
    // under the new ones?
    type Reqs = &'static [(&'static str, &'static str, &'static [&'static str])];
    const CT: &str = "karpenter.sh/capacity-type";
    const OS: &str = "kubernetes.io/os";
    const ARCH: &str = "kubernetes.io/arch";
    type Labels = &'static [(&'static str, &'static str)];
    let table: [(&'static str, Reqs, Reqs, Labels, bool); 8] = [
        (
            "should return drifted if the nodePool node requirement is updated",
            &[
                (CT, "In", &["on-demand"]),
                (ARCH, "In", &["amd64"]),
                (OS, "In", &["linux"]),
            ],
            &[(CT, "In", &["spot"])],
            &[(CT, "on-demand"), (ARCH, "amd64"), (OS, "linux")],
            true,
        ),
        (
            "should return drifted if a new node requirement is added",
            &[(CT, "In", &["on-demand"]), (OS, "In", &["linux"])],
            &[
                (CT, "In", &["on-demand"]),
                (OS, "In", &["linux"]),
                (ARCH, "In", &["amd64"]),
            ],
            &[(CT, "on-demand"), (OS, "linux")],
            true,
        ),
        (
            "should return drifted if a node requirement is reduced",
            &[
                (CT, "In", &["on-demand"]),
                (OS, "In", &["linux", "windows"]),
            ],
            &[(CT, "In", &["on-demand"]), (OS, "In", &["windows"])],
            &[(CT, "on-demand"), (OS, "linux")],
            true,
        ),
        (
            "should not return drifted if a node requirement is expanded",
            &[(CT, "In", &["on-demand"]), (OS, "In", &["linux"])],
            &[
                (CT, "In", &["on-demand"]),
                (OS, "In", &["linux", "windows"]),
            ],
            &[(CT, "on-demand"), (OS, "linux")],
            false,
        ),
        (
            "should not return drifted if a node requirement set to Exists",
            &[(CT, "In", &["on-demand"]), (OS, "In", &["linux"])],
            &[(CT, "In", &["on-demand"]), (OS, "Exists", &[])],
            &[(CT, "on-demand"), (OS, "linux")],
            false,
        ),
        (
            "should return drifted if a node requirement set to DoesNotExists",
            &[(CT, "In", &["on-demand"]), (OS, "In", &["linux"])],
            &[(CT, "In", &["on-demand"]), (OS, "DoesNotExist", &[])],
            &[(CT, "on-demand"), (OS, "linux")],
            true,
        ),
        (
            "should not return drifted if a nodeClaim is greater then node requirement",
            &[(CT, "In", &["on-demand"]), ("test-label", "Gt", &["2"])],
            &[(CT, "In", &["on-demand"]), ("test-label", "Gt", &["10"])],
            &[(CT, "on-demand"), ("test-label", "5")],
            true,
        ),
        (
            "should not return drifted if a nodeClaim is less then node requirement",
            &[(CT, "In", &["on-demand"]), ("test-label", "Lt", &["5"])],
            &[(CT, "In", &["on-demand"]), ("test-label", "Lt", &["1"])],
            &[(CT, "on-demand"), ("test-label", "2")],
            true,
        ),
    ];
    for (it, old, new, labels, drifted) in table {
        out.push(Scenario {
            file: NODECLAIM_DRIFT,
            it,
            run: Box::new(move |dir: &PathBuf| {
                let c = &mut Cluster::new(dir);
                let n = drift_claim(c, reqs(old), labels);
                drift_found(c, &n, false)
                    .map_err(|e| format!("under the old requirements: {e}"))?;
                c.pools[0]["spec"]["template"]["spec"]["requirements"] = reqs(new);
                drift_found(c, &n, drifted)
            }),
        });
    }
    out.push(Scenario {
        file: NODECLAIM_DRIFT,
        it: "should return drifted only on NodeClaims that are drifted from an updated nodePool",
        run: Box::new(|dir: &PathBuf| {
            let c = &mut Cluster::new(dir);
            let both: Reqs = &[
                (CT, "In", &["on-demand"]),
                (OS, "In", &["linux", "windows"]),
            ];
            let one = drift_claim(c, reqs(both), &[(CT, "on-demand"), (OS, "linux")]);
            let two = c.node(&drift_suite_node(false));
            for o in [&mut c.nodes[1], &mut c.claims[1]] {
                o["metadata"]["labels"][OS] = json!("windows");
                o["metadata"]["labels"]
                    .as_object_mut()
                    .unwrap()
                    .remove(ARCH);
            }
            drift_found(c, &one, false)?;
            drift_found(c, &two, false)?;
            // Windows removed.
            c.pools[0]["spec"]["template"]["spec"]["requirements"] =
                reqs(&[(CT, "In", &["on-demand"]), (OS, "In", &["linux"])]);
            drift_found(c, &one, false)?;
            drift_found(c, &two, true)
        }),
    });
}

/// `pkg/controllers/nodeclaim/expiration/suite_test.go`: a NodeClaim of NodePool `default`
/// with its own `spec.expireAfter`, as the expiry command `consolidate` makes (or does not)
/// shows it.
fn expiration(out: &mut Vec<Scenario>) {
    // (It, the claim's expireAfter, its age, whether Karpenter expires it)
    let cases: [(&'static str, &'static str, &'static str, bool); 4] = [
        (
            "should remove nodeclaims that are expired",
            "30s",
            "2026-01-01T11:59:00Z",
            true,
        ),
        (
            "should not remove the NodeClaims when expiration is disabled",
            "Never",
            NOW,
            false,
        ),
        (
            "should not remove non-expired NodeClaims",
            "200s",
            NOW,
            false,
        ),
        (
            "should delete NodeClaims if the nodeClaim is expired but the node isn't",
            "30s",
            "2026-01-01T11:59:00Z",
            true,
        ),
    ];
    for (it, expire_after, claim_created, want) in cases {
        out.push(Scenario {
            file: EXPIRATION,
            it,
            run: Box::new(move |dir: &PathBuf| {
                let c = &mut Cluster::new(dir);
                // test.NodePool(): Karpenter's defaults (expireAfter 720h among them).
                c.pools = vec![nodepool("default", vec![])];
                let mut s = cheapest("default", false);
                s.created = claim_created;
                let n = c.node(&s);
                c.claims[0]["spec"]["expireAfter"] = json!(expire_after);
                if it.contains("but the node isn't") {
                    c.nodes[0]["metadata"]["creationTimestamp"] = json!(NOW);
                }
                let reasons = reasons_for(c, &n)?;
                let got = reasons.iter().any(|r| r == "expired");
                ensure(
                    got == want,
                    format!(
                        "commands {reasons:?}; Karpenter {} it",
                        if want { "expires" } else { "does not expire" }
                    ),
                )
            }),
        });
    }
}
