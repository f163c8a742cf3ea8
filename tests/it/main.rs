//! End-to-end tests of the `capstan` binary: one integration-test binary for the workspace.

mod bench;
mod cloud;
mod hpa;
mod plan;
