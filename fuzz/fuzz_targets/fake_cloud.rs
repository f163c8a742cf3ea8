//! The fake cloud's configuration (YAML).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &str| {
    let _ = capstan_fake_cloud::FakeCloudConfig::from_yaml("fuzz", data);
});
