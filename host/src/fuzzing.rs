//! The bodies of the fuzz targets: one function per decoder of outside input,
//! fed arbitrary bytes, asserting what must hold whatever they are.
//!
//! `fuzz/fuzz_targets/<name>.rs` calls `<name>` here under libFuzzer (`./dev
//! fuzz`, the coverage-guided campaign), and the tests below feed the same
//! function every seed in `fuzz/corpus/<name>/` as an ordinary test (`./dev
//! test`, `./dev test-quick`), so the seeds, and any reproducer added to
//! them, run on every test run without an instrumented build.
//!
//! Depends on `ingest`, `config` and `plugin`; nothing depends on it.

use std::sync::LazyLock;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;

use crate::config::{Config, parse_override};
use crate::ingest::Report;
use crate::ingest::json::{Body, TableRules};
use crate::ingest::otlp::compression::{BodyError, decode};
use crate::ingest::otlp::{log_reports, metrics_reports, trace_reports, wire};
use crate::plugin::bindings::types::{ColumnDecl, ColumnDefault, ColumnType, TableDecl, Value};
use crate::plugin::config::check_plugin_name;
use crate::plugin::engine::PluginEngine;
use crate::plugin::tables::{Owner, TableDecl as Declared, TableRegistry};

/// OTLP in: what the receiver does with a request body, for all three
/// signals (the first byte picks which).
///
/// Metrics bodies go to the receiver's own in-place reader (`otlp::wire`),
/// and are checked against prost: whatever prost accepts, the reader must
/// accept too, with the same points. Traces and logs are decoded with prost,
/// as the receiver does, then mapped.
pub fn otlp_in(data: &[u8]) {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    // The property is that nothing panics, whatever the bytes; the reports
    // are built in full (every string and attribute copied) so that it holds
    // for the mapping too, not just for the decoder.
    let reports = match which % 3 {
        0 => {
            let read = wire::metrics_reports(body);
            if let Ok(req) = ExportMetricsServiceRequest::decode(body) {
                let read = read.as_ref().expect("prost decoded it, so must the receiver's reader");
                let (again, skipped) = metrics_reports(&req);
                assert_eq!(points(&read.reports), points(&again), "same points either way");
                assert_eq!(read.skipped, skipped, "same points skipped");
            }
            match read {
                Ok(d) => d.reports,
                Err(_) => return,
            }
        }
        1 => match ExportTraceServiceRequest::decode(body) {
            Ok(req) => trace_reports(&req),
            Err(_) => return,
        },
        _ => match ExportLogsServiceRequest::decode(body) {
            Ok(req) => log_reports(&req),
            Err(_) => return,
        },
    };
    std::hint::black_box(reports);
}

/// Each point with its series resolved, its time aside (a point without one
/// is stamped when it is read).
fn points(reports: &[Report]) -> Vec<String> {
    reports
        .iter()
        .flat_map(|r| {
            r.points.iter().map(move |p| {
                let s = &r.series[p.series as usize];
                format!(
                    "{:?}|{}|{}|{:?}|{:?}|{:x}",
                    r.origin,
                    s.metric,
                    s.unit,
                    s.kind,
                    s.attributes,
                    p.value.to_bits()
                )
            })
        })
        .collect()
}

/// One event table declared with every column type, so that the rows of
/// tables in a fuzzed ingest body are typed too.
static TABLES: LazyLock<TableRegistry> = LazyLock::new(|| {
    let col = |name: &str, type_, default| ColumnDecl {
        name: name.into(),
        type_,
        default,
        labels: vec![],
    };
    let t = TableDecl {
        name: "t".into(),
        description: String::new(),
        columns: vec![
            col("a", ColumnType::U8, ColumnDefault::Required),
            col("b", ColumnType::U64, ColumnDefault::Zero),
            col("c", ColumnType::S32, ColumnDefault::Value(Value::Int(-1))),
            col("d", ColumnType::F64, ColumnDefault::Zero),
            col("e", ColumnType::Boolean, ColumnDefault::Zero),
            col("callsite", ColumnType::String, ColumnDefault::Zero),
            col("f", ColumnType::Timestamp, ColumnDefault::Received),
        ],
    };
    let r = TableRegistry::default();
    let owner = Owner {
        plugin: "fuzz".into(),
        instance: 1,
    };
    r.declare(&owner, &[Declared::from_wit(t).unwrap()]).unwrap();
    r
});

/// The JSON ingest body (`POST /api/ingest`): parse, then validate. Every row
/// of an accepted body is kept or refused, none lost.
pub fn ingest_json(data: &[u8]) {
    if let Ok(body) = serde_json::from_slice::<Body>(data) {
        let rows = body.rows();
        let rules = TableRules {
            registry: &TABLES,
            keep_unknown: false,
        };
        if let Ok(c) = body.convert(1, &Default::default(), &rules) {
            // Validation may drop nothing silently: every row is kept or refused.
            assert_eq!(c.report.rows() + c.refused_rows, rows);
            assert!(c.refused_rows == 0 || !c.refused.is_empty());
        }
    }
}

/// A config file, and each of its lines as a `--set key=value` override.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(cfg) = Config::from_toml_str(text) {
        let _ = cfg.validate();
    }
    for line in text.lines() {
        let _ = parse_override(line);
    }
}

/// An uploaded plugin: the name check (the bytes up to the first NUL are the
/// name), then what loading does with the rest (header check, compile,
/// contract check) in `engine`. Anything but a component built against an
/// accepted contract must come back as an error, never a panic.
pub fn plugin_upload(engine: &PluginEngine, data: &[u8]) {
    let (name, bytes) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i..]),
        None => (&data[..0], data),
    };
    if let Ok(name) = std::str::from_utf8(name)
        && check_plugin_name(name).is_ok()
    {
        assert!(
            !name.contains('/') && !name.contains(".."),
            "{name:?} passed the name check"
        );
    }
    let _ = engine.load_component(bytes);
}

/// A compressed OTLP/HTTP body (`Content-Encoding: gzip` or `zstd`, the
/// first byte picks which, or none): whatever the bytes, decoding ends, never
/// returns more than the limit, and an uncompressed body comes back as it was.
pub fn compressed_body(data: &[u8]) {
    const LIMIT: usize = 64 << 10;
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
}

/// The seeds replayed: every file in `fuzz/corpus/<target>/` through the
/// target's function, as `cargo fuzz run <target> corpus/<target>` would
/// start with.
#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;

    fn fuzz_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
    }

    /// Feeds each file of `fuzz/corpus/<target>/` to `f`; a panic names the
    /// file (rerun it under libFuzzer: `cd fuzz && cargo fuzz run --dev
    /// --sanitizer none <target> corpus/<target>/<file>`).
    fn replay(target: &str, f: impl Fn(&[u8])) {
        let dir = fuzz_dir().join("corpus").join(target);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{} has no seeds", dir.display());
        for file in files {
            let data = std::fs::read(&file).unwrap();
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&data)));
            assert!(run.is_ok(), "fuzz target {target} panicked on {}", file.display());
        }
    }

    /// The targets replayed below, one per file in `fuzz/fuzz_targets/`.
    const TARGETS: [&str; 5] = ["otlp_in", "ingest_json", "config", "plugin_upload", "compressed_body"];

    #[test]
    fn every_fuzz_target_is_replayed_here() {
        let mut targets: Vec<String> = std::fs::read_dir(fuzz_dir().join("fuzz_targets"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "rs"))
            .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
            .collect();
        targets.sort();
        let mut here = TARGETS.map(String::from).to_vec();
        here.sort();
        assert_eq!(
            targets, here,
            "a fuzz target without a replay test here (or the reverse)"
        );
    }

    #[test]
    fn otlp_in_seeds() {
        replay("otlp_in", otlp_in);
    }

    #[test]
    fn ingest_json_seeds() {
        replay("ingest_json", ingest_json);
    }

    #[test]
    fn config_seeds() {
        replay("config", config);
    }

    #[test]
    fn plugin_upload_seeds() {
        let cache = tempfile::tempdir().unwrap();
        let engine = PluginEngine::new(cache.path()).unwrap();
        replay("plugin_upload", |data| plugin_upload(&engine, data));
    }

    #[test]
    fn compressed_body_seeds() {
        replay("compressed_body", compressed_body);
    }
}
