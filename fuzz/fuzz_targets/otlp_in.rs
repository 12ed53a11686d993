//! OTLP in: a request body for one of the three signals (the first byte
//! picks which), as the receiver decodes and maps it; metrics checked against
//! prost. The body is `sonde::fuzzing::otlp_in`, which `./dev test` also
//! feeds every seed in `corpus/otlp_in/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| sonde::fuzzing::otlp_in(data));
