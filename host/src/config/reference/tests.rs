//! The reference against the code: docs/configuration.md is what
//! `sonde config reference` prints, every key is documented and parsed, and
//! every `Range:` line is the range `validate` checks.

use serde_json::Value;

use super::*;
use crate::config::check::{below, out_of_range};

#[test]
fn docs_configuration_md_is_the_generated_reference() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/configuration.md");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    let generated = markdown();
    if committed != generated {
        let line = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
        panic!(
            "docs/configuration.md differs from `sonde config reference` from line {}: \
             run `./dev config-reference` (or `cargo run -p sonde -- config reference > \
             docs/configuration.md`) and commit the result",
            line + 1
        );
    }
}

#[test]
fn every_key_and_table_has_a_doc_comment_and_a_type() {
    for s in sections() {
        assert!(
            !s.doc.is_empty(),
            "[{}] has no doc comment on the field that holds it",
            s.path
        );
        for k in &s.keys {
            assert!(!k.doc.is_empty(), "{} has no doc comment", k.path);
            assert!(!k.kind.contains('`'), "{}: no TOML type for {}", k.path, k.rust_type);
        }
    }
}

#[test]
fn the_parser_sees_every_field_the_defaults_have() {
    let defaults = serde_json::to_value(Config::default()).unwrap();
    let keys: Vec<String> = sections()
        .iter()
        .flat_map(|s| s.keys.iter().map(|k| k.path.clone()))
        .collect();
    let tables: Vec<String> = sections().into_iter().map(|s| s.path).collect();
    let mut missing = Vec::new();
    leaves(&defaults, "", &mut |path| {
        let table = |t: &String| [path.to_string(), format!("{path}.<name>"), format!("{path}[]")].contains(t);
        if !keys.iter().any(|k| k == path) && !tables.iter().any(table) {
            missing.push(path.to_string());
        }
    });
    assert!(missing.is_empty(), "in the defaults, not in the reference: {missing:?}");
}

/// Calls `f` with the dotted path of every value in `v` that is not a
/// table of settings (an empty table is a map: `export.headers`, `plugin`).
fn leaves(v: &Value, path: &str, f: &mut impl FnMut(&str)) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, v) in m {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                leaves(v, &p, f);
            }
        }
        _ => f(path),
    }
}

#[test]
fn every_range_line_is_the_range_validate_checks() {
    let mut checked = 0;
    for s in sections() {
        for k in s.keys.iter().filter(|k| k.kind.starts_with("integer")) {
            let max = if k.rust_type.contains("u32") {
                u32::MAX as u64
            } else {
                u64::MAX
            };
            let probe = Probe::new(&k.path, k.range.as_deref());
            match k.range.as_deref().map(Range::parse) {
                // Prose (`at least batch_max_samples`): checked by the section's own tests.
                Some(None) => {}
                None => {
                    probe.accepts(0);
                    probe.accepts(max);
                }
                Some(Some(r)) => {
                    checked += 1;
                    let reason = |v: u64| match r.hi {
                        Some(hi) => out_of_range(v, r.lo, hi),
                        None => below(r.lo),
                    };
                    probe.accepts(r.lo);
                    if r.lo > 0 && !(r.zero_off && r.lo == 1) {
                        probe.refuses(r.lo - 1, &reason(r.lo - 1));
                    }
                    if r.zero_off {
                        probe.accepts(0);
                    }
                    match r.hi {
                        Some(hi) => {
                            probe.accepts(hi);
                            if hi < max {
                                probe.refuses(hi + 1, &reason(hi + 1));
                            }
                        }
                        None => probe.accepts(max),
                    }
                }
            }
        }
    }
    assert!(
        checked > 40,
        "only {checked} ranges were read: is the `Range:` line still parsed?"
    );
}

/// A `Range:` line: `LO ..= HI`, `at least LO`, or either after `0 (off) or`;
/// numbers may group digits with spaces and end in KiB, MiB, GiB or TiB.
#[derive(Debug)]
struct Range {
    zero_off: bool,
    lo: u64,
    hi: Option<u64>,
}

impl Range {
    fn parse(s: &str) -> Option<Range> {
        let (zero_off, s) = match s.strip_prefix("0 (off) or ") {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        if let Some(lo) = s.strip_prefix("at least ") {
            return Some(Range {
                zero_off,
                lo: number(lo)?,
                hi: None,
            });
        }
        let (lo, hi) = s.split_once(" ..= ")?;
        Some(Range {
            zero_off,
            lo: number(lo)?,
            hi: Some(number(hi)?),
        })
    }
}

fn number(s: &str) -> Option<u64> {
    let (digits, scale) = BINARY_UNITS
        .iter()
        .find_map(|(u, scale)| s.strip_suffix(u).map(|d| (d, *scale)))
        .unwrap_or((s, 1));
    let digits: String = digits.chars().filter(|c| *c != ' ').collect();
    Some(digits.parse::<u64>().ok()? * scale)
}

/// One key set to a value on top of the defaults, and validated.
struct Probe {
    /// The key as its errors name it: `<name>` is `probe`, `[]` is `[0]`.
    key: String,
    /// What its doc comment's `Range:` line says, for the failure message.
    says: String,
}

impl Probe {
    fn new(path: &str, range: Option<&str>) -> Probe {
        Probe {
            key: path.replace("<name>", "probe").replace("[]", "[0]"),
            says: range.map_or("no range".into(), |r| format!("Range: {r}")),
        }
    }

    /// The range problems `validate` finds with the key at `v`, or None
    /// when the key's type cannot hold `v`.
    fn problems(&self, v: u64) -> Option<Vec<String>> {
        let mut doc = serde_json::to_value(Config::default()).unwrap();
        let mut at = &mut doc;
        for seg in self.key.split('.') {
            let (name, index) = match seg.split_once('[') {
                Some((n, i)) => (n, Some(i.trim_end_matches(']').parse::<usize>().unwrap())),
                None => (seg, None),
            };
            let obj = at
                .as_object_mut()
                .unwrap_or_else(|| panic!("{}: not a table", self.key));
            at = obj.entry(name).or_insert_with(|| Value::Object(Default::default()));
            if let Some(i) = index {
                at = at
                    .get_mut(i)
                    .unwrap_or_else(|| panic!("{}: the default list is empty", self.key));
            }
        }
        *at = v.into();
        let cfg: Config = serde_json::from_value(doc).ok()?;
        let errs = cfg.validate().err().unwrap_or_default();
        Some(
            errs.into_iter()
                .filter(|e| e.key == self.key && is_range_reason(&e.reason))
                .map(|e| e.reason)
                .collect(),
        )
    }

    fn accepts(&self, v: u64) {
        if let Some(p) = self.problems(v) {
            assert!(
                p.is_empty(),
                "{} = {v}: validate refuses it ({p:?}), but its doc comment says {}",
                self.key,
                self.says
            );
        }
    }

    fn refuses(&self, v: u64, reason: &str) {
        let p = self
            .problems(v)
            .unwrap_or_else(|| panic!("{} cannot hold {v}", self.key));
        assert!(
            p.iter().any(|r| r == reason),
            "{} = {v}: expected {reason:?}, as its doc comment says {}, but validate gives {p:?}",
            self.key,
            self.says
        );
    }
}

/// Whether `reason` is one that [`Check::range`] or [`Check::at_least`] gives.
fn is_range_reason(reason: &str) -> bool {
    let numeric = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    if let Some(lo) = reason.strip_prefix("must be at least ") {
        return numeric(lo);
    }
    match reason.split_once(" is out of range ") {
        Some((v, r)) => numeric(v) && r.split_once("..=").is_some_and(|(a, b)| numeric(a) && numeric(b)),
        None => false,
    }
}

#[test]
fn range_lines_parse() {
    let r = Range::parse("0 (off) or 1 MiB ..= 1 TiB").unwrap();
    assert_eq!((r.zero_off, r.lo, r.hi), (true, 1 << 20, Some(1 << 40)));
    let r = Range::parse("at least 200").unwrap();
    assert_eq!((r.zero_off, r.lo, r.hi), (false, 200, None));
    assert_eq!(Range::parse("10 000 ..= 86 400 000").unwrap().hi, Some(86_400_000));
    assert!(Range::parse("at least `batch_max_samples`").is_none());
}

#[test]
fn a_key_reads_its_type_unit_default_and_range() {
    let all = sections();
    let key = |p: &str| {
        all.iter()
            .flat_map(|s| &s.keys)
            .find(|k| k.path == p)
            .unwrap_or_else(|| panic!("{p} is not in the reference"))
    };
    let t = key("export.timeout_ms");
    assert_eq!(t.kind, "integer (milliseconds)");
    assert_eq!(t.default.as_deref(), Some("`10000`"));
    assert_eq!(t.range.as_deref(), Some("1 ..= 600 000"));
    assert_eq!(
        key("export.protocol").range.as_deref(),
        Some("one of `grpc`, `http/protobuf`")
    );
    assert_eq!(
        key("cluster.role").range.as_deref(),
        Some("one of `standalone`, `agent`, `master`")
    );
    assert_eq!(key("api.tls.cert").default, None, "required");
    assert_eq!(
        key("plugin.<name>.grants.dirs[].read_only").default.as_deref(),
        Some("`true`")
    );
    assert_eq!(
        key("storage.history.disk_budget_bytes").default.as_deref(),
        Some("`1073741824` (1 GiB)")
    );
}
