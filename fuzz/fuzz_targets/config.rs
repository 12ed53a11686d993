//! Config files and `--set key=value` overrides.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sonde::config::{Config, parse_override};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(cfg) = Config::from_toml_str(text) {
        let _ = cfg.validate();
    }
    for line in text.lines() {
        let _ = parse_override(line);
    }
});
