//! What every request passes before a handler sees it, and what every error looks like after.
//!
//! - **Token.** With a token configured, every API request (everything but the dashboard's
//!   static files) needs `Authorization: Bearer <token>`; otherwise 401.
//! - **Host.** Without a token the server only listens on loopback; a request whose `Host`
//!   is not a loopback name is refused (403), so a web page cannot reach the API through DNS
//!   rebinding.
//! - **Body.** A body announced larger than the limit is refused (413) before it is read;
//!   a `POST` must say `Content-Type: application/json` (415) — which a cross-site form or
//!   simple request cannot, so another web page cannot trigger or stop the job.
//! - **Errors.** Refusals produced by the router itself (405 for a wrong method) are turned
//!   into Flink's `{"errors": [...]}` form.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{dashboard, Shared};
use crate::error::ApiError;

/// Runs the checks above, then the handler.
pub async fn check(State(state): State<Shared>, request: Request, next: Next) -> Response {
    match admit(
        &state,
        request.method(),
        request.uri().path(),
        request.headers(),
    ) {
        Ok(()) => next.run(request).await,
        Err(e) => e.into_response(),
    }
}

fn admit(state: &Shared, method: &Method, path: &str, headers: &HeaderMap) -> Result<(), ApiError> {
    let config = &state.config;
    if let Some(len) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        if len > config.max_body_bytes as u64 {
            return Err(too_large(config.max_body_bytes));
        }
    }
    match &config.token {
        Some(token) => {
            if !dashboard::is_static(path) && !bearer_matches(headers, token) {
                return Err(ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "this API needs a token: send 'Authorization: Bearer <token>' (the dashboard \
                     takes it once as /?token=<token>)",
                ));
            }
        }
        None => {
            if let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) {
                if !is_loopback_host(host) {
                    return Err(ApiError::forbidden(format!(
                        "requests for host '{}' are refused: this server answers only on loopback \
                         unless it is started with a token",
                        crate::ids::shorten(host)
                    )));
                }
            }
        }
    }
    if method == Method::POST && !is_json(headers) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "a POST request needs 'Content-Type: application/json'",
        ));
    }
    Ok(())
}

pub fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the request body is larger than {limit} bytes"),
    )
}

/// `Content-Type: application/json`, with or without parameters.
pub fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
}

fn bearer_matches(headers: &HeaderMap, token: &str) -> bool {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    // Compare in time independent of where the first difference is.
    let (a, b) = (given.trim().as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `localhost`, `127.x.y.z` or `[::1]`, with or without a port.
pub fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Turns the router's own plain refusals (a wrong method: 405) into Flink's error form,
/// keeping their headers (`Allow`).
pub async fn json_errors(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let response = next.run(request).await;
    let status = response.status();
    let is_json_already = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json_already {
        return response;
    }
    let (mut parts, _) = response.into_parts();
    let message = if status == StatusCode::METHOD_NOT_ALLOWED {
        let allow = parts
            .headers
            .get(header::ALLOW)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        format!(
            "method {method} is not allowed on {}; allowed: {allow}",
            crate::ids::shorten(&path)
        )
    } else {
        format!(
            "{} {}",
            status.as_u16(),
            status.canonical_reason().unwrap_or("error")
        )
    };
    let fixed = ApiError::new(status, message).into_response();
    let (fixed_parts, body) = fixed.into_parts();
    parts.headers.extend(fixed_parts.headers);
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::new(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_recognised_with_and_without_ports() {
        for host in [
            "localhost",
            "localhost:8081",
            "127.0.0.1:1",
            "127.9.9.9",
            "[::1]:8081",
            "[::1]",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [
            "evil.example:8081",
            "10.0.0.1",
            "[2001:db8::1]:80",
            "localhost.evil.example",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }

    #[test]
    fn json_content_types_are_recognised_with_parameters() {
        let mut h = HeaderMap::new();
        assert!(!is_json(&h));
        h.insert(
            header::CONTENT_TYPE,
            "application/json; charset=UTF-8".parse().unwrap(),
        );
        assert!(is_json(&h));
        h.insert(header::CONTENT_TYPE, "text/plain".parse().unwrap());
        assert!(!is_json(&h));
    }

    #[test]
    fn the_bearer_token_must_match_exactly() {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, "Bearer s3cret".parse().unwrap());
        assert!(bearer_matches(&h, "s3cret"));
        assert!(!bearer_matches(&h, "s3cret2"));
        assert!(!bearer_matches(&h, "s3cre"));
        h.insert(header::AUTHORIZATION, "Basic s3cret".parse().unwrap());
        assert!(!bearer_matches(&h, "s3cret"));
    }
}
