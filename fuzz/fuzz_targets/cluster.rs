//! Cluster snapshots (`kubectl get nodes,pods,daemonsets,pdb -A -o json`), read as `plan
//! --cluster` and `consolidate --cluster` read them.
#![no_main]
use capstan_model::load::{Kind, load};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &str| {
    let kinds = [
        Kind::Pod,
        Kind::Node,
        Kind::DaemonSet,
        Kind::NodeClaim,
        Kind::PodDisruptionBudget,
    ];
    let _ = load("fuzz", data, &kinds);
});
