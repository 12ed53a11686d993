//! A compressed OTLP/HTTP body (`Content-Encoding: gzip` or `zstd`): whatever
//! the bytes, decoding ends, never returns more than the limit, and an
//! uncompressed body comes back as it was.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sonde::ingest::otlp::compression::{BodyError, decode};

const LIMIT: usize = 64 << 10;

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    let encoding = ["gzip", "zstd", "identity"][which as usize % 3];
    let body = bytes::Bytes::copy_from_slice(body);
    match decode(Some(encoding), body.clone(), LIMIT) {
        Ok(out) => {
            assert!(encoding == "identity" || out.len() <= LIMIT);
            if encoding == "identity" {
                assert_eq!(out, body);
            }
        }
        Err(BodyError::TooLarge { limit }) => assert_eq!(limit, LIMIT),
        Err(BodyError::Corrupt(_)) => assert_ne!(encoding, "identity"),
        Err(BodyError::Unsupported(m)) => panic!("{encoding} refused: {m}"),
    }
});
