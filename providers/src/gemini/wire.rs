//! The lines of `gemini --output-format stream-json`, as typed serde enums.
//!
//! Mirrors gemini-cli's stream-json events and its formatter, pinned:
//! <https://github.com/google-gemini/gemini-cli/blob/04fbf50725b94cef0a8f37be6436bd0a84dafc9b/packages/core/src/output/types.ts>
//! and `stream-json-formatter.ts` in the same directory. Checked against gemini
//! 0.61.0's recorded lines in `fixtures/gemini/`.
//!
//! Older versions: before 0.2x `result.stats` has `total_tokens`, `input_tokens`,
//! `output_tokens`, `duration_ms` and `tool_calls` only (no `cached`, `input`), and
//! before 0.5x no per-model `models` map; those read as 0 / empty (the usage is then
//! the run totals, priced at the model `init` names). Read through [`crate::wire`].

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::tagged_enum;
use crate::wire::{Count, Str, null_default};

/// One line.
#[derive(Debug, Deserialize)]
#[serde(remote = "Self")]
pub enum Line<'a> {
    /// The session starts.
    #[serde(rename = "init")]
    Init(#[serde(borrow)] Init<'a>),
    /// The prompt (role `user`) or a chunk of the answer (role `assistant`).
    #[serde(rename = "message")]
    Message(#[serde(borrow)] Message<'a>),
    /// A tool call.
    #[serde(rename = "tool_use")]
    ToolUse(ToolUse),
    /// A tool's result.
    #[serde(rename = "tool_result")]
    ToolResult(#[serde(borrow)] ToolResult<'a>),
    /// A warning or error (loop detected, turn limit, an invalid model response).
    #[serde(rename = "error")]
    Error(#[serde(borrow)] ErrorEvent<'a>),
    /// The run's end.
    #[serde(rename = "result")]
    Result(#[serde(borrow)] ResultEvent<'a>),
    /// A type gemini does not print: its `type`.
    #[serde(rename = "__other")]
    Other(#[serde(borrow)] Cow<'a, str>),
}
tagged_enum!(Line, "type");

/// `init`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Init<'a> {
    /// When.
    #[serde(borrow)]
    pub timestamp: Option<Str<'a>>,
    /// The session id.
    #[serde(borrow)]
    pub session_id: Option<Str<'a>>,
    /// The model (`auto` without `-m`).
    #[serde(borrow)]
    pub model: Option<Str<'a>>,
}

/// `message`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Message<'a> {
    /// `user` or `assistant`.
    #[serde(borrow)]
    pub role: Str<'a>,
    /// The text.
    #[serde(borrow)]
    pub content: Str<'a>,
    /// Whether it is a chunk of a longer text.
    pub delta: Option<bool>,
}

/// `tool_use`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ToolUse {
    /// The tool (`mcp_<server>_<tool>` for MCP tools).
    pub tool_name: String,
    /// The call's id.
    pub tool_id: String,
    /// The arguments.
    pub parameters: Value,
}

/// `tool_result`. A shell command that exits non-zero is still `success`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ToolResult<'a> {
    /// The call's id.
    pub tool_id: String,
    /// `success` or `error`.
    #[serde(borrow)]
    pub status: Str<'a>,
    /// The output.
    pub output: Option<String>,
    /// The failure.
    pub error: Option<ErrorBody>,
}

/// `{type, message}` of a failed tool or run.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ErrorBody {
    /// `FatalTurnLimitedError`, `unknown`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// The words.
    pub message: String,
}

/// `error`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ErrorEvent<'a> {
    /// `warning` or `error`.
    #[serde(borrow)]
    pub severity: Option<Str<'a>>,
    /// The words.
    pub message: String,
}

/// `result`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ResultEvent<'a> {
    /// When.
    #[serde(borrow)]
    pub timestamp: Option<Str<'a>>,
    /// `success` or `error`.
    #[serde(borrow)]
    pub status: Str<'a>,
    /// The failure.
    pub error: Option<ErrorBody>,
    /// Tokens, duration, tool calls (verbatim for `provider_data` too).
    #[serde(borrow)]
    pub stats: Option<crate::wire::Kept<'a, Stats>>,
}

/// `result.stats`: the sums of `models`, plus duration and tool calls.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Stats {
    /// The run totals.
    #[serde(flatten)]
    pub tokens: Tokens,
    /// 0 on error results (the CLI measures nothing there).
    pub duration_ms: Count,
    /// Tool calls.
    pub tool_calls: Count,
    /// Per model (0.5x+).
    #[serde(deserialize_with = "null_default")]
    pub models: BTreeMap<String, Tokens>,
}

/// Token counts, run totals or one model's.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(default)]
pub struct Tokens {
    /// prompt + candidates + thoughts (+ tool-use prompt tokens).
    pub total_tokens: Count,
    /// The prompt, cached part included.
    pub input_tokens: Count,
    /// Candidates: the visible output, thinking excluded.
    pub output_tokens: Count,
    /// The cached part of `input_tokens`.
    pub cached: Count,
}
