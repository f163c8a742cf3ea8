//! `capstan consolidate`: what the disruption engine would do to a cluster snapshot now, and
//! with `--until-stable`, round after round until nothing changes.

use crate::input::{self, InputError};
use capstan_disrupt::{Evaluation, Input, NodeInfo, Target, evaluate};
use capstan_model::claim::conditions;
use capstan_model::load::{Kind, load};
use capstan_model::nodepool::NodeClaimObject;
use capstan_model::pdb::Pdb;
use capstan_model::{Catalog, Node, NodeClaim, NodePool, Pod};
use serde_json::{Value, json};

pub struct Cluster {
    pub nodes: Vec<NodeInfo>,
    pub pods: Vec<std::sync::Arc<Pod>>,
    pub pdbs: Vec<Pdb>,
    pub daemonsets: Vec<Pod>,
}

/// Reads the snapshot (and extra PDB files).
pub fn read(cluster: &str, pdb_files: &[String], catalog: &Catalog) -> Result<Cluster, InputError> {
    let text = input::read(cluster)?;
    let objs = load(
        cluster,
        &text,
        &[
            Kind::Pod,
            Kind::Node,
            Kind::DaemonSet,
            Kind::PodDisruptionBudget,
            Kind::NodeClaim,
            Kind::PersistentVolumeClaim,
            Kind::PersistentVolume,
            Kind::StorageClass,
        ],
    )
    .map_err(|e| InputError(e.to_string()))?;
    objs.require(cluster, "nodes", objs.nodes.len())
        .map_err(|e| InputError(e.to_string()))?;
    for w in &objs.warnings {
        tracing::warn!("{w}");
    }
    let mut pdbs = objs.pdbs;
    for f in pdb_files {
        let text = input::read(f)?;
        let more =
            load(f, &text, &[Kind::PodDisruptionBudget]).map_err(|e| InputError(e.to_string()))?;
        more.require(f, "PodDisruptionBudgets", more.pdbs.len())
            .map_err(|e| InputError(e.to_string()))?;
        for w in &more.warnings {
            tracing::warn!("{w}");
        }
        pdbs.extend(more.pdbs);
    }
    let claims = objs
        .nodeclaims
        .iter()
        .map(|o| {
            let bad =
                |e: String| InputError(format!("{cluster}: NodeClaim {}: {e}", o.metadata.name));
            if let Some(e) = &o.spec.expire_after {
                capstan_model::time::parse_duration(e)
                    .map_err(|err| bad(format!("spec.expireAfter {e:?}: {err}")))?;
            }
            NodeClaim::from_object(o, 0.0).map_err(|e| bad(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let nodes = objs
        .nodes
        .into_iter()
        .map(|n| {
            let mut info = NodeInfo::from_node(n, &catalog.instance_types);
            if !with_claim(&mut info, &objs.nodeclaims, &claims) && !claims.is_empty() {
                // As the controller: a node no NodeClaim stands for is not capstan's to
                // disrupt. (A snapshot with no NodeClaims at all is read node by node.)
                if info.nodepool.take().is_some() {
                    tracing::warn!(
                        "{cluster}: node {}: no NodeClaim in the snapshot stands for it: not \
                         a candidate",
                        info.node.name
                    );
                }
            }
            info
        })
        .collect();
    Ok(Cluster {
        nodes,
        // A bound pod moves only where its volumes can follow (a zonal volume keeps it in
        // its zone).
        pods: objs
            .pods
            .into_iter()
            .filter(|p| p.node_name.is_some() && p.is_active())
            .map(|mut p| {
                objs.volumes.apply(&mut p);
                std::sync::Arc::new(p)
            })
            .collect(),
        pdbs,
        daemonsets: objs.daemonsets,
    })
}

/// A node's NodeClaim, where the snapshot has it (matched by `status.nodeName`, else by
/// provider ID), says what the controller would know: see `NodeInfo::apply_claim`; and its
/// `Drifted` condition and, a Karpenter NodeClaim, its `Consolidatable` one. False: none does.
fn with_claim(info: &mut NodeInfo, objects: &[NodeClaimObject], claims: &[NodeClaim]) -> bool {
    let node = info.node.clone();
    let Some(i) = claims.iter().position(|c| {
        c.status.node_name.as_deref() == Some(node.name.as_str())
            || (c.status.provider_id.is_some() && c.status.provider_id == node.provider_id)
    }) else {
        return false;
    };
    let created = info.created;
    info.apply_claim(&claims[i], 0.0);
    let o = &objects[i];
    if !o.metadata.other.contains_key("creationTimestamp") {
        info.created = created;
    }
    let condition = |kind: &str| {
        o.status
            .iter()
            .flat_map(|s| &s.conditions)
            .find(|c| c.type_ == kind)
            .map(|c| c.status == "True")
    };
    // The claim's own expireAfter (a Karpenter NodeClaim's, copied from its NodePool at
    // launch) is the one that applies.
    // (read_cluster refused a value that does not parse.)
    if let Some(v) = o
        .spec
        .expire_after
        .as_deref()
        .and_then(|e| capstan_model::time::parse_duration(e).ok())
    {
        info.expire_after = Some(v);
    }
    // Drift is the verdict of a launched claim only (Karpenter clears it otherwise).
    if let Some(c) = o
        .status
        .iter()
        .flat_map(|s| &s.conditions)
        .find(|c| c.type_ == conditions::DRIFTED && c.status == "True")
        .filter(|_| condition(conditions::LAUNCHED) == Some(true))
    {
        info.provider_drift = Some("its NodeClaim is Drifted".into());
        info.drifted_at = capstan_model::time::parse_rfc3339(&c.last_transition_time);
    }
    // The last pod event (Karpenter's `status.lastPodEventTime`), else the node's
    // initialization: what `consolidateAfter` counts from.
    let status = o.status.as_ref();
    info.last_pod_event = status
        .and_then(|s| s.last_pod_event_time.as_deref())
        .and_then(capstan_model::time::parse_rfc3339)
        .or_else(|| {
            status
                .into_iter()
                .flat_map(|s| &s.conditions)
                .find(|c| c.type_ == conditions::INITIALIZED && c.status == "True")
                .and_then(|c| capstan_model::time::parse_rfc3339(&c.last_transition_time))
        })
        .or(info.last_pod_event);
    // Karpenter's NodeClaims say when `consolidateAfter` has passed (no condition: not
    // yet); capstan's keep no such condition, and the engine reckons from the node's age.
    if o.api_version.starts_with("karpenter.sh/") {
        info.consolidatable = Some(condition(conditions::CONSOLIDATABLE) == Some(true));
    }
    true
}

fn round(v: f64) -> f64 {
    crate::table::round(v, 6)
}

/// The contract's JSON for one evaluation: a move to a replacement names it `replacement-K`,
/// K its entry in the command's `replacements` (in every round of `--until-stable` too; the
/// node it becomes in later rounds is `replacement-R-K`, see [`replacement_node`]).
pub fn evaluation_json(e: &Evaluation, catalog: &Catalog) -> Value {
    let commands: Vec<Value> = e
        .commands
        .iter()
        .map(|c| {
            json!({
                "reason": c.reason.cli_name(),
                "candidates": c.candidates,
                "replacements": c.replacements.iter().map(|r| json!({
                    "nodepool": r.nodepool,
                    "instance_type": catalog.instance_types[r.instance_type].name,
                    "capacity_type": r.capacity_type,
                    "zone": r.zone,
                    "price_usd_per_hour": round(r.price),
                    // The types the replacement may launch as: a spot-to-spot replacement's
                    // cheapest spot options (as Karpenter launches it), else the one type.
                    "instance_type_options": if r.spot_options.is_empty() {
                        vec![catalog.instance_types[r.instance_type].name.clone()]
                    } else {
                        r.spot_options.iter().map(|&t| catalog.instance_types[t].name.clone()).collect()
                    },
                })).collect::<Vec<_>>(),
                "moves": c.moves.iter().map(|m| json!({
                    "pod": m.pod,
                    "to": match &m.to { Target::Node(n) => n.clone(), Target::Replacement(k) => format!("replacement-{k}") },
                })).collect::<Vec<_>>(),
                "savings_usd_per_hour": round(c.savings),
                "drain": c.drain,
                "drain_seconds": c.drain_seconds,
            })
        })
        .collect();
    json!({
        "commands": commands,
        "blocked": e.blocked.iter().map(|b| json!({"node": b.node, "reason": b.reason})).collect::<Vec<_>>(),
        "before_usd_per_hour": round(e.before),
        "after_usd_per_hour": round(e.after),
    })
}

/// One evaluation at `now`; `spot_to_spot` is Karpenter's `SpotToSpotConsolidation` gate (off
/// by default there and in the controller: spot nodes are then only deleted);
/// `ignore_preferences` its preference policy `Ignore`.
pub fn evaluate_now(
    c: &Cluster,
    pools: &[NodePool],
    catalog: &Catalog,
    now: f64,
    spot_to_spot: bool,
    ignore_preferences: bool,
) -> Evaluation {
    evaluate(Input {
        nodes: &c.nodes,
        pods: &c.pods,
        pdbs: &c.pdbs,
        nodepools: pools,
        instance_types: &catalog.instance_types,
        daemonsets: &c.daemonsets,
        now,
        spot_to_spot,
        ignore_preferences,
        known: None,
    })
}

/// The node a replacement launched in `round` becomes in later rounds: `replacement-R-K`, K
/// counting the round's replacements over all its commands, in order.
pub fn replacement_node(round: usize, k: usize) -> String {
    format!("replacement-{round}-{k}")
}

/// Carries out one round's commands on the snapshot: replacements become nodes named
/// [`replacement_node`], pods move, candidates go.
pub fn apply(c: &mut Cluster, e: &Evaluation, catalog: &Catalog, round: usize, now: f64) {
    let mut launched = 0;
    for cmd in &e.commands {
        let mut names = Vec::new();
        for r in &cmd.replacements {
            let t = &catalog.instance_types[r.instance_type];
            let name = replacement_node(round, launched);
            launched += 1;
            let node = Node::for_instance_type(t, &name, &r.zone, &r.capacity_type, &r.nodepool);
            let mut info = NodeInfo::from_node(node, &catalog.instance_types);
            info.price = r.price;
            info.created = Some(now);
            c.nodes.push(info);
            names.push(name);
        }
        for m in &cmd.moves {
            let to = match &m.to {
                Target::Node(n) => n.clone(),
                Target::Replacement(k) => names[*k].clone(),
            };
            if let Some(p) = c.pods.iter_mut().find(|p| p.key() == m.pod) {
                std::sync::Arc::make_mut(p).node_name = Some(to);
            }
        }
        let gone: Vec<&String> = cmd.candidates.iter().collect();
        c.nodes.retain(|n| !gone.contains(&&n.node.name));
        c.pods
            .retain(|p| p.node_name.as_ref().is_none_or(|n| !gone.contains(&n)));
    }
}

/// Parses `--now`, or reads the clock (the only clock read: in the binary, not the engine).
pub fn now(arg: Option<&str>) -> Result<f64, InputError> {
    match arg {
        Some(s) => capstan_model::time::parse_rfc3339(s).ok_or_else(|| {
            InputError(format!(
                "--now: {s:?} is not an RFC 3339 time (e.g. 2026-11-30T09:15:00Z)"
            ))
        }),
        None => Ok(std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0)),
    }
}
