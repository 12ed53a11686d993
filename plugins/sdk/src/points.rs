//! `PointBuffer`: collects points into the three columns of a `point-batch`
//! so a hook emits them with one host call instead of one per point.

use crate::types::{PointBatch, Timestamp};
use crate::{Host, WasmHost};

#[derive(Debug, Default)]
pub struct PointBuffer {
    batch: PointBatch,
}

impl PointBuffer {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_capacity(points: usize) -> Self {
        PointBuffer {
            batch: PointBatch {
                series: Vec::with_capacity(points),
                time: Vec::with_capacity(points),
                value: Vec::with_capacity(points),
            },
        }
    }

    /// Adds one point for the series `handle` (from `declare-metric`).
    pub fn push(&mut self, handle: u32, time: Timestamp, value: f64) {
        self.batch.series.push(handle);
        self.batch.time.push(time);
        self.batch.value.push(value);
    }

    /// Adds `values[i]` at `timestamps[i]` for every i, skipping NaN (a value
    /// the host could not read). Returns how many points were added.
    pub fn extend_readings(&mut self, handle: u32, timestamps: &[Timestamp], values: &[f64]) -> usize {
        let before = self.len();
        for (&t, &v) in timestamps.iter().zip(values) {
            if !v.is_nan() {
                self.push(handle, t, v);
            }
        }
        self.len() - before
    }

    pub fn len(&self) -> usize {
        self.batch.series.len()
    }

    pub fn is_empty(&self) -> bool {
        self.batch.series.is_empty()
    }

    /// The points collected so far.
    pub fn batch(&self) -> &PointBatch {
        &self.batch
    }

    /// Takes the collected points out, leaving the buffer empty.
    pub fn take(&mut self) -> PointBatch {
        std::mem::take(&mut self.batch)
    }

    /// Drops the collected points but keeps the allocation for the next call.
    pub fn clear(&mut self) {
        self.batch.series.clear();
        self.batch.time.clear();
        self.batch.value.clear();
    }

    /// Emits the collected points with one `emit-points` call to `host`
    /// (none when empty) and clears the buffer. Returns how many were emitted.
    pub fn flush_to(&mut self, host: &mut impl Host) -> usize {
        let n = self.len();
        if n > 0 {
            host.emit_points(&self.batch);
            self.clear();
        }
        n
    }

    /// [`PointBuffer::flush_to`] the real host.
    pub fn flush(&mut self) -> usize {
        self.flush_to(&mut WasmHost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_stay_parallel() {
        let mut buf = PointBuffer::with_capacity(4);
        buf.push(1, 100, 0.5);
        let added = buf.extend_readings(2, &[10, 20, 30], &[1.0, f64::NAN, 3.0]);
        assert_eq!(added, 2);
        assert_eq!(buf.len(), 3);
        assert_eq!(
            buf.batch(),
            &PointBatch {
                series: vec![1, 2, 2],
                time: vec![100, 10, 30],
                value: vec![0.5, 1.0, 3.0]
            }
        );

        let taken = buf.take();
        assert_eq!(taken.series.len(), 3);
        assert!(buf.is_empty());

        buf.push(3, 1, 1.0);
        buf.clear();
        assert!(buf.is_empty());
        // Flushing an empty buffer must not call the host (which would panic natively).
        assert_eq!(buf.flush(), 0);
        let mut host = crate::testing::FakeHost::default();
        let h = host
            .declare_metric(&crate::types::MetricDesc::new(
                "m",
                crate::types::MetricKind::Gauge,
                "1",
                "",
            ))
            .unwrap();
        buf.push(h, 5, 2.0);
        assert_eq!(buf.flush_to(&mut host), 1);
        assert!(buf.is_empty());
        assert_eq!(host.series("m", &[]), vec![(5, 2.0)]);
    }
}
