//! End-to-end tests of the `capstan` binary: one integration-test binary for the workspace.

#[cfg(feature = "aws")]
mod aws;
mod bench;
mod cloud;
mod cluster;
mod consolidate;
mod deploy;
mod hpa;
mod karpenter;
mod plan;
mod simulate;
