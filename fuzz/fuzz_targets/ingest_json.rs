//! The JSON ingest body (`POST /api/ingest`): parse, then validate.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sonde::ingest::json::Body;

fuzz_target!(|data: &[u8]| {
    if let Ok(body) = serde_json::from_slice::<Body>(data) {
        let rows = body.rows();
        if let Ok(report) = body.into_report(1, &Default::default()) {
            // Validation may drop nothing silently: what it accepts is all there.
            assert_eq!(report.rows(), rows);
        }
    }
});
