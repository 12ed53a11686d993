//! `SeriesTable`: the descriptions of sampled series, by id.
//!
//! The host describes each series once (`sample-batch.new-series`) and from
//! then on sends only its id, so a plugin has to remember the descriptions.

use std::collections::HashMap;

use crate::types::{SampleBatch, SeriesInfo};

#[derive(Debug, Default)]
pub struct SeriesTable {
    by_id: HashMap<u32, SeriesInfo>,
}

impl SeriesTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the batch's new series, taking them out of the batch (the
    /// plugin owns the batch in `on-samples`, so nothing is cloned).
    /// Returns how many were added or replaced.
    pub fn absorb(&mut self, batch: &mut SampleBatch) -> usize {
        self.extend(std::mem::take(&mut batch.new_series))
    }

    /// Records series descriptions; a repeated id replaces the old one.
    pub fn extend(&mut self, infos: impl IntoIterator<Item = SeriesInfo>) -> usize {
        let mut n = 0;
        for info in infos {
            self.by_id.insert(info.id, info);
            n += 1;
        }
        n
    }

    pub fn get(&self, id: u32) -> Option<&SeriesInfo> {
        self.by_id.get(&id)
    }

    pub fn contains(&self, id: u32) -> bool {
        self.by_id.contains_key(&id)
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// All known series, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &SeriesInfo> {
        self.by_id.values()
    }
}

#[cfg(test)]
pub(crate) fn info(id: u32, metric: &str) -> SeriesInfo {
    use crate::types::SeriesKind;
    SeriesInfo {
        id,
        metric: metric.to_string(),
        unit: "1".to_string(),
        kind: SeriesKind::Gauge,
        attributes: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absorbs_new_series_and_looks_them_up() {
        let mut table = SeriesTable::new();
        let mut batch = SampleBatch {
            new_series: vec![info(0, "system.cpu.utilization"), info(7, "hw.power")],
            timestamps: vec![],
            series: vec![],
            values: vec![],
        };
        assert_eq!(table.absorb(&mut batch), 2);
        assert!(batch.new_series.is_empty(), "descriptions are moved, not copied");
        assert_eq!(table.get(7).unwrap().metric, "hw.power");
        assert!(table.get(1).is_none());
        assert_eq!(table.len(), 2);

        // A later description of the same id replaces the earlier one.
        table.extend([info(7, "hw.energy")]);
        assert_eq!(table.get(7).unwrap().metric, "hw.energy");
        assert_eq!(table.len(), 2);
    }
}
