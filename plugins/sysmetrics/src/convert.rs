//! Turns sample batches into metric points: the whole of `on-samples` except
//! the two host calls, which are passed in, so it runs in native tests.

use std::collections::HashMap;

use sonde_plugin_sdk::types::{MetricDesc, SampleBatch};
use sonde_plugin_sdk::{MetricRegistry, PointBuffer, SampleView, SeriesTable};

use crate::mapping::{output_desc, selected};

#[derive(Debug, Default)]
pub struct Converter {
    table: SeriesTable,
    registry: MetricRegistry,
    /// Host series id -> output handle, or `None` for a series we do not
    /// export (filtered out, or its declaration failed and was reported).
    outputs: HashMap<u32, Option<u32>>,
    prefixes: Vec<String>,
    points: PointBuffer,
}

impl Converter {
    pub fn new(prefixes: Vec<String>) -> Self {
        Converter {
            prefixes,
            ..Default::default()
        }
    }

    /// Changes which metric prefixes are exported, from the next batch on.
    pub fn set_prefixes(&mut self, prefixes: Vec<String>) {
        if prefixes != self.prefixes {
            self.prefixes = prefixes;
            // Decisions were made against the old prefixes; redo them lazily.
            self.outputs.clear();
        }
    }

    /// Adds one point per readable (timestamp, value) of every exported series
    /// in `batch` to the point buffer, declaring series the first time they
    /// appear. Problems (a series never described, a refused declaration) are
    /// returned as one error after the good series were converted, so one bad
    /// series does not silence the others.
    pub fn convert(
        &mut self,
        mut batch: SampleBatch,
        mut declare: impl FnMut(&MetricDesc) -> Result<u32, String>,
    ) -> Result<(), String> {
        self.table.absorb(&mut batch);
        let view = SampleView::new(&batch)?;
        let mut problems = Vec::new();
        let mut undescribed = Vec::new();

        for series in view.iter() {
            let handle = match self.outputs.get(&series.id) {
                Some(&cached) => cached,
                None => {
                    let Some(info) = self.table.get(series.id) else {
                        // Not cached: a later batch may still describe it.
                        undescribed.push(series.id);
                        continue;
                    };
                    let handle = if selected(&info.metric, &self.prefixes) {
                        match self.registry.declare_with(&output_desc(info), &mut declare) {
                            Ok(h) => Some(h),
                            Err(e) => {
                                // Cached as "skip": reported once, not on every batch.
                                problems.push(e);
                                None
                            }
                        }
                    } else {
                        None
                    };
                    self.outputs.insert(series.id, handle);
                    handle
                }
            };
            if let Some(handle) = handle {
                self.points.extend_readings(handle, series.timestamps, series.values);
            }
        }

        if !undescribed.is_empty() {
            problems.push(format!(
                "{} series in the batch were never described in new-series (ids {:?}); their points were dropped",
                undescribed.len(),
                undescribed
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }

    /// The points converted so far; the caller emits and clears them.
    pub fn points(&mut self) -> &mut PointBuffer {
        &mut self.points
    }

    /// How many host series are known (described by the host).
    pub fn known_series(&self) -> usize {
        self.table.len()
    }

    /// How many output series have been declared.
    pub fn declared_series(&self) -> usize {
        self.registry.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_plugin_sdk::types::{Attribute, MetricKind, PointBatch, SeriesInfo, SeriesKind};

    fn info(id: u32, metric: &str, unit: &str, kind: SeriesKind, attrs: Vec<Attribute>) -> SeriesInfo {
        SeriesInfo {
            id,
            metric: metric.into(),
            unit: unit.into(),
            kind,
            attributes: attrs,
        }
    }

    fn three_series() -> Vec<SeriesInfo> {
        vec![
            info(
                0,
                "system.cpu.utilization",
                "1",
                SeriesKind::Gauge,
                vec![
                    Attribute::new("cpu.logical_number", 0i64),
                    Attribute::new("cpu.mode", "user"),
                ],
            ),
            info(
                1,
                "system.memory.usage",
                "By",
                SeriesKind::Gauge,
                vec![Attribute::new("system.memory.state", "used")],
            ),
            info(
                2,
                "system.network.io",
                "By",
                SeriesKind::Counter,
                vec![
                    Attribute::new("network.interface.name", "eth0"),
                    Attribute::new("network.io.direction", "receive"),
                ],
            ),
        ]
    }

    /// 3 series x 4 ticks, series-major; value = 10 * series + tick.
    fn batch(new_series: Vec<SeriesInfo>) -> SampleBatch {
        let timestamps = vec![1_000, 2_000, 3_000, 4_000];
        let series = vec![0, 1, 2];
        let values = (0..3).flat_map(|s| (0..4).map(move |t| (10 * s + t) as f64)).collect();
        SampleBatch {
            new_series,
            timestamps,
            series,
            values,
        }
    }

    /// A stand-in for `declare-metric`: hands out 100, 101, ... and records
    /// what was declared.
    #[derive(Default)]
    struct Declarer {
        declared: Vec<MetricDesc>,
    }

    impl Declarer {
        fn declare(&mut self, d: &MetricDesc) -> Result<u32, String> {
            self.declared.push(d.clone());
            Ok(99 + self.declared.len() as u32)
        }
    }

    #[test]
    fn three_series_by_four_ticks_gives_twelve_points_in_order() {
        let mut conv = Converter::new(vec![]);
        let mut host = Declarer::default();
        conv.convert(batch(three_series()), |d| host.declare(d)).unwrap();

        let kinds: Vec<_> = host.declared.iter().map(|d| (d.name.as_str(), d.kind)).collect();
        assert_eq!(
            kinds,
            vec![
                ("system.cpu.utilization", MetricKind::Gauge),
                ("system.memory.usage", MetricKind::UpdownCounter),
                ("system.network.io", MetricKind::Counter),
            ]
        );
        assert_eq!(host.declared[2].attributes.len(), 2);

        let points = conv.points().take();
        assert_eq!(
            points,
            PointBatch {
                series: vec![100, 100, 100, 100, 101, 101, 101, 101, 102, 102, 102, 102],
                time: [1_000, 2_000, 3_000, 4_000].repeat(3),
                value: vec![0.0, 1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 13.0, 20.0, 21.0, 22.0, 23.0],
            }
        );
    }

    #[test]
    fn nan_readings_are_skipped() {
        let mut conv = Converter::new(vec![]);
        let mut host = Declarer::default();
        let mut b = batch(three_series());
        b.values[1] = f64::NAN; // series 0, tick 1
        b.values[8] = f64::NAN; // series 2, tick 0
        b.values[11] = f64::NAN; // series 2, tick 3
        conv.convert(b, |d| host.declare(d)).unwrap();

        let points = conv.points().take();
        assert_eq!(points.series, vec![100, 100, 100, 101, 101, 101, 101, 102, 102]);
        assert_eq!(
            points.time,
            vec![1_000, 3_000, 4_000, 1_000, 2_000, 3_000, 4_000, 2_000, 3_000]
        );
        assert!(points.value.iter().all(|v| !v.is_nan()));
    }

    #[test]
    fn series_are_declared_once_across_batches() {
        let mut conv = Converter::new(vec![]);
        let mut host = Declarer::default();
        conv.convert(batch(three_series()), |d| host.declare(d)).unwrap();
        conv.points().clear();
        // Later batches carry no descriptions; the table remembers them.
        conv.convert(batch(vec![]), |d| host.declare(d)).unwrap();
        assert_eq!(host.declared.len(), 3);
        assert_eq!(conv.points().len(), 12);
        assert_eq!((conv.known_series(), conv.declared_series()), (3, 3));
    }

    #[test]
    fn prefixes_filter_and_can_change() {
        let mut conv = Converter::new(vec!["system.network.".into()]);
        let mut host = Declarer::default();
        conv.convert(batch(three_series()), |d| host.declare(d)).unwrap();
        assert_eq!(host.declared.len(), 1);
        assert_eq!(conv.points().take().series, vec![100; 4]);

        conv.set_prefixes(vec!["system.cpu.".into(), "system.network.".into()]);
        conv.convert(batch(vec![]), |d| host.declare(d)).unwrap();
        assert_eq!(host.declared.len(), 2, "only the newly selected cpu series is declared");
        let points = conv.points().take();
        assert_eq!(points.series, vec![101, 101, 101, 101, 100, 100, 100, 100]);
    }

    #[test]
    fn problems_are_reported_without_dropping_good_series() {
        let mut conv = Converter::new(vec![]);
        let mut calls = 0;
        let refuse_memory = |d: &MetricDesc| {
            calls += 1;
            if d.name == "system.memory.usage" {
                Err("kind contradicts".to_string())
            } else {
                Ok(calls)
            }
        };
        let mut b = batch(three_series());
        b.new_series.pop(); // series 2 is never described
        let err = conv.convert(b, refuse_memory).unwrap_err();
        assert!(
            err.contains("declare-metric `system.memory.usage`: kind contradicts"),
            "{err}"
        );
        assert!(err.contains("ids [2]"), "{err}");
        assert_eq!(conv.points().len(), 4, "the cpu series still got its points");
        conv.points().clear();

        // The refused series is not retried (or re-reported); the undescribed one
        // is picked up once the host describes it.
        let mut host = Declarer::default();
        let mut b = batch(vec![three_series().remove(2)]);
        b.series = vec![0, 1, 2];
        conv.convert(b, |d| host.declare(d)).unwrap();
        assert_eq!(host.declared.len(), 1);
        assert_eq!(host.declared[0].name, "system.network.io");
        assert_eq!(conv.points().len(), 8);
    }

    #[test]
    fn malformed_batches_are_rejected() {
        let mut conv = Converter::new(vec![]);
        let mut b = batch(three_series());
        b.values.truncate(11);
        let err = conv.convert(b, |_| Ok(1)).unwrap_err();
        assert!(err.contains("malformed sample batch"), "{err}");
        assert!(conv.points().is_empty());
    }
}
