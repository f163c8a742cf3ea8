//! Kubernetes quantities (`500m`, `1Gi`, `1e3`): parse, and print what parsed.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &str| {
    if let Ok(q) = capstan_model::Quantity::parse(data) {
        let _ = (q.milli_ceil(), q.units_ceil(), q.to_string());
    }
});
