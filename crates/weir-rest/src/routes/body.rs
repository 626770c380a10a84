//! A strict JSON request body: at most the configured size, `application/json`, and parsed into
//! the request type with every mistake (syntax, unknown field, wrong type) answered by a 400
//! that says where. An empty body means the request's defaults, as Flink's client sends `{}`.

use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::guard::{is_json, too_large};
use super::Shared;
use crate::error::ApiError;

/// A request body of type `T`.
pub struct JsonBody<T>(pub T);

impl<T> FromRequest<Shared> for JsonBody<T>
where
    T: DeserializeOwned + Default,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &Shared) -> Result<Self, Self::Rejection> {
        let limit = state.config.max_body_bytes;
        let has_type = request
            .headers()
            .contains_key(axum::http::header::CONTENT_TYPE);
        if has_type && !is_json(request.headers()) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "the request body must be JSON ('Content-Type: application/json')",
            ));
        }
        let bytes = axum::body::to_bytes(request.into_body(), limit)
            .await
            .map_err(|_| too_large(limit))?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(JsonBody(T::default()));
        }
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::bad_request(format!("malformed request body: {e}")))
    }
}
