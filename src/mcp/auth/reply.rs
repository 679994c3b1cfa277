//! The answers the gate gives instead of rmcp's: 400, 401, 403, 404, 413 and 429, each
//! with a JSON body.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::token::AuthFailure;

/// `body` as an `application/json` response with `status`.
fn json_response(status: StatusCode, body: serde_json::Value) -> Response {
    let mut resp = (status, body.to_string()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// 413 for a request whose `Content-Length` is over `max` (`mcp.limits.max_body_bytes`),
/// answered from the head alone: rmcp counts a body's bytes only as they arrive, so a
/// client announcing more than it sends would hold the connection until the idle close.
/// The body is never read, so the connection is closed after the answer.
pub(super) fn announced_too_large(headers: &HeaderMap, max: usize) -> Option<Response> {
    let length: u64 = headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    if length <= u64::try_from(max).unwrap_or(u64::MAX) {
        return None;
    }
    let mut resp = json_response(
        StatusCode::PAYLOAD_TOO_LARGE,
        serde_json::json!({
            "error": "payload_too_large",
            "error_description": format!(
                "the request body (Content-Length {length}) is over mcp.limits.max_body_bytes ({max} bytes)"
            ),
        }),
    );
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    Some(resp)
}

/// 403 for a request refused by the Host/Origin check or from the wrong address.
pub(super) fn forbidden(why: &str) -> Response {
    json_response(
        StatusCode::FORBIDDEN,
        serde_json::json!({"error": "forbidden", "error_description": why}),
    )
}

/// 429 for a request that would open one more session than `limit`.
pub(super) fn too_many_sessions(limit: usize) -> Response {
    json_response(
        StatusCode::TOO_MANY_REQUESTS,
        serde_json::json!({
            "error": "too_many_sessions",
            "error_description": format!(
                "this token holds {limit} MCP sessions (mcp.limits.max_sessions_per_token); close one (DELETE) or wait for an idle one to expire"
            ),
        }),
    )
}

/// 401 with `WWW-Authenticate: Bearer` and a JSON body.
pub(super) fn unauthorized(failure: AuthFailure) -> Response {
    let (challenge, error) = match failure {
        AuthFailure::Missing => (r#"Bearer realm="aicli""#.to_owned(), "unauthorized"),
        AuthFailure::Malformed | AuthFailure::Unknown => (
            format!(
                r#"Bearer realm="aicli", error="invalid_token", error_description="{}""#,
                failure.describe()
            ),
            "invalid_token",
        ),
    };
    let mut resp = json_response(
        StatusCode::UNAUTHORIZED,
        serde_json::json!({"error": error, "error_description": failure.describe()}),
    );
    if let Ok(v) = HeaderValue::from_str(&challenge) {
        resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    resp
}

/// 404 for a session id this token did not create (or that does not exist).
pub(super) fn session_not_found() -> Response {
    json_response(
        StatusCode::NOT_FOUND,
        serde_json::json!({"error": "not_found", "error_description": "session not found"}),
    )
}

/// 400 with a JSON-RPC parse error carrying rmcp's reason (cut to 1,000 characters).
pub(super) async fn malformed_body(resp: Response) -> Response {
    let reason = axum::body::to_bytes(resp.into_body(), 64 * 1024)
        .await
        .map(|b| {
            String::from_utf8_lossy(&b)
                .chars()
                .take(1000)
                .collect::<String>()
        })
        .unwrap_or_default();
    json_response(
        StatusCode::BAD_REQUEST,
        serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": -32700, "message": format!("Parse error: the request body is not a JSON-RPC message ({reason})")},
        }),
    )
}
