//! The instance types the NodePools may launch, with prices, fetched from the cloud at most
//! every `catalog_ttl`, and the offerings recently out of capacity (the unavailable-offerings
//! cache), which are marked unavailable until their entry expires.

use crate::context::Ctx;
use capstan_cloud::{CloudProvider, OfferingKey};
use capstan_model::InstanceType;
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default)]
pub(crate) struct Catalog {
    /// When fetched, and the types of every NodePool merged, in name order.
    types: Option<(f64, Vec<InstanceType>)>,
    /// Offerings that returned InsufficientCapacity, and until when they are avoided.
    unavailable: BTreeMap<OfferingKey, f64>,
}

impl Catalog {
    pub fn mark_unavailable(&mut self, key: OfferingKey, until: f64) {
        self.unavailable.insert(key, until);
    }

    pub fn is_unavailable(&self, key: &OfferingKey) -> bool {
        self.unavailable.contains_key(key)
    }

    /// The types as last fetched (without availability applied).
    pub fn cached(&self) -> &[InstanceType] {
        self.types
            .as_ref()
            .map(|(_, t)| t.as_slice())
            .unwrap_or(&[])
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
    let ttl = cx.config.catalog_ttl;
    let fresh =
        cx.s.catalog
            .types
            .as_ref()
            .is_some_and(|(at, _)| now - at < ttl);
    if !fresh {
        let mut merged: BTreeMap<String, InstanceType> = BTreeMap::new();
        for pool in cx.s.cache.nodepool_list() {
            match cx.cloud.instance_types(&pool).await {
                Ok(ts) => {
                    for t in ts {
                        merged.entry(t.name.clone()).or_insert(t);
                    }
                }
                Err(e) => tracing::warn!(error = %e, pool = %pool.name, "instance types"),
            }
        }
        cx.s.catalog.types = Some((now, merged.into_values().collect()));
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
