//! `SampleView`: per-series slices over a `sample-batch`.
//!
//! The batch is series-major: the values of `series[s]` are the contiguous
//! run `values[s * T .. (s + 1) * T]`, where `T = timestamps.len()`. The view
//! checks that shape once so the per-series code works on plain slices.

use crate::types::{SampleBatch, Timestamp};

#[derive(Clone, Copy, Debug)]
pub struct SampleView<'a> {
    timestamps: &'a [Timestamp],
    series: &'a [u32],
    values: &'a [f64],
}

/// One series of a batch: its id, and its values at the batch's timestamps
/// (`values[t]` was read at `timestamps[t]`; NaN where the host could not read it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SeriesSamples<'a> {
    pub id: u32,
    pub timestamps: &'a [Timestamp],
    pub values: &'a [f64],
}

impl<'a> SampleView<'a> {
    /// Fails when `values.len() != series.len() * timestamps.len()`, i.e. the
    /// host broke the layout; the message says by how much.
    pub fn new(batch: &'a SampleBatch) -> Result<Self, String> {
        Self::from_columns(&batch.timestamps, &batch.series, &batch.values)
    }

    pub fn from_columns(timestamps: &'a [Timestamp], series: &'a [u32], values: &'a [f64]) -> Result<Self, String> {
        let expected = series.len().checked_mul(timestamps.len());
        if expected != Some(values.len()) {
            return Err(format!(
                "malformed sample batch: {} series x {} timestamps but {} values",
                series.len(),
                timestamps.len(),
                values.len()
            ));
        }
        Ok(SampleView {
            timestamps,
            series,
            values,
        })
    }

    /// Number of sampling ticks in the batch.
    pub fn ticks(&self) -> usize {
        self.timestamps.len()
    }

    pub fn series_count(&self) -> usize {
        self.series.len()
    }

    pub fn timestamps(&self) -> &'a [Timestamp] {
        self.timestamps
    }

    /// The `index`-th series of the batch (not the series with id `index`).
    pub fn series(&self, index: usize) -> Option<SeriesSamples<'a>> {
        let id = *self.series.get(index)?;
        let t = self.timestamps.len();
        Some(SeriesSamples {
            id,
            timestamps: self.timestamps,
            values: &self.values[index * t..(index + 1) * t],
        })
    }

    /// The series with this id, if the batch carries it.
    pub fn find(&self, id: u32) -> Option<SeriesSamples<'a>> {
        let index = self.series.iter().position(|&s| s == id)?;
        self.series(index)
    }

    /// Every series of the batch, in batch order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = SeriesSamples<'a>> + 'a {
        let view = *self;
        (0..self.series.len()).map(move |i| view.series(i).expect("index in range"))
    }
}

impl<'a> SeriesSamples<'a> {
    /// Every (timestamp, value) pair, NaN included.
    pub fn points(&self) -> impl Iterator<Item = (Timestamp, f64)> + 'a {
        self.timestamps.iter().copied().zip(self.values.iter().copied())
    }

    /// The (timestamp, value) pairs the host could read (NaN skipped).
    pub fn readings(&self) -> impl Iterator<Item = (Timestamp, f64)> + 'a {
        self.points().filter(|(_, v)| !v.is_nan())
    }

    /// The latest reading, if any tick had one.
    pub fn last_reading(&self) -> Option<(Timestamp, f64)> {
        self.timestamps
            .iter()
            .zip(self.values)
            .rev()
            .find(|(_, v)| !v.is_nan())
            .map(|(&t, &v)| (t, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> SampleBatch {
        // 2 series x 3 ticks, series-major.
        SampleBatch {
            new_series: vec![],
            timestamps: vec![10, 20, 30],
            series: vec![5, 9],
            values: vec![1.0, 2.0, 3.0, 4.0, f64::NAN, 6.0],
        }
    }

    #[test]
    fn slices_follow_the_series_major_layout() {
        let b = batch();
        let view = SampleView::new(&b).unwrap();
        assert_eq!(view.ticks(), 3);
        assert_eq!(view.series_count(), 2);

        let all: Vec<_> = view.iter().collect();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].id, 5);
        assert_eq!(all[0].values, &[1.0, 2.0, 3.0]);
        assert_eq!(all[1].id, 9);
        assert_eq!(all[1].values[0], 4.0);
        assert!(all[1].values[1].is_nan());
        assert_eq!(all[1].timestamps, &[10, 20, 30]);

        assert_eq!(view.find(9).unwrap().values[2], 6.0);
        assert!(view.find(1).is_none());
        assert!(view.series(2).is_none());
    }

    #[test]
    fn readings_skip_nan() {
        let b = batch();
        let view = SampleView::new(&b).unwrap();
        let s = view.find(9).unwrap();
        assert_eq!(s.points().count(), 3);
        assert_eq!(s.readings().collect::<Vec<_>>(), vec![(10, 4.0), (30, 6.0)]);
        assert_eq!(s.last_reading(), Some((30, 6.0)));

        let only_nan = SampleView::from_columns(&[1, 2], &[3], &[f64::NAN, f64::NAN]).unwrap();
        assert_eq!(only_nan.series(0).unwrap().last_reading(), None);
    }

    #[test]
    fn rejects_a_broken_layout() {
        let mut b = batch();
        b.values.pop();
        let err = SampleView::new(&b).unwrap_err();
        assert!(err.contains("2 series x 3 timestamps but 5 values"), "{err}");
    }

    #[test]
    fn empty_batches_are_fine() {
        let view = SampleView::from_columns(&[], &[1, 2], &[]).unwrap();
        assert_eq!(view.ticks(), 0);
        assert_eq!(view.iter().map(|s| s.values.len()).sum::<usize>(), 0);
    }
}
