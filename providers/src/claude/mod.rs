//! The Claude Code adapter (`@anthropic-ai/claude-code`, binary `claude`).
//!
//! Written against claude 2.1.332 and its recorded transcripts in `fixtures/claude/`;
//! older shapes are read too (see "Older versions"). Pure: it builds a command and reads
//! lines, it never spawns anything.
//!
//! | module | owns |
//! |---|---|
//! | [`wire`] | the stream-json line types (pinned to the Claude Agent SDK; messages and stream events in `message`) |
//! | `argv` | the command, the MCP config file, the IDE lockfile |
//! | `decode` | lines -> events, the per-run fold (`lines`: the stateless part) |
//! | `classify` | error kinds from the structured fields, then the words |
//! | `result` | the `result` lines' accounting and the final [`SessionResult`] |
//!
//! # The command
//!
//! `claude -p --output-format stream-json --verbose` (the CLI refuses stream-json
//! without `--verbose`) with **the prompt on stdin** (with no prompt argument `-p` reads
//! stdin; the prompt never shows in `/proc/PID/cmdline`), then `--model`, `--max-turns`
//! (hidden from `--help`, works), `--max-budget-usd`, `--append-system-prompt`,
//! `--permission-mode`, `--resume`, `--mcp-config FILE --strict-mcp-config`,
//! `--allowedTools`, `--disallowedTools`, the config's extra args and the task's. An
//! option value that starts with `-` is passed as `--flag=value`. Run as root (a local run
//! only: in aicli's containers claude never runs as root), bypassing permissions also
//! needs `IS_SANDBOX=1`. The budget is the smaller of the task's (or
//! config's) limit and what is left of the batch's; with nothing left the command is
//! refused.
//!
//! # The stream
//!
//! | line | event |
//! |---|---|
//! | `system/init` | [`EventKind::SessionStarted`] |
//! | `system/api_retry` | [`EventKind::Retry`] |
//! | `system/permission_denied` | [`EventKind::PermissionDenied`] |
//! | `system/status` | [`EventKind::Status`] (`requesting`, `compacting`; `idle` for null) |
//! | `system/hook_started`, `hook_response` | [`EventKind::Hook`] |
//! | `system/task_started`, `task_progress`, `task_updated`, `task_notification` | [`EventKind::Subtask`] |
//! | other `system/*` | [`EventKind::Unknown`] `system/<subtype>` |
//! | `assistant` | one event per content block (text, thinking, tool_use); an [`EventKind::Error`] when it is an API error; a [`EventKind::Usage`] for a new model response |
//! | `user` | [`EventKind::ToolResult`] per `tool_result` block, [`EventKind::UserMessage`] for text |
//! | `stream_event` | text / thinking deltas ([`EventKind::AssistantText`] with `delta`, live progress); `message_start` / `message_delta` give [`EventKind::Usage`]; the framing events [`EventKind::Status`] |
//! | `rate_limit_event` | [`EventKind::RateLimit`] |
//! | `subagent_token_usage` | [`EventKind::Subtask`] (`token_usage`) |
//! | `result` | [`EventKind::Usage`] up to what the CLI billed so far, then [`EventKind::Final`] |
//!
//! # Success, errors, usage and cost
//!
//! - A run may print several `result` lines (background agents: a result, more work,
//!   another result). Turns, durations, usage and cost cover them all; the verdict and
//!   the response are the last one's. The engine waits while background tasks
//!   (`task_started` without its end) are open.
//! - `result.subtype` stays `"success"` on API and auth errors: success is `is_error ==
//!   false` with `terminal_reason` `completed`. The error kind comes from
//!   `terminal_reason` (`max_turns`, `budget_exhausted`, `api_error`), then for API errors
//!   from `api_error` (`connection_failed`), `api_error_status`, `api_error_type` and the
//!   assistant line's `error` word (which alone marks an API error on 2.1.x before
//!   `terminal_reason`), and only then from text (`API Error: 404 ...` on 2.0.x).
//! - Usage is everything the run was billed for: `modelUsage` holds the main model, side
//!   models (haiku) and subagents, and `total_cost_usd` prices all of it; `result.usage`
//!   is the main model alone (and on `error_max_budget_usd` leaves out the last
//!   request). Per run: the sum of `model_usage_since_last_result` over the result
//!   lines; else the last `modelUsage` (session-cumulative) minus the prior session
//!   totals when the run resumed one; else `result.usage` (CLIs without `modelUsage`);
//!   else, without a result line, what the stream showed (message snapshots and
//!   `message_delta` counts). `usage_by_model` keeps the split. `request_count` is the
//!   number of distinct model responses (`message.id`s of non-synthetic messages).
//! - Cost per run: the sum of the since-last-result `costUSD`s; else `total_cost_usd`
//!   minus the prior session total; else estimated from the price table, else unknown,
//!   never 0.
//! - Live usage: a new model response gives its `message_start` snapshot (input side,
//!   one request), a `message_delta` the output increment, and each `result` line the
//!   rest of what the CLI billed so far, by model.
//!
//! # Older versions
//!
//! - 2.0.x prints no `claude_code_version` in `init`, no `terminal_reason`, no
//!   `api_error_status` / `api_error_type` / `api_error` and no
//!   `model_usage_since_last_result`; API errors are the text `API Error: <status>
//!   <body>`. Usage then comes from `modelUsage`, errors from the text.
//! - 2.1.x before 2.1.110 has no `api_error_status`; early 2.1.x reports auth failures
//!   only through the assistant line's `error: "authentication_failed"`.
//! - `stream_event` lines before 2.1 carry no `api_message_id`.

mod argv;
mod classify;
mod decode;
mod lines;
mod message;
mod result;
pub mod wire;

use std::path::Path;

use serde::Deserialize;

pub use argv::MCP_CONFIG_FILE;
pub use decode::ClaudeDecoder;

use crate::config::ProviderConfig;
use crate::decode::{Decoder, ExitStatus};
use crate::error::ProviderError;
#[cfg(doc)]
use crate::event::EventKind;
use crate::provider::{AiCliProvider, AuthStatus, CommandSpec, LaunchContext, McpEndpoint};
use crate::result::ParseContext;
#[cfg(doc)]
use crate::result::SessionResult;
use crate::shared::text::truncate_chars;

/// The Claude Code CLI.
#[derive(Debug, Clone)]
pub struct ClaudeProvider {
    name: String,
    config: ProviderConfig,
}

impl ClaudeProvider {
    /// A provider called `name` with config entry `config`.
    pub fn new(name: &str, config: ProviderConfig) -> ClaudeProvider {
        ClaudeProvider {
            name: name.to_owned(),
            config,
        }
    }

    /// What to do about missing or rejected credentials.
    fn login_hint(&self) -> String {
        format!(
            "run `{} {}`, or set ANTHROPIC_API_KEY to a valid API key",
            self.config.binary_name,
            self.config.login_argv.join(" ")
        )
    }

    /// The CLI's words about an auth failure, with what to do about it.
    fn auth_message(&self, cli_words: &str) -> String {
        format!(
            "{}: Claude Code is not logged in or its credentials were rejected; {}",
            cli_words.trim(),
            self.login_hint()
        )
    }
}

impl AiCliProvider for ClaudeProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn config(&self) -> &ProviderConfig {
        &self.config
    }

    fn command(&self, ctx: &LaunchContext<'_>) -> Result<CommandSpec, ProviderError> {
        self.build_command(ctx)
    }

    fn decoder(&self, ctx: &ParseContext) -> Box<dyn Decoder> {
        Box::new(ClaudeDecoder::new(self.clone(), ctx.clone()))
    }

    fn ide_lockfile(
        &self,
        endpoint: &McpEndpoint,
        port: u16,
        workspace: &Path,
        pid: u32,
    ) -> Option<(String, String)> {
        Some(argv::ide_lockfile(endpoint, port, workspace, pid))
    }

    fn parse_auth_status(&self, stdout: &str, stderr: &str, exit_code: Option<i32>) -> AuthStatus {
        parse_auth_status(stdout, stderr, exit_code, &self.login_hint())
    }

    fn detect_auth_error(&self, stderr: &str, _exit: ExitStatus) -> Option<String> {
        detect_auth_error_in(self, stderr)
    }
}

/// The CLI's auth-failure words on stderr (claude reports auth failures on stdout, with
/// exit 1 and an empty stderr: this is the last resort).
fn detect_auth_error_in(p: &ClaudeProvider, stderr: &str) -> Option<String> {
    stderr
        .lines()
        .map(str::trim)
        .find(|l| classify::auth_text(l))
        .map(|l| p.auth_message(&truncate_chars(l, 300)))
}

/// The JSON `claude auth status` prints.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct AuthStatusJson {
    logged_in: Option<bool>,
    auth_method: Option<String>,
}

/// Reads `claude auth status` (JSON by default, text with `--text`; exit 0 = logged in).
/// The probe does not check an API key against the server: a bad key reads as logged in.
fn parse_auth_status(stdout: &str, stderr: &str, exit_code: Option<i32>, hint: &str) -> AuthStatus {
    if let Ok(s) = serde_json::from_str::<AuthStatusJson>(stdout.trim())
        && let Some(logged_in) = s.logged_in
    {
        return if logged_in {
            AuthStatus::LoggedIn {
                method: s.auth_method.filter(|m| !m.is_empty() && m != "none"),
            }
        } else {
            AuthStatus::LoggedOut {
                hint: format!("not logged in: {hint}"),
            }
        };
    }
    let lower = format!("{stdout}\n{stderr}").to_ascii_lowercase();
    match exit_code {
        _ if lower.contains("not logged in") => AuthStatus::LoggedOut {
            hint: format!("not logged in: {hint}"),
        },
        Some(0) => AuthStatus::LoggedIn { method: None },
        Some(code) => AuthStatus::LoggedOut {
            hint: format!("`claude auth status` exited with {code}: {hint}"),
        },
        None => AuthStatus::Unknown {
            detail: "the status probe was killed".to_owned(),
        },
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_argv;
