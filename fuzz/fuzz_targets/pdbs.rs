//! PodDisruptionBudget lists.
#![no_main]
use capstan_model::load::{Kind, load};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &str| {
    let _ = load("fuzz", data, &[Kind::PodDisruptionBudget]);
});
