//! Instance-type catalogs in the shared format (JSON or YAML).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &str| {
    let _ = capstan_cli::input::catalog_from_text("fuzz", data);
});
