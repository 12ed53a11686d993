//! The testbed's HTTP routes, parsed without touching the host so the
//! routing itself is unit-tested natively.

use sonde_plugin_sdk::types::EventBatch;

#[derive(Debug, PartialEq, Eq)]
pub enum Route<'a> {
    /// `GET /state/<key>`
    GetState(&'a str),
    /// `PUT /state/<key>`
    PutState(&'a str),
    /// `POST /append/<stream>`
    Append(&'a str),
    /// `GET /read/<stream>?from=N&max=M`
    Read(&'a str),
    /// `GET /now`
    Now,
    /// `GET /restarts`
    Restarts,
    /// `POST /decision?kind=K&subject=S`
    Decision,
    /// `GET /config`
    Config,
    /// `GET /wasi/env/<NAME>`: reads an environment variable (denied unless granted)
    WasiEnv(&'a str),
    /// `GET /wasi/dir/<path>`: lists a directory, e.g. `/wasi/dir/data` lists `/data`
    WasiDir(&'a str),
    NotFound,
}

pub fn route<'a>(method: &str, path: &'a str) -> Route<'a> {
    let named = |prefix: &str| path.strip_prefix(prefix).filter(|rest| !rest.is_empty());
    match method {
        "GET" if path == "/now" => Route::Now,
        "GET" if path == "/restarts" => Route::Restarts,
        "GET" if path == "/config" => Route::Config,
        "POST" if path == "/decision" => Route::Decision,
        "GET" if named("/wasi/env/").is_some() => Route::WasiEnv(&path["/wasi/env/".len()..]),
        "GET" if path.starts_with("/wasi/dir/") => Route::WasiDir(&path["/wasi/dir".len()..]),
        "GET" => match (named("/state/"), named("/read/")) {
            (Some(key), _) => Route::GetState(key),
            (_, Some(stream)) => Route::Read(stream),
            _ => Route::NotFound,
        },
        "PUT" => named("/state/").map_or(Route::NotFound, Route::PutState),
        "POST" => named("/append/").map_or(Route::NotFound, Route::Append),
        _ => Route::NotFound,
    }
}

/// `[[seq, "text"], ...]` for `GET /read`; records that are not UTF-8 are
/// shown with replacement characters.
pub fn records_json(records: &[(u64, Vec<u8>)]) -> String {
    let list: Vec<serde_json::Value> = records
        .iter()
        .map(|(seq, bytes)| serde_json::json!([seq, String::from_utf8_lossy(bytes)]))
        .collect();
    serde_json::Value::Array(list).to_string()
}

/// How many events a batch carries, over every kind and table.
pub fn count_events(batch: &EventBatch) -> usize {
    let columns = [
        batch.progress.as_ref().map(|c| c.origin.len()),
        batch.timings.as_ref().map(|c| c.origin.len()),
        batch.heartbeats.as_ref().map(|c| c.origin.len()),
        batch.points.as_ref().map(|c| c.origin.len()),
    ];
    columns.iter().flatten().sum::<usize>()
        + batch.node_events.len()
        + batch.custom.len()
        + batch.tables.iter().map(|t| t.origin.len()).sum::<usize>()
}

/// The value stored under `timer_count`: a decimal count, 0 when absent or unreadable.
pub fn parse_count(stored: Option<&[u8]>) -> u64 {
    stored
        .and_then(|b| std::str::from_utf8(b).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_plugin_sdk::types::{CustomEvent, HeartbeatColumns, ProgressColumns};

    #[test]
    fn routes() {
        let table = [
            ("GET", "/state/a", Route::GetState("a")),
            ("GET", "/state/a/b", Route::GetState("a/b")),
            ("PUT", "/state/k", Route::PutState("k")),
            ("POST", "/append/log", Route::Append("log")),
            ("GET", "/read/log", Route::Read("log")),
            ("GET", "/now", Route::Now),
            ("GET", "/wasi/env/HOME", Route::WasiEnv("HOME")),
            ("GET", "/wasi/dir/data/x", Route::WasiDir("/data/x")),
            ("GET", "/restarts", Route::Restarts),
            ("POST", "/decision", Route::Decision),
            ("GET", "/config", Route::Config),
            ("GET", "/state/", Route::NotFound),
            ("POST", "/state/k", Route::NotFound),
            ("PUT", "/now", Route::NotFound),
            ("GET", "/decision", Route::NotFound),
            ("DELETE", "/state/k", Route::NotFound),
            ("GET", "/", Route::NotFound),
            ("GET", "/nowhere", Route::NotFound),
        ];
        for (method, path, want) in table {
            assert_eq!(route(method, path), want, "{method} {path}");
        }
    }

    #[test]
    fn read_json() {
        let records = vec![(1, b"a".to_vec()), (2, "é\"".as_bytes().to_vec()), (3, vec![0xff])];
        assert_eq!(records_json(&records), r#"[[1,"a"],[2,"é\""],[3,"�"]]"#);
        assert_eq!(records_json(&[]), "[]");
    }

    #[test]
    fn counts_events_of_every_kind() {
        let mut batch = EventBatch::default();
        assert_eq!(count_events(&batch), 0);
        batch.progress = Some(ProgressColumns {
            origin: vec![0, 0],
            name: vec![0, 0],
            time: vec![1, 2],
            value: vec![1, 2],
        });
        batch.heartbeats = Some(HeartbeatColumns {
            origin: vec![0; 3],
            time: vec![1; 3],
        });
        batch.custom.push(CustomEvent {
            origin: 0,
            time: 1,
            name: "x".into(),
            attributes: vec![],
            body: String::new(),
        });
        assert_eq!(count_events(&batch), 6);
    }

    #[test]
    fn timer_count_parsing() {
        assert_eq!(parse_count(None), 0);
        assert_eq!(parse_count(Some(b"41")), 41);
        assert_eq!(parse_count(Some(b"junk")), 0);
    }
}
