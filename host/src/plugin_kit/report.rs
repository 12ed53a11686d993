//! What `sonde plugin test` prints: the replay's [`Replayed`] as text for a
//! person (times relative to the recording's start), or as one JSON object
//! with `--json`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::replay::{EmittedPoint, Replayed};

/// The replay as JSON (`--json`).
pub fn json(r: &Replayed) -> String {
    serde_json::to_string_pretty(r).expect("a replay serializes")
}

/// The replay as text.
pub fn text(r: &Replayed) -> String {
    let mut o = String::new();
    let h = &r.recording.header;
    let st = &r.status;
    let m = &st.metrics;
    let _ = writeln!(
        o,
        "plugin {} {} (contract {}): {}",
        r.plugin,
        st.version.as_deref().unwrap_or("?"),
        st.contract,
        st.description.as_deref().unwrap_or("")
    );
    let _ = writeln!(
        o,
        "recording {}: {:.1} s replayed of {} s recorded by sonde {} ({} lines)",
        r.recording.file,
        secs(r.recording.replayed_until_ns, h.started_ns),
        h.seconds,
        h.host_version,
        r.recording.lines
    );
    let d = &r.delivered;
    let _ = writeln!(
        o,
        "delivered: {} sample batches ({} values), {} event batches ({} rows), {} timer calls",
        d.sample_batches, d.samples, d.event_batches, d.events, d.timer_calls
    );
    let _ = writeln!(
        o,
        "calls: {} (mean {:.0} µs, max {:.0} µs), hook errors {}{}, linear memory at most {:.1} MiB",
        m.calls,
        m.call_us_mean,
        m.call_us_max,
        m.errors,
        st.last_error
            .as_deref()
            .map(|e| format!(" (last: {e})"))
            .unwrap_or_default(),
        m.memory_peak_bytes as f64 / 1048576.0
    );

    let _ = writeln!(o, "\ndecisions ({}):", r.decisions.len());
    for dec in &r.decisions {
        let _ = writeln!(
            o,
            "  +{:>8.3} s  {}  {}: {}",
            secs(dec.time_ns, h.started_ns),
            dec.kind,
            dec.subject,
            dec.reason
        );
        let _ = writeln!(o, "               {}", dec.body);
    }
    // Points by series: a plugin emits many; --json has every one.
    let mut series: BTreeMap<(String, String), (usize, &EmittedPoint)> = BTreeMap::new();
    for p in &r.points {
        let attrs = if p.attributes.is_empty() {
            String::new()
        } else {
            serde_json::Value::Object(p.attributes.clone()).to_string()
        };
        let e = series.entry((p.metric.clone(), attrs)).or_insert((0, p));
        e.0 += 1;
        e.1 = p;
    }
    let _ = writeln!(
        o,
        "\npoints ({} in {} series; the last of each):",
        r.points.len(),
        series.len()
    );
    for ((metric, attrs), (n, last)) in &series {
        let _ = writeln!(
            o,
            "  {metric}{attrs} ({}, {}): {n} points, last {} at +{:.3} s",
            last.kind,
            last.unit,
            last.value,
            secs(last.time_ns, h.started_ns)
        );
    }
    let _ = writeln!(o, "\nlog records ({}):", r.logs.len());
    for l in &r.logs {
        let _ = writeln!(
            o,
            "  +{:>8.3} s  {} {}{}",
            secs(l.time_ns, h.started_ns),
            l.severity,
            if l.event_name.is_empty() {
                String::new()
            } else {
                format!("[{}] ", l.event_name)
            },
            l.body
        );
    }
    let _ = writeln!(o, "\nsinks ({} files):", r.sinks.len());
    for (name, f) in &r.sinks {
        match &f.text {
            Some(t) => {
                let _ = writeln!(o, "  {name} ({} bytes):", f.bytes);
                for line in t.lines() {
                    let _ = writeln!(o, "    {line}");
                }
            }
            None => {
                let _ = writeln!(o, "  {name} ({} bytes, not text)", f.bytes);
            }
        }
    }
    if !r.routes.is_empty() {
        let _ = writeln!(o, "\nroutes:");
        for a in &r.routes {
            let _ = writeln!(o, "  {} {} → {}", a.method, a.path, a.status);
            let body = match &a.body {
                serde_json::Value::String(s) => s.clone(),
                v => serde_json::to_string_pretty(v).unwrap_or_default(),
            };
            for line in body.lines() {
                let _ = writeln!(o, "    {line}");
            }
        }
    }
    if let Some(t) = &r.trap {
        let _ = writeln!(o, "\nTRAP: {t}");
    }
    o
}

/// Seconds from the recording's start (negative for a clock that was behind).
fn secs(ns: u64, start: u64) -> f64 {
    (ns as f64 - start as f64) / 1e9
}
