//! Which claims need the lifecycle this pass, and what each needs: launch, registration,
//! initialization, termination, or — when its node was deleted — to go. Nodes deleted by
//! someone else (`kubectl delete node`) start their claim's termination; a terminating node
//! capstan owns no claim for just loses capstan's finalizer.

use crate::api::{ClusterApi, Kind};
use crate::context::Ctx;
use crate::launch::Launcher;
use crate::{registration, termination};
use capstan_cloud::CloudProvider;
use capstan_model::NodeClaim;
use capstan_model::claim::TERMINATION_FINALIZER;
use capstan_model::disruption::Reason;
use std::collections::BTreeSet;
use std::sync::Arc;

/// What a claim needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    Terminate,
    Launch,
    Register,
    Initialize,
    /// Its node is gone or going: the claim goes too.
    Replace,
    Nothing,
}

/// What a claim needs, given whether its node exists and whether that node is terminating.
pub fn need(c: &NodeClaim, node: Option<bool>) -> Need {
    if c.deleting() {
        Need::Terminate
    } else if c.status.provider_id.is_none() {
        Need::Launch
    } else if !c.status.registered() {
        Need::Register
    } else if node == Some(true) {
        Need::Replace
    } else if !c.status.initialized() {
        Need::Initialize
    } else if node.is_none() {
        Need::Replace
    } else {
        Need::Nothing
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Lifecycle {
    /// The claims that need the loop, and where the cache's claim journal ended when they
    /// were last brought up to date. What a claim needs depends on the claim and its node
    /// alone, so only the claims the journal names since are looked at again.
    work: Option<(u64, BTreeSet<String>)>,
}

/// Whether claim `c` needs the loop: what it needs, given its node.
fn unsettled_claim(cache: &crate::Cache, c: &NodeClaim) -> bool {
    need(c, cache.node_of_claim(c).map(|n| n.deleting)) != Need::Nothing
}

/// Every claim that needs the loop, by going over them all.
fn unsettled(cache: &crate::Cache) -> BTreeSet<String> {
    cache
        .claims()
        .filter(|c| unsettled_claim(cache, c))
        .map(|c| c.name.clone())
        .collect()
}

impl Lifecycle {
    pub async fn reconcile<A: ClusterApi, C: CloudProvider>(
        &mut self,
        cx: &mut Ctx<'_, A, C>,
        launcher: &mut Launcher,
        now: f64,
    ) {
        let cache = cx.cache();
        let end = cache.claim_journal_end();
        let claims = match self.work.take() {
            Some((cursor, mut claims)) => match cache.claims_touched_since(cursor) {
                Some(touched) => {
                    for name in touched {
                        if cache.claim(name).is_some_and(|c| unsettled_claim(cache, c)) {
                            if !claims.contains(name) {
                                claims.insert(name.to_string());
                            }
                        } else {
                            claims.remove(name);
                        }
                    }
                    claims
                }
                None => unsettled(cache),
            },
            None => unsettled(cache),
        };
        debug_assert_eq!(
            claims,
            unsettled(cache),
            "the claim journal missed a change"
        );
        // Terminating nodes no claim owns: few, from the index of deleting nodes.
        let orphans: Vec<String> = cache
            .deleting_nodes()
            .filter(|n| {
                n.finalizers.iter().any(|f| f == TERMINATION_FINALIZER)
                    && cache.claim_of_node(n).is_none()
            })
            .map(|n| n.name.clone())
            .collect();
        self.work = Some((end, claims.clone()));
        for name in claims {
            let Some(c) = cx.cache().claim(&name).cloned() else {
                continue;
            };
            step(cx, launcher, now, &c).await;
        }
        for node in orphans {
            cx.release_finalizer(Kind::Node, &node).await;
        }
    }
}

async fn step<A: ClusterApi, C: CloudProvider>(
    cx: &mut Ctx<'_, A, C>,
    launcher: &mut Launcher,
    now: f64,
    c: &Arc<NodeClaim>,
) {
    let node = cx.cache().node_of_claim(c).map(|n| n.deleting);
    match need(c, node) {
        Need::Terminate => {
            launcher.done(&c.name);
            termination::terminate(cx, now, c).await;
        }
        Need::Launch => launcher.launch(cx, now, c).await,
        Need::Register => registration::register(cx, now, c).await,
        Need::Initialize => registration::initialize(cx, now, c).await,
        Need::Replace => {
            cx.begin_deletion(&c.name, Reason::NodeDeleted, None).await;
        }
        Need::Nothing => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_needs_the_next_step_of_its_life() {
        let launched = |registered: bool, initialized: bool| {
            let mut c = NodeClaim::default();
            c.status.provider_id = Some("fake://i-1".into());
            if registered {
                c.status.registered_at = Some(1.0);
                c.status.node_name = Some("n".into());
            }
            if initialized {
                c.status.initialized_at = Some(2.0);
            }
            c
        };
        let mut deleting = launched(true, true);
        deleting.deleted_at = Some(3.0);
        // (claim, node: None = absent, Some(terminating), need)
        let cases = [
            (NodeClaim::default(), None, Need::Launch),
            (launched(false, false), None, Need::Register),
            (launched(true, false), Some(false), Need::Initialize),
            (launched(true, true), Some(false), Need::Nothing),
            (launched(true, true), None, Need::Replace),
            (launched(true, true), Some(true), Need::Replace),
            (deleting, Some(true), Need::Terminate),
        ];
        for (c, node, want) in cases {
            assert_eq!(need(&c, node), want, "{:?} {node:?}", c.status);
        }
    }
}
