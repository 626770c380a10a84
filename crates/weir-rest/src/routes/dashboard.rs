//! The dashboard's files, embedded in the binary: one page, its script and its style. No CDN,
//! no build step; it works offline. The page reads everything from the REST API.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::Shared;

const INDEX: &str = include_str!("../dashboard/index.html");
const SCRIPT: &str = include_str!("../dashboard/weir.js");
const STYLE: &str = include_str!("../dashboard/weir.css");

/// The paths of the static files: served without a token (they hold no job data).
pub fn is_static(path: &str) -> bool {
    matches!(path, "/" | "/index.html" | "/weir.js" | "/weir.css")
}

pub fn routes() -> Router<Shared> {
    Router::new()
        .route("/", get(index))
        .route("/index.html", get(index))
        .route("/weir.js", get(script))
        .route("/weir.css", get(style))
}

fn file(content_type: &'static str, body: &'static str) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

async fn index() -> Response {
    file("text/html; charset=utf-8", INDEX)
}

async fn script() -> Response {
    file("text/javascript; charset=utf-8", SCRIPT)
}

async fn style() -> Response {
    file("text/css; charset=utf-8", STYLE)
}
