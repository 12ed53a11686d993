//! `MetricRegistry`: remembers the handle of every metric series a plugin has
//! declared, so each (name, attributes) is declared with the host only once
//! however many batches mention it.

use std::collections::HashMap;

use crate::types::{Attribute, MetricDesc, Value};
use crate::{Host, WasmHost};

#[derive(Debug, Default)]
pub struct MetricRegistry {
    handles: HashMap<SeriesKey, u32>,
}

/// (name, attributes), with attributes sorted by key so that the same set in a
/// different order is the same series, and floats compared by their bits so
/// the key can be hashed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SeriesKey {
    name: String,
    attributes: Vec<(String, AttrKey)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum AttrKey {
    Str(String),
    Int(i64),
    Float(u64),
    Bool(bool),
}

impl SeriesKey {
    fn new(name: &str, attributes: &[Attribute]) -> Self {
        let mut attributes: Vec<(String, AttrKey)> = attributes
            .iter()
            .map(|a| {
                let v = match &a.value {
                    Value::Str(s) => AttrKey::Str(s.clone()),
                    Value::Int(i) => AttrKey::Int(*i),
                    Value::Float(f) => AttrKey::Float(f.to_bits()),
                    Value::Boolean(b) => AttrKey::Bool(*b),
                };
                (a.key.clone(), v)
            })
            .collect();
        attributes.sort_by(|a, b| a.0.cmp(&b.0));
        SeriesKey {
            name: name.to_string(),
            attributes,
        }
    }
}

impl MetricRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// The handle for `desc`, declaring it with `host` the first time.
    pub fn declare_in(&mut self, host: &mut impl Host, desc: &MetricDesc) -> Result<u32, String> {
        self.declare_with(desc, |d| host.declare_metric(d))
    }

    /// [`MetricRegistry::declare_in`] the real host.
    pub fn declare(&mut self, desc: &MetricDesc) -> Result<u32, String> {
        self.declare_in(&mut WasmHost, desc)
    }

    /// Like [`MetricRegistry::declare`], with the host call supplied by the
    /// caller (a fake in native tests). A failed declaration is not cached,
    /// so the next call tries again.
    pub fn declare_with(
        &mut self,
        desc: &MetricDesc,
        declare: impl FnOnce(&MetricDesc) -> Result<u32, String>,
    ) -> Result<u32, String> {
        let key = SeriesKey::new(&desc.name, &desc.attributes);
        if let Some(&handle) = self.handles.get(&key) {
            return Ok(handle);
        }
        let handle = declare(desc).map_err(|e| format!("declare-metric `{}`: {e}", desc.name))?;
        self.handles.insert(key, handle);
        Ok(handle)
    }

    /// The handle of an already declared series.
    pub fn get(&self, name: &str, attributes: &[Attribute]) -> Option<u32> {
        self.handles.get(&SeriesKey::new(name, attributes)).copied()
    }

    pub fn len(&self) -> usize {
        self.handles.len()
    }

    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::MetricKind;

    fn desc(name: &str, attrs: Vec<Attribute>) -> MetricDesc {
        MetricDesc::new(name, MetricKind::Gauge, "1", "test").with_attributes(attrs)
    }

    #[test]
    fn declares_each_series_once() {
        let mut reg = MetricRegistry::new();
        let mut calls = Vec::new();
        let mut next = 10;
        let mut fake = |d: &MetricDesc| {
            calls.push(d.name.clone());
            next += 1;
            Ok(next)
        };

        let cpu0 = desc(
            "system.cpu.utilization",
            vec![Attribute::new("cpu.logical_number", 0i64)],
        );
        let cpu1 = desc(
            "system.cpu.utilization",
            vec![Attribute::new("cpu.logical_number", 1i64)],
        );
        let a = reg.declare_with(&cpu0, &mut fake).unwrap();
        let b = reg.declare_with(&cpu1, &mut fake).unwrap();
        let a_again = reg.declare_with(&cpu0, &mut fake).unwrap();
        assert_ne!(a, b);
        assert_eq!(a, a_again);
        assert_eq!(
            calls.len(),
            2,
            "the second declaration of cpu0 is served from the cache"
        );
        assert_eq!(reg.len(), 2);
        assert_eq!(reg.get("system.cpu.utilization", &cpu1.attributes), Some(b));
        assert_eq!(reg.get("system.cpu.utilization", &[]), None);
    }

    #[test]
    fn attribute_order_does_not_matter() {
        let mut reg = MetricRegistry::new();
        let ab = desc("m", vec![Attribute::new("a", "1"), Attribute::new("b", 2.5)]);
        let ba = desc("m", vec![Attribute::new("b", 2.5), Attribute::new("a", "1")]);
        let h = reg.declare_with(&ab, |_| Ok(1)).unwrap();
        let h2 = reg.declare_with(&ba, |_| panic!("must be cached")).unwrap();
        assert_eq!(h, h2);
    }

    #[test]
    fn failures_name_the_metric_and_are_not_cached() {
        let mut reg = MetricRegistry::new();
        let d = desc("bad.metric", vec![]);
        let err = reg.declare_with(&d, |_| Err("kind contradicts".into())).unwrap_err();
        assert_eq!(err, "declare-metric `bad.metric`: kind contradicts");
        assert!(reg.is_empty());
        assert_eq!(reg.declare_with(&d, |_| Ok(4)), Ok(4));
    }
}
