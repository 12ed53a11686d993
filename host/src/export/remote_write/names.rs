//! OpenTelemetry names → Prometheus names, the way Prometheus names what it
//! receives over OTLP (the rules are tabled in the module doc of `remote_write`),
//! and the way back for what the query side finds in an engine.
//!
//! ```text
//!  sonde series (name, unit, kind, attributes) + resource
//!     │ series_labels                         (the writer, and the reader's selectors)
//!     ▼
//!  Prometheus label set {__name__, host_name, sonde_job, job, instance, …}
//!     │ series_from_labels                    (the reader, for series only the engine lists)
//!     ▼
//!  sonde series: name = __name__ as stored, unit "", counter when `_total`,
//!  attributes = the labels less job/instance, known keys given their dots back
//! ```
//! The way back cannot undo what translation merged (`a.b` and `a_b` are one
//! label), so it keeps the stored name and makes the round trip exact instead:
//! `series_labels(series_from_labels(l)) == l` once job/instance are added back
//! from the same resource.

use std::collections::BTreeMap;

use crate::model::MetricKind;

/// The Prometheus metric name for an OpenTelemetry metric: `name` split into
/// words at every character outside `[A-Za-z0-9:]`, the unit's word appended
/// unless the name already has it, `_total` for monotonic counters, `_ratio`
/// for gauges of unit `1`, joined with `_`; a leading digit gets a `_` before it.
/// Returns an empty string when nothing usable is left (the series is refused).
///
/// `system.memory.usage` (By, updown) → `system_memory_usage_bytes`;
/// `process.cpu.time` (s, counter) → `process_cpu_time_seconds_total`;
/// `system.cpu.utilization` (1, gauge) → `system_cpu_utilization_ratio`.
pub fn prometheus_metric_name(name: &str, unit: &str, kind: MetricKind) -> String {
    let mut words: Vec<&str> = name
        .split(|c: char| !is_name_char(c))
        .filter(|w| !w.is_empty())
        .collect();
    let (main, per) = unit_words(unit);
    let main_unit = main.as_deref().map(clean_unit).filter(|u| !u.is_empty());
    let per_unit = per.as_deref().map(clean_unit).filter(|u| !u.is_empty());
    // Owned words are appended after the borrowed ones; collect into Strings at the end.
    let mut tail: Vec<String> = Vec::new();
    if let Some(u) = &main_unit
        && !words.contains(&u.as_str())
    {
        tail.push(u.clone());
    }
    if let Some(p) = &per_unit {
        let has = words.windows(2).any(|w| w[0] == "per" && w[1] == p.as_str());
        if !has {
            tail.push("per".into());
            tail.push(p.clone());
        }
    }
    match kind {
        MetricKind::Counter => {
            words.retain(|w| *w != "total");
            tail.retain(|w| w != "total");
            tail.push("total".into());
        }
        MetricKind::Gauge if unit.trim() == "1" => {
            words.retain(|w| *w != "ratio");
            tail.retain(|w| w != "ratio");
            tail.push("ratio".into());
        }
        _ => {}
    }
    let mut out = String::with_capacity(name.len() + 16);
    for w in words.iter().copied().chain(tail.iter().map(String::as_str)) {
        if !out.is_empty() {
            out.push('_');
        }
        out.push_str(w);
    }
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// The Prometheus label name for an attribute key: every character outside
/// `[A-Za-z0-9_]` becomes `_`, runs of `_` become one, a leading digit gets
/// `key_` before it. None when the key has nothing but underscores or is empty.
///
/// `host.name` → `host_name`; `gpu.0.temp` → `gpu_0_temp`; `1st` → `key_1st`.
pub fn prometheus_label_name(key: &str) -> Option<String> {
    let mut out = String::with_capacity(key.len());
    for c in key.chars() {
        let c = if c.is_ascii_alphanumeric() { c } else { '_' };
        if c == '_' && out.ends_with('_') {
            continue;
        }
        out.push(c);
    }
    if out.chars().all(|c| c == '_') {
        return None;
    }
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert_str(0, "key_");
    }
    Some(out)
}

/// The full label set of one series, sorted by name (byte order, as the
/// remote-write spec asks; `__name__` sorts before every lower-case name):
/// - `__name__` from [`prometheus_metric_name`];
/// - each attribute under its [`prometheus_label_name`]; keys that collide once
///   translated have their values joined with `;`, in the order of the original keys;
/// - `job` = `service.namespace/service.name` (or `service.name`) and
///   `instance` = `service.instance.id` from the resource, replacing attributes of those names;
/// - each resource attribute named in `promote`, unless an attribute already has that label.
///
/// Empty values are left out (Prometheus reads an empty label as an absent one).
/// None when the metric name translates to nothing.
pub fn series_labels(
    name: &str,
    unit: &str,
    kind: MetricKind,
    attributes: &[(String, String)],
    resource: &[(String, String)],
    promote: &[String],
) -> Option<Vec<(String, String)>> {
    let metric = prometheus_metric_name(name, unit, kind);
    if metric.is_empty() {
        return None;
    }
    // (translated, original key) → value; BTreeMap keeps collisions in original-key order.
    let mut by_key: BTreeMap<(String, &str), &str> = BTreeMap::new();
    for (k, v) in attributes {
        if v.is_empty() {
            continue;
        }
        if let Some(l) = prometheus_label_name(k) {
            by_key.insert((l, k.as_str()), v.as_str());
        }
    }
    let mut labels: BTreeMap<String, String> = BTreeMap::new();
    for ((l, _), v) in by_key {
        labels
            .entry(l)
            .and_modify(|cur| {
                cur.push(';');
                cur.push_str(v);
            })
            .or_insert_with(|| v.to_string());
    }
    let res = |key: &str| {
        resource
            .iter()
            .find(|(k, v)| k == key && !v.is_empty())
            .map(|(_, v)| v.as_str())
    };
    if let Some(svc) = res("service.name") {
        let job = match res("service.namespace") {
            Some(ns) => format!("{ns}/{svc}"),
            None => svc.to_string(),
        };
        labels.insert("job".into(), job);
    }
    if let Some(id) = res("service.instance.id") {
        labels.insert("instance".into(), id.to_string());
    }
    for key in promote {
        if let (Some(v), Some(l)) = (res(key), prometheus_label_name(key)) {
            labels.entry(l).or_insert_with(|| v.to_string());
        }
    }
    labels.insert("__name__".into(), metric);
    Some(labels.into_iter().collect())
}

/// Attribute keys sonde itself writes, given back their dots when a label
/// read from an engine is turned into an attribute (so `node` and `job`
/// filters, and the dashboard's labels, read the same as for live series).
pub const KNOWN_ATTRIBUTE_KEYS: &[&str] = &[
    "host.name",
    "sonde.job",
    "sonde.rank",
    "sonde.local_rank",
    "sonde.role",
    "sonde.agent",
    "sonde.cluster",
    "service.name",
];

/// A series as an engine lists it, turned back into sonde's terms.
#[derive(Clone, Debug, PartialEq)]
pub struct SeriesFromLabels {
    /// `__name__` unchanged: the original name cannot be recovered.
    pub name: String,
    /// Counter when the name ends in `_total`, else gauge.
    pub kind: MetricKind,
    /// Every label but `__name__`, `job` and `instance` (which come from the
    /// writer's resource), sorted by key.
    pub attributes: Vec<(String, String)>,
}

/// The way back from a stored label set; None without a `__name__`.
/// With unit `""`, translating the result again with [`series_labels`] and
/// the writer's resource gives `labels` back.
pub fn series_from_labels(labels: &BTreeMap<String, String>) -> Option<SeriesFromLabels> {
    let name = labels.get("__name__")?.clone();
    let kind = if name.ends_with("_total") {
        MetricKind::Counter
    } else {
        MetricKind::Gauge
    };
    let mut attributes: Vec<(String, String)> = labels
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "__name__" | "job" | "instance"))
        .map(|(k, v)| {
            let key = KNOWN_ATTRIBUTE_KEYS
                .iter()
                .find(|known| prometheus_label_name(known).as_deref() == Some(k.as_str()))
                .map_or_else(|| k.clone(), |known| known.to_string());
            (key, v.clone())
        })
        .collect();
    attributes.sort();
    Some(SeriesFromLabels { name, kind, attributes })
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == ':'
}

/// The unit's main and per parts, mapped to Prometheus words but not cleaned.
/// Parts that are blank or annotations (`{request}`) give None.
fn unit_words(unit: &str) -> (Option<String>, Option<String>) {
    let (main, per) = match unit.split_once('/') {
        Some((m, p)) => (m.trim(), Some(p.trim())),
        None => (unit.trim(), None),
    };
    let usable = |s: &str| !s.is_empty() && !s.contains(['{', '}']);
    let main = usable(main).then(|| main_unit_word(main).to_string());
    let per = per.filter(|p| usable(p)).map(|p| per_unit_word(p).to_string());
    (main, per)
}

fn main_unit_word(u: &str) -> &str {
    match u {
        "d" => "days",
        "h" => "hours",
        "min" => "minutes",
        "s" => "seconds",
        "ms" => "milliseconds",
        "us" => "microseconds",
        "ns" => "nanoseconds",
        "By" => "bytes",
        "KiBy" => "kibibytes",
        "MiBy" => "mebibytes",
        "GiBy" => "gibibytes",
        "TiBy" => "tibibytes",
        "KBy" => "kilobytes",
        "MBy" => "megabytes",
        "GBy" => "gigabytes",
        "TBy" => "terabytes",
        "m" => "meters",
        "V" => "volts",
        "A" => "amperes",
        "J" => "joules",
        "W" => "watts",
        "g" => "grams",
        "Cel" => "celsius",
        "Hz" => "hertz",
        "%" => "percent",
        "1" => "",
        other => other,
    }
}

fn per_unit_word(u: &str) -> &str {
    match u {
        "s" => "second",
        "m" => "minute",
        "h" => "hour",
        "d" => "day",
        "w" => "week",
        "mo" => "month",
        "y" => "year",
        other => other,
    }
}

/// A unit word made name-safe: outside `[A-Za-z0-9:]` → `_`, runs collapsed, no `_` at either end.
fn clean_unit(u: &str) -> String {
    let mut out = String::with_capacity(u.len());
    for c in u.chars() {
        let c = if is_name_char(c) { c } else { '_' };
        if c == '_' && (out.is_empty() || out.ends_with('_')) {
            continue;
        }
        out.push(c);
    }
    while out.ends_with('_') {
        out.pop();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use MetricKind::*;

    #[test]
    fn remote_write_metric_names_follow_prometheus_otlp_rules() {
        let cases: &[(&str, &str, MetricKind, &str)] = &[
            ("system.memory.usage", "By", UpDownCounter, "system_memory_usage_bytes"),
            ("system.memory.usage", "By", Gauge, "system_memory_usage_bytes"),
            ("process.cpu.time", "s", Counter, "process_cpu_time_seconds_total"),
            ("system.cpu.utilization", "1", Gauge, "system_cpu_utilization_ratio"),
            // unit 1 adds nothing to counters and updowns
            ("requests.count", "1", Counter, "requests_count_total"),
            ("queue.depth", "1", UpDownCounter, "queue_depth"),
            // annotations are not units
            (
                "http.server.active_requests",
                "{request}",
                UpDownCounter,
                "http_server_active_requests",
            ),
            ("sonde.requests", "{request}", Counter, "sonde_requests_total"),
            // a word already in the name is not repeated; `total` and `ratio` move to the end
            ("latency.seconds", "s", Gauge, "latency_seconds"),
            ("errors.total.count", "", Counter, "errors_count_total"),
            ("hit.ratio.cache", "1", Gauge, "hit_cache_ratio"),
            // per units
            ("network.io.rate", "By/s", Gauge, "network_io_rate_bytes_per_second"),
            ("packets", "{packet}/s", Gauge, "packets_per_second"),
            ("speed.per.second", "m/s", Gauge, "speed_per_second_meters"),
            // unknown units are kept, made name-safe
            ("gpu.power", "mW", Gauge, "gpu_power_mW"),
            ("disk.io", "kB-x", Gauge, "disk_io_kB_x"),
            ("temp", "Cel", Gauge, "temp_celsius"),
            ("util", "%", Gauge, "util_percent"),
            // separators collapse, colons stay, leading digits get an underscore
            ("a..b__c", "", Gauge, "a_b_c"),
            ("__x__", "", Gauge, "x"),
            ("job:rate:5m", "", Gauge, "job:rate:5m"),
            ("9lives", "", Gauge, "_9lives"),
            ("héllo.wörld", "", Gauge, "h_llo_w_rld"),
            ("...", "", Gauge, ""),
            // as in Prometheus, the unit alone still makes a name
            ("...", "By", Gauge, "bytes"),
        ];
        for (name, unit, kind, want) in cases {
            assert_eq!(
                prometheus_metric_name(name, unit, *kind),
                *want,
                "{name} [{unit}] {kind:?}"
            );
        }
    }

    #[test]
    fn remote_write_label_names_are_sanitized() {
        assert_eq!(prometheus_label_name("host.name").as_deref(), Some("host_name"));
        assert_eq!(prometheus_label_name("gpu.0.temp").as_deref(), Some("gpu_0_temp"));
        assert_eq!(prometheus_label_name("1st").as_deref(), Some("key_1st"));
        assert_eq!(prometheus_label_name("a..b").as_deref(), Some("a_b"));
        assert_eq!(prometheus_label_name("__name__").as_deref(), Some("_name_"));
        assert_eq!(prometheus_label_name("Rank").as_deref(), Some("Rank"));
        assert_eq!(prometheus_label_name("..."), None);
        assert_eq!(prometheus_label_name(""), None);
    }

    #[test]
    fn remote_write_series_labels_take_job_instance_and_promoted_resource() {
        let s = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
        };
        let attrs = s(&[
            ("gpu.id", "0"),
            ("gpu_id", "1"),
            ("empty", ""),
            ("job", "mine"),
            ("host.name", "from-point"),
        ]);
        let resource = s(&[
            ("service.name", "sonde"),
            ("service.namespace", "ml"),
            ("service.instance.id", "abc"),
            ("host.name", "node-1"),
            ("os.type", "linux"),
        ]);
        let labels = series_labels(
            "gpu.utilization",
            "1",
            Gauge,
            &attrs,
            &resource,
            &["host.name".into(), "os.type".into()],
        )
        .unwrap();
        assert_eq!(
            labels,
            s(&[
                ("__name__", "gpu_utilization_ratio"),
                ("gpu_id", "0;1"),
                ("host_name", "from-point"),
                ("instance", "abc"),
                ("job", "ml/sonde"),
                ("os_type", "linux"),
            ])
        );
        // Byte order throughout, so an upper-case label sorts before __name__.
        let labels = series_labels("x", "", Gauge, &s(&[("Zone", "a")]), &[], &[]).unwrap();
        assert_eq!(labels, s(&[("Zone", "a"), ("__name__", "x")]));
        assert!(series_labels("..", "", Gauge, &[], &[], &[]).is_none());
    }

    #[test]
    fn remote_write_labels_read_back_and_translate_to_themselves() {
        let stored: BTreeMap<String, String> = [
            ("__name__", "system_network_io_bytes_total"),
            ("host_name", "node-0"),
            ("sonde_job", "train-1"),
            ("direction", "rx"),
            ("job", "sonde"),
            ("instance", "abc"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        let back = series_from_labels(&stored).unwrap();
        assert_eq!(back.kind, Counter);
        assert_eq!(back.name, "system_network_io_bytes_total");
        let keys: Vec<&str> = back.attributes.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["direction", "host.name", "sonde.job"]);
        let resource = [
            ("service.name".to_string(), "sonde".to_string()),
            ("service.instance.id".to_string(), "abc".to_string()),
        ];
        let again = series_labels(&back.name, "", back.kind, &back.attributes, &resource, &[]).unwrap();
        assert_eq!(again, stored.into_iter().collect::<Vec<_>>());
        // A ratio gauge keeps its name too.
        let g: BTreeMap<String, String> = [("__name__".to_string(), "gpu_utilization_ratio".to_string())].into();
        let back = series_from_labels(&g).unwrap();
        assert_eq!(back.kind, Gauge);
        assert_eq!(
            prometheus_metric_name(&back.name, "", back.kind),
            "gpu_utilization_ratio"
        );
        assert!(series_from_labels(&BTreeMap::new()).is_none());
    }
}
