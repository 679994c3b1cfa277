//! JSON-RPC 2.0 framing of ACP messages: one line read into an [`Envelope`] (which kind
//! of message it is), and the messages aicli sends built from the crate's v1 types
//! (`agent_client_protocol::v1::schema`, pinned `=5.2.0`).
//!
//! The payloads themselves (`params`, `result`) are read with the crate's types where
//! the decoder needs them; everything else stays raw in the event's `raw`.

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;
use serde_json::value::RawValue;

/// The JSON-RPC `error` object.
#[derive(Debug, Clone, Deserialize)]
pub struct RpcError {
    /// The code (`-32000` auth, `-32601` method not found, ...; gemini sends HTTP
    /// statuses).
    pub code: i64,
    /// The message.
    #[serde(default)]
    pub message: String,
    /// Structured detail (`errorKind`, `codexErrorInfo`, `details`, ...).
    #[serde(default)]
    pub data: Option<Value>,
}

/// One message, by its shape.
#[derive(Debug)]
pub enum Envelope<'a> {
    /// A request (`method` and `id`): the peer expects an answer. `id` is the raw JSON
    /// of the id, echoed back as it came (numbers and strings both occur).
    Request {
        /// The id, raw.
        id: &'a RawValue,
        /// The method.
        method: String,
        /// The params, raw (`null` when absent).
        params: Option<&'a RawValue>,
    },
    /// A notification (`method`, no `id`).
    Notification {
        /// The method.
        method: String,
        /// The params, raw.
        params: Option<&'a RawValue>,
    },
    /// A successful response.
    Result {
        /// The id it answers, raw.
        id: &'a RawValue,
        /// The result, raw.
        result: &'a RawValue,
    },
    /// An error response (its id may be `null`: an error about a message the peer
    /// could not read).
    Error {
        /// The id it answers, raw (`null` when absent).
        id: Option<&'a RawValue>,
        /// The error.
        error: RpcError,
    },
}

#[derive(Deserialize)]
struct Raw<'a> {
    #[serde(default, borrow)]
    jsonrpc: Option<&'a str>,
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
    #[serde(default, borrow)]
    result: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<RpcError>,
}

/// Reads one line as a JSON-RPC 2.0 message, or says what is wrong with it.
pub fn envelope(text: &str) -> Result<Envelope<'_>, String> {
    let raw: Raw<'_> = serde_json::from_str(text).map_err(|e| {
        if e.is_syntax() || e.is_eof() {
            format!("not a JSON-RPC message: malformed JSON: {e}")
        } else {
            format!("not a JSON-RPC message: {e}")
        }
    })?;
    if raw.jsonrpc != Some("2.0") {
        return Err(match raw.jsonrpc {
            Some(v) => format!("not a JSON-RPC 2.0 message: \"jsonrpc\" is {v:?}"),
            None => "not a JSON-RPC 2.0 message: no \"jsonrpc\": \"2.0\"".to_owned(),
        });
    }
    // `"id": null` reads as no id.
    let id = raw.id.filter(|i| i.get() != "null");
    match (raw.method, id, raw.result, raw.error) {
        (Some(method), Some(id), None, None) => Ok(Envelope::Request {
            id,
            method,
            params: raw.params,
        }),
        (Some(method), None, None, None) => Ok(Envelope::Notification {
            method,
            params: raw.params,
        }),
        (None, Some(id), Some(result), None) => Ok(Envelope::Result { id, result }),
        (None, id, None, Some(error)) => Ok(Envelope::Error { id, error }),
        (None, None, Some(_), None) => Err("a JSON-RPC response without an id".to_owned()),
        (None, _, None, None) => {
            Err("a JSON-RPC message with neither method, result nor error".to_owned())
        }
        (Some(_), _, _, _) | (None, _, Some(_), Some(_)) => {
            Err("a JSON-RPC message that is both a request and a response".to_owned())
        }
    }
}

/// aicli's request ids are integers; the raw id of a response, as one.
pub fn own_id(raw: &RawValue) -> Option<i64> {
    serde_json::from_str::<i64>(raw.get()).ok()
}

/// `{"jsonrpc":"2.0","id":ID,"method":M,"params":P}`.
pub fn request(id: i64, method: &str, params: &impl serde::Serialize) -> Value {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// `{"jsonrpc":"2.0","method":M,"params":P}`.
pub fn notification(method: &str, params: &impl serde::Serialize) -> Value {
    serde_json::json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// `{"jsonrpc":"2.0","id":ID,"result":R}`, `id` echoed raw.
pub fn result(id: &str, result: &impl serde::Serialize) -> Value {
    serde_json::json!({"jsonrpc": "2.0", "id": raw_id(id), "result": result})
}

/// `{"jsonrpc":"2.0","id":ID,"error":{"code":C,"message":M}}`.
pub fn error(id: &str, code: i64, message: &str) -> Value {
    serde_json::json!({"jsonrpc": "2.0", "id": raw_id(id), "error": {"code": code, "message": message}})
}

fn raw_id(id: &str) -> Value {
    serde_json::from_str(id).unwrap_or(Value::Null)
}

/// The `sessionUpdate` tag of a `session/update`'s params, for updates the crate's
/// enum does not know.
pub fn update_tag(params: &RawValue) -> Option<String> {
    #[derive(Deserialize)]
    struct P {
        update: U,
    }
    #[derive(Deserialize)]
    struct U {
        #[serde(rename = "sessionUpdate")]
        tag: String,
        #[serde(flatten)]
        _rest: std::collections::BTreeMap<String, IgnoredAny>,
    }
    serde_json::from_str::<P>(params.get())
        .ok()
        .map(|p| p.update.tag)
}

/// The value at `path` (object keys) of `v`.
pub fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_by_shape_and_what_is_wrong_otherwise() {
        let e = envelope(
            r#"{"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{}}"#,
        );
        assert!(
            matches!(e, Ok(Envelope::Request { ref method, .. }) if method == "session/request_permission")
        );
        let e = envelope(r#"{"jsonrpc":"2.0","method":"session/update","params":{}}"#);
        assert!(matches!(e, Ok(Envelope::Notification { .. })));
        let e = envelope(r#"{"jsonrpc":"2.0","id":3,"result":{}}"#);
        assert!(matches!(e, Ok(Envelope::Result { id, .. }) if own_id(id) == Some(3)));
        let e = envelope(
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#,
        );
        assert!(matches!(e, Ok(Envelope::Error { id: None, ref error }) if error.code == -32700));
        assert_eq!(
            envelope("hello").err().unwrap_or_default(),
            "not a JSON-RPC message: malformed JSON: expected value at line 1 column 1"
        );
        assert_eq!(
            envelope(r#"{"id":1,"result":{}}"#)
                .err()
                .unwrap_or_default(),
            "not a JSON-RPC 2.0 message: no \"jsonrpc\": \"2.0\""
        );
        assert!(envelope(r#"{"jsonrpc":"2.0","id":1}"#).is_err());
        let out = result("\"a-uuid\"", &serde_json::json!({}));
        assert_eq!(out["id"], "a-uuid");
    }
}
