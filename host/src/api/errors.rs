//! One shape for every error the API answers: `{"error": "..."}`, with `key`
//! and `reason` when one parameter, field or setting is at fault (the OpenAPI
//! document lists it as the `Error` schema).
//!
//! The handlers write that shape themselves. What they do not write is what
//! axum answers before a handler runs — a body over its limit (413), a
//! rejected extractor (400, 415, 422), a route or method it does not know
//! (404, 405) — and the text a plugin's `on-request` may answer with. Those
//! come as plain text or empty, so [`json_errors`] wraps them on their way
//! out instead of each rejection being caught in each handler.
//! The OTLP/HTTP receiver is not behind it: OTLP answers its errors as a
//! protobuf `google.rpc.Status`, which its clients decode.

use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Error texts longer than this are cut: they are messages, not payloads.
const MAX_TEXT: usize = 64 << 10;

/// An error in the API's shape; `key` and `reason` name what was wrong.
pub fn error(status: StatusCode, error: impl Into<String>, key: Option<&str>, reason: Option<&str>) -> Response {
    let mut body = json!({"error": error.into()});
    if let Some(k) = key {
        body["key"] = k.into();
    }
    if let Some(r) = reason {
        body["reason"] = r.into();
    }
    (status, axum::Json(body)).into_response()
}

fn is_json(r: &Response) -> bool {
    r.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            let ct = ct.split(';').next().unwrap_or("").trim();
            ct == "application/json" || ct.ends_with("+json")
        })
}

/// What to say when axum gave no text of its own (an empty 404 or 405).
fn fallback_text(status: StatusCode) -> String {
    match status {
        StatusCode::NOT_FOUND => "no such endpoint".into(),
        StatusCode::METHOD_NOT_ALLOWED => "this endpoint does not take that method; see /api/openapi.json".into(),
        s => s.canonical_reason().unwrap_or("error").to_lowercase(),
    }
}

/// Middleware: rewrites an error answered as text (or with no body) into the
/// API's JSON shape, keeping its status and headers (`Allow`, `Retry-After`,
/// `WWW-Authenticate`). Errors already in JSON pass untouched.
pub async fn json_errors(req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) || is_json(&resp) {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let text = match to_bytes(body, MAX_TEXT).await {
        Ok(b) => String::from_utf8_lossy(&b).trim().to_string(),
        Err(_) => String::new(),
    };
    let mut error = if text.is_empty() { fallback_text(status) } else { text };
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        error = format!("the request body is larger than this endpoint takes ({error})");
    }
    let body = json!({"error": error}).to_string();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts
        .headers
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Response::from_parts(parts, Body::from(body))
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::routing::{get, post};
    use http_body_util::BodyExt;
    use tonic::codegen::Service;

    use super::*;

    async fn answer(app: &Router, req: axum::http::Request<Body>) -> (StatusCode, String, serde_json::Value) {
        let resp = app.clone().call(req).await.unwrap();
        let status = resp.status();
        let ct = resp.headers()[header::CONTENT_TYPE].to_str().unwrap().to_string();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, ct, serde_json::from_slice(&body).unwrap())
    }

    fn app() -> Router {
        Router::new()
            .route("/json", post(|_: axum::Json<serde_json::Value>| async { "ok" }))
            .route("/small", post(|_: axum::body::Bytes| async { "ok" }))
            .route("/text", get(|| async { (StatusCode::NOT_FOUND, "no such file") }))
            .route(
                "/mine",
                get(|| async { error(StatusCode::BAD_REQUEST, "x: bad", Some("x"), Some("bad")) }),
            )
            .layer(axum::extract::DefaultBodyLimit::max(16))
            .layer(axum::middleware::from_fn(json_errors))
    }

    fn req(method: &str, uri: &str, ct: &str, body: &str) -> axum::http::Request<Body> {
        axum::http::Request::builder()
            .method(method)
            .uri(uri)
            .header(header::CONTENT_TYPE, ct)
            .body(Body::from(body.to_string()))
            .unwrap()
    }

    #[tokio::test]
    async fn axum_rejections_and_text_errors_become_json() {
        let app = app();
        let (s, ct, v) = answer(&app, req("POST", "/small", "text/plain", &"x".repeat(100))).await;
        assert_eq!((s, ct.as_str()), (StatusCode::PAYLOAD_TOO_LARGE, "application/json"));
        assert!(
            v["error"].as_str().unwrap().contains("larger than this endpoint takes"),
            "{v}"
        );
        let (s, _, v) = answer(&app, req("POST", "/json", "application/json", "{nope")).await;
        assert_eq!(s, StatusCode::BAD_REQUEST);
        assert!(v["error"].is_string(), "{v}");
        let (s, _, v) = answer(&app, req("POST", "/json", "text/plain", "{}")).await;
        assert_eq!(s, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{v}");
        let (s, _, v) = answer(&app, req("GET", "/nowhere", "text/plain", "")).await;
        assert_eq!((s, v), (StatusCode::NOT_FOUND, json!({"error": "no such endpoint"})));
        let resp = app
            .clone()
            .call(req("DELETE", "/json", "text/plain", ""))
            .await
            .unwrap();
        assert!(resp.headers().contains_key(header::ALLOW), "headers are kept");
        let (s, _, v) = answer(&app, req("DELETE", "/json", "text/plain", "")).await;
        assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED);
        assert!(v["error"].as_str().unwrap().contains("that method"), "{v}");
        let (_, _, v) = answer(&app, req("GET", "/text", "text/plain", "")).await;
        assert_eq!(v, json!({"error": "no such file"}));
        let (_, _, v) = answer(&app, req("GET", "/mine", "text/plain", "")).await;
        assert_eq!(
            v,
            json!({"error": "x: bad", "key": "x", "reason": "bad"}),
            "JSON passes as it is"
        );
    }
}
