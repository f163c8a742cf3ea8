//! NodePool manifests (capstan.dev/v1 and karpenter.sh/v1), compiled.
#![no_main]
use capstan_model::load::{Kind, load};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &str| {
    let _ = load("fuzz", data, &[Kind::NodePool]);
});
