//! The dashboard's files: embedded at build time from `web/dist/` (see
//! `host/build.rs`), or read from `api.web_dir` when that is set (for working
//! on the dashboard without rebuilding sonde).

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::AppState;

include!(concat!(env!("OUT_DIR"), "/web_assets.rs"));

/// Whether the real dashboard (not the fallback page) is embedded.
pub fn embedded() -> bool {
    ASSETS.len() > 1
}

pub async fn index(st: State<AppState>) -> Response {
    file(st, Path("index.html".to_string())).await
}

pub async fn asset(st: State<AppState>, Path(rest): Path<String>) -> Response {
    file(st, Path(format!("assets/{rest}"))).await
}

fn mime_of(rel: &str) -> &'static str {
    match rel.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("json" | "map") => "application/json",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        _ => "application/octet-stream",
    }
}

async fn file(State(st): State<AppState>, Path(rel): Path<String>) -> Response {
    // A file only on disk (api.web_dir on a build without the dashboard)
    // still needs its type, or the browser drops a stylesheet.
    let mime = ASSETS
        .iter()
        .find(|a| a.0 == rel)
        .map(|a| a.1)
        .unwrap_or_else(|| mime_of(&rel));
    let dir = st.config.lock().api.web_dir.clone();
    if let Some(dir) = dir
        && !rel.split('/').any(|c| c == ".." || c.is_empty())
        && let Ok(bytes) = tokio::fs::read(dir.join(&rel)).await
    {
        return (
            [(header::CONTENT_TYPE, mime), (header::CACHE_CONTROL, "no-cache")],
            bytes,
        )
            .into_response();
    }
    match ASSETS.iter().find(|a| a.0 == rel) {
        Some((_, mime, bytes)) => (
            [(header::CONTENT_TYPE, *mime), (header::CACHE_CONTROL, "no-cache")],
            *bytes,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such file").into_response(),
    }
}
