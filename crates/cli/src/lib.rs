//! The parts of the `capstan` binary that benches and integration tests reuse.

pub mod bench;
pub mod cluster_cmd;
pub mod consolidate_cmd;
pub mod hpa_cmd;
pub mod input;
pub mod plan_cmd;
pub mod simulate_cmd;
pub mod spot;
pub mod table;
