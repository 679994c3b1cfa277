//! Claude lines that map to events without the decoder's state: content blocks, user
//! messages, hooks, retries.

use super::classify::retry_kind;
use super::wire::{self, MessageUsage, UserBlock, UserContent};
use crate::decode::Events;
use crate::event::EventKind;
use crate::shared::text::push_capped;
use crate::usage::CanonicalUsage;
use crate::wire::Str;

/// The usage of a message snapshot.
pub(super) fn snapshot(u: MessageUsage) -> CanonicalUsage {
    let n = |c: Option<crate::wire::Count>| c.map_or(0, |c| c.0);
    CanonicalUsage {
        input_tokens: n(u.input_tokens),
        output_tokens: n(u.output_tokens),
        cache_read: n(u.cache_read_input_tokens),
        cache_write: n(u.cache_creation_input_tokens),
        reasoning_tokens: 0,
        request_count: 0,
    }
}

/// Appends a whole text block (blocks are separated by a blank line).
pub(super) fn push_block(out: &mut String, text: &str) {
    if !out.is_empty() {
        push_capped(out, "\n\n");
    }
    push_capped(out, text);
}

pub(super) fn hook(h: wire::Hook<'_>, phase: &str) -> EventKind {
    EventKind::Hook {
        hook: h
            .hook_event
            .or(h.hook_name)
            .or(h.hook_event_name)
            .map(|s| s.into_string())
            .unwrap_or_default(),
        phase: phase.to_owned(),
        outcome: h.outcome.map(|s| s.into_string()),
        exit_code: h.exit_code,
    }
}

/// `system/api_retry` -> a retry event.
pub(super) fn retry_event(l: &wire::ApiRetry<'_>) -> EventKind {
    use std::fmt::Write;
    let word = l.error.as_ref().map(Str::as_str);
    let error_kind = retry_kind(l.error_status, word);
    let delay_ms = l
        .retry_delay_ms
        .filter(|d| d.is_finite() && *d >= 0.0)
        .map(|d| d.round() as u64);
    // "API request failed (HTTP 529, error overloaded); retry 2 of 10 in 1200 ms", in
    // one buffer (a run may print hundreds of these).
    let mut message = String::with_capacity(96);
    message.push_str("API request failed (");
    match l.error_status {
        Some(s) => {
            let _ = write!(message, "HTTP {s}");
        }
        None => message.push_str("no HTTP response"),
    }
    message.push_str(", error ");
    message.push_str(word.unwrap_or("unknown"));
    message.push_str("); ");
    let _ = match (l.attempt, l.max_retries) {
        (Some(a), Some(m)) => write!(message, "retry {a} of {m}"),
        (Some(a), None) => write!(message, "retry {a}"),
        (None, _) => message.write_str("retrying"),
    };
    if let Some(d) = delay_ms {
        let _ = write!(message, " in {d} ms");
    }
    EventKind::Retry {
        attempt: l.attempt,
        max_retries: l.max_retries,
        delay_ms,
        http_status: l.error_status,
        error_kind,
        message,
    }
}

/// A tool call; MCP tools (`mcp__<server>__<tool>`) get their server and bare name.
pub(super) fn tool_call(b: wire::ToolUse, meta: &[wire::ToolUseMeta]) -> EventKind {
    let (name, mcp_server) = match split_mcp_name(&b.name) {
        Some((server, tool)) => {
            let bare = meta
                .iter()
                .find(|m| m.id == b.id)
                .and_then(|m| m.tool_name.clone())
                .unwrap_or_else(|| tool.to_owned());
            (bare, Some(server.to_owned()))
        }
        None => (b.name, None),
    };
    EventKind::ToolCall {
        id: b.id,
        name,
        input: b.input,
        mcp_server,
    }
}

/// `mcp__server__tool` -> (`server`, `tool`).
pub(super) fn split_mcp_name(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix("mcp__")?;
    let (server, tool) = rest.split_once("__")?;
    (!server.is_empty() && !tool.is_empty()).then_some((server, tool))
}

/// `user` lines: tool results and user text.
pub(super) fn user(l: wire::User<'_>, out: &mut Events<'_>) {
    let first = out.len();
    match l.message.content {
        UserContent::Text(s) => out.push(EventKind::UserMessage { text: s }),
        UserContent::Blocks(blocks) => {
            for block in blocks {
                out.push(match block {
                    UserBlock::ToolResult(b) => EventKind::ToolResult {
                        id: b.tool_use_id,
                        name: None,
                        output: b.content.0,
                        is_error: b.is_error.unwrap_or(false),
                        exit_code: None,
                    },
                    UserBlock::Text(t) => EventKind::UserMessage {
                        text: t.text.into_string(),
                    },
                    UserBlock::Other(other) => EventKind::Unknown {
                        vendor_type: Some(format!("user/{other}")),
                    },
                });
            }
        }
        UserContent::None => {}
    }
    if out.len() == first {
        out.push(EventKind::Unknown {
            vendor_type: Some("user".to_owned()),
        });
    }
}
