//! The Codex CLI adapter: `codex exec --json` of `@openai/codex` (fixtures recorded with
//! 0.171.0, see `fixtures/codex/`; older shapes in [`wire`]).
//!
//! Everything here is pure except the `auth_precheck`, which looks at a few local files.
//!
//! | module | owns |
//! |---|---|
//! | [`wire`] | the `codex exec --json` line types (pinned to `exec_events.rs`) |
//! | `argv` | the command, the MCP `-c` override |
//! | `decode` | lines -> events, the per-run fold |
//! | `classify` | error texts -> kinds, retry notices |
//! | `result` | the final [`SessionResult`] |
//! | `precheck` | the pre-flight look for credentials |
//!
//! # The command
//!
//! ```text
//! codex exec -C <workdir> [--sandbox <mode>] [resume] --json --skip-git-repo-check
//!     [-m <model>] [--dangerously-bypass-approvals-and-sandbox]
//!     [-c developer_instructions="..."] [-c mcp_servers.<name>={...}]
//!     <config extra_args> <task extra_args> -- [<thread_id>] -
//! ```
//!
//! - **The prompt is on stdin** (`-` reads it; also for `exec resume`), so it never shows
//!   in `/proc/PID/cmdline`. Codex prints "Reading additional input from stdin..." on
//!   stderr, which is harmless.
//! - `-C` and `--sandbox` are options of `codex exec` itself: `codex exec resume` rejects
//!   them, so they always come before the `resume` subcommand.
//! - `--skip-git-repo-check` is always passed: outside a git repository `codex exec`
//!   refuses to start without it.
//! - Sandbox, from the neutral [`PermissionMode`](crate::PermissionMode): `plan` ->
//!   `--sandbox read-only`, `default` -> nothing, `accept_edits` -> `--sandbox
//!   workspace-write` (`danger-full-access` in a container, which is the sandbox there:
//!   bubblewrap cannot start in one), `bypass` -> `--dangerously-bypass-approvals-and-sandbox`.
//! - `--` ends the options, so a thread id is never taken for a flag.
//! - Not supported by Codex and left out of the argv: `max_turns`, `max_budget_usd`,
//!   tool lists. `append_system_prompt` becomes `-c developer_instructions=...`.
//! - Credentials: `codex exec` ignores `OPENAI_API_KEY` and `OPENAI_BASE_URL`; it uses
//!   `CODEX_API_KEY`, a `codex login` (`$CODEX_HOME/auth.json`), or the `env_key` of a
//!   custom model provider.
//!
//! # Events
//!
//! | Codex line | normalized |
//! |---|---|
//! | `thread.started` | `SessionStarted` (the thread id is the session id) |
//! | `turn.started` | `Status` `turn_started` |
//! | `item.completed` `agent_message` | `AssistantText` (a whole message) |
//! | `item.completed` `reasoning` | `Thinking` |
//! | `item.*` `todo_list`, `item.completed` `plan` | `Plan` |
//! | `item.started` / `item.completed` `command_execution`, `mcp_tool_call`, `file_change`, `web_search` | `ToolCall` / `ToolResult` |
//! | `item.completed` `error` | `Error { fatal: false }` (warnings) |
//! | `error` `Reconnecting... N/M (why)` | `Retry` |
//! | `error`, any other message | `Error { fatal: true }` |
//! | `turn.completed` | `Usage` (this run's share) and `Final { success: true }` |
//! | `turn.failed` | `Final { success: false }` with the kind read from the message |
//! | `item.updated`, `item.plan.delta`, `request_user_input`, `collab_tool_call` | `Unknown` (raw kept) |
//!
//! # The result
//!
//! - Response: the text of the last `agent_message` (kept on failure too).
//! - Success: a `turn.completed` and no `turn.failed`.
//! - Usage: `turn.completed.usage` is cumulative over the thread, so the per-run usage is
//!   the figure minus `ParseContext::prior`; the cumulative figure goes to
//!   `session_totals`. `input_tokens` includes cached input, so canonical input is
//!   `input_tokens - cached_input_tokens - cache_write_input_tokens`. `output_tokens`
//!   already includes `reasoning_output_tokens`.
//! - Cost: Codex reports none; it is estimated from the config's prices for the model the
//!   run asked for, else unknown (never 0).
//! - Runs without a final event: a foreign transcript is `protocol`; "no rollout found"
//!   on stderr is `invalid_resume`; an argv Codex rejected is `bad_request`; then auth,
//!   and the shared rules of [`Tally::classify_without_final`](crate::Tally) (a run that
//!   was still "Reconnecting..." ends as `network`).

mod argv;
mod classify;
mod decode;
mod precheck;
mod result;
pub mod wire;

use std::collections::BTreeMap;
use std::path::Path;

pub use argv::{mcp_config_override, toml_string};
/// Codex's error texts -> kinds (codex-acp shows them as agent text).
pub(crate) use classify::classify_message;
pub use decode::CodexDecoder;

use crate::config::ProviderConfig;
use crate::decode::{Decoder, ExitStatus};
use crate::error::ProviderError;
use crate::provider::{AiCliProvider, AuthStatus, CommandSpec, LaunchContext};
use crate::result::ParseContext;
#[cfg(doc)]
use crate::result::SessionResult;
use crate::shared::text::{stderr_last_line, truncate_chars};

/// The environment variable through which Codex reads aicli's MCP bearer token
/// (`bearer_token_env_var` of the server entry); the token never appears in the argv.
pub const MCP_TOKEN_ENV: &str = "AICLI_MCP_TOKEN";

/// The API key variable `codex exec` uses (`OPENAI_API_KEY` is ignored by `codex exec`).
pub const API_KEY_ENV: &str = "CODEX_API_KEY";

/// An access-token variable the 0.171.0 binary also reads as credentials.
pub const ACCESS_TOKEN_ENV: &str = "CODEX_ACCESS_TOKEN";

/// Where Codex keeps its state and `auth.json`; `~/.codex` when unset.
pub const CODEX_HOME_ENV: &str = "CODEX_HOME";

/// What to do when there are no credentials.
const LOGIN_HINT: &str = "set CODEX_API_KEY or run `codex login`";

/// Codex's words for a session it cannot resume: an unknown id (`no rollout found`), or
/// a session whose recording holds nothing yet (killed right after `thread.started`:
/// `thread/resume failed: failed to read thread: ... is empty`).
const RESUME_FAILED: &[&str] = &["no rollout found", "thread/resume failed"];

/// The Codex CLI.
#[derive(Debug, Clone)]
pub struct CodexProvider {
    name: String,
    config: ProviderConfig,
}

impl CodexProvider {
    /// A provider called `name` with config entry `config`.
    pub fn new(name: &str, config: ProviderConfig) -> CodexProvider {
        CodexProvider {
            name: name.to_owned(),
            config,
        }
    }

    fn invalid_task(&self, message: impl Into<String>) -> ProviderError {
        ProviderError::InvalidTask {
            provider: self.name.clone(),
            message: message.into(),
        }
    }
}

impl AiCliProvider for CodexProvider {
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
        Box::new(CodexDecoder::new(self.clone(), ctx.clone()))
    }

    fn parse_auth_status(&self, stdout: &str, stderr: &str, exit_code: Option<i32>) -> AuthStatus {
        // `codex login status` prints to stderr; read both to be safe.
        let text = format!("{stderr}\n{stdout}");
        if text.contains("Not logged in") {
            return AuthStatus::LoggedOut {
                hint: format!(
                    "{LOGIN_HINT} (`codex login status` does not see CODEX_API_KEY, which `codex exec` uses)"
                ),
            };
        }
        match exit_code {
            Some(0) => {
                let method = [
                    ("API key configured", "api_key"),
                    ("Logged in using ChatGPT", "chatgpt"),
                    ("Logged in using access token", "access_token"),
                    ("Logged in using workload identity", "workload_identity"),
                ]
                .into_iter()
                .find(|(marker, _)| text.contains(marker))
                .map(|(_, method)| method.to_owned());
                AuthStatus::LoggedIn { method }
            }
            Some(code) => AuthStatus::Unknown {
                detail: format!(
                    "`codex login status` exited {code}{}",
                    stderr_last_line(stderr)
                        .map(|l| format!(": {l}"))
                        .unwrap_or_default()
                ),
            },
            None => AuthStatus::Unknown {
                detail: "the status probe was killed".to_owned(),
            },
        }
    }

    fn auth_precheck(
        &self,
        env: &BTreeMap<String, String>,
        home: &Path,
        args: &[String],
    ) -> Option<String> {
        precheck::auth_precheck(&self.config, env, home, args)
    }

    fn detect_auth_error(&self, stderr: &str, _exit: ExitStatus) -> Option<String> {
        stderr_auth_error(stderr)
    }
}

/// Codex's auth-failure words on stderr.
fn stderr_auth_error(stderr: &str) -> Option<String> {
    stderr
        .lines()
        .map(str::trim)
        .find(|l| {
            l.contains("Not logged in")
                || l.contains("401 Unauthorized")
                || l.contains("Missing environment variable")
        })
        .map(|l| format!("{}; {LOGIN_HINT}", truncate_chars(l, 500)))
}

#[cfg(test)]
mod tests;
