//! `capstan plan` and `capstan bench packing`: loading pods, clusters and NodePools, and the
//! contract's JSON.

use crate::input::{self, InputError};
use capstan_model::load::{Kind, load};
use capstan_model::{Catalog, NodePool, Pod, Resources};
use capstan_pack::{PackOptions, PackResult, Strategy, pack_until};
use capstan_sched::{InFlight, Snapshot, SolveInput};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Instant;

/// Everything a plan reads, loaded.
pub struct PlanInput {
    pub pending: Vec<Arc<Pod>>,
    pub snapshot: Snapshot,
    pub nodepools: Vec<NodePool>,
    pub catalog: Catalog,
}

fn warn_all(warnings: &[String]) {
    for w in warnings {
        tracing::warn!("{w}");
    }
}

/// The kinds of object that say what pods' volumes require.
pub const VOLUME_KINDS: [Kind; 3] = [
    Kind::PersistentVolumeClaim,
    Kind::PersistentVolume,
    Kind::StorageClass,
];

/// Reads pending pods from a file (bound pods in it are skipped with a warning), with what
/// their volumes require where the file holds their claims (see [`with_volumes`]).
pub fn read_pods(path: &str) -> Result<Vec<Arc<Pod>>, InputError> {
    let (pods, volumes) = read_pods_and_volumes(path)?;
    Ok(with_volumes(pods, &volumes))
}

/// Pending pods with what their PersistentVolumeClaims require of a node, as kube-scheduler
/// reads the claims, volumes and StorageClasses given: a pod whose claims cannot bind yet
/// (missing, being deleted, lost, unbound under an `Immediate` class, ...) gets no node, with
/// a warning naming why, as the controller does. When no claim, volume or class was given at
/// all (a pod set recorded with `kubectl get pods`), pods are planned without their volumes'
/// constraints, and a warning says how many that is.
pub fn with_volumes(
    pods: Vec<Arc<Pod>>,
    volumes: &capstan_model::volume::Volumes,
) -> Vec<Arc<Pod>> {
    if volumes.is_empty() {
        let n = pods.iter().filter(|p| !p.volume_claims.is_empty()).count();
        if n > 0 {
            tracing::warn!(
                "{n} pending pods use PersistentVolumeClaims, and no claim, volume or StorageClass \
                 was given: planned without their volumes' zones"
            );
        }
        return pods;
    }
    let mut out = Vec::with_capacity(pods.len());
    for mut p in pods {
        if !p.volume_claims.is_empty() {
            volumes.apply(Arc::make_mut(&mut p));
            if let Some(e) = &p.volume_error {
                tracing::warn!("pod {}: no node planned: {e}", p.key());
                continue;
            }
        }
        out.push(p);
    }
    out
}

/// Why a pending pod gets no node of its own, as the controller decides: a DaemonSet's pod
/// (the DaemonSet controller places it on the node it is for; the DaemonSet costs every node
/// it runs on instead) or a static pod (its node's kubelet runs it).
fn not_planned(p: &Pod) -> Option<&'static str> {
    if p.is_daemonset_pod() {
        Some("a DaemonSet's pod: its DaemonSet is counted on every node it runs on")
    } else if p.owner_kind.as_deref() == Some("Node") {
        Some("a static pod: its node's kubelet runs it")
    } else {
        None
    }
}

/// Reads pending pods and any PersistentVolumeClaims, PersistentVolumes and StorageClasses
/// from a file.
pub fn read_pods_and_volumes(
    path: &str,
) -> Result<(Vec<Arc<Pod>>, capstan_model::volume::Volumes), InputError> {
    let text = input::read(path)?;
    let mut kinds = vec![Kind::Pod];
    kinds.extend(VOLUME_KINDS);
    let objs = load(path, &text, &kinds).map_err(|e| InputError(e.to_string()))?;
    objs.require(path, "pods", objs.pods.len())
        .map_err(|e| InputError(e.to_string()))?;
    warn_all(&objs.warnings);
    let mut pending = Vec::new();
    for p in objs.pods {
        if p.is_pending() {
            if let Some(why) = not_planned(&p) {
                tracing::warn!("{path}: pod {}: not planned ({why})", p.key());
                continue;
            }
            pending.push(Arc::new(p));
        } else {
            tracing::warn!(
                "{path}: pod {}: skipped (already bound to {} or finished)",
                p.key(),
                p.node_name.as_deref().unwrap_or("-")
            );
        }
    }
    Ok((pending, objs.volumes))
}

pub fn read_nodepools(paths: &[String]) -> Result<Vec<NodePool>, InputError> {
    if paths.is_empty() {
        return Ok(vec![NodePool::default_pool()]);
    }
    let mut pools = Vec::new();
    for path in paths {
        let text = input::read(path)?;
        let objs = load(path, &text, &[Kind::NodePool]).map_err(|e| InputError(e.to_string()))?;
        objs.require(path, "NodePool", objs.nodepools.len())
            .map_err(|e| InputError(e.to_string()))?;
        warn_all(&objs.warnings);
        pools.extend(objs.nodepools);
    }
    if pools.is_empty() {
        return Err(InputError(format!(
            "{}: no NodePool in the --nodepool files",
            paths.join(", ")
        )));
    }
    let mut names: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
    names.sort();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(InputError(format!("nodepool {}: defined twice", w[0])));
    }
    Ok(pools)
}

/// What a cluster snapshot file held: nodes, bound pods, DaemonSets and in-flight NodeClaims
/// as a [`Snapshot`]; pending pods to be planned too; claims, volumes and StorageClasses.
pub type ClusterFile = (Snapshot, Vec<Arc<Pod>>, capstan_model::volume::Volumes);

/// Reads a cluster snapshot (see [`ClusterFile`]).
pub fn read_cluster(path: &str, catalog: &Catalog) -> Result<ClusterFile, InputError> {
    let text = input::read(path)?;
    let objs = load(
        path,
        &text,
        &[
            Kind::Pod,
            Kind::Node,
            Kind::DaemonSet,
            Kind::NodeClaim,
            Kind::PodDisruptionBudget,
            Kind::PersistentVolumeClaim,
            Kind::PersistentVolume,
            Kind::StorageClass,
        ],
    )
    .map_err(|e| InputError(e.to_string()))?;
    let v = &objs.volumes;
    let read = objs.pods.len()
        + objs.nodes.len()
        + objs.daemonsets.len()
        + objs.nodeclaims.len()
        + objs.pdbs.len()
        + v.claims.len()
        + v.volumes.len()
        + v.classes.len();
    objs.require(path, "nodes or pods", read)
        .map_err(|e| InputError(e.to_string()))?;
    warn_all(&objs.warnings);
    let mut snap = Snapshot {
        nodes: objs.nodes.into_iter().map(std::sync::Arc::new).collect(),
        daemonsets: objs.daemonsets,
        ..Default::default()
    };
    for ds in &mut snap.daemonsets {
        capstan_model::convert::daemonset_requests_from_pods(ds, &objs.pods);
    }
    let mut claim_deleting = Vec::new();
    for nc in objs.nodeclaims {
        let registered = nc
            .status
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .filter(|n| !n.is_empty());
        if let Some(node) = registered {
            // A node still coming up takes pods as it will be once initialized, as in
            // Karpenter: without its ephemeral and startup taints, after initialized nodes.
            let claim = capstan_model::NodeClaim::from_object(&nc, 0.0)
                .map_err(|e| InputError(format!("{path}: nodeclaim {}: {e}", nc.metadata.name)))?;
            if let Some(n) = snap.nodes.iter_mut().find(|n| &n.name == node) {
                if let Some(up) = n.coming_up(Some(&claim)) {
                    *n = std::sync::Arc::new(up);
                    snap.coming_up.insert(n.name.clone());
                }
            }
            if claim.deleting() {
                // Its node goes with it (Karpenter's MarkedForDeletion).
                claim_deleting.push(node.clone());
            }
            continue;
        }
        let labels: std::collections::BTreeMap<String, String> = nc
            .metadata
            .labels
            .iter()
            .map(|(k, v)| {
                (
                    capstan_model::labels::normalize_key(k).into_owned(),
                    v.clone(),
                )
            })
            .collect();
        let name = nc.metadata.name.clone();
        let Some(t) = labels
            .get(capstan_model::labels::INSTANCE_TYPE)
            .and_then(|t| catalog.get(t))
        else {
            // Not launched yet, or of a type the catalog does not know: it takes no pods, but
            // what its status says it has counts against its NodePool's limits (Karpenter
            // counts a NodeClaim from its launch).
            let claim = capstan_model::NodeClaim::from_object(&nc, 0.0)
                .map_err(|e| InputError(format!("{path}: nodeclaim {name}: {e}")))?;
            let capacity = if claim.status.capacity.is_zero() {
                &claim.status.allocatable
            } else {
                &claim.status.capacity
            };
            match labels.get(capstan_model::labels::NODEPOOL) {
                Some(pool) if !capacity.is_zero() && !claim.deleting() => {
                    snap.count(pool, capacity);
                    tracing::warn!(
                        "{path}: nodeclaim {name}: takes no pods (no known instance-type label \
                         yet); its capacity counts against NodePool {pool}'s limits"
                    );
                }
                _ => tracing::warn!(
                    "{path}: nodeclaim {name}: skipped (no known instance-type label yet)"
                ),
            }
            continue;
        };
        let mut l = t.labels.clone();
        l.extend(labels.clone());
        snap.inflight.push(InFlight {
            name,
            nodepool: labels
                .get(capstan_model::labels::NODEPOOL)
                .cloned()
                .unwrap_or_default(),
            labels: l,
            taints: Vec::new(),
            allocatable: t.allocatable.clone(),
            capacity: t.capacity.clone(),
        });
    }
    for n in &mut snap.nodes {
        if claim_deleting.contains(&n.name) {
            std::sync::Arc::make_mut(n).deleting = true;
        }
    }
    // Pods of a node being deleted that will need room elsewhere are planned with the
    // pending ones, ahead of their eviction, as the controller plans them.
    let deleting: std::collections::BTreeSet<&str> = snap
        .nodes
        .iter()
        .filter(|n| n.deleting)
        .map(|n| n.name.as_str())
        .collect();
    let now = crate::consolidate_cmd::now(None)?;
    let mut pending = Vec::new();
    for p in objs.pods {
        if p.is_pending() {
            if let Some(why) = not_planned(&p) {
                tracing::warn!("{path}: pod {}: not planned ({why})", p.key());
                continue;
            }
            pending.push(Arc::new(p));
        } else if p.is_active() {
            let on_deleting = p.node_name.as_deref().is_some_and(|n| deleting.contains(n));
            if on_deleting && capstan_model::pdb::moves_ahead_of_drain(&p, &objs.pdbs, now) {
                tracing::info!(
                    "{path}: pod {}: its node {} is being deleted; planned ahead of its eviction",
                    p.key(),
                    p.node_name.as_deref().unwrap_or_default()
                );
                pending.push(Arc::new(p.off_its_node()));
            } else {
                snap.pods.push(Arc::new(p));
            }
        }
    }
    Ok((snap, pending, objs.volumes))
}

pub fn solve_input(p: &PlanInput) -> SolveInput<'_> {
    SolveInput {
        snapshot: &p.snapshot,
        pending: &p.pending,
        nodepools: &p.nodepools,
        instance_types: &p.catalog.instance_types,
    }
}

use crate::table::round;

/// The contract's JSON for a plan.
pub fn plan_json(p: &PlanInput, r: &PackResult, solve_ms: f64) -> Value {
    let types = &p.catalog.instance_types;
    let key = |i: usize| p.pending[i].key();
    let claims: Vec<Value> = r
        .plan
        .new_claims
        .iter()
        .enumerate()
        .map(|(k, c)| {
            let name = format!("{}-{k}", c.nodepool);
            // The labels and taints the NodeClaim would carry, as the controller makes them:
            // the template's labels, the NodePool's, a value for each custom requirement.
            let pool = p.nodepools.iter().find(|n| n.name == c.nodepool);
            let mut labels = pool.map(|n| n.labels.clone()).unwrap_or_default();
            labels.insert(capstan_model::labels::NODEPOOL.into(), c.nodepool.clone());
            labels.insert(
                capstan_model::labels::KARPENTER_NODEPOOL.into(),
                c.nodepool.clone(),
            );
            // A key the instance type defines takes the type's value (Karpenter's well-known
            // labels; a catalog's own labels).
            let it = &types[c.offering.instance_type];
            for (key, v) in it.labels.iter() {
                if c.requirements.has_key(key) {
                    labels.insert(key.clone(), v.clone());
                }
            }
            for (key, v) in c.requirements.node_labels(&name) {
                if !it.requirements.has_key(&key) {
                    labels.entry(key).or_insert(v);
                }
            }
            let taints: Vec<Value> = pool
                .map(|n| n.taints.as_slice())
                .unwrap_or_default()
                .iter()
                .map(|t| json!({"key": t.key, "value": t.value, "effect": t.effect.as_str()}))
                .collect();
            // Karpenter's MinValuesPolicy BestEffort: what the claim's minValues came down to.
            let min_values: std::collections::BTreeMap<String, u32> = c
                .requirements
                .iter()
                .filter_map(|r| r.min_values.map(|m| (r.key.clone(), m)))
                .collect();
            let mut annotations = std::collections::BTreeMap::new();
            if pool.is_some_and(|n| {
                capstan_model::claim::min_values_relaxed(&n.requirements, &c.requirements)
            }) {
                annotations.insert(capstan_model::claim::MIN_VALUES_RELAXED_ANNOTATION, "true");
            }
            json!({
                "name": name,
                "labels": labels,
                "taints": taints,
                "annotations": annotations,
                "min_values": min_values,
                "nodepool": c.nodepool,
                "instance_type": types[c.offering.instance_type].name,
                "capacity_type": c.offering.capacity_type,
                "zone": c.offering.zone,
                "price_usd_per_hour": round(c.offering.price, 6),
                "pods": c.pods.iter().map(|&i| key(i)).collect::<Vec<_>>(),
                "instance_type_options": c.instance_types.iter().map(|&t| types[t].name.clone()).collect::<Vec<_>>(),
                "requests": resources_json(&c.requests),
            })
        })
        .collect();
    let existing: Vec<Value> = r
        .plan
        .existing
        .iter()
        .map(
            |b| json!({"node": b.node, "pods": b.pods.iter().map(|&i| key(i)).collect::<Vec<_>>()}),
        )
        .collect();
    let unschedulable: Vec<Value> = r
        .plan
        .unschedulable
        .iter()
        .map(|u| json!({"pod": key(u.pod), "reason": &*u.reason}))
        .collect();
    let mut v = json!({
        "strategy": r.strategy.name(),
        "nodeclaims": claims,
        "existing": existing,
        "unschedulable": unschedulable,
        "total_price_usd_per_hour": round(r.total_price, 6),
        "lower_bound_usd_per_hour": round(r.lower_bound, 6),
        "solve_ms": round(solve_ms, 3),
    });
    v["gap"] = json!(round(r.gap, 6));
    v
}

fn resources_json(r: &Resources) -> Value {
    let mut m = serde_json::Map::new();
    m.insert("cpu_millicores".into(), json!(r.cpu));
    m.insert(
        "memory_mib".into(),
        json!(round(
            r.memory as f64 / capstan_model::resources::MIB as f64,
            3
        )),
    );
    m.insert("pods".into(), json!(r.pods));
    for (k, v) in &r.extended {
        m.insert(k.clone(), json!(v));
    }
    Value::Object(m)
}

/// Plans and times it. `optimal` works to `--time-limit` from here (the clock is read here and
/// handed to the planner as seconds left); the other strategies work to their budgets of work,
/// so their plans do not depend on the machine.
pub fn run(p: &PlanInput, options: &PackOptions) -> Result<(PackResult, f64), anyhow::Error> {
    let started = Instant::now();
    let left = || {
        if options.strategy == Strategy::Optimal {
            options.time_limit_seconds - started.elapsed().as_secs_f64()
        } else {
            f64::INFINITY
        }
    };
    let r = pack_until(solve_input(p), options, &left)?;
    Ok((r, started.elapsed().as_secs_f64() * 1000.0))
}

/// One row of `capstan bench packing`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PackingRow {
    pub set: String,
    pub strategy: String,
    pub pods: usize,
    /// Distinct resource requests among the pods.
    pub shapes: usize,
    pub nodes: usize,
    pub price_usd_per_hour: f64,
    pub lower_bound_usd_per_hour: f64,
    pub ratio_to_bound: f64,
    /// (price − bound) / price, or 0 when `optimal` proved its plan optimal.
    pub gap: f64,
    pub solve_ms: f64,
    /// Peak resident memory of the process so far in the run, this row included (Linux; 0
    /// elsewhere): rows are run in order, so a row's own peak is at most this.
    pub peak_rss_mib: f64,
    pub unschedulable: usize,
}

pub fn bench_packing(
    dir: &str,
    catalog: Catalog,
    strategies: &[Strategy],
    time_limit: f64,
) -> Result<Vec<PackingRow>, anyhow::Error> {
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| InputError(format!("{dir}: {e}")))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("json" | "yaml" | "yml")
            )
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(InputError(format!("{dir}: no .json or .yaml pod sets")).into());
    }
    let mut p = PlanInput {
        pending: Vec::new(),
        snapshot: Snapshot::default(),
        nodepools: vec![NodePool::default_pool()],
        catalog,
    };
    let mut rows = Vec::new();
    for f in files {
        let path = f.to_string_lossy().to_string();
        p.pending = read_pods(&path)?;
        let set = f
            .file_stem()
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or_default();
        let shapes = p
            .pending
            .iter()
            .map(|pod| pod.requests.to_string())
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        for &s in strategies {
            let options = PackOptions {
                strategy: s,
                time_limit_seconds: time_limit,
                ..Default::default()
            };
            let (r, ms) = run(&p, &options)?;
            tracing::info!(set = %set, strategy = s.name(), price = r.total_price, bound = r.lower_bound, ms, "packed");
            rows.push(PackingRow {
                set: set.clone(),
                strategy: s.name().into(),
                pods: p.pending.len(),
                shapes,
                nodes: r.plan.new_claims.len(),
                price_usd_per_hour: round(r.total_price, 4),
                lower_bound_usd_per_hour: round(r.lower_bound, 4),
                ratio_to_bound: if r.lower_bound > 0.0 {
                    round(r.total_price / r.lower_bound, 4)
                } else {
                    1.0
                },
                solve_ms: round(ms, 1),
                peak_rss_mib: round(peak_rss_mib(), 1),
                gap: round(r.gap, 4),
                unschedulable: r.plan.unschedulable.len(),
            });
        }
    }
    Ok(rows)
}

/// The process's peak resident memory so far, in MiB (Linux; 0 where unknown).
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}
