//! Constructors for attributes and metric descriptions, so plugins write
//! `Attribute::new("hw.id", uuid)` instead of spelling out the variant.

use crate::types::{Attribute, MetricDesc, MetricKind, Value};

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Str(s.to_string())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Str(s)
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Boolean(v)
    }
}

impl Attribute {
    pub fn new(key: impl Into<String>, value: impl Into<Value>) -> Self {
        Attribute {
            key: key.into(),
            value: value.into(),
        }
    }
}

impl MetricDesc {
    /// A metric without attributes; add them with [`MetricDesc::with_attributes`].
    pub fn new(
        name: impl Into<String>,
        kind: MetricKind,
        unit: impl Into<String>,
        description: impl Into<String>,
    ) -> Self {
        MetricDesc {
            name: name.into(),
            description: description.into(),
            unit: unit.into(),
            kind,
            attributes: Vec::new(),
        }
    }

    pub fn with_attributes(mut self, attributes: Vec<Attribute>) -> Self {
        self.attributes = attributes;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_attributes_and_descs() {
        let a = Attribute::new("hw.id", "GPU-1");
        assert_eq!(a.value, Value::Str("GPU-1".into()));
        assert_eq!(Attribute::new("n", 3i64).value, Value::Int(3));
        assert_eq!(Attribute::new("f", 0.5).value, Value::Float(0.5));
        assert_eq!(Attribute::new("b", true).value, Value::Boolean(true));

        let d = MetricDesc::new("x.y", MetricKind::Counter, "By", "bytes").with_attributes(vec![a]);
        assert_eq!(d.name, "x.y");
        assert_eq!(d.kind, MetricKind::Counter);
        assert_eq!(d.attributes.len(), 1);
    }
}
