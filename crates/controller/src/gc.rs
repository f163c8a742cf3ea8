//! Garbage collection, every `gc_interval`: instances no NodeClaim owns (past `gc_grace`, as
//! their claim may still be being written) are terminated; claims whose instance is gone
//! start their termination; the cloud's drift reports are refreshed for the disruption
//! engine.

use crate::api::ClusterApi;
use crate::context::Ctx;
use crate::{Action, secs};
use capstan_cloud::{CloudError, CloudProvider, Instance, InstanceState};
use capstan_model::NodeClaim;
use capstan_model::disruption::Reason;

/// Whether `claim` (the claim named as the instance's) owns the instance: it has not launched
/// yet (its launch may be this instance), or it records this instance.
pub fn owns(claim: Option<&NodeClaim>, inst: &Instance) -> bool {
    claim.is_some_and(|c| {
        c.status.provider_id.is_none() || c.status.provider_id.as_deref() == Some(&inst.provider_id)
    })
}

/// Asks the cloud whether each owned instance drifted and keeps the answers for the
/// disruption engine (an instance it cannot answer for keeps its last one); how many drifted.
async fn note_drift<A: ClusterApi, C: CloudProvider>(
    cx: &mut Ctx<'_, A, C>,
    owned: &[&Instance],
) -> usize {
    if owned.is_empty() {
        return 0;
    }
    let answers = cx
        .cloud_call("disruption", "IsDrifted", async {
            Ok(cx.cloud.drift_of(owned).await)
        })
        .await
        .unwrap_or_default();
    let mut reported = 0;
    for (inst, answer) in owned.iter().zip(answers) {
        match answer {
            Ok(Some(d)) => {
                reported += 1;
                cx.s.provider_drift
                    .insert(inst.provider_id.clone(), d.reason);
            }
            Ok(None) => {
                cx.s.provider_drift.remove(&inst.provider_id);
            }
            Err(_) => {}
        }
    }
    reported
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Gc {
    next_at: f64,
}

impl Gc {
    pub async fn reconcile<A: ClusterApi, C: CloudProvider>(
        &mut self,
        cx: &mut Ctx<'_, A, C>,
        now: f64,
    ) {
        if now < self.next_at {
            return;
        }
        self.next_at = now + cx.config.gc_interval;
        let instances = match cx
            .cloud_call("nodeclaim.garbagecollection", "List", cx.cloud.list())
            .await
        {
            Ok(i) => i,
            Err(e) => {
                tracing::warn!(error = %e, "listing instances failed");
                return;
            }
        };
        // Claims that record a live instance of theirs, and drift reports set this pass: when
        // they account for every launched claim and every report, no claim's instance is gone
        // and no report is stale, and nothing needs the set of live provider ids.
        let mut found = 0;
        // The instances claims own, asked about drift together after the loop.
        let mut owned_now: Vec<&Instance> = Vec::new();
        for inst in &instances {
            if inst.state == InstanceState::Terminated {
                continue;
            }
            let claim = cx.cache().claim(&inst.claim_name);
            found += claim.is_some_and(|c| {
                !c.deleting() && c.status.provider_id.as_deref() == Some(&inst.provider_id)
            }) as usize;
            let owned = owns(claim.map(|c| &**c), inst);
            if !owned && now - secs(inst.launched_at) > cx.config.gc_grace {
                if !cx.may_act() {
                    note_drift(cx, &owned_now).await;
                    return;
                }
                match cx
                    .cloud_call(
                        "nodeclaim.garbagecollection",
                        "Delete",
                        cx.cloud.delete(&inst.provider_id),
                    )
                    .await
                {
                    Ok(()) | Err(CloudError::NotFound { .. }) => cx.record(
                        now,
                        Action::GarbageCollected {
                            provider_id: inst.provider_id.clone(),
                        },
                    ),
                    Err(e) => {
                        tracing::warn!(error = %e, instance = %inst.provider_id, "gc delete failed")
                    }
                }
                continue;
            }
            if owned {
                owned_now.push(inst);
            }
        }
        let reported = note_drift(cx, &owned_now).await;
        let gone_or_stale =
            found != cx.cache().launched_claims() || reported != cx.s.provider_drift.len();
        if !gone_or_stale {
            return;
        }
        let live: std::collections::HashSet<&str, foldhash::fast::FixedState> = instances
            .iter()
            .filter(|i| i.state != InstanceState::Terminated)
            .map(|i| i.provider_id.as_str())
            .collect();
        // Claims whose instance is gone.
        let gone: Vec<String> = cx
            .cache()
            .claims()
            .filter(|c| {
                !c.deleting()
                    && c.status
                        .provider_id
                        .as_ref()
                        .is_some_and(|p| !live.contains(p.as_str()))
            })
            .map(|c| c.name.clone())
            .collect();
        for claim in gone {
            cx.begin_deletion(&claim, Reason::InstanceTerminated, Some(now))
                .await;
        }
        cx.s.provider_drift.retain(|p, _| live.contains(p.as_str()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn an_instance_is_owned_by_its_claim_until_the_claim_records_another() {
        let inst = Instance {
            provider_id: "fake://i-1".into(),
            claim_name: "c".into(),
            nodepool: "default".into(),
            client_token: "c-u".into(),
            instance_type: "m7i.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: "on-demand".into(),
            price: 0.1,
            labels: Arc::default(),
            state: InstanceState::Running,
            launched_at: Duration::ZERO,
            ready_at: None,
        };
        let mut c = NodeClaim::default();
        assert!(!owns(None, &inst), "no claim");
        assert!(
            owns(Some(&c), &inst),
            "not launched yet: it may be this one"
        );
        c.status.provider_id = Some("fake://i-1".into());
        assert!(owns(Some(&c), &inst));
        c.status.provider_id = Some("fake://i-2".into());
        assert!(!owns(Some(&c), &inst), "a retried launch made another");
    }
}
