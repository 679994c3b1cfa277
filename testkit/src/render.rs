//! Vendor-neutral pieces of a rendered answer, shared by the three vendor modules.

use serde_json::Value;

use crate::Vendor;
use crate::script::Usage;

/// Everything a vendor renderer needs to know about one model request.
pub(crate) struct Ctx<'a> {
    /// 1-based number of this request on the fake; used in ids (`msg_fake0001`).
    pub seq: u64,
    /// Token counts to report.
    pub usage: Usage,
    /// The model the request asked for (body `model`, or Gemini's path).
    pub model: String,
    /// The key the client sent, unredacted (OpenAI's 401 message quotes it).
    pub api_key: Option<String>,
    /// The parsed request body.
    pub body: &'a Value,
}

/// How an SSE response ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamEnd {
    /// All frames, then a clean end of body.
    Complete,
    /// The frames, then the connection is dropped (body error).
    Drop,
}

/// What the server sends back.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// A JSON body with a status and extra headers.
    Json {
        status: u16,
        headers: Vec<(String, String)>,
        body: Value,
    },
    /// `text/event-stream` frames (already formatted, each ends with a blank line).
    Sse { frames: Vec<String>, end: StreamEnd },
    /// A status with no body.
    Empty { status: u16 },
    /// Never answer.
    Hang,
}

/// A reply plus whether it used up the script step.
pub(crate) struct Rendered {
    pub reply: Reply,
    /// False when the step needs another request (the MCP discovery call).
    pub advance: bool,
    /// One line for the request log: what was answered.
    pub note: String,
}

impl Rendered {
    pub fn done(reply: Reply, note: impl Into<String>) -> Rendered {
        Rendered {
            reply,
            advance: true,
            note: note.into(),
        }
    }

    pub fn stay(reply: Reply, note: impl Into<String>) -> Rendered {
        Rendered {
            reply,
            advance: false,
            note: note.into(),
        }
    }
}

/// 16 random hex digits, for tool-call ids.
pub(crate) fn short_id() -> String {
    let mut s = uuid::Uuid::new_v4().simple().to_string();
    s.truncate(16);
    s
}

/// Splits text into word chunks that keep their trailing space, the way the reference
/// fakes streamed ("Hello ", "from ", …, "API.").
pub(crate) fn word_chunks(text: &str) -> Vec<String> {
    if text.is_empty() {
        return vec![String::new()];
    }
    text.split_inclusive(' ').map(str::to_owned).collect()
}

/// The default answer text of a vendor.
pub(crate) fn default_text(vendor: Vendor) -> &'static str {
    match vendor {
        Vendor::Anthropic => "Hello from the fake Anthropic API.",
        Vendor::OpenAi => "Hello from the fake OpenAI Responses API.",
        Vendor::Gemini => "Hello from the fake Gemini API.",
    }
}

/// Text of a tool result that is either a string or a list of content blocks
/// (`{"type":"text","text":…}` / `{"type":"input_text","text":…}`).
pub(crate) fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn chunks_keep_spaces() {
        assert_eq!(
            word_chunks("Hello from the fake Gemini API."),
            vec!["Hello ", "from ", "the ", "fake ", "Gemini ", "API."]
        );
        assert_eq!(word_chunks(""), vec![""]);
    }

    #[test]
    fn content_text_joins_blocks() {
        assert_eq!(content_text(&json!("hi")), "hi");
        assert_eq!(
            content_text(
                &json!([{"type": "text", "text": "a"}, {"type": "tool_reference"}, {"type": "text", "text": "b"}])
            ),
            "a\nb"
        );
    }
}
