//! `sonde record --seconds N [--api URL] [--out FILE]`: asks a running sonde
//! for `GET /api/record?seconds=N` and saves the recording, for
//! `sonde plugin test --events FILE`. The file is written under a temporary
//! name and renamed, so a failed recording never leaves half a file; the
//! sonde's own error (busy, too large) is printed as it gave it. Ctrl-C ends
//! the recording early (`DELETE /api/record`) and saves what it holds; a
//! second Ctrl-C gives up.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::{Method, Request};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::plugin::recording::{Line, Reader};

/// What to record.
#[derive(Clone, Debug)]
pub struct Record {
    /// The sonde's API, e.g. `http://127.0.0.1:7878`.
    pub api: String,
    pub seconds: u64,
    pub max_bytes: Option<usize>,
    pub out: PathBuf,
}

/// What was saved.
#[derive(Debug)]
pub struct Saved {
    pub bytes: usize,
    pub ticks: u64,
    pub event_batches: u64,
}

/// The default file name: `sonde-recording-<unix seconds>.jsonl`.
pub fn default_out() -> PathBuf {
    PathBuf::from(format!(
        "sonde-recording-{}.jsonl",
        crate::model::now_ns() / 1_000_000_000
    ))
}

/// Records and saves; Err is a sentence for the user.
pub fn record(r: &Record) -> Result<Saved, String> {
    let base = r.api.trim_end_matches('/');
    if base.starts_with("https://") {
        return Err(format!(
            "{base}: sonde record speaks plain http only; for an API behind TLS use \
             curl --cacert CA.pem '{base}/api/record?seconds={}' -o FILE",
            r.seconds
        ));
    }
    let base = if base.starts_with("http://") {
        base.to_string()
    } else {
        format!("http://{base}")
    };
    let mut url = format!("{base}/api/record?seconds={}", r.seconds);
    if let Some(m) = r.max_bytes {
        url.push_str(&format!("&max_bytes={m}"));
    }
    let uri: hyper::Uri = url.parse().map_err(|e| format!("--api {}: {e}", r.api))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting a runtime: {e}"))?;
    // The answer comes once the recording is over: wait for it, and a margin.
    let limit = Duration::from_secs(r.seconds + 60);
    let (status, body) = rt.block_on(async {
        let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
        let answer = tokio::time::timeout(limit, async {
            let resp = client.get(uri).await.map_err(|e| format!("{base}: {e}"))?;
            let status = resp.status();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| format!("{base}: reading the answer: {e}"))?
                .to_bytes();
            Ok::<_, String>((status, body))
        });
        tokio::pin!(answer);
        let answer = tokio::select! {
            a = &mut answer => a,
            _ = tokio::signal::ctrl_c() => {
                eprintln!("stopping the recording early (Ctrl-C again to give up)");
                stop_early(&client, &base).await?;
                tokio::select! {
                    a = &mut answer => a,
                    _ = tokio::signal::ctrl_c() => return Err("given up: nothing saved".to_string()),
                }
            }
        };
        answer.map_err(|_| format!("{base}: no answer within {} s", limit.as_secs()))?
    })?;
    if !status.is_success() {
        let said = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
        return Err(format!("{base} answered {status}: {said}"));
    }
    let saved = summarize(&body)?;
    write_atomically(&r.out, &body)?;
    Ok(saved)
}

/// `DELETE /api/record`: the sonde ends the recording and answers the GET.
async fn stop_early(
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>,
    base: &str,
) -> Result<(), String> {
    let req = Request::builder()
        .method(Method::DELETE)
        .uri(format!("{base}/api/record"))
        .body(Empty::new())
        .map_err(|e| format!("{base}: {e}"))?;
    let resp = client
        .request(req)
        .await
        .map_err(|e| format!("{base}: stopping: {e}"))?;
    if !resp.status().is_success() {
        return Err(format!("{base}: stopping the recording answered {}", resp.status()));
    }
    Ok(())
}

/// Checks that the answer is a whole recording and counts what it holds.
fn summarize(body: &[u8]) -> Result<Saved, String> {
    let mut reader = Reader::new(body).map_err(|e| format!("the answer is not a recording: {e}"))?;
    let mut end = None;
    while let Some(line) = reader
        .next_line()
        .map_err(|e| format!("the answer is not a recording: {e}"))?
    {
        if let Line::End(e) = line {
            end = Some(e);
        }
    }
    let end = end.ok_or("the recording has no end line: it was cut short")?;
    Ok(Saved {
        bytes: body.len(),
        ticks: end.ticks,
        event_batches: end.event_batches,
    })
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let tmp = path.with_file_name(format!(
        ".{}.tmp{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("recording"),
        std::process::id()
    ));
    std::fs::write(&tmp, bytes).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("{}: {e}", path.display())
    })
}
