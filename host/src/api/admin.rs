//! Plugin management: `/api/admin/plugins/{name}` (upload with PUT, remove
//! with DELETE) and `POST /api/admin/plugins/{name}/{enable|disable|reload}`.
//!
//! These live under `/api/admin/` because everything below
//! `/api/plugins/{name}/` belongs to the plugin itself (its `on-request` hook).
//!
//! An upload is checked (name `^[a-z0-9][a-z0-9_-]{0,63}$`, a WebAssembly
//! header, at most [`MAX_UPLOAD`] bytes), written to a hidden temporary file in
//! the plugins directory, synced, and renamed over `<name>.wasm`; the plugin is
//! then loaded at once (the directory watcher would find it too) and the answer
//! carries the load result. Enable and disable are config changes
//! (`plugin.<name>.enabled`) made through the same path as `PATCH /api/config`.

// Handlers return an axum `Response` as their error: the idiom, and never on a hot path.
#![allow(clippy::result_large_err)]

use std::io::Write;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::AppState;
use super::config_api;
use crate::plugin::RunState;
use crate::plugin::config::check_plugin_name;

/// Largest component an upload may carry.
pub const MAX_UPLOAD: usize = 32 << 20;

fn err(code: StatusCode, msg: impl Into<String>) -> Response {
    (code, Json(json!({"error": msg.into()}))).into_response()
}

fn check_name(name: &str) -> Result<(), Response> {
    check_plugin_name(name).map_err(|r| err(StatusCode::BAD_REQUEST, r))
}

pub async fn action(State(st): State<AppState>, Path((name, action)): Path<(String, String)>) -> Response {
    if let Err(r) = check_name(&name) {
        return r;
    }
    match action.as_str() {
        "reload" => {
            let p = st.plugins.clone();
            let n = name.clone();
            match tokio::task::spawn_blocking(move || p.reload(&n)).await {
                Ok(Ok(())) => status_of(&st, &name, StatusCode::OK),
                Ok(Err(reason)) => err(StatusCode::NOT_FOUND, reason),
                Err(e) => err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
            }
        }
        "enable" | "disable" => {
            if !st.plugins.dir().join(format!("{name}.wasm")).is_file() {
                return err(StatusCode::NOT_FOUND, format!("no plugin file {name}.wasm"));
            }
            let on = action == "enable";
            let resp = config_api::change(&st, |mut doc| {
                config_api::merge_patch(&mut doc, &json!({"plugin": {name.clone(): {"enabled": on}}}));
                Ok(doc)
            })
            .await;
            if resp.status() != StatusCode::OK {
                return resp;
            }
            status_of(&st, &name, StatusCode::OK)
        }
        other => err(
            StatusCode::NOT_FOUND,
            format!("no action {other:?}: use enable, disable or reload"),
        ),
    }
}

fn status_of(st: &AppState, name: &str, code: StatusCode) -> Response {
    match st.plugins.status(name) {
        Some(s) => (code, Json(json!({"plugin": s}))).into_response(),
        None => err(StatusCode::NOT_FOUND, format!("no plugin named {name:?}")),
    }
}

pub async fn upload(State(st): State<AppState>, Path(name): Path<String>, body: Bytes) -> Response {
    if let Err(r) = check_name(&name) {
        return r;
    }
    if body.len() < 8 || &body[..4] != b"\0asm" {
        return err(
            StatusCode::UNPROCESSABLE_ENTITY,
            "not a WebAssembly file (no \\0asm header); send the component's bytes as the body",
        );
    }
    let dir = st.plugins.dir().to_path_buf();
    let existed = dir.join(format!("{name}.wasm")).is_file();
    let before = st.plugins.status(&name).map(|s| s.sha256);
    let n = name.clone();
    let written = tokio::task::spawn_blocking(move || write_atomically(&dir, &n, &body)).await;
    match written {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            return err(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("writing the plugin file: {e}"),
            );
        }
        Err(e) => return err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
    let p = st.plugins.clone();
    let n = name.clone();
    let _ = tokio::task::spawn_blocking(move || p.reload(&n)).await;
    let Some(s) = st.plugins.status(&name) else {
        return err(StatusCode::INTERNAL_SERVER_ERROR, "the plugin vanished while loading");
    };
    let rejected = s.update_rejected.is_some() && before.as_ref() != Some(&s.sha256);
    let code = if s.state == RunState::Failed || rejected {
        StatusCode::UNPROCESSABLE_ENTITY
    } else if existed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    (code, Json(json!({"plugin": s, "replaced": existed}))).into_response()
}

pub async fn remove(State(st): State<AppState>, Path(name): Path<String>) -> Response {
    if let Err(r) = check_name(&name) {
        return r;
    }
    let path = st.plugins.dir().join(format!("{name}.wasm"));
    if !path.is_file() {
        return err(StatusCode::NOT_FOUND, format!("no plugin file {name}.wasm"));
    }
    if let Err(e) = std::fs::remove_file(&path) {
        return err(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("removing {}: {e}", path.display()),
        );
    }
    let p = st.plugins.clone();
    let _ = tokio::task::spawn_blocking(move || p.scan(false)).await;
    StatusCode::NO_CONTENT.into_response()
}

/// Writes `<dir>/.<name>.<random>.tmp` (ignored by the directory scan), syncs
/// it and renames it to `<dir>/<name>.wasm`, so the plugin appears whole.
fn write_atomically(dir: &std::path::Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!(".{name}.{:016x}.tmp", rand::random::<u64>()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, dir.join(format!("{name}.wasm")))?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
