//! Between the live store and the embedded history (`crate::history`): the
//! same series under one id, whichever of the two holds the points.
//!
//! - At start, every series the history kept is declared in the live store,
//!   so a restarted master lists what it had and keeps serving it.
//! - `/api/series/data` for a range that starts before the live store's
//!   coverage reads the history instead (see `stream.rs`), series split over
//!   the machine's cores: an hour of 320 series at the 1 s tier is over a
//!   million rollup buckets to decode.
//! - Counters: the live store serves rates; the history keeps the cumulative
//!   value, so rates are made from consecutive buckets' maxima.

use crate::history::{Buckets as HistoryBuckets, History, SeriesFilter, SeriesKey};
use crate::model::{AttrValue, MetricKind, MetricSeries};
use crate::storage::{KIND_ATTR, SCOPE_ATTR};

use super::live::{Buckets, LiveStore, SeriesMeta};

/// A listed series' unit as it was emitted (a counter's without the `/s`
/// the live store adds): what the history and the engine keyed it by.
pub fn emitted_unit(m: &SeriesMeta) -> &str {
    if m.rate {
        m.unit.strip_suffix("/s").unwrap_or(&m.unit)
    } else {
        &m.unit
    }
}

/// A listed series' attributes as text, the way keys and labels carry them.
pub fn attribute_texts(m: &SeriesMeta) -> impl Iterator<Item = (String, String)> + '_ {
    m.attributes.iter().map(|(k, v)| {
        let v = match v {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        (k.clone(), v)
    })
}

/// The history's key for a series the live store lists.
pub fn key_of(m: &SeriesMeta) -> SeriesKey {
    let unit = emitted_unit(m);
    let attrs = attribute_texts(m).chain([
        (SCOPE_ATTR.to_string(), m.scope.clone()),
        (KIND_ATTR.to_string(), m.kind.to_string()),
    ]);
    SeriesKey::new(m.name.clone(), unit.to_string(), attrs)
}

/// History buckets in the live store's shape; counters become rates per second.
pub fn as_live(m: &SeriesMeta, b: HistoryBuckets) -> Buckets {
    let mut out = Buckets {
        id: m.id,
        ..Default::default()
    };
    if !m.rate {
        out.t = b.t;
        out.min = b.min.iter().map(|v| *v as f32).collect();
        out.max = b.max.iter().map(|v| *v as f32).collect();
        out.mean = b.mean.iter().map(|v| *v as f32).collect();
        return out;
    }
    for i in 1..b.t.len() {
        let dt = (b.t[i] - b.t[i - 1]) as f64 / 1e3;
        let dv = b.max[i] - b.max[i - 1];
        if dt > 0.0 && dv >= 0.0 {
            let r = (dv / dt) as f32;
            out.t.push(b.t[i]);
            out.min.push(r);
            out.max.push(r);
            out.mean.push(r);
        }
    }
    out
}

/// Declares every series the history holds in the live store. Returns how many.
pub fn declare_kept(history: &History, live: &LiveStore) -> usize {
    let mut n = 0;
    for info in history.series(&SeriesFilter::default()) {
        let key = &info.key;
        let scope = key.attr(SCOPE_ATTR).unwrap_or("sonde.history").to_string();
        let kind = match key.attr(KIND_ATTR) {
            Some("counter") => MetricKind::Counter,
            Some("updowncounter") => MetricKind::UpDownCounter,
            _ => MetricKind::Gauge,
        };
        let series = MetricSeries {
            name: key.name().to_string(),
            description: String::new(),
            unit: key.unit().to_string(),
            kind,
            attributes: key
                .attributes()
                .iter()
                .filter(|(k, _)| k != SCOPE_ATTR && k != KIND_ATTR)
                .map(|(k, v)| (k.clone(), AttrValue::Str(v.clone())))
                .collect(),
            start_time_ns: 0,
        };
        if live.declare(&scope, &series).is_some() {
            n += 1;
        }
    }
    n
}

/// `metas`' buckets from the history over `[from, to]` (ms) in buckets of
/// `width` ms, in the live store's shape, read on every core (each series'
/// read takes the history's lock only to copy its chunk list). Series the
/// history does not know are left out. Blocking: call it off the async workers.
pub fn query_many(h: &History, metas: &[SeriesMeta], from: u64, to: u64, width: u64) -> Vec<Buckets> {
    // A thread per few dozen series at least: below that it costs more than it saves.
    super::cores::map_on_cores(metas, metas.len() / 32, |m| {
        let hid = h.id_of(&key_of(m))?;
        Some(as_live(m, h.query(hid, from, to, width)))
    })
}
