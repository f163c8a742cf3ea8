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
pub mod resources;
mod watch;
pub mod whatif;

pub use api::{KubeApi, Settings};
pub use client::{ConnectError, Throttle, connect};
