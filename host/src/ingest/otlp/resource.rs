//! Reading OTLP key-values: the origin a resource describes (the first rows of
//! the table in `otlp/mod.rs`) and attributes as sonde's values. Shared by
//! the in-place metrics reader and the prost-decoded traces and logs.

use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};

use crate::ingest::Origin;
use crate::model::{AttrValue, Attributes};

fn any_to_attr(v: &AnyValue) -> Option<AttrValue> {
    Some(match v.value.as_ref()? {
        any_value::Value::StringValue(s) => AttrValue::Str(s.clone()),
        any_value::Value::BoolValue(b) => AttrValue::Bool(*b),
        any_value::Value::IntValue(i) => AttrValue::Int(*i),
        any_value::Value::DoubleValue(d) => AttrValue::Float(*d),
        // Arrays, maps and bytes have no place in a series key: kept as text.
        other => AttrValue::Str(format!("{other:?}")),
    })
}

pub fn attrs(kvs: &[KeyValue]) -> Attributes {
    kvs.iter()
        .filter_map(|kv| Some((kv.key.clone(), any_to_attr(kv.value.as_ref()?)?)))
        .collect()
}

pub fn find<'a>(kvs: &'a [KeyValue], keys: &[&str]) -> Option<&'a AnyValue> {
    keys.iter()
        .find_map(|k| kvs.iter().find(|kv| kv.key == *k).and_then(|kv| kv.value.as_ref()))
}

pub fn as_text(v: &AnyValue) -> Option<String> {
    match v.value.as_ref()? {
        any_value::Value::StringValue(s) => Some(s.clone()),
        any_value::Value::IntValue(i) => Some(i.to_string()),
        any_value::Value::DoubleValue(d) => Some(d.to_string()),
        any_value::Value::BoolValue(b) => Some(b.to_string()),
        _ => None,
    }
}

pub fn as_int(v: &AnyValue) -> Option<i64> {
    match v.value.as_ref()? {
        any_value::Value::IntValue(i) => Some(*i),
        any_value::Value::DoubleValue(d) if d.fract() == 0.0 => Some(*d as i64),
        any_value::Value::StringValue(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// The origin a resource describes (see the table in `otlp/mod.rs`).
pub fn origin(resource: &[KeyValue]) -> Origin {
    let text = |keys: &[&str]| find(resource, keys).and_then(as_text).unwrap_or_default();
    let int = |key: &str| {
        find(resource, &[key])
            .and_then(as_int)
            .and_then(|i| i32::try_from(i).ok())
            .filter(|i| *i >= 0)
            .unwrap_or(-1)
    };
    // A sonde agent's own telemetry belongs to its node, not to a job.
    let agent = find(resource, &["sonde.agent"]).is_some();
    let job = match find(resource, &["sonde.job"]) {
        Some(v) => as_text(v).unwrap_or_default(),
        None if agent => String::new(),
        None => text(&["service.name"]),
    };
    Origin {
        job,
        node: text(&["host.name"]),
        role: text(&["sonde.role"]),
        index: int("sonde.index"),
        rank: int("sonde.rank"),
        local_rank: int("sonde.local_rank"),
        attributes: Vec::new(),
    }
}
