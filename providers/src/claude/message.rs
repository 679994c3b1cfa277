//! The model's messages on the wire: `assistant` and `user` lines and their content
//! blocks, and the Anthropic Messages streaming events of `stream_event` lines. Part of
//! [`super::wire`] (same sources).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use crate::shared::text::ToolOutput;
use crate::tagged_enum;
use crate::wire::{Count, Str, null_default};

/// `assistant`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Assistant<'a> {
    /// The model message (one content block of it).
    #[serde(borrow)]
    pub message: Message<'a>,
    /// On API errors: `authentication_failed`, `rate_limit`, `server_error`, ...
    #[serde(borrow)]
    pub error: Option<Str<'a>>,
    /// Whether the CLI made this message up to report an API error.
    pub is_api_error_message: Option<bool>,
    /// The failed request's HTTP status (2.1.110+).
    pub api_error_status: Option<u16>,
    /// The API's error type.
    #[serde(borrow)]
    pub api_error_type: Option<Str<'a>>,
    /// `connection_failed` when the API was not reached.
    #[serde(borrow)]
    pub api_error: Option<Str<'a>>,
    /// MCP tool calls: the tool's own name, by call id.
    #[serde(deserialize_with = "null_default")]
    pub tool_use_meta: Vec<ToolUseMeta>,
}

/// `assistant.message`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Message<'a> {
    /// The API's message id (the same on every line of one message).
    #[serde(borrow)]
    pub id: Option<Str<'a>>,
    /// The model (`<synthetic>` for messages the CLI made up).
    #[serde(borrow)]
    pub model: Option<Str<'a>>,
    /// The content block(s).
    #[serde(borrow, deserialize_with = "null_default")]
    pub content: Vec<Block<'a>>,
    /// The `message_start` snapshot: the input side is right, `output_tokens` is a
    /// placeholder (1).
    pub usage: Option<MessageUsage>,
}

/// One `tool_use_meta` entry.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ToolUseMeta {
    /// The call.
    pub id: String,
    /// The MCP tool's own name.
    pub tool_name: Option<String>,
}

/// A content block of an assistant message, by `type`.
#[derive(Debug, Deserialize)]
#[serde(remote = "Self")]
pub enum Block<'a> {
    /// Text.
    #[serde(rename = "text")]
    Text(#[serde(borrow)] TextBlock<'a>),
    /// Reasoning.
    #[serde(rename = "thinking")]
    Thinking(#[serde(borrow)] ThinkingBlock<'a>),
    /// A tool call.
    #[serde(rename = "tool_use")]
    ToolUse(ToolUse),
    /// A call the API runs itself (web search, ...).
    #[serde(rename = "server_tool_use")]
    ServerToolUse(ToolUse),
    /// Another block type: its `type`.
    #[serde(rename = "__other")]
    Other(#[serde(borrow)] Cow<'a, str>),
}
tagged_enum!(Block, "type");

/// `{type: text, text}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct TextBlock<'a> {
    /// The text.
    #[serde(borrow)]
    pub text: Str<'a>,
}

/// `{type: thinking, thinking}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ThinkingBlock<'a> {
    /// The reasoning.
    #[serde(borrow)]
    pub thinking: Str<'a>,
}

/// `{type: tool_use, id, name, input}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ToolUse {
    /// The call's id.
    pub id: String,
    /// The tool (`mcp__<server>__<tool>` for MCP tools).
    pub name: String,
    /// The arguments.
    pub input: Value,
}

/// The token counts of a message (`message_start` snapshot, `message_delta`).
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(default)]
pub struct MessageUsage {
    /// Uncached input.
    pub input_tokens: Option<Count>,
    /// Output so far.
    pub output_tokens: Option<Count>,
    /// Input read from cache.
    pub cache_read_input_tokens: Option<Count>,
    /// Input written to cache.
    pub cache_creation_input_tokens: Option<Count>,
}

/// `user`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct User<'a> {
    /// The message.
    #[serde(borrow)]
    pub message: UserMessage<'a>,
}

/// `user.message`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct UserMessage<'a> {
    /// A string, or blocks.
    #[serde(borrow)]
    pub content: UserContent<'a>,
}

/// `user.message.content`: text, blocks, or anything else (no event of its own).
#[derive(Debug, Default)]
pub enum UserContent<'a> {
    /// A string.
    Text(String),
    /// Blocks.
    Blocks(Vec<UserBlock<'a>>),
    /// Absent, null, or not a string or array.
    #[default]
    None,
}

impl<'de: 'a, 'a> Deserialize<'de> for UserContent<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = UserContent<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or content blocks")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<UserContent<'a>, E> {
                Ok(UserContent::Text(s.to_owned()))
            }
            fn visit_string<E: serde::de::Error>(self, s: String) -> Result<UserContent<'a>, E> {
                Ok(UserContent::Text(s))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<UserContent<'a>, A::Error> {
                let mut blocks = Vec::new();
                while let Some(b) = a.next_element()? {
                    blocks.push(b);
                }
                Ok(UserContent::Blocks(blocks))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<UserContent<'a>, A::Error> {
                while a
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(UserContent::None)
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<UserContent<'a>, E> {
                Ok(UserContent::None)
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<UserContent<'a>, E> {
                Ok(UserContent::None)
            }
            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<UserContent<'a>, E> {
                Ok(UserContent::None)
            }
            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<UserContent<'a>, E> {
                Ok(UserContent::None)
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<UserContent<'a>, E> {
                Ok(UserContent::None)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// A block of a user message, by `type`.
#[derive(Debug, Deserialize)]
#[serde(remote = "Self")]
pub enum UserBlock<'a> {
    /// A tool's result.
    #[serde(rename = "tool_result")]
    ToolResult(ToolResultBlock),
    /// Text.
    #[serde(rename = "text")]
    Text(#[serde(borrow)] TextBlock<'a>),
    /// Another block type: its `type`.
    #[serde(rename = "__other")]
    Other(#[serde(borrow)] Cow<'a, str>),
}
tagged_enum!(UserBlock, "type");

/// `{type: tool_result, tool_use_id, content, is_error}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ToolResultBlock {
    /// The call.
    pub tool_use_id: String,
    /// The output.
    pub content: ToolOutput,
    /// Whether the tool failed.
    pub is_error: Option<bool>,
}

/// `stream_event`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct StreamEvent<'a> {
    /// The API's streaming event.
    #[serde(borrow)]
    pub event: Option<ApiEvent<'a>>,
    /// The message it belongs to (2.1.x).
    #[serde(borrow)]
    pub api_message_id: Option<Str<'a>>,
}

/// An Anthropic Messages streaming event, by `type`.
#[derive(Debug, Deserialize)]
#[serde(remote = "Self")]
pub enum ApiEvent<'a> {
    /// A message starts: its id, model and input-side usage.
    #[serde(rename = "message_start")]
    MessageStart(#[serde(borrow)] MessageStart<'a>),
    /// A content block starts.
    #[serde(rename = "content_block_start")]
    ContentBlockStart(serde::de::IgnoredAny),
    /// A chunk of a content block.
    #[serde(rename = "content_block_delta")]
    ContentBlockDelta(#[serde(borrow)] ContentBlockDelta<'a>),
    /// A content block ends.
    #[serde(rename = "content_block_stop")]
    ContentBlockStop(serde::de::IgnoredAny),
    /// The message's final output count (cumulative for the message) and stop reason.
    #[serde(rename = "message_delta")]
    MessageDelta(MessageDelta),
    /// The message ends.
    #[serde(rename = "message_stop")]
    MessageStop(serde::de::IgnoredAny),
    /// Keep-alive.
    #[serde(rename = "ping")]
    Ping(serde::de::IgnoredAny),
    /// Another event type: its `type`.
    #[serde(rename = "__other")]
    Other(#[serde(borrow)] Cow<'a, str>),
}
tagged_enum!(ApiEvent, "type");

/// `message_start`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct MessageStart<'a> {
    /// The message.
    #[serde(borrow)]
    pub message: StartedMessage<'a>,
}

/// `message_start.message`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct StartedMessage<'a> {
    /// Its id.
    #[serde(borrow)]
    pub id: Option<Str<'a>>,
    /// Its model.
    #[serde(borrow)]
    pub model: Option<Str<'a>>,
    /// The input side (and a placeholder output count).
    pub usage: Option<MessageUsage>,
}

/// `content_block_delta`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ContentBlockDelta<'a> {
    /// The chunk.
    #[serde(borrow)]
    pub delta: Option<Delta<'a>>,
}

/// The chunk of a `content_block_delta`, by `type`.
#[derive(Debug, Deserialize)]
#[serde(remote = "Self")]
pub enum Delta<'a> {
    /// Text.
    #[serde(rename = "text_delta")]
    Text(#[serde(borrow)] TextBlock<'a>),
    /// Reasoning.
    #[serde(rename = "thinking_delta")]
    Thinking(#[serde(borrow)] ThinkingBlock<'a>),
    /// A tool call's arguments, streaming in.
    #[serde(rename = "input_json_delta")]
    InputJson(serde::de::IgnoredAny),
    /// Another delta type: its `type`.
    #[serde(rename = "__other")]
    Other(#[serde(borrow)] Cow<'a, str>),
}
tagged_enum!(Delta, "type");

/// `message_delta`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct MessageDelta {
    /// Counts so far for the message.
    pub usage: Option<MessageUsage>,
}
