//! capstan's domain model: pure data and the algebra over it. No I/O, no clock, no async.
//!
//! Kubernetes objects (k8s-openapi) are converted into compact forms at the edge
//! ([`convert`], [`load`]); everything downstream reads only these forms.

pub mod awsnodeclass;
pub mod catalog;
pub mod claim;
pub mod convert;
pub mod disruption;
pub mod error;
pub mod headroom;
pub mod labels;
pub mod load;
pub mod nodepool;
pub mod overhead;
pub mod pdb;
pub mod pod;
pub mod quantity;
pub mod requirements;
pub mod resources;
pub mod selector;
pub mod taints;
pub mod time;
pub mod volume;

pub use catalog::{Catalog, InstanceType, Offering, Warm};
pub use claim::{ClaimStatus, NodeClaim};
pub use convert::Node;
pub use error::FieldError;
pub use nodepool::NodePool;
pub use pod::Pod;
pub use quantity::Quantity;
pub use requirements::{Requirement, Requirements};
pub use resources::Resources;
pub use taints::{Taint, Toleration};

#[cfg(test)]
mod fixture_tests {
    use crate::load::{Kind, load};
    use crate::requirements::Operator;
    use crate::{labels, nodepool::ConsolidationPolicy};

    #[test]
    fn a_karpenter_nodepool_manifest_loads_unchanged() {
        let text = include_str!("../testdata/karpenter-nodepool.yaml");
        let o = load("karpenter-nodepool.yaml", text, &[Kind::NodePool]).unwrap();
        assert_eq!(o.nodepools.len(), 1);
        assert_eq!(
            o.warnings.len(),
            1,
            "the EC2NodeClass is skipped with a warning: {:?}",
            o.warnings
        );
        let p = &o.nodepools[0];
        assert_eq!(p.name, "general-purpose");
        assert_eq!(p.weight, 10);
        let cat = p
            .requirements
            .get(labels::INSTANCE_CATEGORY)
            .expect("karpenter.k8s.aws key normalized");
        assert_eq!(cat.min_values, Some(2));
        assert_eq!(
            p.requirements
                .get(labels::INSTANCE_FAMILY)
                .unwrap()
                .min_values,
            Some(5)
        );
        assert!(p.requirements.allows(labels::INSTANCE_GENERATION, "7"));
        assert!(!p.requirements.allows(labels::INSTANCE_GENERATION, "2"));
        assert_eq!(
            p.requirements
                .get(labels::CAPACITY_TYPE)
                .unwrap()
                .operator(),
            Operator::In
        );
        assert!(
            p.requirements.allows(labels::CAPACITY_TYPE, "spot"),
            "explicit capacity types beat the default"
        );
        assert!(p.requirements.allows(labels::ARCH, "arm64"));
        assert!(
            p.requirements.allows(labels::OS, "windows") && !p.requirements.has_key(labels::OS),
            "os is left open, as in Karpenter v1"
        );
        assert!(
            p.requirements.allows("billing-team", "my-team"),
            "template labels become requirements"
        );
        assert_eq!(p.taints.len(), 1);
        assert_eq!(p.startup_taints.len(), 1);
        assert_eq!(p.limits["cpu"], 1_000_000);
        assert_eq!(p.limits["memory"], 1000 << 30);
        let budgets = p.budgets.valid();
        assert_eq!(budgets.len(), 3);
        assert_eq!(
            budgets[1].window.as_ref().unwrap().duration_seconds,
            8 * 3600
        );
        assert_eq!(budgets[2].reasons.as_ref().unwrap().len(), 2);
        assert_eq!(
            p.consolidation_policy,
            ConsolidationPolicy::WhenEmptyOrUnderutilized
        );
        assert_eq!(p.consolidate_after_seconds, Some(60));
        assert_eq!(p.expire_after_seconds, Some(720 * 3600));
        assert_eq!(p.termination_grace_period_seconds, Some(48 * 3600));
    }
}
