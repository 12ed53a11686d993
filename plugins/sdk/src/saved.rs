//! Typed values in the host's state store: what a plugin saved as JSON, read
//! back at start. A value that no longer parses (a plugin upgraded with a
//! different shape, a torn write) is logged once, named, and left out, so
//! the plugin starts that part afresh rather than failing to start.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::Host;
use crate::types::Severity;

/// The value at `key`, if there is one and it parses; `what` names it in the
/// warning ("the saved counters").
pub fn get<T: DeserializeOwned>(host: &mut dyn Host, key: &str, what: &str) -> Option<T> {
    let bytes = host.state_get(key)?;
    parse(host, &bytes, what)
}

/// Every value whose key starts with `prefix`, in key order, with its key;
/// those that do not parse are logged and left out.
pub fn all<T: DeserializeOwned>(host: &mut dyn Host, prefix: &str) -> Vec<(String, T)> {
    let mut out = Vec::new();
    for key in host.state_keys(prefix) {
        let Some(bytes) = host.state_get(&key) else { continue };
        if let Some(v) = parse(host, &bytes, &format!("the saved `{key}`")) {
            out.push((key, v));
        }
    }
    out
}

/// Every record of a stream from its first, oldest first, with its sequence
/// number; those that do not parse are logged and left out.
pub fn stream<T: DeserializeOwned>(host: &mut dyn Host, stream: &str) -> Vec<(u64, T)> {
    let mut out = Vec::new();
    let mut from = 0;
    loop {
        let batch = host.state_read(stream, from, 256);
        let Some(&(last, _)) = batch.last() else { break };
        for (seq, bytes) in batch {
            if let Some(v) = parse(host, &bytes, &format!("record {seq} of `{stream}`")) {
                out.push((seq, v));
            }
        }
        from = last + 1;
    }
    out
}

/// The value as JSON at `key`.
pub fn put<T: Serialize>(host: &mut dyn Host, key: &str, value: &T) -> Result<(), String> {
    host.state_put(key, &to_json(value))
}

/// A plain value as JSON bytes.
pub fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("plain data serializes to JSON")
}

fn parse<T: DeserializeOwned>(host: &mut dyn Host, bytes: &[u8], what: &str) -> Option<T> {
    match serde_json::from_slice(bytes) {
        Ok(v) => Some(v),
        Err(e) => {
            host.log(
                Severity::Warn,
                &format!("{what} is unreadable ({e}); left out, it starts afresh"),
            );
            None
        }
    }
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use super::*;
    use crate::testing::FakeHost;

    #[test]
    fn values_and_records_come_back_and_an_unreadable_one_is_left_out_and_logged() {
        let mut host = FakeHost::default();
        put(&mut host, "job/a", &vec![1u32, 2]).unwrap();
        host.state_put("job/b", b"{not json").unwrap();
        put(&mut host, "job/c", &vec![3u32]).unwrap();
        put(&mut host, "other", &vec![9u32]).unwrap();
        let jobs: Vec<(String, Vec<u32>)> = all(&mut host, "job/");
        assert_eq!(jobs, vec![("job/a".into(), vec![1, 2]), ("job/c".into(), vec![3])]);
        assert!(
            host.logs
                .iter()
                .any(|(_, m)| m.contains("the saved `job/b` is unreadable"))
        );
        assert_eq!(get::<Vec<u32>>(&mut host, "other", "the other"), Some(vec![9]));
        assert_eq!(get::<Vec<u32>>(&mut host, "missing", "nothing"), None);

        for i in 0..300u32 {
            host.state_append("rows", &to_json(&i)).unwrap();
        }
        host.state_trim("rows", 11);
        let rows: Vec<(u64, u32)> = stream(&mut host, "rows");
        assert_eq!(rows.len(), 290, "past one read of 256");
        assert_eq!(rows[0], (11, 10));
        assert_eq!(rows[289], (300, 299));
    }
}
