//! The instance types the NodePools may launch, with prices, fetched from the cloud at most
//! every `catalog_ttl`, and the offerings recently out of capacity (the unavailable-offerings
//! cache), which are marked unavailable until their entry expires.

use crate::api::{Kind, Write};
use crate::context::Ctx;
use capstan_cloud::{CloudProvider, OfferingKey};
use capstan_model::nodepool::Condition;
use capstan_model::{InstanceType, NodePool};
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default)]
pub(crate) struct Catalog {
    /// When fetched, and the types of every NodePool merged, in name order (one variant per
    /// pool where pools see a type differently: `merge_pool_types`).
    types: Option<(f64, Vec<InstanceType>)>,
    /// Offerings that returned InsufficientCapacity, and until when they are avoided.
    unavailable: BTreeMap<OfferingKey, f64>,
    /// The NodePools the types were fetched for: a change fetches again.
    pools: Vec<NodePool>,
    /// NodePools the provider cannot launch for (their node class is missing or not its
    /// own), with why: nothing is launched for them.
    failed: BTreeMap<String, String>,
}

/// How soon types are fetched again while some NodePool cannot launch (its class may appear).
const RETRY_FAILED: f64 = 10.0;

impl Catalog {
    pub fn mark_unavailable(&mut self, key: OfferingKey, until: f64) {
        self.unavailable.insert(key, until);
    }

    pub fn is_unavailable(&self, key: &OfferingKey) -> bool {
        self.unavailable.contains_key(key)
    }

    /// Why the provider cannot launch for a NodePool, if it cannot.
    pub fn failed(&self, pool: &str) -> Option<&str> {
        self.failed.get(pool).map(String::as_str)
    }

    /// The types as last fetched (without availability applied).
    pub fn cached(&self) -> &[InstanceType] {
        self.types
            .as_ref()
            .map(|(_, t)| t.as_slice())
            .unwrap_or(&[])
    }
}

/// The cloud's warm instances, asked for on every plan that may use them (unlike the
/// catalog, they come and go by the minute); none when the provider cannot say, so the plan
/// boots instead (`purpose` names what goes on without them in the warning).
pub(crate) async fn warm_instances<A, C: CloudProvider>(
    cx: &Ctx<'_, A, C>,
    purpose: &str,
) -> Vec<capstan_model::Warm> {
    match cx.cloud.warm().await {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(error = %e, "the provider cannot say which warm instances are ready; {purpose} without them");
            Vec::new()
        }
    }
}

/// The types every NodePool may launch, with offerings marked unavailable where capacity ran
/// out recently.
pub(crate) async fn instance_types<A, C: CloudProvider>(
    cx: &mut Ctx<'_, A, C>,
    now: f64,
) -> Vec<InstanceType>
where
    A: crate::api::ClusterApi,
{
    let ttl = if cx.s.catalog.failed.is_empty() {
        cx.config.catalog_ttl
    } else {
        RETRY_FAILED.min(cx.config.catalog_ttl)
    };
    let pools = cx.s.cache.nodepool_list();
    let fresh = cx.s.catalog.pools == pools
        && cx
            .s
            .catalog
            .types
            .as_ref()
            .is_some_and(|(at, _)| now - at < ttl);
    if !fresh {
        let mut per_pool = Vec::with_capacity(pools.len());
        let mut failed = BTreeMap::new();
        for pool in &pools {
            match cx
                .cloud_call(
                    "provisioner",
                    "GetInstanceTypes",
                    cx.cloud.instance_types(pool),
                )
                .await
            {
                Ok(ts) => per_pool.push((pool.name.clone(), ts)),
                Err(e) => {
                    tracing::warn!(error = %e, pool = %pool.name, "the provider cannot launch for this NodePool");
                    failed.insert(pool.name.clone(), e.to_string());
                }
            }
        }
        cx.s.catalog.types = Some((now, capstan_model::catalog::merge_pool_types(per_pool)));
        cx.s.catalog.pools = pools;
        cx.s.catalog.failed = failed;
        report_pools(cx).await;
    }
    let catalog = &mut cx.s.catalog;
    catalog.unavailable.retain(|_, until| *until > now);
    let mut types = catalog.cached().to_vec();
    if !catalog.unavailable.is_empty() {
        for t in &mut types {
            for o in &mut t.offerings {
                let key = OfferingKey {
                    instance_type: t.name.clone(),
                    zone: o.zone.clone(),
                    capacity_type: o.capacity_type.clone(),
                };
                if catalog.unavailable.contains_key(&key) {
                    o.available = false;
                }
            }
        }
    }
    types
}

/// Writes each NodePool's conditions when they change — Ready (False with the provider's
/// reason for a pool nothing can be launched for) and, for a pool that asks for something
/// capstan does not do, Supported=False saying what it does instead — and says why once as
/// an Event.
async fn report_pools<A: crate::api::ClusterApi, C: CloudProvider>(cx: &mut Ctx<'_, A, C>) {
    let now = cx.clock.now().as_secs_f64();
    let pools: Vec<(String, Vec<String>)> =
        cx.s.catalog
            .pools
            .iter()
            .map(|p| (p.name.clone(), p.unsupported.clone()))
            .collect();
    for (name, unsupported) in pools {
        let failed = cx.s.catalog.failed.get(&name).cloned();
        let state = (
            failed.is_none(),
            failed.clone().unwrap_or_default(),
            unsupported.clone(),
        );
        if cx.s.pool_ready.get(&name) == Some(&state) {
            continue;
        }
        let at = capstan_model::time::format_rfc3339(cx.config.epoch_unix + now);
        let mut conditions = Vec::new();
        if !unsupported.is_empty() {
            conditions.push(Condition {
                type_: "Supported".into(),
                status: "False".into(),
                reason: "NotSupported".into(),
                message: unsupported.join("; "),
                last_transition_time: at.clone(),
            });
        }
        let condition = Condition {
            type_: "Ready".into(),
            status: if state.0 { "True" } else { "False" }.into(),
            reason: if state.0 {
                "Ready"
            } else {
                "NodeClassNotReady"
            }
            .into(),
            message: state.1.clone(),
            last_transition_time: at,
        };
        conditions.insert(0, condition);
        let w = Write::PoolStatus {
            name: name.clone(),
            conditions,
        };
        if cx.write(w).await.is_ok() {
            cx.s.pool_ready.insert(name.clone(), state);
        }
        for note in unsupported {
            cx.warn_once((Kind::NodePool, name.clone()), "NotSupported", note)
                .await;
        }
        if let Some(why) = failed {
            cx.warn_once((Kind::NodePool, name), "NodeClassNotReady", why)
                .await;
        }
    }
}
