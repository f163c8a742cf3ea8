//! capstan on a real Kubernetes cluster: [`KubeApi`] (the controller's `ClusterApi` over
//! kube-rs: a watch per kind, one request per write), the CRDs capstan serves ([`crds`]), and
//! the fake cloud on a cluster ([`fake`]: its instances are `FakeInstance` objects, and each
//! booted instance becomes a kwok-managed Node).
//!
//! No decision is made here: the loops are the simulator's (`capstan_controller`).

pub mod api;
pub mod client;
pub mod convert;
pub mod crds;
pub mod fake;
pub mod nodeclasses;
pub mod rbac;
pub mod resources;
mod watch;
pub mod whatif;

pub use api::{KubeApi, Settings};
pub use client::{ConnectError, Throttle, connect};

#[cfg(test)]
mod tests {
    #[test]
    fn the_kube_adapter_holds_no_decision_code() {
        // The loops are the simulator's: this crate depends on no crate that decides.
        let manifest = include_str!("../Cargo.toml");
        let deps = manifest
            .split("[dependencies]")
            .nth(1)
            .and_then(|s| s.split("\n[").next())
            .unwrap_or_default();
        for deciding in [
            "capstan-sched",
            "capstan-pack",
            "capstan-disrupt",
            "capstan-hpa",
        ] {
            assert!(
                !deps.contains(deciding),
                "crates/kube depends on {deciding}"
            );
        }
        assert!(
            deps.contains("capstan-controller"),
            "it serves the controller's trait"
        );
    }
}
