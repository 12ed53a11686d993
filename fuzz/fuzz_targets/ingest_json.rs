//! The JSON ingest body (`POST /api/ingest`): parse, then validate, with one
//! event table declared (every column type). The body is
//! `sonde::fuzzing::ingest_json`, which `./dev test` also feeds every seed in
//! `corpus/ingest_json/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| sonde::fuzzing::ingest_json(data));
