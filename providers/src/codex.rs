//! The Codex CLI adapter: `codex exec --json` of `@openai/codex` (fixtures recorded with
//! 0.171.0, see `fixtures/codex/`).
//!
//! Everything here is pure except [`CodexProvider`]'s `auth_precheck`, which looks at a
//! few local files. Wire shapes follow `codex-rs/exec/src/exec_events.rs`
//! (<https://github.com/openai/codex/blob/main/codex-rs/exec/src/exec_events.rs>).
//!
//! # The command
//!
//! ```text
//! codex exec -C <workdir> [--sandbox <mode>] [resume] --json --skip-git-repo-check
//!     [-m <model>] [--dangerously-bypass-approvals-and-sandbox]
//!     [-c developer_instructions="..."] [-c mcp_servers.<name>={...}]
//!     <config extra_args> <task extra_args> -- [<thread_id>] <prompt>
//! ```
//!
//! - `-C` and `--sandbox` are options of `codex exec` itself: `codex exec resume` rejects
//!   them ("unexpected argument '--sandbox' found", exit 2), so they always come before
//!   the `resume` subcommand, where both `exec` and `exec resume` read them. Everything
//!   else is accepted after `resume` (the reference `resume.cmd` puts it there).
//! - `--skip-git-repo-check` is always passed: inside a git repository or worktree it
//!   changes nothing, and outside one (a task `cwd` that is a plain directory, a
//!   container mount) `codex exec` refuses to start without it.
//! - Sandbox, from the neutral [`PermissionMode`]: `plan` -> `--sandbox read-only`,
//!   `default` -> nothing (exec's own default: read-only, approval `never`),
//!   `accept_edits` -> `--sandbox workspace-write` (`danger-full-access` in a container,
//!   which is the sandbox there: bubblewrap cannot start in one), `bypass` ->
//!   `--dangerously-bypass-approvals-and-sandbox`. `-a/--ask-for-approval` is never
//!   emitted: it exists only before the `exec` subcommand, and exec already runs with
//!   approval `never`.
//! - `--` ends the options, so a prompt that starts with `-` or reads `resume` is never
//!   taken for a flag or a subcommand.
//! - stdin is null. Codex then prints "Reading additional input from stdin..." on
//!   stderr, which is harmless.
//! - Not supported by Codex and left out of the argv (the engine checks
//!   [`AiCliProvider::supports`]): `max_turns`, `max_budget_usd`, allowed/disallowed tool
//!   lists. `append_system_prompt` becomes `-c developer_instructions=...`.
//! - Credentials: `codex exec` ignores `OPENAI_API_KEY` and `OPENAI_BASE_URL`; it uses
//!   `CODEX_API_KEY`, a `codex login` (`$CODEX_HOME/auth.json`), or the `env_key` of a
//!   custom model provider.
//!
//! # Events
//!
//! | Codex line | normalized |
//! |---|---|
//! | `thread.started` `{thread_id}` | `SessionStarted` (the thread id is the session id; the same on resume) |
//! | `turn.started`, `item.updated`, `item.plan.delta`, `request_user_input` | `Unknown` (raw kept) |
//! | `item.completed` `agent_message` | `AssistantText` (a whole message, not a delta) |
//! | `item.completed` `reasoning` | `Thinking` |
//! | `item.started` / `item.completed` `command_execution` | `ToolCall` / `ToolResult` named `command_execution` (input `{command}`; output `aggregated_output`, `exit_code`; status `failed`/`declined` -> `is_error`) |
//! | `item.started` / `item.completed` `mcp_tool_call` | `ToolCall` / `ToolResult` named after the MCP tool, `mcp_server` = server |
//! | `item.started` / `item.completed` `file_change`, `web_search` | `ToolCall` / `ToolResult` named after the item type |
//! | `item.*` `todo_list`, `collab_tool_call`, others | `Unknown` (`vendor_type` = `item.completed/todo_list`, ...) |
//! | `item.completed` `error` | `Error { fatal: false }` (warnings: WebSocket fallback, missing model metadata) |
//! | `error` `Reconnecting... N/M (why)` | `Retry` (attempt N of M, kind from `why`) |
//! | `error` `Reconnecting... waiting for network (why)` | `Retry` (network) |
//! | `error`, any other message | `Error { fatal: true }` (always followed by `turn.failed` in the transcripts) |
//! | `turn.completed` `{usage}` | `Usage { cumulative: true }` and `Final { success: true }` |
//! | `turn.failed` `{error: {message}}` | `Final { success: false }` with the kind read from the message |
//!
//! `turn.completed` and `turn.failed` are the last events of a `codex exec` run (exec
//! shuts down after its one turn), so both yield a `Final` event and the default
//! [`AiCliProvider::is_final_event`] applies.
//!
//! # The result
//!
//! - Response: the text of the last `agent_message` (kept on failure too).
//! - Success: a `turn.completed` and no `turn.failed`; a completed turn in which the
//!   agent asked a question through aicli's MCP server is `blocked` instead.
//! - Usage: `turn.completed.usage` is cumulative over the thread (120 -> 240 -> 360 input
//!   tokens over three one-request runs of one thread), so the per-run usage is the
//!   figure minus `ParseContext::prior`; the cumulative figure goes to `session_totals`.
//!   `input_tokens` includes cached input (OpenAI convention), so canonical input is
//!   `input_tokens - cached_input_tokens - cache_write_input_tokens`, which keeps
//!   `CanonicalUsage::total_input()` equal to Codex's `input_tokens`. `output_tokens`
//!   already includes `reasoning_output_tokens` (Codex's own `blended_total` is non-cached
//!   input + output, and its context-window figure subtracts reasoning from the total).
//! - Cost: Codex reports none; it is estimated from the config's prices for the model the
//!   run asked for, else unknown (never 0). No duration or turn count is reported.
//! - Runs without a final event: a foreign transcript is `protocol`; "no rollout found"
//!   on stderr is `invalid_resume`; an argv Codex rejected is `bad_request`; then auth,
//!   and the shared rules of [`common::classify_without_final`] (a run that was still
//!   "Reconnecting..." ends as `network`).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::common::{self, CowStr, Field, strict};
use crate::config::ProviderConfig;
use crate::error::{ErrorKind, ProviderError};
use crate::event::{AgentEvent, EventKind};
use crate::provider::{
    AiCliProvider, AuthStatus, CommandSpec, LaunchContext, McpEndpoint, McpWiring,
};
use crate::result::{ParseContext, PendingQuestion, SessionResult, SessionTotals};
use crate::task::PermissionMode;
use crate::usage::{CanonicalUsage, Cost};

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

/// The name of the tool a `command_execution` item is reported as.
const COMMAND_TOOL: &str = "command_execution";

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

    /// The model a run with `ctx` asked for: the context's, else the configured default.
    fn model_of(&self, ctx: &ParseContext) -> Option<String> {
        ctx.model
            .clone()
            .or_else(|| self.config.default_model.clone())
    }

    /// The estimated cost of `usage` on `model`, or unknown when either is missing.
    fn estimate_cost(&self, model: Option<&str>, usage: &CanonicalUsage) -> Cost {
        let usd = model
            .and_then(|m| self.config.prices.get(m))
            .map(|price| price.cost(usage));
        Cost::estimated(usd)
    }

    fn invalid_task(&self, message: impl Into<String>) -> ProviderError {
        ProviderError::InvalidTask {
            provider: self.name.clone(),
            message: message.into(),
        }
    }
}

#[async_trait]
impl AiCliProvider for CodexProvider {
    fn config(&self) -> &ProviderConfig {
        &self.config
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn headless_argv(&self, ctx: &LaunchContext<'_>) -> Result<CommandSpec, ProviderError> {
        let task = ctx.task;
        let workdir = ctx.workdir.to_str().ok_or_else(|| {
            self.invalid_task(format!(
                "the working directory {} is not valid UTF-8",
                ctx.workdir.display()
            ))
        })?;
        if task.resume_session_id.is_some() && task.prompt.trim().is_empty() {
            return Err(self.invalid_task("resuming a Codex thread needs a prompt"));
        }
        let mode = self.permission_mode(task);
        let mut c = CommandSpec::new(ctx.binary, ctx.workdir);
        c.args(["exec", "-C", workdir]);
        if let Some(sandbox) = sandbox_of(mode, ctx.in_container) {
            c.args(["--sandbox", sandbox]);
        }
        if task.resume_session_id.is_some() {
            c.args(["resume"]);
        }
        c.args(["--json", "--skip-git-repo-check"]);
        if let Some(model) = self.model_for(task) {
            c.args(["-m".to_owned(), model]);
        }
        if mode == PermissionMode::Bypass {
            c.args(["--dangerously-bypass-approvals-and-sandbox"]);
        }
        if let Some(prompt) = &task.append_system_prompt {
            c.args([
                "-c".to_owned(),
                format!("developer_instructions={}", toml_string(prompt)),
            ]);
        }
        let wiring = match ctx.mcp {
            Some(endpoint) => Some(self.mcp_wiring(endpoint, ctx.private_dir)?),
            None => None,
        };
        if let Some(w) = &wiring {
            c.args(w.args.iter().cloned());
        }
        c.args(self.config.extra_args.iter().cloned());
        c.args(task.extra_args.iter().cloned());
        for (k, v) in self.config.env.iter().chain(&task.env) {
            c.env(k, v);
        }
        if let Some(w) = wiring {
            // After the task's env: the run's token must be the one the server checks.
            c.env.extend(w.env);
            c.files.extend(w.files);
        }
        c.args(["--"]);
        if let Some(id) = &task.resume_session_id {
            c.args([id.clone()]);
        }
        c.args([task.prompt.clone()]);
        c.stdin = None;
        Ok(c)
    }

    fn mcp_wiring(
        &self,
        endpoint: &McpEndpoint,
        _private_dir: &Path,
    ) -> Result<McpWiring, ProviderError> {
        // Codex splits `-c` keys on '.', without TOML quoting: the name must be a bare key.
        let bare = !endpoint.name.is_empty()
            && endpoint
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !bare {
            return Err(self.invalid_task(format!(
                "MCP server name '{}' cannot be a Codex config key; use letters, digits, '_' and '-'",
                endpoint.name
            )));
        }
        Ok(McpWiring {
            args: vec!["-c".to_owned(), mcp_config_override(endpoint)],
            env: BTreeMap::from([(MCP_TOKEN_ENV.to_owned(), endpoint.token.clone())]),
            files: Vec::new(),
            links: Vec::new(),
        })
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
                    common::stderr_last_line(stderr)
                        .map(|l| format!(": {l}"))
                        .unwrap_or_default()
                ),
            },
            None => AuthStatus::Unknown {
                detail: "the status probe was killed".to_owned(),
            },
        }
    }

    async fn auth_precheck(
        &self,
        env: &BTreeMap<String, String>,
        home: &Path,
        args: &[String],
    ) -> Option<String> {
        let codex_home = env
            .get(CODEX_HOME_ENV)
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(".codex"));
        let look = AuthLook {
            config_toml: std::fs::read_to_string(codex_home.join("config.toml")).ok(),
            auth_json: codex_home.join("auth.json").is_file(),
            auth_files: self.config.auth_files.iter().any(|f| home.join(f).exists()),
            codex_home,
        };
        precheck(&self.config, env, &look, args)
    }

    fn detect_auth_error(
        &self,
        stderr: &str,
        _exit_code: Option<i32>,
        events: &[AgentEvent],
    ) -> Option<String> {
        match turn_outcome(events) {
            Some(TurnOutcome::Failed(ErrorKind::Auth, message)) => return Some(message),
            // The structured outcome decides.
            Some(TurnOutcome::Completed | TurnOutcome::Failed(..)) => return None,
            None => {}
        }
        // No final event: the last failure decides (a run cut off while retrying a 401).
        if let Some((ErrorKind::Auth, message)) = last_failure(events) {
            return Some(message);
        }
        stderr
            .lines()
            .map(str::trim)
            .find(|l| {
                l.contains("Not logged in")
                    || l.contains("401 Unauthorized")
                    || l.contains("Missing environment variable")
            })
            .map(|l| format!("{}; {LOGIN_HINT}", common::truncate_chars(l, 500)))
    }

    fn parse_event(&self, line: &str) -> Vec<AgentEvent> {
        let raw: Arc<str> = Arc::from(line);
        let decoded = match wire::decode_fast(line) {
            Some(kinds) => Ok(kinds),
            None => common::json_object(line).and_then(wire::decode),
        };
        match decoded {
            Ok(kinds) => kinds
                .into_iter()
                .map(|k| AgentEvent::new(k, raw.clone()))
                .collect(),
            Err(message) => vec![AgentEvent::protocol(message, raw)],
        }
    }

    fn event_to_session_result(
        &self,
        events: &[AgentEvent],
        stderr: &str,
        exit_code: Option<i32>,
        ctx: &ParseContext,
    ) -> SessionResult {
        let b = common::basics(events);
        let mut r = common::base_result(&self.name, &b);
        r.exit_code = exit_code;
        r.model = self.model_of(ctx);
        r.response = last_agent_message(events).unwrap_or_default();
        r.tool_calls = tool_call_count(events);
        r.provider_data = provider_data(events);
        if let Some(cumulative) = last_cumulative_usage(events) {
            r.canonical_usage = per_run(cumulative, ctx);
            r.session_totals = Some(SessionTotals {
                usage: cumulative,
                cost_usd: None,
            });
            let cost = self.estimate_cost(r.model.as_deref(), &r.canonical_usage);
            r.set_cost(cost);
        }
        match turn_outcome(events) {
            Some(TurnOutcome::Completed) => match b.question {
                Some((question, options)) => r.block(PendingQuestion {
                    question,
                    options,
                    asked_at: String::new(),
                }),
                None => r.succeed(),
            },
            Some(TurnOutcome::Failed(kind, message)) => r.fail(kind, message),
            None => {
                let (kind, message) = self.classify_unfinished(&b, events, stderr, exit_code);
                r.fail(kind, message);
            }
        }
        r
    }

    fn canonical_usage(&self, events: &[AgentEvent], ctx: &ParseContext) -> CanonicalUsage {
        last_cumulative_usage(events)
            .map(|u| per_run(u, ctx))
            .unwrap_or_default()
    }
}

impl CodexProvider {
    /// Why a run without `turn.completed`/`turn.failed` failed.
    fn classify_unfinished(
        &self,
        b: &common::Basics,
        events: &[AgentEvent],
        stderr: &str,
        exit_code: Option<i32>,
    ) -> (ErrorKind, String) {
        if let Some(message) = foreign_stream(events) {
            return (ErrorKind::Protocol, message);
        }
        if let Some(line) = stderr.lines().find(|l| l.contains("no rollout found")) {
            return (ErrorKind::InvalidResume, line.trim().to_owned());
        }
        if let Some(line) = rejected_argv(stderr) {
            return (
                ErrorKind::BadRequest,
                format!("codex rejected its arguments: {line}"),
            );
        }
        let auth = self.detect_auth_error(stderr, exit_code, events);
        // Only a failure the stream ended on says why it ended: retries the CLI recovered
        // from earlier do not.
        let mut b = b.clone();
        b.last_error = trailing_failure(events);
        if auth.is_none()
            && b.fatal_error.is_none()
            && b.protocol_errors == 0
            && let Some((kind, last)) = &b.last_error
            && kind.is_retryable()
        {
            // Codex never gives up on a network failure by itself: it was stopped.
            let retries = events
                .iter()
                .filter(|e| matches!(e.kind, EventKind::Retry { .. }))
                .count();
            let exit = match exit_code {
                Some(c) => format!("exit code {c}"),
                None => "killed by a signal".to_owned(),
            };
            return (
                *kind,
                format!(
                    "{last} (codex was still retrying after {retries} retry notices when the run ended without a final event, {exit})"
                ),
            );
        }
        common::classify_without_final("Codex", &b, stderr, exit_code, auth)
    }
}

/// The `--sandbox` value for a permission mode (bypass uses its own flag). In a
/// container Codex's sandbox cannot start (bubblewrap needs user namespaces, which the
/// container's seccomp profile refuses: every command fails), and the container is the
/// sandbox: `accept_edits` is `danger-full-access` there. `plan` stays `read-only`, so
/// commands fail closed.
fn sandbox_of(mode: PermissionMode, in_container: bool) -> Option<&'static str> {
    match mode {
        PermissionMode::Plan => Some("read-only"),
        PermissionMode::Default | PermissionMode::Bypass => None,
        PermissionMode::AcceptEdits if in_container => Some("danger-full-access"),
        PermissionMode::AcceptEdits => Some("workspace-write"),
    }
}

/// The `-c` override that adds `endpoint` as a streamable-HTTP MCP server:
/// `mcp_servers.<name>={url="<url>", bearer_token_env_var="AICLI_MCP_TOKEN",
/// default_tools_approval_mode="approve"}`. Exec runs with approval `never`, so without
/// `approve` every MCP call fails with "MCP tool call requires approval, but approval
/// policy is never". The name is not checked here (see [`CodexProvider`]'s `mcp_wiring`).
pub fn mcp_config_override(endpoint: &McpEndpoint) -> String {
    format!(
        "mcp_servers.{}={{url={}, bearer_token_env_var={}, default_tools_approval_mode={}}}",
        endpoint.name,
        toml_string(&endpoint.url),
        toml_string(MCP_TOKEN_ENV),
        toml_string("approve"),
    )
}

/// `s` as a TOML basic string, quotes included.
pub fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

// ---------------------------------------------------------------------------------------
// Reading a run's events.

/// How the run's turn ended, by `turn.completed` / `turn.failed` (a failure wins).
enum TurnOutcome {
    Completed,
    Failed(ErrorKind, String),
}

fn turn_outcome(events: &[AgentEvent]) -> Option<TurnOutcome> {
    let mut outcome = None;
    for ev in events {
        if let EventKind::Final {
            success,
            error_kind,
            error,
            ..
        } = &ev.kind
        {
            if *success {
                outcome.get_or_insert(TurnOutcome::Completed);
            } else {
                return Some(TurnOutcome::Failed(
                    error_kind.unwrap_or(ErrorKind::Unknown),
                    error.clone().unwrap_or_else(|| "turn failed".to_owned()),
                ));
            }
        }
    }
    outcome
}

fn last_agent_message(events: &[AgentEvent]) -> Option<String> {
    events.iter().rev().find_map(|ev| {
        let EventKind::AssistantText { text, .. } = &ev.kind else {
            return None;
        };
        Some(text.clone())
    })
}

/// The kind and words of the last `Error` or `Retry` event.
fn last_failure(events: &[AgentEvent]) -> Option<(ErrorKind, String)> {
    events.iter().rev().find_map(|ev| {
        if let EventKind::Error {
            error_kind,
            message,
            ..
        }
        | EventKind::Retry {
            error_kind,
            message,
            ..
        } = &ev.kind
        {
            Some((*error_kind, message.clone()))
        } else {
            None
        }
    })
}

/// The kind and words of the last event when it is an `Error` or `Retry` (lines Codex
/// prints that carry no event of their own, like `turn.started`, are skipped).
fn trailing_failure(events: &[AgentEvent]) -> Option<(ErrorKind, String)> {
    let last = events.iter().rev().find(|ev| {
        !matches!(
            ev.kind,
            EventKind::Unknown { .. } | EventKind::Log { .. } | EventKind::Question { .. }
        )
    })?;
    last_failure(std::slice::from_ref(last))
}

/// The thread's cumulative usage from the last `turn.completed`.
fn last_cumulative_usage(events: &[AgentEvent]) -> Option<CanonicalUsage> {
    events.iter().rev().find_map(|ev| {
        let EventKind::Usage {
            usage,
            cumulative: true,
        } = &ev.kind
        else {
            return None;
        };
        Some(*usage)
    })
}

/// This run's share of a thread-cumulative figure.
fn per_run(cumulative: CanonicalUsage, ctx: &ParseContext) -> CanonicalUsage {
    match &ctx.prior {
        Some(prior) => cumulative.saturating_sub(&prior.usage),
        None => cumulative,
    }
}

/// Distinct tool items (a call seen only by its result still counts once).
fn tool_call_count(events: &[AgentEvent]) -> u32 {
    let ids: BTreeSet<&str> = events
        .iter()
        .filter_map(|ev| {
            let (EventKind::ToolCall { id, .. } | EventKind::ToolResult { id, .. }) = &ev.kind
            else {
                return None;
            };
            Some(id.as_str())
        })
        .collect();
    u32::try_from(ids.len()).unwrap_or(u32::MAX)
}

/// Codex facts with no neutral field: non-fatal warnings, retries, and completed items
/// by type.
fn provider_data(events: &[AgentEvent]) -> Value {
    let mut warnings = Vec::new();
    let mut retries = 0u32;
    let mut items: BTreeMap<String, u32> = BTreeMap::new();
    let mut last_raw: Option<&Arc<str>> = None;
    for ev in events {
        if let EventKind::Error {
            fatal: false,
            message,
            ..
        } = &ev.kind
        {
            warnings.push(Value::String(message.clone()));
        }
        if matches!(ev.kind, EventKind::Retry { .. }) {
            retries += 1;
        }
        // One line may give several events: count each line once.
        if ev.raw.is_empty()
            || matches!(ev.kind, EventKind::Protocol { .. })
            || last_raw.is_some_and(|r| Arc::ptr_eq(r, &ev.raw))
        {
            continue;
        }
        last_raw = Some(&ev.raw);
        if let Some(t) = wire::completed_item_type(&ev.raw) {
            *items.entry(t).or_default() += 1;
        }
    }
    json!({
        "warnings": warnings,
        "retries": retries,
        "completed_items": items,
    })
}

/// A message when the events are another vendor's: JSON objects of types Codex never
/// prints, and not one Codex event.
fn foreign_stream(events: &[AgentEvent]) -> Option<String> {
    let mut foreign: Vec<&str> = Vec::new();
    for ev in events {
        match &ev.kind {
            EventKind::Unknown { vendor_type } => match vendor_type.as_deref() {
                Some(t) if wire::is_codex_type(t) => return None,
                Some(t) => foreign.push(t),
                None => foreign.push("(no type)"),
            },
            EventKind::Protocol { .. } | EventKind::Log { .. } | EventKind::Question { .. } => {}
            EventKind::SessionStarted { .. }
            | EventKind::UserMessage { .. }
            | EventKind::AssistantText { .. }
            | EventKind::Thinking { .. }
            | EventKind::ToolCall { .. }
            | EventKind::ToolResult { .. }
            | EventKind::Usage { .. }
            | EventKind::Retry { .. }
            | EventKind::RateLimit { .. }
            | EventKind::PermissionDenied { .. }
            | EventKind::Error { .. }
            | EventKind::Final { .. } => return None,
        }
    }
    let first = foreign.first()?;
    Some(format!(
        "not a Codex stream: {} JSON lines of types `codex exec --json` never prints (first: `{first}`) and no thread.started, turn.* or item.* event",
        foreign.len()
    ))
}

/// The first line of a command-line parse error (clap's "error: unexpected argument").
fn rejected_argv(stderr: &str) -> Option<String> {
    if !stderr.contains("Usage: codex") {
        return None;
    }
    stderr
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("error:"))
        .map(str::to_owned)
}

// ---------------------------------------------------------------------------------------
// Error text -> kind.

/// The kind (and HTTP status, where the text has one) of a Codex error message.
///
/// Structured first: the HTTP status Codex prints ("unexpected status 401 Unauthorized",
/// "exceeded retry limit, last status: 429"), then an API error body (`{"error":
/// {"type": "invalid_request_error"}}`), then Codex's own fixed texts.
fn classify_message(message: &str) -> (ErrorKind, Option<u16>) {
    if let Some(status) = http_status_in(message) {
        let kind = ErrorKind::from_http_status(status).unwrap_or(ErrorKind::Unknown);
        return (kind, Some(status));
    }
    if let Some(kind) = api_error_body_kind(message) {
        return (kind, None);
    }
    let lower = message.to_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| lower.contains(w));
    let kind = if has(&["high demand"]) {
        // Codex's text for HTTP 500 (`CodexErr::InternalServerError`); it replaces the
        // server's own message.
        ErrorKind::ServerError
    } else if has(&["no rollout found"]) {
        ErrorKind::InvalidResume
    } else if has(&[
        "quota exceeded",
        "usage limit",
        "rate limit",
        "too many requests",
    ]) {
        ErrorKind::RateLimit
    } else if has(&[
        "unauthorized",
        "not logged in",
        "invalid api key",
        "incorrect api key",
        "refresh token",
        "missing environment variable",
    ]) {
        ErrorKind::Auth
    } else if has(&["overloaded", "at capacity"]) {
        ErrorKind::Overloaded
    } else if has(&["context window"]) {
        ErrorKind::BadRequest
    } else if has(&[
        "stream disconnected",
        "connection failed",
        "error sending request",
        "failed to lookup address",
        "name does not resolve",
        "connection refused",
        "connection reset",
        "timed out",
        "waiting for network",
        "error while reading the server response",
    ]) {
        ErrorKind::Network
    } else {
        ErrorKind::Unknown
    };
    (kind, None)
}

/// The HTTP status after one of Codex's status phrases.
fn http_status_in(message: &str) -> Option<u16> {
    ["unexpected status ", "last status: ", "(status "]
        .iter()
        .find_map(|marker| {
            let at = message.find(marker)? + marker.len();
            let digits: String = message[at..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            (digits.len() == 3).then(|| digits.parse().ok()).flatten()
        })
}

/// The kind an OpenAI error body in `message` names (`error.type` / `error.code`).
fn api_error_body_kind(message: &str) -> Option<ErrorKind> {
    let start = message.find('{')?;
    let body: Value = serde_json::from_str(message[start..].trim()).ok()?;
    let error = body.get("error")?;
    let field = |k: &str| error.get(k).and_then(Value::as_str).unwrap_or_default();
    let kind = match (field("type"), field("code")) {
        (_, "rate_limit_exceeded" | "insufficient_quota") | ("rate_limit_error", _) => {
            ErrorKind::RateLimit
        }
        (_, "invalid_api_key") | ("authentication_error", _) => ErrorKind::Auth,
        ("permission_error", _) => ErrorKind::Permission,
        ("server_error", _) => ErrorKind::ServerError,
        ("overloaded_error", _) => ErrorKind::Overloaded,
        ("invalid_request_error" | "not_found_error", _) => ErrorKind::BadRequest,
        _ => return None,
    };
    Some(kind)
}

/// A top-level `error` line: a retry notice or a fatal error.
fn top_level_error(message: &str) -> EventKind {
    let Some(rest) = message.strip_prefix("Reconnecting...") else {
        let (error_kind, http_status) = classify_message(message);
        return EventKind::Error {
            error_kind,
            message: message.to_owned(),
            fatal: true,
            http_status,
        };
    };
    let rest = rest.trim_start();
    let reason = rest
        .find('(')
        .map(|i| rest[i + 1..].trim_end().trim_end_matches(')'))
        .unwrap_or_default();
    let (mut error_kind, http_status) = classify_message(reason);
    let (attempt, max_retries) = if rest.starts_with("waiting for network") {
        error_kind = ErrorKind::Network;
        (None, None)
    } else {
        let counter = rest.split_whitespace().next().unwrap_or_default();
        match counter.split_once('/') {
            Some((n, m)) => (n.parse().ok(), m.parse().ok()),
            None => (None, None),
        }
    };
    EventKind::Retry {
        attempt,
        max_retries,
        delay_ms: None,
        http_status,
        error_kind,
        message: message.to_owned(),
    }
}

// ---------------------------------------------------------------------------------------
// The pre-flight credentials look.

/// What `auth_precheck` found on disk.
struct AuthLook {
    codex_home: PathBuf,
    config_toml: Option<String>,
    auth_json: bool,
    auth_files: bool,
}

/// `Some(message)` when the run certainly has no credentials. Without credentials Codex
/// never fails on its own (it retries "Reconnecting..." forever), so this check matters.
fn precheck(
    config: &ProviderConfig,
    env: &BTreeMap<String, String>,
    look: &AuthLook,
    argv: &[String],
) -> Option<String> {
    let set = |var: &str| env.get(var).is_some_and(|v| !v.is_empty());
    let toml = look
        .config_toml
        .as_deref()
        .map(TomlFacts::read)
        .unwrap_or_default();
    // The built argv holds the config's and the task's extra args (and `-c` overrides).
    let args = if argv.is_empty() {
        ArgFacts::read(&config.extra_args)
    } else {
        ArgFacts::read(argv)
    };
    if args.oss {
        return None; // a local model server: no credentials
    }
    if config.auth_env_vars.iter().any(|v| set(v)) {
        return None;
    }
    let provider = args
        .model_provider
        .or(toml.model_provider)
        .unwrap_or_else(|| "openai".to_owned());
    if provider != "openai" {
        let env_key = args
            .env_keys
            .get(&provider)
            .or_else(|| toml.env_keys.get(&provider));
        return match env_key {
            // A provider without env_key (local models, a key in a header): can't tell.
            None => None,
            Some(var) if set(var) => None,
            Some(var) => Some(format!(
                "not logged in: model provider `{provider}` reads its API key from {var}, which is not set"
            )),
        };
    }
    if set(API_KEY_ENV) || set(ACCESS_TOKEN_ENV) || look.auth_json || look.auth_files {
        return None;
    }
    if toml.keyring_store {
        return None; // credentials may be in the OS keyring: can't tell
    }
    let openai_note = if set("OPENAI_API_KEY") {
        "; OPENAI_API_KEY is set but `codex exec` ignores it"
    } else {
        ""
    };
    Some(format!(
        "not logged in: {LOGIN_HINT} (no CODEX_API_KEY in the environment and no {}){openai_note}",
        look.codex_home.join("auth.json").display()
    ))
}

/// What a `config.toml` says about credentials, read line by line (top-level
/// `model_provider`, `cli_auth_credentials_store`, `[model_providers.X] env_key`).
#[derive(Debug, Default)]
struct TomlFacts {
    model_provider: Option<String>,
    env_keys: BTreeMap<String, String>,
    keyring_store: bool,
}

impl TomlFacts {
    fn read(text: &str) -> TomlFacts {
        let mut facts = TomlFacts::default();
        let mut table: Option<String> = None;
        for line in text.lines().map(str::trim) {
            if let Some(header) = line.strip_prefix('[') {
                table = Some(header.trim_end_matches(']').trim().to_owned());
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let (key, value) = (key.trim(), unquote(value));
            match table.as_deref() {
                None if key == "model_provider" => facts.model_provider = Some(value),
                None if key == "cli_auth_credentials_store" => {
                    facts.keyring_store = value != "file";
                }
                Some(t) if key == "env_key" => {
                    if let Some(name) = t.strip_prefix("model_providers.") {
                        facts.env_keys.insert(unquote(name), value);
                    }
                }
                _ => {}
            }
        }
        facts
    }
}

/// What `-c` overrides in the configured extra args say about credentials.
#[derive(Debug, Default)]
struct ArgFacts {
    model_provider: Option<String>,
    env_keys: BTreeMap<String, String>,
    oss: bool,
}

impl ArgFacts {
    fn read(args: &[String]) -> ArgFacts {
        let mut facts = ArgFacts::default();
        let mut overrides: Vec<&str> = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "-c" | "--config" => overrides.extend(it.next().map(String::as_str)),
                "--oss" => facts.oss = true,
                other => overrides.extend(
                    other
                        .strip_prefix("--config=")
                        .or_else(|| other.strip_prefix("-c")),
                ),
            }
        }
        for o in overrides {
            let Some((key, value)) = o.split_once('=') else {
                continue;
            };
            let key = key.trim();
            if key == "model_provider" {
                facts.model_provider = Some(unquote(value));
            } else if let Some(rest) = key.strip_prefix("model_providers.") {
                let (name, field) = rest.split_once('.').unwrap_or((rest, ""));
                let env_key = match field {
                    "env_key" => Some(unquote(value)),
                    "" => inline_field(value, "env_key"),
                    _ => None,
                };
                if let Some(var) = env_key {
                    facts.env_keys.insert(name.to_owned(), var);
                }
            }
        }
        facts
    }
}

/// A TOML scalar without its quotes (and without a trailing comment).
fn unquote(value: &str) -> String {
    let v = value.trim();
    for q in ['"', '\''] {
        if let Some(inner) = v.strip_prefix(q)
            && let Some(end) = inner.find(q)
        {
            return inner[..end].to_owned();
        }
    }
    v.split('#').next().unwrap_or_default().trim().to_owned()
}

/// `field = "value"` inside an inline table `{...}`.
fn inline_field(table: &str, field: &str) -> Option<String> {
    let mut search = table;
    while let Some(at) = search.find(field) {
        let before_ok = search[..at]
            .chars()
            .next_back()
            .is_none_or(|c| c == '{' || c == ',' || c.is_whitespace());
        let rest = search[at + field.len()..].trim_start();
        if before_ok && let Some(value) = rest.strip_prefix('=') {
            let value = unquote(value.trim_start());
            return Some(value.trim_end_matches(['}', ',']).to_owned());
        }
        search = &search[at + field.len()..];
    }
    None
}

// ---------------------------------------------------------------------------------------
// The wire format of `codex exec --json`.

mod wire {
    //! Serde mirrors of the `codex exec --json` lines (unknown fields are tolerated) and
    //! their mapping to [`EventKind`]s.

    use super::*;

    /// The `type`s `codex exec --json` prints, including those mapped to `Unknown`.
    pub(super) fn is_codex_type(t: &str) -> bool {
        t.starts_with("thread.")
            || t.starts_with("turn.")
            || t.starts_with("item.")
            || t == "error"
            || t == "request_user_input"
    }

    #[derive(Debug, Deserialize)]
    struct ThreadStarted {
        thread_id: String,
    }

    #[derive(Debug, Deserialize)]
    struct TurnCompleted {
        #[serde(default)]
        usage: Usage,
    }

    /// `turn.completed.usage`, cumulative over the thread. Signed on the wire.
    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    struct Usage {
        input_tokens: i64,
        cached_input_tokens: i64,
        cache_write_input_tokens: i64,
        output_tokens: i64,
        reasoning_output_tokens: i64,
    }

    impl Usage {
        fn canonical(&self) -> CanonicalUsage {
            let n = |v: i64| u64::try_from(v).unwrap_or(0);
            let cached = n(self.cached_input_tokens);
            let written = n(self.cache_write_input_tokens);
            CanonicalUsage {
                input_tokens: n(self.input_tokens)
                    .saturating_sub(cached)
                    .saturating_sub(written),
                output_tokens: n(self.output_tokens),
                cache_read: cached,
                cache_write: written,
                reasoning_tokens: n(self.reasoning_output_tokens),
                request_count: 0,
            }
        }
    }

    #[derive(Debug, Deserialize)]
    struct TurnFailed {
        error: ErrorBody,
    }

    /// `{message}`: the top-level `error` line, `turn.failed.error`, an `error` item.
    #[derive(Debug, Deserialize)]
    struct ErrorBody {
        message: String,
    }

    #[derive(Debug, Deserialize)]
    struct ItemEvent {
        item: Map<String, Value>,
    }

    #[derive(Debug, Deserialize)]
    struct Text {
        text: String,
    }

    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Status {
        #[default]
        InProgress,
        Completed,
        Failed,
        Declined,
        #[serde(other)]
        Other,
    }

    impl Status {
        fn is_error(self) -> bool {
            match self {
                Status::Failed | Status::Declined => true,
                Status::InProgress | Status::Completed | Status::Other => false,
            }
        }
    }

    #[derive(Debug, Deserialize)]
    struct CommandExecution {
        command: String,
        #[serde(default)]
        aggregated_output: String,
        #[serde(default)]
        exit_code: Option<i64>,
        #[serde(default)]
        status: Status,
    }

    #[derive(Debug, Deserialize)]
    struct McpToolCall {
        server: String,
        tool: String,
        #[serde(default)]
        arguments: Value,
        #[serde(default)]
        result: Option<McpResult>,
        #[serde(default)]
        error: Option<ErrorBody>,
        #[serde(default)]
        status: Status,
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    struct McpResult {
        content: Vec<Value>,
        structured_content: Option<Value>,
    }

    #[derive(Debug, Deserialize)]
    struct FileChange {
        #[serde(default)]
        changes: Vec<FileUpdate>,
        #[serde(default)]
        status: Status,
    }

    #[derive(Debug, Deserialize)]
    struct FileUpdate {
        path: String,
        #[serde(default)]
        kind: String,
    }

    #[derive(Debug, Deserialize)]
    struct WebSearch {
        #[serde(default)]
        query: String,
        #[serde(default)]
        action: Value,
    }

    fn from_map<T: serde::de::DeserializeOwned>(
        map: Map<String, Value>,
        what: &str,
    ) -> Result<T, String> {
        common::from_value_lenient(Value::Object(map))
            .map_err(|e| format!("malformed Codex {what}: {e}"))
    }

    /// The events of one `codex exec --json` object; `Err` for a Codex event that is
    /// missing what makes it one (a protocol violation).
    pub(super) fn decode(obj: Map<String, Value>) -> Result<Vec<EventKind>, String> {
        let Some(ty) = obj.get("type").and_then(Value::as_str).map(str::to_owned) else {
            return Ok(vec![EventKind::Unknown { vendor_type: None }]);
        };
        let what = format!("`{ty}` event");
        Ok(match ty.as_str() {
            "thread.started" => {
                let e: ThreadStarted = from_map(obj, &what)?;
                vec![session_started(e.thread_id)]
            }
            "turn.completed" => {
                let e: TurnCompleted = from_map(obj, &what)?;
                turn_completed(&e.usage)
            }
            "turn.failed" => {
                let e: TurnFailed = from_map(obj, &what)?;
                vec![turn_failed(e.error)]
            }
            "error" => {
                let e: ErrorBody = from_map(obj, &what)?;
                vec![top_level_error(&e.message)]
            }
            "item.started" | "item.updated" | "item.completed" => {
                let e: ItemEvent = from_map(obj, &what)?;
                item(&ty, e.item)?
            }
            _ => vec![EventKind::Unknown {
                vendor_type: Some(ty),
            }],
        })
    }

    fn session_started(thread_id: String) -> EventKind {
        EventKind::SessionStarted {
            session_id: thread_id,
            model: None,
            cwd: None,
            tools: Vec::new(),
            mcp_servers: Vec::new(),
            cli_version: None,
        }
    }

    fn turn_completed(usage: &Usage) -> Vec<EventKind> {
        vec![
            EventKind::Usage {
                usage: usage.canonical(),
                cumulative: true,
            },
            EventKind::Final {
                success: true,
                text: None,
                error_kind: None,
                error: None,
                usage: None,
                cost_usd: None,
                num_turns: None,
                duration_ms: None,
            },
        ]
    }

    fn turn_failed(error: ErrorBody) -> EventKind {
        let (kind, _) = classify_message(&error.message);
        EventKind::Final {
            success: false,
            text: None,
            error_kind: Some(kind),
            error: Some(error.message),
            usage: None,
            cost_usd: None,
            num_turns: None,
            duration_ms: None,
        }
    }

    /// Which struct an item is read as, by its type and phase (`None`: not read, the
    /// event is `Unknown`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Shape {
        Text,
        Command,
        Mcp,
        FileChange,
        WebSearch,
        Error,
        None,
    }

    fn shape(phase: &str, item_type: &str) -> Shape {
        let started = phase == "item.started";
        let completed = phase == "item.completed";
        match item_type {
            "agent_message" | "reasoning" if completed => Shape::Text,
            "command_execution" if started || completed => Shape::Command,
            "mcp_tool_call" if started || completed => Shape::Mcp,
            "file_change" if started || completed => Shape::FileChange,
            "web_search" if started || completed => Shape::WebSearch,
            "error" if completed => Shape::Error,
            _ => Shape::None,
        }
    }

    /// An item read as its [`Shape`].
    enum ItemData {
        Text(Text),
        Command(CommandExecution),
        Mcp(McpToolCall),
        FileChange(FileChange),
        WebSearch(WebSearch),
        Error(ErrorBody),
        None,
    }

    /// The events of an `item.*` line.
    fn item(phase: &str, item: Map<String, Value>) -> Result<Vec<EventKind>, String> {
        let field = |k: &str| item.get(k).and_then(Value::as_str).map(str::to_owned);
        let (Some(id), Some(item_type)) = (field("id"), field("type")) else {
            return Err(format!(
                "malformed Codex `{phase}` event: the item needs a string `id` and `type`"
            ));
        };
        let what = format!("`{phase}` {item_type} item");
        let data = match shape(phase, &item_type) {
            Shape::Text => ItemData::Text(from_map(item, &what)?),
            Shape::Command => ItemData::Command(from_map(item, &what)?),
            Shape::Mcp => ItemData::Mcp(from_map(item, &what)?),
            Shape::FileChange => ItemData::FileChange(from_map(item, &what)?),
            Shape::WebSearch => ItemData::WebSearch(from_map(item, &what)?),
            Shape::Error => ItemData::Error(from_map(item, &what)?),
            Shape::None => ItemData::None,
        };
        Ok(vec![item_kind(phase, id, item_type, data)])
    }

    /// The event of an item, read.
    fn item_kind(phase: &str, id: String, item_type: String, data: ItemData) -> EventKind {
        let started = phase == "item.started";
        match data {
            ItemData::Text(t) if item_type == "agent_message" => EventKind::AssistantText {
                text: t.text,
                delta: false,
            },
            ItemData::Text(t) => EventKind::Thinking { text: t.text },
            ItemData::Command(c) if started => EventKind::ToolCall {
                id,
                name: COMMAND_TOOL.to_owned(),
                input: json!({ "command": c.command }),
                mcp_server: None,
            },
            ItemData::Command(c) => EventKind::ToolResult {
                id,
                name: Some(COMMAND_TOOL.to_owned()),
                output: c.aggregated_output,
                is_error: c.status.is_error(),
                exit_code: c.exit_code,
            },
            ItemData::Mcp(c) if started => EventKind::ToolCall {
                id,
                name: c.tool,
                input: c.arguments,
                mcp_server: Some(c.server),
            },
            ItemData::Mcp(c) => {
                let is_error = c.status.is_error() || c.error.is_some();
                let output = match (c.error, c.result) {
                    (Some(e), _) => e.message,
                    (None, Some(r)) if r.content.is_empty() => r
                        .structured_content
                        .map(|v| v.to_string())
                        .unwrap_or_default(),
                    (None, Some(r)) => common::content_text(&Value::Array(r.content)),
                    (None, None) => String::new(),
                };
                EventKind::ToolResult {
                    id,
                    name: Some(c.tool),
                    output,
                    is_error,
                    exit_code: None,
                }
            }
            ItemData::FileChange(f) if started => EventKind::ToolCall {
                id,
                name: item_type,
                input: json!({ "changes": f.changes.iter().map(|c| json!({"path": c.path, "kind": c.kind})).collect::<Vec<_>>() }),
                mcp_server: None,
            },
            ItemData::FileChange(f) => {
                let output = f
                    .changes
                    .iter()
                    .map(|c| format!("{} {}", c.kind, c.path))
                    .collect::<Vec<_>>()
                    .join("\n");
                EventKind::ToolResult {
                    id,
                    name: Some(item_type),
                    output,
                    is_error: f.status.is_error(),
                    exit_code: None,
                }
            }
            ItemData::WebSearch(w) if started => EventKind::ToolCall {
                id,
                name: item_type,
                input: json!({ "query": w.query, "action": w.action }),
                mcp_server: None,
            },
            ItemData::WebSearch(w) => EventKind::ToolResult {
                id,
                name: Some(item_type),
                output: w.query,
                is_error: false,
                exit_code: None,
            },
            ItemData::Error(e) => {
                let (error_kind, http_status) = classify_message(&e.message);
                EventKind::Error {
                    error_kind,
                    message: e.message,
                    fatal: false,
                    http_status,
                }
            }
            ItemData::None => EventKind::Unknown {
                vendor_type: Some(format!("{phase}/{item_type}")),
            },
        }
    }

    // -----------------------------------------------------------------------------------
    // The fast path: lines read straight into borrowed structs (see `common::strict`).
    // Each struct reads every field its `Value`-path twin reads, with the same or a
    // stricter type, plus `type` (checked against the hint, and unique); `None` leaves
    // the line to [`decode`], which also gives the protocol messages.

    /// Any line, for its `type` alone (the rest is read and dropped).
    #[derive(Deserialize)]
    struct FastTyped<'a> {
        #[serde(borrow)]
        r#type: Cow<'a, str>,
    }

    #[derive(Deserialize)]
    struct FastThreadStarted<'a> {
        #[serde(borrow)]
        r#type: Cow<'a, str>,
        thread_id: String,
    }

    #[derive(Deserialize)]
    struct FastTurnCompleted<'a> {
        #[serde(borrow)]
        r#type: Cow<'a, str>,
        #[serde(default)]
        usage: Usage,
    }

    #[derive(Deserialize)]
    struct FastTurnFailed<'a> {
        #[serde(borrow)]
        r#type: Cow<'a, str>,
        error: ErrorBody,
    }

    /// The top-level `error` line.
    #[derive(Deserialize)]
    struct FastError<'a> {
        #[serde(borrow)]
        r#type: Cow<'a, str>,
        message: String,
    }

    #[derive(Deserialize)]
    struct FastItemEvent<'a> {
        #[serde(borrow)]
        r#type: Cow<'a, str>,
        #[serde(borrow)]
        item: FastItem<'a>,
    }

    /// Any item: the fields of every [`Shape`]. A field some shape requires is a
    /// [`Field`], absent for the others.
    #[derive(Deserialize)]
    struct FastItem<'a> {
        #[serde(default, borrow)]
        id: Option<CowStr<'a>>,
        #[serde(default, borrow)]
        r#type: Option<CowStr<'a>>,
        #[serde(default)]
        text: Field<String>,
        #[serde(default)]
        command: Field<String>,
        #[serde(default)]
        aggregated_output: String,
        #[serde(default)]
        exit_code: Option<i64>,
        #[serde(default, borrow)]
        status: Field<CowStr<'a>>,
        #[serde(default)]
        server: Field<String>,
        #[serde(default)]
        tool: Field<String>,
        #[serde(default)]
        arguments: Value,
        #[serde(default)]
        result: Option<McpResult>,
        #[serde(default)]
        error: Option<ErrorBody>,
        #[serde(default)]
        changes: Vec<FileUpdate>,
        #[serde(default)]
        query: String,
        #[serde(default)]
        action: Value,
        #[serde(default)]
        message: Field<String>,
    }

    /// [`Status`] as serde reads it from a string (absent: the default).
    fn status_of(s: &Field<CowStr<'_>>) -> Status {
        match s {
            Field::Absent => Status::default(),
            Field::Present(s) => match s.as_str() {
                "in_progress" => Status::InProgress,
                "completed" => Status::Completed,
                "failed" => Status::Failed,
                "declined" => Status::Declined,
                _ => Status::Other,
            },
        }
    }

    impl FastItem<'_> {
        /// The item read as `shape`; `None` when a field that shape requires is absent.
        fn data(self, shape: Shape) -> Option<ItemData> {
            let status = status_of(&self.status);
            Some(match shape {
                Shape::Text => ItemData::Text(Text {
                    text: self.text.present()?,
                }),
                Shape::Command => ItemData::Command(CommandExecution {
                    command: self.command.present()?,
                    aggregated_output: self.aggregated_output,
                    exit_code: self.exit_code,
                    status,
                }),
                Shape::Mcp => ItemData::Mcp(McpToolCall {
                    server: self.server.present()?,
                    tool: self.tool.present()?,
                    arguments: self.arguments,
                    result: self.result,
                    error: self.error,
                    status,
                }),
                Shape::FileChange => ItemData::FileChange(FileChange {
                    changes: self.changes,
                    status,
                }),
                Shape::WebSearch => ItemData::WebSearch(WebSearch {
                    query: self.query,
                    action: self.action,
                }),
                Shape::Error => ItemData::Error(ErrorBody {
                    message: self.message.present()?,
                }),
                Shape::None => ItemData::None,
            })
        }
    }

    /// The events of one line by the fast path; `None` leaves it to [`decode`].
    pub(super) fn decode_fast(line: &str) -> Option<Vec<EventKind>> {
        let hint = common::line_type(line)?;
        let check = |t: &str| (t == hint.as_ref()).then_some(());
        Some(match hint.as_ref() {
            "thread.started" => {
                let e: FastThreadStarted<'_> = strict::from_str(line).ok()?;
                check(&e.r#type)?;
                vec![session_started(e.thread_id)]
            }
            "turn.completed" => {
                let e: FastTurnCompleted<'_> = strict::from_str(line).ok()?;
                check(&e.r#type)?;
                turn_completed(&e.usage)
            }
            "turn.failed" => {
                let e: FastTurnFailed<'_> = strict::from_str(line).ok()?;
                check(&e.r#type)?;
                vec![turn_failed(e.error)]
            }
            "error" => {
                let e: FastError<'_> = strict::from_str(line).ok()?;
                check(&e.r#type)?;
                vec![top_level_error(&e.message)]
            }
            phase @ ("item.started" | "item.updated" | "item.completed") => {
                let e: FastItemEvent<'_> = strict::from_str(line).ok()?;
                check(&e.r#type)?;
                let mut it = e.item;
                let (Some(id), Some(item_type)) = (it.id.take(), it.r#type.take()) else {
                    return None;
                };
                let item_type = item_type.into_string();
                let data = it.data(shape(phase, &item_type))?;
                vec![item_kind(phase, id.into_string(), item_type, data)]
            }
            other => {
                let e: FastTyped<'_> = strict::from_str(line).ok()?;
                check(&e.r#type)?;
                vec![EventKind::Unknown {
                    vendor_type: Some(other.to_owned()),
                }]
            }
        })
    }

    /// The type of an `item.completed` line's item (for the count in `provider_data`);
    /// `None` for any other line, and for a line that is not JSON.
    pub(super) fn completed_item_type(raw: &str) -> Option<String> {
        // A line whose `type` is `item.completed` holds those bytes, unless it spells them
        // with `\u` escapes: any other line can be left unread.
        let bytes = raw.as_bytes();
        if memchr::memmem::find(bytes, b"item.completed").is_none()
            && memchr::memmem::find(bytes, b"\\u").is_none()
        {
            return None;
        }
        #[derive(Deserialize)]
        struct Line<'a> {
            #[serde(default, borrow)]
            r#type: Option<CowStr<'a>>,
            #[serde(default, borrow)]
            item: Option<Head<'a>>,
        }
        #[derive(Deserialize)]
        struct Head<'a> {
            #[serde(default, borrow)]
            r#type: Option<CowStr<'a>>,
        }
        match strict::from_str::<Line<'_>>(raw) {
            Ok(l) => {
                if l.r#type.as_ref().map(CowStr::as_str) != Some("item.completed") {
                    return None;
                }
                l.item?.r#type.map(CowStr::into_string)
            }
            Err(_) => completed_item_type_value(raw),
        }
    }

    /// [`completed_item_type`] through a `Value` (for lines the fast read refuses).
    pub(super) fn completed_item_type_value(raw: &str) -> Option<String> {
        let v: Value = serde_json::from_str(raw).ok()?;
        if v.get("type")?.as_str()? != "item.completed" {
            return None;
        }
        Some(v.get("item")?.get("type")?.as_str()?.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;
    use crate::config::AiCliConfig;
    use crate::provider::BinaryLocation;
    use crate::replay;
    use crate::result::SessionStatus;
    use crate::task::TaskSpec;
    use crate::usage::CostSource;

    fn provider() -> CodexProvider {
        let cfg = AiCliConfig::builtin().unwrap();
        CodexProvider::new("codex", cfg.providers["codex"].clone())
    }

    fn fixture_path(name: &str, ext: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../fixtures/codex/{name}.{ext}"))
    }

    /// Replays `fixtures/codex/<name>` with the context of its meta file.
    fn fixture(name: &str) -> (Vec<AgentEvent>, SessionResult) {
        let meta: Value =
            serde_json::from_slice(&std::fs::read(fixture_path(name, "meta.json")).unwrap())
                .unwrap();
        let ctx: ParseContext = serde_json::from_value(meta["context"].clone()).unwrap();
        let stdout = std::fs::read(fixture_path(name, "ndjson")).unwrap();
        let stderr = std::fs::read_to_string(fixture_path(name, "stderr")).unwrap();
        let exit = std::fs::read_to_string(fixture_path(name, "exit")).unwrap();
        let exit = exit.trim().parse().ok();
        replay::replay(&provider(), &stdout, &stderr, exit, &ctx)
    }

    fn kinds(events: &[AgentEvent]) -> Vec<EventKind> {
        events.iter().map(|e| e.kind.clone()).collect()
    }

    fn parse(line: &str) -> Vec<EventKind> {
        kinds(&provider().parse_event(line))
    }

    fn replay_str(stdout: &str, stderr: &str, exit: Option<i32>) -> SessionResult {
        replay::replay(
            &provider(),
            stdout.as_bytes(),
            stderr,
            exit,
            &ParseContext::default(),
        )
        .1
    }

    fn usage(input: u64, output: u64, cache_read: u64, reasoning: u64) -> CanonicalUsage {
        CanonicalUsage {
            input_tokens: input,
            output_tokens: output,
            cache_read,
            cache_write: 0,
            reasoning_tokens: reasoning,
            request_count: 0,
        }
    }

    fn final_ok() -> EventKind {
        EventKind::Final {
            success: true,
            text: None,
            error_kind: None,
            error: None,
            usage: None,
            cost_usd: None,
            num_turns: None,
            duration_ms: None,
        }
    }

    fn session(id: &str) -> EventKind {
        EventKind::SessionStarted {
            session_id: id.into(),
            model: None,
            cwd: None,
            tools: vec![],
            mcp_servers: vec![],
            cli_version: None,
        }
    }

    fn turn_started() -> EventKind {
        EventKind::Unknown {
            vendor_type: Some("turn.started".into()),
        }
    }

    const HELLO: &str = "Hello from the fake OpenAI Responses API.";

    // ----- scenario families (real transcripts) -----

    #[test]
    fn text_gives_the_whole_expected_result() {
        let (events, result) = fixture("text");
        assert_eq!(
            kinds(&events),
            vec![
                session("01a22a82-66e8-7cf1-b039-f1b85ea2a9e0"),
                turn_started(),
                EventKind::AssistantText {
                    text: HELLO.into(),
                    delta: false
                },
                EventKind::Usage {
                    usage: usage(90, 9, 30, 4),
                    cumulative: true
                },
                final_ok(),
            ]
        );
        assert!(events.iter().all(|e| !e.raw.is_empty()));
        let expected = SessionResult {
            provider: "codex".into(),
            session_id: Some("01a22a82-66e8-7cf1-b039-f1b85ea2a9e0".into()),
            model: Some("gpt-5.5".into()),
            status: SessionStatus::Succeeded,
            success: true,
            response: HELLO.into(),
            error_kind: None,
            // (90 * 1.25 + 30 * 0.125 + 9 * 10) / 1e6
            cost_usd: Some(0.00020625),
            cost_source: CostSource::Estimated,
            canonical_usage: usage(90, 9, 30, 4),
            session_totals: Some(SessionTotals {
                usage: usage(90, 9, 30, 4),
                cost_usd: None,
            }),
            exit_code: Some(0),
            provider_data: json!({"warnings": [], "retries": 0, "completed_items": {"agent_message": 1}}),
            ..SessionResult::default()
        };
        assert_eq!(result, expected);
    }

    #[test]
    fn an_unpriced_or_unnamed_model_has_unknown_cost_never_zero() {
        for name in ["text_model_gpt-5.4", "text_defaultmodel", "text_try1"] {
            let (_, r) = fixture(name);
            assert_eq!(
                (r.success, r.cost_usd, r.cost_source, r.canonical_usage),
                (true, None, CostSource::Unknown, usage(90, 9, 30, 4)),
                "{name}"
            );
        }
    }

    #[test]
    fn missing_model_metadata_is_a_non_fatal_warning() {
        let (events, r) = fixture("text_model_gpt-5.4");
        let message = "Model metadata for `gpt-5.4` not found. Defaulting to fallback metadata; this can degrade performance and cause issues.";
        assert_eq!(
            kinds(&events)[1],
            EventKind::Error {
                error_kind: ErrorKind::Unknown,
                message: message.into(),
                fatal: false,
                http_status: None
            }
        );
        assert_eq!(
            (r.success, r.response, r.provider_data["warnings"].clone()),
            (true, HELLO.to_owned(), json!([message]))
        );
    }

    #[test]
    fn shell_is_a_command_execution_tool_call_and_result() {
        let (events, r) = fixture("shell");
        assert_eq!(
            kinds(&events)[2..4].to_vec(),
            vec![
                EventKind::ToolCall {
                    id: "item_0".into(),
                    name: "command_execution".into(),
                    input: json!({"command": "/bin/bash -lc 'echo hi'"}),
                    mcp_server: None
                },
                EventKind::ToolResult {
                    id: "item_0".into(),
                    name: Some("command_execution".into()),
                    output: "hi\n".into(),
                    is_error: false,
                    exit_code: Some(0)
                },
            ]
        );
        assert_eq!(
            (r.success, r.tool_calls, r.canonical_usage),
            (true, 1, usage(180, 18, 60, 8))
        );
        assert!(r.response.ends_with("Output:\nhi"), "{}", r.response);
    }

    #[test]
    fn a_read_only_refusal_has_no_command_item_while_bypass_runs_the_command() {
        let (_, ro) = fixture("shell_write_readonly");
        let (_, bypass) = fixture("shell_write_bypass");
        assert_eq!((ro.success, ro.tool_calls), (true, 0));
        assert!(
            ro.response.contains("Read-only file system"),
            "{}",
            ro.response
        );
        assert_eq!((bypass.success, bypass.tool_calls), (true, 1));
        assert!(bypass.response.contains("Process exited with code 0"));
    }

    #[test]
    fn mcp_tool_calls_name_the_tool_and_server() {
        let (events, r) = fixture("mcp");
        assert_eq!(
            kinds(&events)[2..4].to_vec(),
            vec![
                EventKind::ToolCall {
                    id: "item_0".into(),
                    name: "echo".into(),
                    input: json!({"text": "ping from fake model"}),
                    mcp_server: Some("echo".into())
                },
                EventKind::ToolResult {
                    id: "item_0".into(),
                    name: Some("echo".into()),
                    output: "echo: ping from fake model".into(),
                    is_error: false,
                    exit_code: None
                },
            ]
        );
        assert_eq!(
            (r.success, r.tool_calls, r.canonical_usage),
            (true, 1, usage(270, 27, 90, 12))
        );
    }

    /// (fixture, error kind, start of the error message)
    const FAILURES: [(&str, ErrorKind, &str); 13] = [
        (
            "err400_retries0",
            ErrorKind::BadRequest,
            "{\"error\": {\"message\": \"Invalid 'input[0].content': empty.\"",
        ),
        (
            "err401_retries0",
            ErrorKind::Auth,
            "unexpected status 401 Unauthorized: Incorrect API key provided",
        ),
        (
            "err500_retries0",
            ErrorKind::ServerError,
            "We’re currently experiencing high demand",
        ),
        (
            "err500_default_retries",
            ErrorKind::ServerError,
            "We’re currently experiencing high demand",
        ),
        (
            "unauth_nokey_fake401",
            ErrorKind::Auth,
            "unexpected status 401 Unauthorized",
        ),
        (
            "conn_refused_default_retries",
            ErrorKind::Network,
            "Reconnecting... waiting for network (Connection failed: error sending request) (codex was still retrying after 8 retry notices when the run ended without a final event, exit code 124)",
        ),
        (
            "unauth_nokey",
            ErrorKind::Network,
            "Falling back from WebSockets to HTTPS transport. stream disconnected before completion: failed to lookup address information: Try again (codex was still retrying after 4 retry notices",
        ),
        (
            "unauth_nokey_long",
            ErrorKind::Network,
            "Reconnecting... waiting for network",
        ),
        (
            "unauth_nokey_dnsprobe",
            ErrorKind::Network,
            "Reconnecting... waiting for network",
        ),
        (
            "badkey",
            ErrorKind::Network,
            "Reconnecting... waiting for network",
        ),
        (
            "base_env_OPENAI_BASE_URL",
            ErrorKind::Network,
            "Reconnecting... waiting for network",
        ),
        (
            "exec_with_a_flag",
            ErrorKind::BadRequest,
            "codex rejected its arguments: error: unexpected argument '-a' found",
        ),
        (
            "resume_unknown_id",
            ErrorKind::InvalidResume,
            "Error: thread/resume: thread/resume failed: no rollout found for thread id 01a22a83-0000-7000-8000-000000000000",
        ),
    ];

    #[test]
    fn each_failure_has_its_kind_and_message() {
        for (name, kind, start) in FAILURES {
            let (_, r) = fixture(name);
            let error = r.error.clone().unwrap_or_default();
            assert_eq!(
                (r.status, r.success, r.error_kind, error.starts_with(start)),
                (SessionStatus::Failed, false, Some(kind), true),
                "{name}: {error}"
            );
            assert_eq!(r.cost_source, CostSource::Unknown, "{name}");
        }
    }

    #[test]
    fn err500_with_retries_is_five_server_error_retries_then_a_failed_turn() {
        let (events, _) = fixture("err500_default_retries");
        let text = "We’re currently experiencing high demand, which may cause temporary errors.";
        let retry = |n| EventKind::Retry {
            attempt: Some(n),
            max_retries: Some(5),
            delay_ms: None,
            http_status: None,
            error_kind: ErrorKind::ServerError,
            message: format!("Reconnecting... {n}/5 ({text})"),
        };
        let mut expected = vec![
            session("01a22a83-3ec5-7c51-9cfe-7cadc4ac79e1"),
            turn_started(),
        ];
        expected.extend((1..=5).map(retry));
        expected.push(EventKind::Error {
            error_kind: ErrorKind::ServerError,
            message: text.into(),
            fatal: true,
            http_status: None,
        });
        expected.push(EventKind::Final {
            success: false,
            text: None,
            error_kind: Some(ErrorKind::ServerError),
            error: Some(text.into()),
            usage: None,
            cost_usd: None,
            num_turns: None,
            duration_ms: None,
        });
        assert_eq!(kinds(&events), expected);
    }

    #[test]
    fn reconnecting_notices_are_retries_with_attempt_and_kind() {
        let dns = "Reconnecting... 2/5 (stream disconnected before completion: failed to lookup address information: Try again)";
        let unauthorized = "Reconnecting... 3/5 (unexpected status 401 Unauthorized: Incorrect API key provided: sk-fake., url: http://127.0.0.1:8791/v1/responses, request id: req_fake0024)";
        let limited =
            "Reconnecting... 1/5 (exceeded retry limit, last status: 429 Too Many Requests)";
        let waiting =
            "Reconnecting... waiting for network (Connection failed: error sending request)";
        let line = |m: &str| json!({"type": "error", "message": m}).to_string();
        let retry = |attempt, max, http_status, error_kind, message: &str| EventKind::Retry {
            attempt,
            max_retries: max,
            delay_ms: None,
            http_status,
            error_kind,
            message: message.into(),
        };
        assert_eq!(
            [dns, unauthorized, limited, waiting]
                .iter()
                .flat_map(|m| parse(&line(m)))
                .collect::<Vec<_>>(),
            vec![
                retry(Some(2), Some(5), None, ErrorKind::Network, dns),
                retry(Some(3), Some(5), Some(401), ErrorKind::Auth, unauthorized),
                retry(Some(1), Some(5), Some(429), ErrorKind::RateLimit, limited),
                retry(None, None, None, ErrorKind::Network, waiting),
            ]
        );
    }

    #[test]
    fn resume_reports_the_runs_own_usage_not_the_threads() {
        let (_, first) = fixture("resume_first");
        let (events, second) = fixture("resume");
        assert_eq!(first.session_id, second.session_id);
        // The thread's figures: 120 -> 240 input tokens.
        assert_eq!(
            kinds(&events)[3],
            EventKind::Usage {
                usage: usage(180, 18, 60, 8),
                cumulative: true
            }
        );
        assert_eq!(
            (
                second.success,
                second.canonical_usage,
                second.session_totals
            ),
            (
                true,
                usage(90, 9, 30, 4), // 120 input tokens in all, 30 of them cached
                Some(SessionTotals {
                    usage: usage(180, 18, 60, 8),
                    cost_usd: None
                })
            )
        );
        assert_eq!(second.cost_usd, first.cost_usd);
        let ctx = ParseContext {
            model: None,
            prior: first.session_totals,
        };
        assert_eq!(
            provider().canonical_usage(&events, &ctx),
            usage(90, 9, 30, 4)
        );
        // Without the prior, the cumulative figure is all there is.
        assert_eq!(
            provider().canonical_usage(&events, &ParseContext::default()),
            usage(180, 18, 60, 8)
        );
    }

    #[test]
    fn cache_writes_and_cached_input_are_taken_out_of_input() {
        let line = r#"{"type":"turn.completed","usage":{"input_tokens":1000,"cached_input_tokens":600,"cache_write_input_tokens":300,"output_tokens":50,"reasoning_output_tokens":20}}"#;
        let expected = CanonicalUsage {
            input_tokens: 100,
            output_tokens: 50,
            cache_read: 600,
            cache_write: 300,
            reasoning_tokens: 20,
            request_count: 0,
        };
        assert_eq!(
            parse(line),
            vec![
                EventKind::Usage {
                    usage: expected,
                    cumulative: true
                },
                final_ok()
            ]
        );
        assert_eq!(expected.total_input(), 1000);
    }

    // ----- events the transcripts did not show -----

    #[test]
    fn other_item_types_map_to_tools_thinking_or_unknown() {
        let lines = [
            r#"{"type":"item.completed","item":{"id":"item_0","type":"reasoning","text":"**Planning**"}}"#,
            r#"{"type":"item.started","item":{"id":"item_1","type":"file_change","changes":[{"path":"src/a.rs","kind":"update"}],"status":"in_progress"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_1","type":"file_change","changes":[{"path":"src/a.rs","kind":"update"},{"path":"b.txt","kind":"add"}],"status":"failed"}}"#,
            r#"{"type":"item.started","item":{"id":"item_2","type":"web_search","query":"rust serde","action":{"type":"search"}}}"#,
            r#"{"type":"item.completed","item":{"id":"item_2","type":"web_search","query":"rust serde","action":{"type":"search"}}}"#,
            r#"{"type":"item.started","item":{"id":"item_3","type":"todo_list","items":[{"text":"a","completed":false}]}}"#,
            r#"{"type":"item.updated","item":{"id":"item_3","type":"todo_list","items":[{"text":"a","completed":true}]}}"#,
            r#"{"type":"item.completed","item":{"id":"item_4","type":"command_execution","command":"false","aggregated_output":"","exit_code":1,"status":"failed"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_5","type":"mcp_tool_call","server":"aicli","tool":"ask_user","arguments":{},"result":null,"error":{"message":"MCP tool call requires approval, but approval policy is never"},"status":"failed"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_6","type":"mcp_tool_call","server":"s","tool":"t","arguments":{},"result":{"content":[],"structured_content":{"ok":true}},"error":null,"status":"completed"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_7","type":"collab_tool_call","tool":"spawn_agent"}}"#,
            r#"{"type":"request_user_input","id":"t","call_id":"c","questions":[]}"#,
        ];
        let got: Vec<EventKind> = lines.iter().flat_map(|l| parse(l)).collect();
        let unknown = |t: &str| EventKind::Unknown {
            vendor_type: Some(t.into()),
        };
        let result =
            |id: &str, name: &str, output: &str, is_error, exit_code| EventKind::ToolResult {
                id: id.into(),
                name: Some(name.into()),
                output: output.into(),
                is_error,
                exit_code,
            };
        assert_eq!(
            got,
            vec![
                EventKind::Thinking {
                    text: "**Planning**".into()
                },
                EventKind::ToolCall {
                    id: "item_1".into(),
                    name: "file_change".into(),
                    input: json!({"changes": [{"path": "src/a.rs", "kind": "update"}]}),
                    mcp_server: None
                },
                result(
                    "item_1",
                    "file_change",
                    "update src/a.rs\nadd b.txt",
                    true,
                    None
                ),
                EventKind::ToolCall {
                    id: "item_2".into(),
                    name: "web_search".into(),
                    input: json!({"query": "rust serde", "action": {"type": "search"}}),
                    mcp_server: None
                },
                result("item_2", "web_search", "rust serde", false, None),
                unknown("item.started/todo_list"),
                unknown("item.updated/todo_list"),
                result("item_4", "command_execution", "", true, Some(1)),
                result(
                    "item_5",
                    "ask_user",
                    "MCP tool call requires approval, but approval policy is never",
                    true,
                    None
                ),
                result("item_6", "t", "{\"ok\":true}", false, None),
                unknown("item.completed/collab_tool_call"),
                unknown("request_user_input"),
            ]
        );
    }

    #[test]
    fn a_tool_seen_only_by_its_result_counts_once() {
        let stream = [
            r#"{"type":"thread.started","thread_id":"t"}"#,
            r#"{"type":"item.started","item":{"id":"item_0","type":"command_execution","command":"ls","aggregated_output":"","exit_code":null,"status":"in_progress"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_0","type":"command_execution","command":"ls","aggregated_output":"a\n","exit_code":0,"status":"completed"}}"#,
            r#"{"type":"item.completed","item":{"id":"item_1","type":"file_change","changes":[],"status":"completed"}}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":1,"cached_input_tokens":0,"output_tokens":1,"reasoning_output_tokens":0}}"#,
        ]
        .join("\n");
        assert_eq!(replay_str(&stream, "", Some(0)).tool_calls, 2);
    }

    #[test]
    fn a_question_asked_through_mcp_blocks_a_completed_turn() {
        let p = provider();
        let mut events = p.parse_event(r#"{"type":"thread.started","thread_id":"t-9"}"#);
        events.push(AgentEvent::synthetic(EventKind::Question {
            question: "Which branch?".into(),
            options: vec!["main".into()],
        }));
        events.extend(p.parse_event(r#"{"type":"turn.completed","usage":{}}"#));
        let r = p.event_to_session_result(&events, "", Some(0), &ParseContext::default());
        assert_eq!(
            (r.status, r.success, r.error_kind, r.question),
            (
                SessionStatus::Blocked,
                false,
                None,
                Some(PendingQuestion {
                    question: "Which branch?".into(),
                    options: vec!["main".into()],
                    asked_at: String::new()
                })
            )
        );
    }

    #[test]
    fn error_texts_map_to_kinds() {
        let cases = [
            (
                "unexpected status 429 Too Many Requests: slow down",
                ErrorKind::RateLimit,
                Some(429),
            ),
            (
                "unexpected status 503 Service Unavailable: x",
                ErrorKind::Overloaded,
                Some(503),
            ),
            (
                "unexpected status 502 Bad Gateway: x",
                ErrorKind::ServerError,
                Some(502),
            ),
            (
                "Access blocked by Cloudflare. This usually happens when connecting from a restricted region (status 403 Forbidden)",
                ErrorKind::Permission,
                Some(403),
            ),
            (
                "Quota exceeded. Check your plan and billing details.",
                ErrorKind::RateLimit,
                None,
            ),
            (
                "You've hit your usage limit. Try again later.",
                ErrorKind::RateLimit,
                None,
            ),
            (
                "stream disconnected before completion: error decoding response body",
                ErrorKind::Network,
                None,
            ),
            (
                "Missing environment variable: `FAKE_OPENAI_KEY`.",
                ErrorKind::Auth,
                None,
            ),
            (
                "Codex ran out of room in the model's context window. Start a new conversation.",
                ErrorKind::BadRequest,
                None,
            ),
            (
                r#"{"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}"#,
                ErrorKind::RateLimit,
                None,
            ),
            (
                r#"{"error": {"message": "bad key", "type": "invalid_request_error", "code": "invalid_api_key"}}"#,
                ErrorKind::Auth,
                None,
            ),
            ("something else entirely", ErrorKind::Unknown, None),
        ];
        for (text, kind, status) in cases {
            assert_eq!(classify_message(text), (kind, status), "{text}");
        }
    }

    // ----- argv -----

    const BIN: &str = "/opt/clis/codex";

    fn argv_with(
        task: &TaskSpec,
        config: impl FnOnce(&mut ProviderConfig),
        mcp: Option<&McpEndpoint>,
    ) -> Result<CommandSpec, ProviderError> {
        let mut cfg = AiCliConfig::builtin().unwrap().providers["codex"].clone();
        config(&mut cfg);
        let p = CodexProvider::new("codex", cfg);
        let binary = BinaryLocation::Path(BIN.into());
        let ctx = LaunchContext {
            env: &std::collections::BTreeMap::new(),
            task,
            binary: &binary,
            workdir: Path::new("/work/tree"),
            private_dir: Path::new("/run/aicli/t1"),
            mcp,
            budget_remaining_usd: None,
            is_root: false,
            in_container: false,
        };
        p.headless_argv(&ctx)
    }

    fn args(task: &TaskSpec) -> Vec<String> {
        argv_with(task, |_| {}, None).unwrap().args
    }

    fn task(prompt: &str, mode: Option<PermissionMode>) -> TaskSpec {
        TaskSpec {
            permission_mode: mode,
            ..TaskSpec::new(prompt)
        }
    }

    #[test]
    fn a_new_run_uses_exec_json_with_the_configured_sandbox() {
        let c = argv_with(&task("Say hello", None), |_| {}, None).unwrap();
        assert_eq!(
            (
                c.program.clone(),
                c.args.clone(),
                c.cwd.clone(),
                c.stdin.clone()
            ),
            (
                PathBuf::from(BIN),
                vec![
                    "exec",
                    "-C",
                    "/work/tree",
                    "--sandbox",
                    "workspace-write",
                    "--json",
                    "--skip-git-repo-check",
                    "--",
                    "Say hello"
                ]
                .into_iter()
                .map(String::from)
                .collect::<Vec<_>>(),
                PathBuf::from("/work/tree"),
                None
            )
        );
        assert!(c.env.is_empty());
    }

    #[test]
    fn in_a_container_accept_edits_needs_no_sandbox_of_codex() {
        assert_eq!(
            sandbox_of(PermissionMode::AcceptEdits, true),
            Some("danger-full-access")
        );
        assert_eq!(
            sandbox_of(PermissionMode::AcceptEdits, false),
            Some("workspace-write")
        );
        assert_eq!(sandbox_of(PermissionMode::Plan, true), Some("read-only"));
        assert_eq!(sandbox_of(PermissionMode::Bypass, true), None);
    }

    #[test]
    fn permission_modes_map_to_sandbox_flags() {
        let mode_args = |mode| {
            let a = args(&task("x", Some(mode)));
            a[3..a.len() - 2].to_vec()
        };
        assert_eq!(
            mode_args(PermissionMode::Plan),
            ["--sandbox", "read-only", "--json", "--skip-git-repo-check"]
        );
        assert_eq!(
            mode_args(PermissionMode::Default),
            ["--json", "--skip-git-repo-check"]
        );
        assert_eq!(
            mode_args(PermissionMode::AcceptEdits),
            [
                "--sandbox",
                "workspace-write",
                "--json",
                "--skip-git-repo-check"
            ]
        );
        assert_eq!(
            mode_args(PermissionMode::Bypass),
            [
                "--json",
                "--skip-git-repo-check",
                "--dangerously-bypass-approvals-and-sandbox"
            ]
        );
        for mode in [
            PermissionMode::Plan,
            PermissionMode::Default,
            PermissionMode::AcceptEdits,
            PermissionMode::Bypass,
        ] {
            let a = args(&task("x", Some(mode)));
            assert!(!a.iter().any(|x| x == "-a" || x == "--ask-for-approval"));
        }
    }

    #[test]
    fn resume_puts_exec_options_first_then_the_thread_id_and_prompt() {
        let t = TaskSpec {
            model: Some("gpt-5.5".into()),
            resume_session_id: Some("01a22a83-4fd5-7b50-a108-5b8999571503".into()),
            permission_mode: Some(PermissionMode::Plan),
            ..TaskSpec::new("Second prompt")
        };
        assert_eq!(
            args(&t),
            [
                "exec",
                "-C",
                "/work/tree",
                "--sandbox",
                "read-only",
                "resume",
                "--json",
                "--skip-git-repo-check",
                "-m",
                "gpt-5.5",
                "--",
                "01a22a83-4fd5-7b50-a108-5b8999571503",
                "Second prompt"
            ]
        );
        let empty = TaskSpec {
            resume_session_id: Some("t".into()),
            ..TaskSpec::new(" ")
        };
        let err = argv_with(&empty, |_| {}, None).err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("invalid task for provider codex: resuming a Codex thread needs a prompt")
        );
    }

    #[test]
    fn mcp_is_one_config_override_and_the_token_travels_in_env() {
        let endpoint = McpEndpoint {
            name: "aicli".into(),
            url: "http://127.0.0.1:4242/mcp".into(),
            token: "tok-secret".into(),
            tools: vec!["ask_user".into()],
        };
        let t = TaskSpec {
            env: BTreeMap::from([("AICLI_MCP_TOKEN".to_owned(), "task-value".to_owned())]),
            ..task("x", Some(PermissionMode::Default))
        };
        let c = argv_with(&t, |_| {}, Some(&endpoint)).unwrap();
        assert_eq!(
            c.args[3..].to_vec(),
            [
                "--json",
                "--skip-git-repo-check",
                "-c",
                r#"mcp_servers.aicli={url="http://127.0.0.1:4242/mcp", bearer_token_env_var="AICLI_MCP_TOKEN", default_tools_approval_mode="approve"}"#,
                "--",
                "x"
            ]
        );
        assert_eq!(
            c.env,
            BTreeMap::from([("AICLI_MCP_TOKEN".to_owned(), "tok-secret".to_owned())])
        );
        assert!(!c.args.iter().any(|a| a.contains("tok-secret")));
        let wiring = provider()
            .mcp_wiring(&endpoint, Path::new("/run/x"))
            .unwrap();
        assert_eq!(wiring.args, c.args[5..7].to_vec());

        let odd = McpEndpoint {
            url: "http://h/\"q\"\\".into(),
            ..endpoint.clone()
        };
        assert_eq!(
            mcp_config_override(&odd),
            r#"mcp_servers.aicli={url="http://h/\"q\"\\", bearer_token_env_var="AICLI_MCP_TOKEN", default_tools_approval_mode="approve"}"#
        );
        let dotted = McpEndpoint {
            name: "a.b".into(),
            ..endpoint
        };
        let err = provider()
            .mcp_wiring(&dotted, Path::new("/run/x"))
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "invalid task for provider codex: MCP server name 'a.b' cannot be a Codex config key; use letters, digits, '_' and '-'"
            )
        );
    }

    #[test]
    fn extra_args_and_env_come_from_config_then_task_before_the_prompt() {
        let t = TaskSpec {
            extra_args: vec!["-c".into(), "model_reasoning_effort=\"high\"".into()],
            env: BTreeMap::from([
                ("SHARED".to_owned(), "task".to_owned()),
                ("TASK_ONLY".to_owned(), "1".to_owned()),
            ]),
            append_system_prompt: Some("Be \"brief\".\nNo emoji.".into()),
            max_turns: Some(3),
            max_budget_usd: Some(1.0),
            ..task("-v is a flag-looking prompt", Some(PermissionMode::Default))
        };
        let c = argv_with(
            &t,
            |cfg| {
                cfg.default_model = Some("gpt-5.5".into());
                cfg.extra_args = vec!["--disable".into(), "plugins".into()];
                cfg.env = BTreeMap::from([
                    ("SHARED".to_owned(), "config".to_owned()),
                    ("CONFIG_ONLY".to_owned(), "1".to_owned()),
                ]);
            },
            None,
        )
        .unwrap();
        assert_eq!(
            c.args[3..].to_vec(),
            [
                "--json",
                "--skip-git-repo-check",
                "-m",
                "gpt-5.5",
                "-c",
                r#"developer_instructions="Be \"brief\".\nNo emoji.""#,
                "--disable",
                "plugins",
                "-c",
                "model_reasoning_effort=\"high\"",
                "--",
                "-v is a flag-looking prompt"
            ]
        );
        assert_eq!(
            c.env,
            BTreeMap::from([
                ("CONFIG_ONLY".to_owned(), "1".to_owned()),
                ("SHARED".to_owned(), "task".to_owned()),
                ("TASK_ONLY".to_owned(), "1".to_owned()),
            ])
        );
    }

    #[test]
    fn toml_strings_escape_quotes_backslashes_and_controls() {
        assert_eq!(toml_string("a\"b\\c\td\u{1}"), r#""a\"b\\c\td\u0001""#);
        assert_eq!(toml_string("héllo"), "\"héllo\"");
    }

    // ----- auth -----

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("auth_precheck awaited something"),
        }
    }

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn precheck_finds_credentials_or_says_how_to_get_them() {
        let home = tempfile::tempdir().unwrap();
        let p = provider();
        let check = |e: &BTreeMap<String, String>| block_on(p.auth_precheck(e, home.path(), &[]));
        let expected = format!(
            "not logged in: set CODEX_API_KEY or run `codex login` (no CODEX_API_KEY in the environment and no {}/.codex/auth.json)",
            home.path().display()
        );
        assert_eq!(check(&env(&[])), Some(expected.clone()));
        assert_eq!(
            check(&env(&[("OPENAI_API_KEY", "sk-x")])),
            Some(format!(
                "{expected}; OPENAI_API_KEY is set but `codex exec` ignores it"
            ))
        );
        assert_eq!(check(&env(&[("CODEX_API_KEY", "")])), Some(expected));
        assert_eq!(check(&env(&[("CODEX_API_KEY", "sk-x")])), None);
        assert_eq!(check(&env(&[("CODEX_ACCESS_TOKEN", "t")])), None);

        // `codex login` under CODEX_HOME, elsewhere than ~/.codex.
        let codex_home = home.path().join("ch");
        std::fs::create_dir_all(&codex_home).unwrap();
        std::fs::write(codex_home.join("auth.json"), "{}").unwrap();
        let ch = codex_home.display().to_string();
        assert_eq!(check(&env(&[("CODEX_HOME", &ch)])), None);
        assert!(check(&env(&[])).is_some());
        std::fs::create_dir_all(home.path().join(".codex")).unwrap();
        std::fs::write(home.path().join(".codex/auth.json"), "{}").unwrap();
        assert_eq!(check(&env(&[])), None);
    }

    #[test]
    fn precheck_follows_a_custom_providers_env_key() {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join(".codex")).unwrap();
        std::fs::write(
            home.path().join(".codex/config.toml"),
            "model_provider = \"corp\"\n\n[model_providers.corp]\nname = \"Corp\"\nbase_url = \"https://llm.corp/v1\"\nenv_key = \"CORP_KEY\" # the key\n",
        )
        .unwrap();
        let p = provider();
        assert_eq!(
            block_on(p.auth_precheck(&env(&[]), home.path(), &[])),
            Some("not logged in: model provider `corp` reads its API key from CORP_KEY, which is not set".into())
        );
        assert_eq!(
            block_on(p.auth_precheck(&env(&[("CORP_KEY", "k")]), home.path(), &[])),
            None
        );

        // The same through the config's extra args (the fixtures' fake provider).
        let mut cfg = p.config.clone();
        cfg.extra_args = vec![
            "-c".into(),
            "model_provider=fake".into(),
            "-c".into(),
            r#"model_providers.fake={name="fake",base_url="http://127.0.0.1:8791/v1",env_key="FAKE_OPENAI_KEY",wire_api="responses"}"#.into(),
        ];
        let fake = CodexProvider::new("codex", cfg.clone());
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(
            block_on(fake.auth_precheck(&env(&[]), empty.path(), &[])),
            Some("not logged in: model provider `fake` reads its API key from FAKE_OPENAI_KEY, which is not set".into())
        );
        assert_eq!(
            block_on(fake.auth_precheck(&env(&[("FAKE_OPENAI_KEY", "sk")]), empty.path(), &[])),
            None
        );
        // Any variable the config names counts (a task's own provider is not visible here).
        cfg.extra_args.clear();
        cfg.auth_env_vars.push("TEAM_KEY".into());
        let named = CodexProvider::new("codex", cfg);
        assert_eq!(
            block_on(named.auth_precheck(&env(&[("TEAM_KEY", "k")]), empty.path(), &[])),
            None
        );
    }

    #[test]
    fn precheck_cannot_tell_for_keyring_logins_or_keyless_providers() {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join(".codex")).unwrap();
        let p = provider();
        for toml in [
            "cli_auth_credentials_store = \"keyring\"\n",
            "model_provider = \"ollama\"\n",
        ] {
            std::fs::write(home.path().join(".codex/config.toml"), toml).unwrap();
            assert_eq!(
                block_on(p.auth_precheck(&env(&[]), home.path(), &[])),
                None,
                "{toml}"
            );
        }
    }

    #[test]
    fn login_status_is_read_from_stderr() {
        let p = provider();
        // loginstatus_after_login, loginstatus_nokey, loginstatus_codexapikey
        assert_eq!(
            p.parse_auth_status(
                "",
                "API key configured - sk-fake-***tored\nAuthentication is checked when you send a request.\n",
                Some(0)
            ),
            AuthStatus::LoggedIn {
                method: Some("api_key".into())
            }
        );
        let logged_out = AuthStatus::LoggedOut {
            hint: "set CODEX_API_KEY or run `codex login` (`codex login status` does not see CODEX_API_KEY, which `codex exec` uses)".into(),
        };
        assert_eq!(
            p.parse_auth_status(
                "",
                "WARNING: proceeding, even though we could not create PATH aliases: Refusing to create helper binaries under temporary dir \"/tmp\" (codex_home: AbsolutePathBuf(\"/home/tester/codex-as/.codex\"))\nNot logged in\n",
                Some(1)
            ),
            logged_out
        );
        assert_eq!(
            p.parse_auth_status("", "Not logged in\n", Some(1)),
            logged_out
        );
        assert_eq!(
            p.parse_auth_status("", "Error loading config.toml: bad\n", Some(1)),
            AuthStatus::Unknown {
                detail: "`codex login status` exited 1: Error loading config.toml: bad".into()
            }
        );
        assert_eq!(
            p.auth_status_argv(),
            Some(vec!["login".into(), "status".into()])
        );
    }

    #[test]
    fn auth_errors_are_found_in_events_and_stderr() {
        let p = provider();
        let (events, _) = fixture("err401_retries0");
        let found = p
            .detect_auth_error("", Some(1), &events)
            .unwrap_or_default();
        assert!(
            found.starts_with("unexpected status 401 Unauthorized"),
            "{found}"
        );
        let (events, _) = fixture("err500_retries0");
        assert_eq!(p.detect_auth_error("", Some(1), &events), None);
        // Cut off while retrying a 401: the last retry decides.
        let cut = p.parse_event(r#"{"type":"error","message":"Reconnecting... 2/5 (unexpected status 401 Unauthorized: no key)"}"#);
        assert_eq!(
            p.detect_auth_error("", None, &cut).as_deref(),
            Some("Reconnecting... 2/5 (unexpected status 401 Unauthorized: no key)")
        );
        assert_eq!(
            p.detect_auth_error("Not logged in\n", Some(1), &[])
                .as_deref(),
            Some("Not logged in; set CODEX_API_KEY or run `codex login`")
        );
        let (events, _) = fixture("unauth_nokey");
        assert_eq!(p.detect_auth_error("", Some(124), &events), None);
    }

    // ----- bad input -----

    fn protocol(message: &str, line_bytes: u64) -> EventKind {
        EventKind::Protocol {
            message: message.into(),
            line_bytes,
        }
    }

    #[test]
    fn malformed_lines_are_protocol_events_that_keep_the_line() {
        let p = provider();
        let events = p.parse_event("{\"type\":\"thread.started\"");
        assert_eq!(
            kinds(&events),
            vec![protocol(
                "malformed JSON: EOF while parsing an object at line 1 column 24",
                24
            )]
        );
        assert_eq!(&*events[0].raw, "{\"type\":\"thread.started\"");
        assert_eq!(
            parse("[1,2]"),
            vec![protocol("expected a JSON object, got an array", 5)]
        );
        assert_eq!(
            parse(r#"{"type":"thread.started"}"#),
            vec![protocol(
                "malformed Codex `thread.started` event: missing field `thread_id`",
                25
            )]
        );
        assert_eq!(
            parse(r#"{"type":"item.completed","item":{"type":"agent_message"}}"#),
            vec![protocol(
                "malformed Codex `item.completed` event: the item needs a string `id` and `type`",
                57
            )]
        );
        assert_eq!(
            parse(r#"{"type":"turn.failed","error":"boom"}"#),
            vec![protocol(
                "malformed Codex `turn.failed` event: invalid type: string \"boom\", expected struct ErrorBody",
                37
            )]
        );
        assert_eq!(
            parse(r#"{"no_type":1}"#),
            vec![EventKind::Unknown { vendor_type: None }]
        );
    }

    #[test]
    fn invalid_utf8_and_over_long_lines_are_protocol_errors_and_parsing_goes_on() {
        let p = provider();
        let mut bytes = b"{\"type\":\"thread.started\",\"thread_id\":\"t-1\"}\n".to_vec();
        bytes.extend_from_slice(b"{\"type\":\"error\",\"message\":\"\xff\xfe\"}\n");
        bytes.extend_from_slice(b"{\"type\":\"turn.completed\",\"usage\":{}}\n");
        let events = replay::parse_bytes(&p, &bytes, replay::DEFAULT_LINE_CAP);
        assert_eq!(
            kinds(&events),
            vec![
                session("t-1"),
                protocol("line is not valid UTF-8 (invalid byte at offset 27)", 31),
                EventKind::Usage {
                    usage: CanonicalUsage::default(),
                    cumulative: true
                },
                final_ok(),
            ]
        );
        let r = p.event_to_session_result(&events, "", Some(0), &ParseContext::default());
        assert_eq!((r.success, r.protocol_errors), (true, 1));

        let long = format!(
            "{{\"type\":\"item.completed\",\"item\":{{\"id\":\"i\",\"type\":\"agent_message\",\"text\":\"{}\"}}}}",
            "x".repeat(100)
        );
        let events = replay::parse_line_bytes(&p, long.as_bytes(), 64);
        assert_eq!(
            kinds(&events),
            vec![protocol(
                "line of 176 bytes exceeds the cap of 64 bytes; kept its first 176 bytes",
                176
            )]
        );
    }

    #[test]
    fn an_empty_stream_is_a_crash() {
        let r = replay_str("", "", Some(0));
        assert_eq!(
            (r.error_kind, r.error),
            (
                Some(ErrorKind::Crashed),
                Some("the CLI ended without any Codex event (exit code 0)".into())
            )
        );
    }

    #[test]
    fn a_stream_cut_mid_line_keeps_every_event_and_is_a_protocol_error() {
        let stream = "{\"type\":\"thread.started\",\"thread_id\":\"t-1\"}\n{\"type\":\"turn.started\"}\n{\"type\":\"item.completed\",\"item\":{\"id\":\"item_0\",\"type\":\"agent_message\",\"text\":\"Hi.\"}}\n{\"type\":\"turn.comp";
        let (events, r) = replay::replay(
            &provider(),
            stream.as_bytes(),
            "",
            None,
            &ParseContext::default(),
        );
        assert_eq!(events.len(), 4);
        assert_eq!(
            (r.session_id.as_deref(), r.response.as_str(), r.error_kind, r.error),
            (
                Some("t-1"),
                "Hi.",
                Some(ErrorKind::Protocol),
                Some("the stream ended without a final event after 1 malformed or over-long lines (killed by a signal)".into())
            )
        );
    }

    #[test]
    fn a_stream_without_a_final_event_is_a_crash() {
        let stream = "{\"type\":\"thread.started\",\"thread_id\":\"t-1\"}\n{\"type\":\"turn.started\"}\n{\"type\":\"item.completed\",\"item\":{\"id\":\"item_0\",\"type\":\"agent_message\",\"text\":\"Hi.\"}}\n";
        let r = replay_str(
            stream,
            "Reading additional input from stdin...\nthread 'main' panicked\n",
            Some(101),
        );
        assert_eq!(
            (r.response.as_str(), r.error_kind, r.error),
            (
                "Hi.",
                Some(ErrorKind::Crashed),
                Some("the CLI ended without a final event (exit code 101); stderr: thread 'main' panicked".into())
            )
        );
    }

    #[test]
    fn retries_the_cli_recovered_from_do_not_explain_a_later_crash() {
        let stream = [
            r#"{"type":"thread.started","thread_id":"t-1"}"#,
            r#"{"type":"turn.started"}"#,
            r#"{"type":"error","message":"Reconnecting... 1/5 (stream disconnected before completion: error decoding response body)"}"#,
            r#"{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"Working."}}"#,
        ]
        .join("\n");
        let r = replay_str(&stream, "", None);
        assert_eq!(
            (r.error_kind, r.error),
            (
                Some(ErrorKind::Crashed),
                Some("the CLI ended without a final event (killed by a signal)".into())
            )
        );
        let cut = format!(
            "{stream}\n{}",
            r#"{"type":"error","message":"Reconnecting... 2/5 (stream disconnected before completion: error decoding response body)"}"#
        );
        let r = replay_str(&cut, "", None);
        assert_eq!(
            (r.error_kind, r.error),
            (
                Some(ErrorKind::Network),
                Some("Reconnecting... 2/5 (stream disconnected before completion: error decoding response body) (codex was still retrying after 2 retry notices when the run ended without a final event, killed by a signal)".into())
            )
        );
    }

    #[test]
    fn another_vendors_transcript_is_not_a_codex_stream() {
        // The shape of shared/transcripts/claude/text.ndjson (fields trimmed).
        let claude = [
            r#"{"type":"system","subtype":"init","cwd":"/workspace/demo","session_id":"20d19ac2-06fa-4ed4-8c4f-6e8abb872002","model":"claude-opus-5-5"}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Hello from the fake Anthropic API."}]},"session_id":"20d19ac2-06fa-4ed4-8c4f-6e8abb872002"}"#,
            r#"{"type":"result","subtype":"success","is_error":false,"result":"Hello from the fake Anthropic API.","session_id":"20d19ac2-06fa-4ed4-8c4f-6e8abb872002","total_cost_usd":0.0003692}"#,
        ]
        .join("\n");
        let r = replay_str(&claude, "", Some(0));
        assert_eq!(
            (r.error_kind, r.error, r.session_id, r.response),
            (
                Some(ErrorKind::Protocol),
                Some("not a Codex stream: 3 JSON lines of types `codex exec --json` never prints (first: `system`) and no thread.started, turn.* or item.* event".into()),
                None,
                String::new()
            )
        );
        // shared/transcripts/gemini/text.ndjson (first lines)
        let gemini = "{\"type\":\"init\",\"session_id\":\"ea7b22cc\",\"model\":\"auto\"}\n{\"type\":\"message\",\"role\":\"assistant\",\"content\":\"Hello \",\"delta\":true}\n";
        let r = replay_str(gemini, "", Some(0));
        assert_eq!(r.error_kind, Some(ErrorKind::Protocol));
        assert!(r.error.unwrap_or_default().contains("(first: `init`)"));
    }

    #[test]
    fn plain_text_output_is_a_protocol_error() {
        // `codex features list` prints a table, not NDJSON (shared/transcripts/codex/features_list).
        let table = "agent_message_board                      under development  false\nagent_message_board_mcp                  under development  false\n";
        let r = replay_str(table, "", Some(0));
        assert_eq!(
            (r.error_kind, r.protocol_errors, r.error),
            (
                Some(ErrorKind::Protocol),
                2,
                Some(
                    "no line was a valid Codex event (2 malformed or over-long lines; exit code 0)"
                        .into()
                )
            )
        );
    }

    /// Wherever the fast path answers it answers what the `Value` path does (see the
    /// Claude adapter's test of the same name).
    #[test]
    fn the_fast_path_agrees_with_the_value_path() {
        let (mut total, mut fast) = (0, 0);
        for v in common::test_lines::all() {
            total += 1;
            if let Some(kinds) = wire::decode_fast(v) {
                fast += 1;
                assert_eq!(
                    Ok(kinds),
                    common::json_object(v).and_then(wire::decode),
                    "{v}"
                );
            }
            assert_eq!(
                wire::completed_item_type(v),
                wire::completed_item_type_value(v),
                "{v}"
            );
        }
        assert!(fast * 4 > total, "{fast} of {total}");
    }
}
