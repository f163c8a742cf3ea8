//! Simulator scenarios (YAML), checked and compiled.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &str| {
    let _ = capstan_sim::scenario::Scenario::parse("fuzz", data);
});
