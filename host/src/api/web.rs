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

async fn file(State(st): State<AppState>, Path(rel): Path<String>) -> Response {
    let mime = ASSETS
        .iter()
        .find(|a| a.0 == rel)
        .map(|a| a.1)
        .unwrap_or("application/octet-stream");
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
