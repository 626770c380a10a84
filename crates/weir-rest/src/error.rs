//! Errors: why the server could not start ([`StartError`]), and a refused request
//! ([`ApiError`]), answered as Flink does — a 4xx/5xx status and `{"errors": [...]}`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::net::{IpAddr, SocketAddr};

/// Why the REST server did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(
        "refusing to serve the REST API on {bind} without a token: anyone who can reach it could \
         stop the job; pass --rest-token TOKEN (or set WEIR_REST_TOKEN), or bind to 127.0.0.1"
    )]
    TokenRequired { bind: IpAddr },
    #[error("the REST token must be a non-empty string without spaces")]
    BadToken,
    #[error("cannot listen on {addr}: {source}; pick another port with --rest-port (0 picks a free one) or turn the REST API off with --no-rest")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("invalid REST settings: {0}")]
    Invalid(String),
    #[error("could not start the REST server: {0}")]
    Runtime(std::io::Error),
}

impl StartError {
    /// The port was taken (as opposed to a bad setting).
    pub fn is_address_in_use(&self) -> bool {
        matches!(self, StartError::Bind { source, .. } if source.kind() == std::io::ErrorKind::AddrInUse)
    }
}

/// A request the API refuses, with the status and message the caller gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// For 405: the methods the path allows.
    pub allow: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            allow: None,
        }
    }
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, message)
    }
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, message)
    }
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "errors": [self.message] }).to_string();
        let mut response = (self.status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(crate::schema::JSON_CONTENT_TYPE),
        );
        if let Some(allow) = self.allow.and_then(|a| HeaderValue::from_str(&a).ok()) {
            headers.insert(header::ALLOW, allow);
        }
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"weir\""),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_request_answers_with_flinks_error_body() {
        let response = ApiError::not_found("Job 00 not found").into_response();
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "application/json; charset=UTF-8"
        );
    }

    #[test]
    fn a_taken_port_is_told_apart_from_other_bind_errors() {
        let e = StartError::Bind {
            addr: "127.0.0.1:8081".parse().unwrap(),
            source: std::io::Error::from(std::io::ErrorKind::AddrInUse),
        };
        assert!(e.is_address_in_use());
        assert!(e.to_string().contains("--rest-port"));
    }
}
