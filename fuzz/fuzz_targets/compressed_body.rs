//! A compressed OTLP/HTTP body (`Content-Encoding: gzip` or `zstd`): whatever
//! the bytes, decoding ends, never returns more than the limit, and an
//! uncompressed body comes back as it was. The body is
//! `sonde::fuzzing::compressed_body`, which `./dev test` also feeds every seed
//! in `corpus/compressed_body/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| sonde::fuzzing::compressed_body(data));
