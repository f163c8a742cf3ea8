//! `capstan hpa decide` input, and the decision on every tick that reads.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &str| {
    if let Ok((ticks, _)) = capstan_cli::hpa_cmd::read_ticks("fuzz", data) {
        for t in &ticks {
            let _ = capstan_hpa::decide(t);
        }
    }
});
