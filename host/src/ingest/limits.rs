//! How long a name or attribute may be, and how many attributes one origin or
//! row may carry (`ingest.max_name_bytes` and its neighbours). Every string a
//! job sends can end up as a series attribute and a key inside every plugin,
//! so each receiver bounds them before the hub sees a report.
//!
//! The two receivers answer an overlong string differently:
//! - the JSON ingest refuses the request (422 naming the field and the
//!   limit): its callers are scripts a person writes, and a clear refusal is
//!   what lets them fix the script;
//! - OTLP cuts the string (or drops the attributes past the count) and counts
//!   it as `truncated`, as the OpenTelemetry SDKs' own attribute limits and
//!   collectors do: an OTLP sender cannot act on a per-field error, and a
//!   refused export would lose every good row of the batch with it.

use super::config::IngestConfig;
use super::error::{Invalid, invalid};
use super::{Origin, Report};
use crate::model::{AttrValue, Attributes};

/// The bounds, taken from `[ingest]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub name: usize,
    pub attribute_key: usize,
    pub attribute_value: usize,
    pub attributes: usize,
}

impl From<&IngestConfig> for Limits {
    fn from(c: &IngestConfig) -> Self {
        Limits {
            name: c.max_name_bytes,
            attribute_key: c.max_attribute_key_bytes,
            attribute_value: c.max_attribute_value_bytes,
            attributes: c.max_attributes,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::from(&IngestConfig::default())
    }
}

fn over(field: impl Into<String>, len: usize, limit: usize, key: &str) -> Invalid {
    invalid(field, format!("{len} bytes; at most {limit} (ingest.{key})"))
}

/// A key shown inside a field name, cut short so that the error stays readable.
fn shown(key: &str) -> String {
    match key.char_indices().nth(32) {
        Some((i, _)) => format!("{}…", &key[..i]),
        None => key.to_string(),
    }
}

impl Limits {
    /// A name (job, node, metric, ...) within `ingest.max_name_bytes`.
    pub fn check_name(&self, field: impl Into<String>, s: &str) -> Result<(), Invalid> {
        match s.len() > self.name {
            true => Err(over(field, s.len(), self.name, "max_name_bytes")),
            false => Ok(()),
        }
    }

    /// A free text (event body, node-event reason) within `ingest.max_attribute_value_bytes`.
    pub fn check_text(&self, field: impl Into<String>, s: &str) -> Result<(), Invalid> {
        match s.len() > self.attribute_value {
            true => Err(over(field, s.len(), self.attribute_value, "max_attribute_value_bytes")),
            false => Ok(()),
        }
    }

    /// The attributes of `owner` (`origin`, `points[3]`, ...): their count,
    /// each key and each text value. Numbers and booleans are short by nature.
    pub fn check_attributes<'a>(
        &self,
        owner: &str,
        attrs: impl ExactSizeIterator<Item = (&'a str, Option<&'a str>)>,
    ) -> Result<(), Invalid> {
        if attrs.len() > self.attributes {
            return Err(invalid(
                format!("{owner}.attributes"),
                format!(
                    "{} attributes; at most {} (ingest.max_attributes)",
                    attrs.len(),
                    self.attributes
                ),
            ));
        }
        for (k, v) in attrs {
            if k.len() > self.attribute_key {
                return Err(over(
                    format!("{owner}.attributes.{}", shown(k)),
                    k.len(),
                    self.attribute_key,
                    "max_attribute_key_bytes",
                ));
            }
            if let Some(v) = v.filter(|v| v.len() > self.attribute_value) {
                return Err(over(
                    format!("{owner}.attributes.{k}"),
                    v.len(),
                    self.attribute_value,
                    "max_attribute_value_bytes",
                ));
            }
        }
        Ok(())
    }

    /// Cuts every string of `report` that is over its bound and drops the
    /// attributes past the count. Returns how many strings were cut plus how
    /// many attributes were dropped (0 for a report within bounds, which is
    /// then left untouched).
    pub fn clip(&self, r: &mut Report) -> u64 {
        let mut n = self.clip_origin(&mut r.origin);
        for p in &mut r.progress {
            n += cut(&mut p.name, self.name);
        }
        for t in &mut r.timings {
            n += cut(&mut t.name, self.name);
        }
        for s in &mut r.series {
            n += cut(&mut s.metric, self.name) + cut(&mut s.unit, self.name);
            n += self.clip_attributes(&mut s.attributes);
        }
        for e in &mut r.node_events {
            n += cut(&mut e.kind, self.name) + cut(&mut e.reason, self.attribute_value);
            n += self.clip_attributes(&mut e.attributes);
        }
        for e in &mut r.custom {
            n += cut(&mut e.name, self.name) + cut(&mut e.body, self.attribute_value);
            n += self.clip_attributes(&mut e.attributes);
        }
        for t in &mut r.tables {
            for c in t.rows.iter_mut().flatten() {
                if let crate::ingest::tables::Cell::S(s) = c {
                    n += cut(s, self.attribute_value);
                }
            }
        }
        n
    }

    fn clip_origin(&self, o: &mut Origin) -> u64 {
        let mut n = cut(&mut o.job, self.name) + cut(&mut o.node, self.name) + cut(&mut o.role, self.name);
        n += drop_past(&mut o.attributes, self.attributes);
        for (k, v) in &mut o.attributes {
            n += cut(k, self.attribute_key) + cut(v, self.attribute_value);
        }
        n
    }

    fn clip_attributes(&self, attrs: &mut Attributes) -> u64 {
        let mut n = drop_past(attrs, self.attributes);
        for (k, v) in attrs.iter_mut() {
            n += cut(k, self.attribute_key);
            if let AttrValue::Str(s) = v {
                n += cut(s, self.attribute_value);
            }
        }
        n
    }
}

/// Cuts `s` to at most `max` bytes, at a character boundary; 1 if it was cut.
fn cut(s: &mut String, max: usize) -> u64 {
    if s.len() <= max {
        return 0;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    1
}

/// Keeps the first `max` entries (the sender's order); the number dropped.
fn drop_past<T>(v: &mut Vec<T>, max: usize) -> u64 {
    let dropped = v.len().saturating_sub(max);
    v.truncate(max);
    dropped as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::{CustomEvent, ForeignSeries};
    use crate::model::SeriesKind;

    fn small() -> Limits {
        Limits {
            name: 8,
            attribute_key: 4,
            attribute_value: 6,
            attributes: 2,
        }
    }

    #[test]
    fn checks_name_the_field_and_the_setting() {
        let l = small();
        assert!(l.check_name("origin.job", "12345678").is_ok());
        let e = l.check_name("origin.job", "123456789").unwrap_err();
        assert_eq!(e.field, "origin.job");
        assert_eq!(e.reason, "9 bytes; at most 8 (ingest.max_name_bytes)");
        let attrs = [("a", Some("x")), ("b", None), ("c", None)];
        let e = l.check_attributes("origin", attrs.into_iter()).unwrap_err();
        assert_eq!(e.field, "origin.attributes");
        assert!(e.reason.contains("at most 2 (ingest.max_attributes)"), "{e}");
        let e = l
            .check_attributes("points[1]", [("toolong", None)].into_iter())
            .unwrap_err();
        assert!(e.reason.contains("ingest.max_attribute_key_bytes"), "{e}");
        let e = l
            .check_attributes("events[0]", [("k", Some("1234567"))].into_iter())
            .unwrap_err();
        assert_eq!(e.field, "events[0].attributes.k");
        assert!(e.reason.contains("at most 6"), "{e}");
        assert!(l.check_text("events[0].body", "1234567").is_err());
    }

    #[test]
    fn clipping_cuts_at_a_character_and_counts_every_cut() {
        let l = small();
        let mut r = Report {
            origin: Origin {
                job: "ééééé".into(), // 10 bytes: cut to 4 characters (8 bytes)
                node: "n".into(),
                attributes: vec![
                    ("a".into(), "1".into()),
                    ("b".into(), "2".into()),
                    ("c".into(), "3".into()),
                ],
                ..Default::default()
            },
            series: vec![ForeignSeries {
                metric: "a_long_metric".into(),
                unit: String::new(),
                kind: SeriesKind::Gauge,
                attributes: vec![("gpu_index".into(), AttrValue::Str("0123456789".into()))],
            }],
            custom: vec![CustomEvent {
                time: 0,
                name: "ok".into(),
                body: "short".into(),
                attributes: vec![],
            }],
            ..Default::default()
        };
        assert_eq!(l.clip(&mut r), 5, "job, one origin attribute, metric, key, value");
        assert_eq!(r.origin.job, "éééé");
        assert_eq!(r.origin.attributes.len(), 2);
        assert_eq!(r.series[0].metric, "a_long_m");
        assert_eq!(
            r.series[0].attributes[0],
            ("gpu_".into(), AttrValue::Str("012345".into()))
        );
        assert_eq!(l.clip(&mut r), 0, "a report within bounds is left as it is");
    }
}
