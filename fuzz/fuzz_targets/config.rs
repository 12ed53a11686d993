//! Config files and `--set key=value` overrides. The body is
//! `sonde::fuzzing::config`, which `./dev test` also feeds every seed in
//! `corpus/config/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| sonde::fuzzing::config(data));
