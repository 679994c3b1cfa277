//! The Claude Code adapter (`@anthropic-ai/claude-code`, binary `claude`).
//!
//! Written against claude 2.1.332 and its recorded transcripts in `fixtures/claude/`.
//! Pure: it builds argv and reads lines, it never spawns anything.
//!
//! # The command
//!
//! `claude -p PROMPT --output-format stream-json --verbose` (the CLI refuses stream-json
//! without `--verbose`), then `--model`, `--max-turns` (hidden from `--help`, works),
//! `--max-budget-usd`, `--append-system-prompt`, `--permission-mode`, `--resume`,
//! `--mcp-config FILE --strict-mcp-config`, `--allowedTools`, `--disallowedTools`, the
//! config's extra args and the task's. A prompt that starts with `-` would be read as an
//! option by the CLI's parser, so it goes last, after `--`. As root, bypassing permissions
//! also needs `IS_SANDBOX=1` (else: exit 1, "--dangerously-skip-permissions cannot be used
//! with root/sudo privileges"). The budget is the smaller of the task's (or config's)
//! limit and what is left of the batch's; with nothing left the command is refused.
//!
//! # The stream
//!
//! | line | event |
//! |---|---|
//! | `system/init` | [`EventKind::SessionStarted`] |
//! | `system/api_retry` | [`EventKind::Retry`] |
//! | `system/permission_denied` | [`EventKind::PermissionDenied`] |
//! | other `system/*` (`status`, ...) | [`EventKind::Unknown`] `system/<subtype>` |
//! | `assistant` | one event per content block (text, thinking, tool_use); plus an [`EventKind::Error`] when the line is an API error (`is_api_error_message`) |
//! | `user` | [`EventKind::ToolResult`] per `tool_result` block, [`EventKind::UserMessage`] for text |
//! | `stream_event` (`--include-partial-messages`) | text / thinking deltas; the rest [`EventKind::Unknown`] `stream_event/<type>` |
//! | `rate_limit_event` | [`EventKind::RateLimit`] |
//! | `result` | [`EventKind::Final`] |
//!
//! Every event of a line shares that line's `raw`.
//!
//! # Success, errors, usage and cost
//!
//! - `result.subtype` stays `"success"` on API and auth errors: success is `is_error ==
//!   false` with `terminal_reason` `completed`. The error kind comes from
//!   `terminal_reason` (`max_turns`, `budget_exhausted`, `api_error`), then for API errors
//!   from `api_error` (`connection_failed`), `api_error_status`, `api_error_type` and the
//!   assistant line's `error` word, and only then from text.
//! - Usage is `result.usage` (per run; Claude's `input_tokens` already excludes cache).
//!   `request_count` is the number of distinct model responses (`message.id`s of
//!   non-synthetic assistant messages): failed attempts and the CLI's synthetic error
//!   messages are not counted (`--output-format json` prints no assistant lines: 0 there).
//!   The `usage` on `assistant` lines is a `message_start` snapshot and is never used.
//! - Cost per run: the sum of `model_usage_since_last_result[*].costUSD`; else
//!   `total_cost_usd` minus the prior session total when the run resumed one (after
//!   `--resume`, `total_cost_usd` and `modelUsage` are cumulative for the session); else
//!   `total_cost_usd`. Without a result line the cost is estimated from the price table
//!   when the usage can be rebuilt from partial-message events (`message_start` input
//!   side + `message_delta` output count), else unknown, never 0.
//! - `session_totals` are the session-cumulative `modelUsage` sums and `total_cost_usd`
//!   (request count: the prior's plus this run's), for the next resume to subtract.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value, json};

use crate::common::{self, CowStr, strict};
use crate::config::ProviderConfig;
use crate::error::{ErrorKind, ProviderError};
use crate::event::{AgentEvent, EventKind, McpServerStatus};
use crate::provider::{
    AiCliProvider, AuthStatus, CommandSpec, FileSpec, LaunchContext, McpEndpoint, McpWiring,
};
use crate::result::{ParseContext, SessionResult, SessionTotals};
use crate::task::PermissionMode;
use crate::usage::{CanonicalUsage, Cost};

/// The name of the MCP config file written into a run's private directory.
const MCP_CONFIG_FILE: &str = "claude-mcp.json";

/// The model name Claude gives the assistant messages it makes up itself (API errors).
const SYNTHETIC_MODEL: &str = "<synthetic>";

/// Names the vendor uses for its own line types (to tell a foreign transcript apart).
const CLAUDE_LINE_TYPES: [&str; 6] = [
    "system",
    "assistant",
    "user",
    "stream_event",
    "rate_limit_event",
    "result",
];

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
        let login = self.login_argv().join(" ");
        format!(
            "run `{} {login}`, or set ANTHROPIC_API_KEY to a valid API key",
            self.binary_name()
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

// ---------------------------------------------------------------------------------------
// The trait
// ---------------------------------------------------------------------------------------

impl AiCliProvider for ClaudeProvider {
    fn config(&self) -> &ProviderConfig {
        &self.config
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn ide_lockfile(
        &self,
        endpoint: &McpEndpoint,
        port: u16,
        workspace: &Path,
        pid: u32,
    ) -> Option<(String, String)> {
        let contents = json!({
            "pid": pid,
            "workspaceFolders": [workspace.to_string_lossy()],
            "ideName": "aicli",
            "transport": "ws",
            "authToken": endpoint.token,
        });
        Some((format!("{port}.lock"), contents.to_string()))
    }

    fn headless_argv(&self, ctx: &LaunchContext<'_>) -> Result<CommandSpec, ProviderError> {
        let task = ctx.task;
        if task.prompt.trim().is_empty() {
            return Err(ProviderError::InvalidTask {
                provider: self.name.clone(),
                message: "claude -p needs a non-empty prompt (also when resuming a session)"
                    .to_owned(),
            });
        }
        // `ctx.workdir` already is the task's subdirectory when it names one.
        let mut c = CommandSpec::new(ctx.binary, ctx.workdir);
        // The CLI's option parser takes a prompt starting with '-' for an option; such a
        // prompt goes last, after "--".
        let prompt_after_dashes = task.prompt.starts_with('-');
        c.args(["-p"]);
        if !prompt_after_dashes {
            c.args([task.prompt.as_str()]);
        }
        c.args(["--output-format", "stream-json", "--verbose"]);
        if let Some(model) = self.model_for(task).filter(|m| !m.is_empty()) {
            c.args(["--model".to_owned(), model]);
        }
        if let Some(n) = task.max_turns.or(self.config.max_turns) {
            c.args(["--max-turns".to_owned(), n.to_string()]);
        }
        if let Some(usd) = budget_usd(
            task.max_budget_usd.or(self.config.max_budget_usd),
            ctx.budget_remaining_usd,
        ) {
            if usd <= 0.0 {
                // The CLI checks its budget after a model call, and may read 0 as "no
                // limit": a run with nothing left to spend must not start.
                return Err(ProviderError::InvalidTask {
                    provider: self.name.clone(),
                    message: "no budget left for this run (--max-budget-usd would be 0)".to_owned(),
                });
            }
            c.args(["--max-budget-usd".to_owned(), usd.to_string()]);
        }
        if let Some(s) = &task.append_system_prompt {
            c.args(["--append-system-prompt", s.as_str()]);
        }
        let mode = self.permission_mode(task);
        if let Some(flag) = permission_mode_flag(mode) {
            c.args(["--permission-mode", flag]);
        }
        if let Some(id) = &task.resume_session_id {
            c.args(["--resume", id.as_str()]);
        }
        let mut allowed = Vec::new();
        push_unique(&mut allowed, &self.config.allowed_tools);
        push_unique(&mut allowed, &task.allowed_tools);
        if let Some(endpoint) = ctx.mcp {
            let file = mcp_config_file(endpoint, ctx.private_dir);
            c.args([
                "--mcp-config".to_owned(),
                path_arg(&self.name, &file.path)?,
                "--strict-mcp-config".to_owned(),
            ]);
            c.files.push(file);
            push_unique(&mut allowed, &mcp_allowed_tools(endpoint));
        }
        // Both flags take several values; each is followed by another option (or
        // nothing), never by the prompt.
        if !allowed.is_empty() {
            c.args(["--allowedTools".to_owned()]).args(allowed);
        }
        let mut disallowed = Vec::new();
        push_unique(&mut disallowed, &self.config.disallowed_tools);
        push_unique(&mut disallowed, &task.disallowed_tools);
        if !disallowed.is_empty() {
            c.args(["--disallowedTools".to_owned()]).args(disallowed);
        }
        if mode == PermissionMode::Bypass && ctx.is_root {
            // claude refuses to bypass permissions as root unless told it runs sandboxed.
            c.env("IS_SANDBOX", "1");
        }
        c.env.extend(self.config.env.clone());
        c.env.extend(task.env.clone());
        c.args(self.config.extra_args.iter().cloned());
        c.args(task.extra_args.iter().cloned());
        if prompt_after_dashes {
            c.args(["--", task.prompt.as_str()]);
        }
        c.stdin = None;
        Ok(c)
    }

    fn mcp_wiring(
        &self,
        endpoint: &McpEndpoint,
        private_dir: &Path,
    ) -> Result<McpWiring, ProviderError> {
        let file = mcp_config_file(endpoint, private_dir);
        let mut args = vec![
            "--mcp-config".to_owned(),
            path_arg(&self.name, &file.path)?,
            "--strict-mcp-config".to_owned(),
            "--allowedTools".to_owned(),
        ];
        args.extend(mcp_allowed_tools(endpoint));
        Ok(McpWiring {
            args,
            env: BTreeMap::new(),
            files: vec![file],
            links: Vec::new(),
        })
    }

    fn parse_auth_status(&self, stdout: &str, stderr: &str, exit_code: Option<i32>) -> AuthStatus {
        parse_auth_status(stdout, stderr, exit_code, &self.login_hint())
    }

    fn detect_auth_error(
        &self,
        stderr: &str,
        _exit_code: Option<i32>,
        events: &[AgentEvent],
    ) -> Option<String> {
        // Structured signals first: the last verdict decides.
        for ev in events.iter().rev() {
            match &ev.kind {
                EventKind::Final { success: true, .. } => return None,
                EventKind::Final {
                    error_kind: Some(ErrorKind::Auth),
                    error,
                    ..
                } => return Some(self.auth_message(error.as_deref().unwrap_or("auth failure"))),
                EventKind::Error {
                    error_kind: ErrorKind::Auth,
                    message,
                    ..
                } => return Some(self.auth_message(message)),
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
                | EventKind::Final { .. }
                | EventKind::Log { .. }
                | EventKind::Question { .. }
                | EventKind::Protocol { .. }
                | EventKind::Unknown { .. } => {}
            }
        }
        // Last resort: the CLI's words on stderr.
        stderr
            .lines()
            .map(str::trim)
            .find(|l| auth_text(l))
            .map(|l| self.auth_message(&common::truncate_chars(l, 300)))
    }

    fn parse_event(&self, line: &str) -> Vec<AgentEvent> {
        parse_line(line)
    }

    fn event_to_session_result(
        &self,
        events: &[AgentEvent],
        stderr: &str,
        exit_code: Option<i32>,
        ctx: &ParseContext,
    ) -> SessionResult {
        self.build_result(events, stderr, exit_code, ctx)
    }

    fn canonical_usage(&self, events: &[AgentEvent], ctx: &ParseContext) -> CanonicalUsage {
        let scan = Scan::of(events);
        let model = scan.model(ctx);
        self.accounting(&scan, ctx, model.as_deref()).usage
    }
}

// ---------------------------------------------------------------------------------------
// argv helpers
// ---------------------------------------------------------------------------------------

/// `--permission-mode` for a neutral mode (`None`: the CLI's default, no flag).
fn permission_mode_flag(mode: PermissionMode) -> Option<&'static str> {
    match mode {
        PermissionMode::Plan => Some("plan"),
        PermissionMode::Default => None,
        PermissionMode::AcceptEdits => Some("acceptEdits"),
        PermissionMode::Bypass => Some("bypassPermissions"),
    }
}

/// The per-run dollar limit: the smaller of the task's (or config's) limit and what is
/// left of the batch budget; never negative.
fn budget_usd(limit: Option<f64>, remaining: Option<f64>) -> Option<f64> {
    let finite = |x: f64| x.is_finite().then_some(x.max(0.0));
    match (limit.and_then(finite), remaining.and_then(finite)) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Appends the items of `more` not already in `list`.
fn push_unique(list: &mut Vec<String>, more: &[String]) {
    for m in more {
        if !m.is_empty() && !list.contains(m) {
            list.push(m.clone());
        }
    }
}

/// A path as an argument (claude reads its argv as UTF-8).
fn path_arg(provider: &str, path: &Path) -> Result<String, ProviderError> {
    path.to_str()
        .map(str::to_owned)
        .ok_or_else(|| ProviderError::InvalidTask {
            provider: provider.to_owned(),
            message: format!("path {} is not valid UTF-8", path.display()),
        })
}

/// The `--mcp-config` file for `endpoint` (0600: it holds the bearer token).
fn mcp_config_file(endpoint: &McpEndpoint, private_dir: &Path) -> FileSpec {
    let mut servers = Map::new();
    servers.insert(
        endpoint.name.clone(),
        json!({
            "type": "http",
            "url": endpoint.url,
            "headers": {"Authorization": format!("Bearer {}", endpoint.token)},
        }),
    );
    FileSpec {
        path: private_dir.join(MCP_CONFIG_FILE),
        contents: json!({ "mcpServers": servers }).to_string(),
        mode: 0o600,
    }
}

/// `--allowedTools` entries for the endpoint's tools: `mcp__<server>__<tool>`, or the
/// whole server (`mcp__<server>`) when its tools are not listed.
fn mcp_allowed_tools(endpoint: &McpEndpoint) -> Vec<String> {
    if endpoint.tools.is_empty() {
        return vec![format!("mcp__{}", endpoint.name)];
    }
    endpoint
        .tools
        .iter()
        .map(|t| format!("mcp__{}__{t}", endpoint.name))
        .collect()
}

// ---------------------------------------------------------------------------------------
// Auth status
// ---------------------------------------------------------------------------------------

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
    let text = format!("{stdout}\n{stderr}");
    let lower = text.to_ascii_lowercase();
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

/// Auth-failure wording of the CLI (a last resort after the structured fields).
fn auth_text(s: &str) -> bool {
    const MARKERS: [&str; 6] = [
        "Not logged in",
        "Please run /login",
        "Invalid API key",
        "invalid x-api-key",
        "OAuth token has expired",
        "authentication_error",
    ];
    MARKERS.iter().any(|m| s.contains(m))
}

// ---------------------------------------------------------------------------------------
// Wire types: the stream-json lines, as far as the adapter reads them. Unknown fields
// are ignored; absent or null fields take their defaults.
// (Shapes: claude 2.1.332, see fixtures/claude/ and shared/notes/real-clis.md §5.)
// ---------------------------------------------------------------------------------------

/// `null` reads as the default (serde's `default` only covers absent fields).
fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// `system/init`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InitLine {
    session_id: Option<String>,
    model: Option<String>,
    cwd: Option<String>,
    #[serde(deserialize_with = "null_default")]
    tools: Vec<String>,
    #[serde(deserialize_with = "null_default")]
    mcp_servers: Vec<McpServerWire>,
    claude_code_version: Option<String>,
}

/// One entry of `system/init.mcp_servers`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct McpServerWire {
    name: String,
    status: String,
}

/// `system/api_retry`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ApiRetryLine {
    attempt: Option<u32>,
    max_retries: Option<u32>,
    retry_delay_ms: Option<f64>,
    error_status: Option<u16>,
    error: Option<String>,
}

/// `system/permission_denied`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct PermissionDeniedLine {
    tool_name: Option<String>,
    tool_use_id: Option<String>,
    message: Option<String>,
}

/// `assistant`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct AssistantLine {
    message: AssistantMessage,
    /// `authentication_failed`, `rate_limit`, `server_error`, `unknown`, ... on API errors.
    error: Option<String>,
    is_api_error_message: bool,
    api_error_status: Option<u16>,
    api_error_type: Option<String>,
    /// `connection_failed` when the API could not be reached.
    api_error: Option<String>,
    #[serde(deserialize_with = "null_default")]
    tool_use_meta: Vec<ToolUseMeta>,
}

/// `assistant.message`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct AssistantMessage {
    id: Option<String>,
    model: Option<String>,
    #[serde(deserialize_with = "null_default")]
    content: Vec<Value>,
}

/// `assistant.tool_use_meta[]` (MCP tools: the tool's own name).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ToolUseMeta {
    id: String,
    tool_name: Option<String>,
}

/// `text` content block.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TextBlock {
    text: String,
}

/// `thinking` content block.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ThinkingBlock {
    thinking: String,
}

/// `tool_use` (and `server_tool_use`) content block.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ToolUseBlock {
    id: String,
    name: String,
    input: Value,
}

/// `tool_result` content block (in `user` lines).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ToolResultBlock {
    tool_use_id: String,
    content: Value,
    is_error: Option<bool>,
}

/// `user`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct UserLine {
    message: UserMessageWire,
}

/// `user.message`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct UserMessageWire {
    content: Value,
}

/// `stream_event`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct StreamEventLine {
    event: Value,
    /// The message a `message_delta` belongs to.
    api_message_id: Option<String>,
}

/// `result`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ResultLine {
    subtype: Option<String>,
    is_error: Option<bool>,
    terminal_reason: Option<String>,
    result: Option<String>,
    #[serde(deserialize_with = "null_default")]
    errors: Vec<Value>,
    api_error_status: Option<u16>,
    api_error_type: Option<String>,
    api_error: Option<String>,
    num_turns: Option<u32>,
    duration_ms: Option<u64>,
    total_cost_usd: Option<f64>,
    usage: Option<ResultUsage>,
    #[serde(rename = "modelUsage")]
    model_usage: Option<BTreeMap<String, ModelUsage>>,
    model_usage_since_last_result: Option<BTreeMap<String, ModelUsage>>,
    session_id: Option<String>,
}

/// `result.usage` (per run, summed over the run's API calls).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ResultUsage {
    input_tokens: u64,
    output_tokens: u64,
    cache_read_input_tokens: u64,
    cache_creation_input_tokens: u64,
    #[serde(deserialize_with = "null_default")]
    output_tokens_details: OutputTokensDetails,
}

/// `result.usage.output_tokens_details`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct OutputTokensDetails {
    thinking_tokens: u64,
}

/// One model's entry of `result.modelUsage` / `model_usage_since_last_result`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct ModelUsage {
    input_tokens: u64,
    output_tokens: u64,
    cache_read_input_tokens: u64,
    cache_creation_input_tokens: u64,
    thinking_tokens: u64,
    #[serde(rename = "costUSD")]
    cost_usd: Option<f64>,
}

impl ResultUsage {
    fn canonical(&self) -> CanonicalUsage {
        CanonicalUsage {
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            cache_read: self.cache_read_input_tokens,
            cache_write: self.cache_creation_input_tokens,
            reasoning_tokens: self.output_tokens_details.thinking_tokens,
            request_count: 0,
        }
    }
}

impl ModelUsage {
    fn canonical(&self) -> CanonicalUsage {
        CanonicalUsage {
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            cache_read: self.cache_read_input_tokens,
            cache_write: self.cache_creation_input_tokens,
            reasoning_tokens: self.thinking_tokens,
            request_count: 0,
        }
    }
}

/// The sum of the models' usage.
fn sum_model_usage(m: &BTreeMap<String, ModelUsage>) -> CanonicalUsage {
    m.values()
        .fold(CanonicalUsage::default(), |acc, u| acc + u.canonical())
}

/// The sum of the models' `costUSD`, when every model has one.
fn sum_model_cost(m: &BTreeMap<String, ModelUsage>) -> Option<f64> {
    // A fold from +0.0: `f64`'s `Sum` starts at -0.0, which would print as "-0.0".
    m.values()
        .try_fold(0.0, |acc, u| u.cost_usd.map(|c| acc + c))
}

impl ResultLine {
    /// The run's own cost as the line reports it: the since-last-result sum when
    /// present, else `total_cost_usd` (session-cumulative after `--resume`).
    fn reported_cost(&self) -> Option<f64> {
        self.model_usage_since_last_result
            .as_ref()
            .and_then(sum_model_cost)
            .or(self.total_cost_usd)
    }

    /// `errors[]` as one message.
    fn errors_text(&self) -> Option<String> {
        let parts: Vec<String> = self
            .errors
            .iter()
            .map(|e| match e {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .filter(|s| !s.trim().is_empty())
            .collect();
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

/// Deserializes a known line type (or block); a wrong shape is an error naming it, which
/// the caller turns into a protocol event.
fn read<T: for<'de> Deserialize<'de>>(value: Value, what: &str) -> Result<T, String> {
    common::from_value_lenient(value)
        .map_err(|e| format!("claude `{what}` does not have the expected shape: {e}"))
}

// ---------------------------------------------------------------------------------------
// Lines -> events
//
// Each line is read twice at most. The fast path ([`fast_kinds`]) reads the common line
// types (`assistant`, `user`, `stream_event`, `system` other than the three read below,
// unknown types) straight from the text into borrowed structs, strictly (see
// [`common::strict`]). Anything it does not take, or any line it cannot read, goes the
// `Value` path ([`value_kinds`]), which gives the protocol messages. Both end in the same
// functions (`assistant_kinds`, `user_kinds`, `stream_kind`), and a unit test checks that
// wherever the fast path answers it answers what the `Value` path does.
// ---------------------------------------------------------------------------------------

/// Events from one line.
fn parse_line(line: &str) -> Vec<AgentEvent> {
    let raw: Arc<str> = Arc::from(line);
    let kinds = match fast_kinds(line) {
        Some(kinds) => Ok(kinds),
        None => value_kinds(line),
    };
    match kinds {
        Ok(kinds) => kinds
            .into_iter()
            .map(|k| AgentEvent::new(k, raw.clone()))
            .collect(),
        Err(message) => vec![AgentEvent::protocol(message, raw)],
    }
}

/// The kinds of one line, read through a `Value`; `Err` is a protocol message.
fn value_kinds(line: &str) -> Result<Vec<EventKind>, String> {
    let obj = common::json_object(line)?;
    let Some(line_type) = common::string_field(&obj, "type") else {
        return Ok(vec![EventKind::Unknown { vendor_type: None }]);
    };
    let subtype = common::string_field(&obj, "subtype");
    let value = Value::Object(obj);
    match line_type.as_str() {
        "system" => system_events(value, subtype.as_deref()),
        "assistant" => assistant_events(value),
        "user" => user_events(value),
        "stream_event" => stream_events(value),
        "rate_limit_event" => Ok(vec![rate_limit_event(&value)]),
        "result" => read::<ResultLine>(value, "result").map(|r| vec![final_event(&r)]),
        _ => Ok(vec![EventKind::Unknown {
            vendor_type: Some(line_type),
        }]),
    }
}

/// `system/*` lines.
fn system_events(value: Value, subtype: Option<&str>) -> Result<Vec<EventKind>, String> {
    let kind = match subtype {
        Some("init") => {
            let l: InitLine = read(value, "system/init")?;
            EventKind::SessionStarted {
                session_id: l.session_id.unwrap_or_default(),
                model: l.model,
                cwd: l.cwd,
                tools: l.tools,
                mcp_servers: l
                    .mcp_servers
                    .into_iter()
                    .map(|s| McpServerStatus {
                        name: s.name,
                        status: s.status,
                    })
                    .collect(),
                cli_version: l.claude_code_version,
            }
        }
        Some("api_retry") => {
            let l: ApiRetryLine = read(value, "system/api_retry")?;
            retry_event(&l)
        }
        Some("permission_denied") => {
            let l: PermissionDeniedLine = read(value, "system/permission_denied")?;
            let tool = l.tool_name.unwrap_or_default();
            EventKind::PermissionDenied {
                message: l
                    .message
                    .unwrap_or_else(|| format!("permission to use {tool} was denied")),
                tool,
                tool_call_id: l.tool_use_id,
            }
        }
        Some(other) => system_unknown(Some(other)),
        None => system_unknown(None),
    };
    Ok(vec![kind])
}

/// A `system` line of a subtype the adapter does not read.
fn system_unknown(subtype: Option<&str>) -> EventKind {
    EventKind::Unknown {
        vendor_type: Some(match subtype {
            Some(other) => format!("system/{other}"),
            None => "system".to_owned(),
        }),
    }
}

/// `system/api_retry` -> a retry event.
fn retry_event(l: &ApiRetryLine) -> EventKind {
    let error_kind = retry_kind(l.error_status, l.error.as_deref());
    let cause = match l.error_status {
        Some(s) => format!("HTTP {s}"),
        None => "no HTTP response".to_owned(),
    };
    let word = l.error.as_deref().unwrap_or("unknown");
    let attempt = match (l.attempt, l.max_retries) {
        (Some(a), Some(m)) => format!("retry {a} of {m}"),
        (Some(a), None) => format!("retry {a}"),
        (None, _) => "retrying".to_owned(),
    };
    let delay_ms = l
        .retry_delay_ms
        .filter(|d| d.is_finite() && *d >= 0.0)
        .map(|d| d.round() as u64);
    let delay = delay_ms.map(|d| format!(" in {d} ms")).unwrap_or_default();
    EventKind::Retry {
        attempt: l.attempt,
        max_retries: l.max_retries,
        delay_ms,
        http_status: l.error_status,
        error_kind,
        message: format!("API request failed ({cause}, error {word}); {attempt}{delay}"),
    }
}

/// One content block of an `assistant` line, read.
enum AssistantBlock {
    Text(String),
    Thinking(String),
    ToolUse(ToolUseBlock),
    /// A block of another type (`""` when it has none).
    Other(String),
}

/// The API-error fields of an `assistant` line.
struct AssistantErrorFields {
    error: Option<String>,
    is_api_error_message: bool,
    api_error_status: Option<u16>,
    api_error_type: Option<String>,
    api_error: Option<String>,
}

/// `assistant` lines: one event per content block, plus the API error if it is one.
fn assistant_events(value: Value) -> Result<Vec<EventKind>, String> {
    let l: AssistantLine = read(value, "assistant")?;
    let blocks = l
        .message
        .content
        .iter()
        .map(read_assistant_block)
        .collect::<Result<Vec<_>, String>>()?;
    let fields = AssistantErrorFields {
        error: l.error,
        is_api_error_message: l.is_api_error_message,
        api_error_status: l.api_error_status,
        api_error_type: l.api_error_type,
        api_error: l.api_error,
    };
    Ok(assistant_kinds(blocks, &l.tool_use_meta, fields))
}

/// One content block of an `assistant` line, from its `Value`.
fn read_assistant_block(block: &Value) -> Result<AssistantBlock, String> {
    let block_type = block.get("type").and_then(Value::as_str).unwrap_or("");
    Ok(match block_type {
        "text" => {
            let b: TextBlock = read(block.clone(), "assistant text block")?;
            AssistantBlock::Text(b.text)
        }
        "thinking" => {
            let b: ThinkingBlock = read(block.clone(), "assistant thinking block")?;
            AssistantBlock::Thinking(b.thinking)
        }
        "tool_use" | "server_tool_use" => {
            AssistantBlock::ToolUse(read(block.clone(), "assistant tool_use block")?)
        }
        other => AssistantBlock::Other(other.to_owned()),
    })
}

/// The events of an `assistant` line from its blocks and error fields.
fn assistant_kinds(
    blocks: Vec<AssistantBlock>,
    meta: &[ToolUseMeta],
    l: AssistantErrorFields,
) -> Vec<EventKind> {
    let is_error = l.is_api_error_message || l.error.is_some();
    let mut out = Vec::with_capacity(blocks.len() + 1);
    let mut text = Vec::new();
    for block in blocks {
        let kind = match block {
            AssistantBlock::Text(t) => {
                if is_error {
                    text.push(t.clone());
                }
                EventKind::AssistantText {
                    text: t,
                    delta: false,
                }
            }
            AssistantBlock::Thinking(t) => EventKind::Thinking { text: t },
            AssistantBlock::ToolUse(b) => tool_call(b, meta),
            AssistantBlock::Other(other) => EventKind::Unknown {
                vendor_type: Some(format!("assistant/{other}")),
            },
        };
        out.push(kind);
    }
    if is_error {
        let message = if text.is_empty() {
            format!("API error ({})", l.error.as_deref().unwrap_or("unknown"))
        } else {
            text.join("\n")
        };
        let http_status = l.api_error_status;
        let facts = ApiErrorFacts {
            status: l.api_error_status,
            api_error_type: l.api_error_type,
            api_error: l.api_error,
            error_word: l.error,
            text: message.clone(),
        };
        out.push(EventKind::Error {
            error_kind: facts.classify(),
            message,
            fatal: true,
            http_status,
        });
    }
    if out.is_empty() {
        out.push(EventKind::Unknown {
            vendor_type: Some("assistant".to_owned()),
        });
    }
    out
}

/// A tool call; MCP tools (`mcp__<server>__<tool>`) get their server and bare name.
fn tool_call(b: ToolUseBlock, meta: &[ToolUseMeta]) -> EventKind {
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
fn split_mcp_name(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix("mcp__")?;
    let (server, tool) = rest.split_once("__")?;
    (!server.is_empty() && !tool.is_empty()).then_some((server, tool))
}

/// The `message.content` of a `user` line, read.
enum UserContent {
    /// A string: the user's text.
    Text(String),
    /// An array of blocks.
    Blocks(Vec<UserBlock>),
    /// Anything else (absent, null, a number, an object): no event of its own.
    None,
}

/// One block of a `user` line, read.
enum UserBlock {
    ToolResult(ToolResultBlock),
    Text(String),
    /// A block of another type (`""` when it has none).
    Other(String),
}

/// `user` lines: tool results and user text.
fn user_events(value: Value) -> Result<Vec<EventKind>, String> {
    let l: UserLine = read(value, "user")?;
    let content = match &l.message.content {
        Value::String(s) => UserContent::Text(s.clone()),
        Value::Array(blocks) => UserContent::Blocks(
            blocks
                .iter()
                .map(read_user_block)
                .collect::<Result<Vec<_>, String>>()?,
        ),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::Object(_) => UserContent::None,
    };
    Ok(user_kinds(content))
}

/// One block of a `user` line, from its `Value`.
fn read_user_block(block: &Value) -> Result<UserBlock, String> {
    let block_type = block.get("type").and_then(Value::as_str).unwrap_or("");
    Ok(match block_type {
        "tool_result" => UserBlock::ToolResult(read(block.clone(), "user tool_result block")?),
        "text" => {
            let b: TextBlock = read(block.clone(), "user text block")?;
            UserBlock::Text(b.text)
        }
        other => UserBlock::Other(other.to_owned()),
    })
}

/// The events of a `user` line from its content.
fn user_kinds(content: UserContent) -> Vec<EventKind> {
    let mut out = Vec::new();
    match content {
        UserContent::Text(s) => out.push(EventKind::UserMessage { text: s }),
        UserContent::Blocks(blocks) => {
            for block in blocks {
                out.push(match block {
                    UserBlock::ToolResult(b) => EventKind::ToolResult {
                        id: b.tool_use_id,
                        name: None,
                        output: common::content_text_owned(b.content),
                        is_error: b.is_error.unwrap_or(false),
                        exit_code: None,
                    },
                    UserBlock::Text(text) => EventKind::UserMessage { text },
                    UserBlock::Other(other) => EventKind::Unknown {
                        vendor_type: Some(format!("user/{other}")),
                    },
                });
            }
        }
        UserContent::None => {}
    }
    if out.is_empty() {
        out.push(EventKind::Unknown {
            vendor_type: Some("user".to_owned()),
        });
    }
    out
}

/// `stream_event` lines (only with `--include-partial-messages`).
fn stream_events(value: Value) -> Result<Vec<EventKind>, String> {
    let l: StreamEventLine = read(value, "stream_event")?;
    let event_type = l.event.get("type").and_then(Value::as_str).unwrap_or("");
    let delta = l.event.get("delta");
    let delta_type = delta.and_then(|d| d.get("type")).and_then(Value::as_str);
    let delta_str = |key: &str| {
        delta
            .and_then(|d| d.get(key))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    Ok(vec![stream_kind(event_type, delta_type, delta_str)])
}

/// The event of a `stream_event` line; `delta_str` reads a string of its `delta`
/// (`""` when absent).
fn stream_kind(
    event_type: &str,
    delta_type: Option<&str>,
    delta_str: impl FnOnce(&str) -> String,
) -> EventKind {
    match (event_type, delta_type) {
        ("content_block_delta", Some("text_delta")) => EventKind::AssistantText {
            text: delta_str("text"),
            delta: true,
        },
        ("content_block_delta", Some("thinking_delta")) => EventKind::Thinking {
            text: delta_str("thinking"),
        },
        _ => EventKind::Unknown {
            vendor_type: Some(if event_type.is_empty() {
                "stream_event".to_owned()
            } else {
                format!("stream_event/{event_type}")
            }),
        },
    }
}

// ---------------------------------------------------------------------------------------
// The fast path: lines read straight into borrowed structs (see `common::strict`). Each
// struct reads every field its `Value`-path twin reads, with the same or a stricter type,
// plus `type` (checked against the hint and, being a named field, unique). The union
// structs for blocks read the fields of every block type they stand for; a field that
// only another block type has can make the read fail, never succeed where the `Value`
// path fails.
// ---------------------------------------------------------------------------------------

/// Any line, for its `type` alone (the rest is read and dropped).
#[derive(Deserialize)]
struct FastTyped<'a> {
    #[serde(borrow)]
    r#type: Cow<'a, str>,
}

/// `system` lines.
#[derive(Deserialize)]
struct FastSystemLine<'a> {
    #[serde(borrow)]
    r#type: Cow<'a, str>,
    #[serde(default, borrow)]
    subtype: Option<CowStr<'a>>,
}

/// `assistant` lines.
#[derive(Deserialize)]
struct FastAssistantLine<'a> {
    #[serde(borrow)]
    r#type: Cow<'a, str>,
    #[serde(default, borrow)]
    message: FastAssistantMessage<'a>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    is_api_error_message: bool,
    #[serde(default)]
    api_error_status: Option<u16>,
    #[serde(default)]
    api_error_type: Option<String>,
    #[serde(default)]
    api_error: Option<String>,
    #[serde(default, deserialize_with = "null_default")]
    tool_use_meta: Vec<ToolUseMeta>,
}

/// `assistant.message`.
#[derive(Default, Deserialize)]
#[serde(default)]
struct FastAssistantMessage<'a> {
    #[serde(borrow)]
    id: Option<CowStr<'a>>,
    #[serde(borrow)]
    model: Option<CowStr<'a>>,
    #[serde(borrow, deserialize_with = "null_default")]
    content: Vec<FastAssistantBlock<'a>>,
}

/// Any block of `assistant.message.content`: the fields of text, thinking and tool_use
/// blocks.
#[derive(Default, Deserialize)]
#[serde(default)]
struct FastAssistantBlock<'a> {
    #[serde(borrow)]
    r#type: Option<CowStr<'a>>,
    text: String,
    thinking: String,
    id: String,
    name: String,
    input: Value,
}

impl FastAssistantBlock<'_> {
    fn read(self) -> AssistantBlock {
        match self.r#type.as_ref().map_or("", CowStr::as_str) {
            "text" => AssistantBlock::Text(self.text),
            "thinking" => AssistantBlock::Thinking(self.thinking),
            "tool_use" | "server_tool_use" => AssistantBlock::ToolUse(ToolUseBlock {
                id: self.id,
                name: self.name,
                input: self.input,
            }),
            other => AssistantBlock::Other(other.to_owned()),
        }
    }
}

/// `user` lines.
#[derive(Deserialize)]
struct FastUserLine<'a> {
    #[serde(borrow)]
    r#type: Cow<'a, str>,
    #[serde(default, borrow)]
    message: FastUserMessage<'a>,
}

/// `user.message`.
#[derive(Default, Deserialize)]
#[serde(default)]
struct FastUserMessage<'a> {
    #[serde(borrow)]
    content: FastUserContent<'a>,
}

/// `user.message.content`: a string, blocks, or anything else (read and dropped).
#[derive(Default)]
enum FastUserContent<'a> {
    Text(String),
    Blocks(Vec<FastUserBlock<'a>>),
    #[default]
    None,
}

impl<'de: 'a, 'a> Deserialize<'de> for FastUserContent<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = FastUserContent<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(FastUserContent::Text(s.to_owned()))
            }
            fn visit_string<E: serde::de::Error>(self, s: String) -> Result<Self::Value, E> {
                Ok(FastUserContent::Text(s))
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(FastUserContent::None)
            }
            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(FastUserContent::None)
            }
            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(FastUserContent::None)
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(FastUserContent::None)
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(FastUserContent::None)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut blocks = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
                while let Some(b) = seq.next_element::<FastUserBlock<'a>>()? {
                    blocks.push(b);
                }
                Ok(FastUserContent::Blocks(blocks))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                while map.next_key::<serde::de::IgnoredAny>()?.is_some() {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
                Ok(FastUserContent::None)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// Any block of `user.message.content`: the fields of tool_result and text blocks.
#[derive(Default, Deserialize)]
#[serde(default)]
struct FastUserBlock<'a> {
    #[serde(borrow)]
    r#type: Option<CowStr<'a>>,
    tool_use_id: String,
    content: Value,
    is_error: Option<bool>,
    text: String,
}

impl FastUserBlock<'_> {
    fn read(self) -> UserBlock {
        match self.r#type.as_ref().map_or("", CowStr::as_str) {
            "tool_result" => UserBlock::ToolResult(ToolResultBlock {
                tool_use_id: self.tool_use_id,
                content: self.content,
                is_error: self.is_error,
            }),
            "text" => UserBlock::Text(self.text),
            other => UserBlock::Other(other.to_owned()),
        }
    }
}

/// `stream_event` lines.
#[derive(Deserialize)]
struct FastStreamLine<'a> {
    #[serde(borrow)]
    r#type: Cow<'a, str>,
    #[serde(default, borrow)]
    event: Option<FastStreamEvent<'a>>,
    /// Read for its type only (the `Value` path requires a string).
    #[serde(default, borrow, rename = "api_message_id")]
    _api_message_id: Option<CowStr<'a>>,
}

/// `stream_event.event`.
#[derive(Deserialize)]
struct FastStreamEvent<'a> {
    #[serde(default, borrow)]
    r#type: Option<CowStr<'a>>,
    #[serde(default, borrow)]
    delta: Option<FastDelta<'a>>,
}

/// `stream_event.event.delta`.
#[derive(Deserialize)]
struct FastDelta<'a> {
    #[serde(default, borrow)]
    r#type: Option<CowStr<'a>>,
    #[serde(default, borrow)]
    text: Option<CowStr<'a>>,
    #[serde(default, borrow)]
    thinking: Option<CowStr<'a>>,
}

/// The kinds of one line by the fast path; `None` leaves the line to [`value_kinds`].
fn fast_kinds(line: &str) -> Option<Vec<EventKind>> {
    let hint = common::line_type(line)?;
    let kinds = match hint.as_ref() {
        "assistant" => {
            let l: FastAssistantLine<'_> = strict::from_str(line).ok()?;
            if l.r#type != hint {
                return None;
            }
            let blocks = l
                .message
                .content
                .into_iter()
                .map(FastAssistantBlock::read)
                .collect();
            let fields = AssistantErrorFields {
                error: l.error,
                is_api_error_message: l.is_api_error_message,
                api_error_status: l.api_error_status,
                api_error_type: l.api_error_type,
                api_error: l.api_error,
            };
            assistant_kinds(blocks, &l.tool_use_meta, fields)
        }
        "user" => {
            let l: FastUserLine<'_> = strict::from_str(line).ok()?;
            if l.r#type != hint {
                return None;
            }
            let content = match l.message.content {
                FastUserContent::Text(s) => UserContent::Text(s),
                FastUserContent::Blocks(b) => {
                    UserContent::Blocks(b.into_iter().map(FastUserBlock::read).collect())
                }
                FastUserContent::None => UserContent::None,
            };
            user_kinds(content)
        }
        "stream_event" => {
            let l: FastStreamLine<'_> = strict::from_str(line).ok()?;
            if l.r#type != hint {
                return None;
            }
            let (event_type, delta) = match l.event {
                Some(e) => (e.r#type, e.delta),
                None => (None, None),
            };
            let (delta_type, text, thinking) = match delta {
                Some(d) => (d.r#type, d.text, d.thinking),
                None => (None, None, None),
            };
            let delta_str = |key: &str| {
                let s = if key == "text" { text } else { thinking };
                s.map(CowStr::into_string).unwrap_or_default()
            };
            vec![stream_kind(
                event_type.as_ref().map_or("", CowStr::as_str),
                delta_type.as_ref().map(CowStr::as_str),
                delta_str,
            )]
        }
        "system" => {
            let l: FastSystemLine<'_> = strict::from_str(line).ok()?;
            if l.r#type != hint {
                return None;
            }
            match l.subtype.as_ref().map(CowStr::as_str) {
                Some("init" | "api_retry" | "permission_denied") => return None,
                subtype => vec![system_unknown(subtype)],
            }
        }
        // One line a run: the `Value` path.
        "rate_limit_event" | "result" => return None,
        other => {
            let l: FastTyped<'_> = strict::from_str(line).ok()?;
            if l.r#type != other {
                return None;
            }
            vec![EventKind::Unknown {
                vendor_type: Some(other.to_owned()),
            }]
        }
    };
    Some(kinds)
}

/// `rate_limit_event` -> the vendor's rate-limit state.
fn rate_limit_event(value: &Value) -> EventKind {
    let info = value.get("rate_limit_info").unwrap_or(&Value::Null);
    let resets_at = info.get("resetsAt").and_then(|v| {
        v.as_i64()
            .or_else(|| v.as_f64().filter(|f| f.is_finite()).map(|f| f as i64))
    });
    EventKind::RateLimit {
        status: info
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_owned(),
        resets_at,
        limit_type: info
            .get("rateLimitType")
            .and_then(Value::as_str)
            .map(str::to_owned),
    }
}

/// `result` -> the final event (from the line alone; the result builder refines the
/// error kind with the assistant line's `error` word).
fn final_event(r: &ResultLine) -> EventKind {
    let verdict = verdict(r, None, "");
    let (error_kind, error) = match verdict {
        Ok(()) => (None, None),
        Err((k, m)) => (Some(k), Some(m)),
    };
    EventKind::Final {
        success: error_kind.is_none(),
        text: r.result.clone(),
        error_kind,
        error,
        usage: r.usage.as_ref().map(ResultUsage::canonical),
        cost_usd: r.reported_cost(),
        num_turns: r.num_turns,
        duration_ms: r.duration_ms,
    }
}

// ---------------------------------------------------------------------------------------
// Error classification
// ---------------------------------------------------------------------------------------

/// What the CLI says about a failed API call, from an `assistant` error line and/or the
/// `result` line.
#[derive(Debug, Default, Clone)]
struct ApiErrorFacts {
    /// HTTP status (`api_error_status`; null on connection failures).
    status: Option<u16>,
    /// The API's error type (`authentication_error`, `overloaded_error`, ...).
    api_error_type: Option<String>,
    /// `connection_failed` when the API was not reached.
    api_error: Option<String>,
    /// The assistant line's `error` word (`authentication_failed`, `rate_limit`, ...).
    error_word: Option<String>,
    /// The CLI's text (only for the last resort).
    text: String,
}

impl ApiErrorFacts {
    /// Structured fields first, text last.
    fn classify(&self) -> ErrorKind {
        if self.api_error.as_deref() == Some("connection_failed") {
            return ErrorKind::Network;
        }
        if let Some(k) = self.status.and_then(ErrorKind::from_http_status) {
            return k;
        }
        if let Some(k) = self.api_error_type.as_deref().and_then(kind_of_api_type) {
            return k;
        }
        if let Some(k) = self.error_word.as_deref().and_then(kind_of_error_word) {
            return k;
        }
        kind_of_text(&self.text).unwrap_or(ErrorKind::Unknown)
    }
}

/// The API's error `type` (Anthropic error JSON).
fn kind_of_api_type(t: &str) -> Option<ErrorKind> {
    Some(match t {
        "authentication_error" => ErrorKind::Auth,
        "permission_error" => ErrorKind::Permission,
        "rate_limit_error" => ErrorKind::RateLimit,
        "overloaded_error" => ErrorKind::Overloaded,
        "api_error" => ErrorKind::ServerError,
        "invalid_request_error" | "not_found_error" | "request_too_large" => ErrorKind::BadRequest,
        _ => return None,
    })
}

/// The `error` word of an assistant API-error line or an `api_retry` line.
fn kind_of_error_word(w: &str) -> Option<ErrorKind> {
    Some(match w {
        "authentication_failed" => ErrorKind::Auth,
        "rate_limit" => ErrorKind::RateLimit,
        "overloaded" => ErrorKind::Overloaded,
        "server_error" => ErrorKind::ServerError,
        "invalid_request" => ErrorKind::BadRequest,
        _ => return None,
    })
}

/// The last resort: the CLI's wording.
fn kind_of_text(s: &str) -> Option<ErrorKind> {
    if auth_text(s) {
        return Some(ErrorKind::Auth);
    }
    const NETWORK: [&str; 5] = [
        "Can't reach the API server",
        "ECONNREFUSED",
        "EAI_AGAIN",
        "ENOTFOUND",
        "Connection refused",
    ];
    NETWORK
        .iter()
        .any(|m| s.contains(m))
        .then_some(ErrorKind::Network)
}

/// The kind of failure an `api_retry` line retries. A null `error_status` means no HTTP
/// answer came back at all (refused connection, DNS): a network failure.
fn retry_kind(status: Option<u16>, word: Option<&str>) -> ErrorKind {
    if let Some(k) = status.and_then(ErrorKind::from_http_status) {
        return k;
    }
    if let Some(k) = word.and_then(kind_of_error_word) {
        return k;
    }
    if status.is_none() {
        ErrorKind::Network
    } else {
        ErrorKind::Unknown
    }
}

/// What a `resume` of an unknown session prints (stderr and `errors[]`).
const UNKNOWN_SESSION: &str = "No conversation found with session ID";

/// What claude prints when asked to bypass permissions as root without `IS_SANDBOX=1`.
const ROOT_BYPASS: &str = "cannot be used with root/sudo privileges";

/// The run's verdict from its result line: `Ok` on success, else the kind and message.
/// `assistant` holds the facts of the run's last API-error assistant line, if any.
fn verdict(
    r: &ResultLine,
    assistant: Option<&ApiErrorFacts>,
    stderr: &str,
) -> Result<(), (ErrorKind, String)> {
    let reason = r.terminal_reason.as_deref();
    let subtype = r.subtype.as_deref().unwrap_or("");
    let is_error = r.is_error.unwrap_or(subtype.starts_with("error"));
    if !is_error && matches!(reason, None | Some("completed")) && !subtype.starts_with("error") {
        return Ok(());
    }
    let errors = r.errors_text();
    let message = |fallback: String| {
        errors
            .clone()
            .or_else(|| r.result.clone().filter(|s| !s.trim().is_empty()))
            .unwrap_or(fallback)
    };
    if reason == Some("max_turns") || subtype == "error_max_turns" {
        return Err((
            ErrorKind::MaxTurns,
            message("claude stopped at its turn limit".to_owned()),
        ));
    }
    if reason == Some("budget_exhausted") || subtype == "error_max_budget_usd" {
        return Err((
            ErrorKind::Budget,
            message("claude stopped at its dollar budget".to_owned()),
        ));
    }
    let api = reason == Some("api_error")
        || r.api_error_status.is_some()
        || r.api_error.is_some()
        || r.api_error_type.is_some();
    if api {
        let text = r
            .result
            .clone()
            .or_else(|| errors.clone())
            .or_else(|| assistant.map(|a| a.text.clone()))
            .unwrap_or_else(|| "API error".to_owned());
        let facts = ApiErrorFacts {
            status: r.api_error_status.or(assistant.and_then(|a| a.status)),
            api_error_type: r
                .api_error_type
                .clone()
                .or_else(|| assistant.and_then(|a| a.api_error_type.clone())),
            api_error: r
                .api_error
                .clone()
                .or_else(|| assistant.and_then(|a| a.api_error.clone())),
            error_word: assistant.and_then(|a| a.error_word.clone()),
            text: text.clone(),
        };
        return Err((facts.classify(), text));
    }
    let fallback = format!(
        "claude reported an error (subtype {subtype}, terminal_reason {})",
        reason.unwrap_or("null")
    );
    let msg = message(fallback);
    if msg.contains(UNKNOWN_SESSION) || stderr.contains(UNKNOWN_SESSION) {
        return Err((ErrorKind::InvalidResume, msg));
    }
    Err((ErrorKind::Unknown, msg))
}

// ---------------------------------------------------------------------------------------
// Events -> result
// ---------------------------------------------------------------------------------------

/// Usage rebuilt for one message from partial-message events (`message_start` gives the
/// input side, `message_delta` the final output count).
#[derive(Debug, Default, Clone)]
struct StreamedMessage {
    model: Option<String>,
    usage: CanonicalUsage,
}

/// What the result builder reads from a run's events (re-reading their raw lines where
/// the neutral events have no field for it).
#[derive(Debug, Default)]
struct Scan {
    /// The `system/init` line.
    init: Option<Value>,
    /// The last `result` line and its raw JSON.
    result: Option<(ResultLine, Value)>,
    /// The last `Final` event's kind (when its raw line cannot be re-read).
    final_kind: Option<EventKind>,
    /// The last API-error assistant line.
    api_error: Option<ApiErrorFacts>,
    /// Ids of the model's responses, in order of appearance.
    message_ids: Vec<String>,
    /// Per-message usage from partial-message events.
    streamed: BTreeMap<String, StreamedMessage>,
    /// `system/api_retry` lines seen.
    retries: u32,
    /// Raw pointers of lines that were API errors (their text is not an answer).
    error_lines: BTreeSet<usize>,
}

/// A line's identity (events of one line share its `Arc`).
fn line_id(raw: &Arc<str>) -> usize {
    Arc::as_ptr(raw) as *const u8 as usize
}

impl Scan {
    fn of(events: &[AgentEvent]) -> Scan {
        let mut s = Scan::default();
        let mut seen_ids = BTreeSet::new();
        let mut last_line: Option<usize> = None;
        let mut last_started: Option<String> = None;
        for ev in events {
            match &ev.kind {
                EventKind::Retry { .. } => s.retries += 1,
                EventKind::Final { .. } => s.final_kind = Some(ev.kind.clone()),
                EventKind::Error { .. } => {
                    s.error_lines.insert(line_id(&ev.raw));
                }
                EventKind::SessionStarted { .. }
                | EventKind::UserMessage { .. }
                | EventKind::AssistantText { .. }
                | EventKind::Thinking { .. }
                | EventKind::ToolCall { .. }
                | EventKind::ToolResult { .. }
                | EventKind::Usage { .. }
                | EventKind::RateLimit { .. }
                | EventKind::PermissionDenied { .. }
                | EventKind::Log { .. }
                | EventKind::Question { .. }
                | EventKind::Protocol { .. }
                | EventKind::Unknown { .. } => {}
            }
            // Re-read each line once, and only the lines that carry what we need.
            let id = line_id(&ev.raw);
            if ev.raw.is_empty() || last_line == Some(id) {
                continue;
            }
            last_line = Some(id);
            let wanted = match &ev.kind {
                EventKind::SessionStarted { .. } => s.init.is_none(),
                EventKind::Final { .. }
                | EventKind::AssistantText { .. }
                | EventKind::Thinking { .. }
                | EventKind::ToolCall { .. }
                | EventKind::Error { .. }
                | EventKind::Unknown { .. } => true,
                EventKind::UserMessage { .. }
                | EventKind::ToolResult { .. }
                | EventKind::Usage { .. }
                | EventKind::Retry { .. }
                | EventKind::RateLimit { .. }
                | EventKind::PermissionDenied { .. }
                | EventKind::Log { .. }
                | EventKind::Question { .. }
                | EventKind::Protocol { .. } => false,
            };
            if !wanted {
                continue;
            }
            s.read_line(&ev.raw, &mut seen_ids, &mut last_started);
        }
        s
    }

    /// Reads what the result needs from one line: straight from the text where it can,
    /// else through a `Value` (a line that is not JSON is skipped either way).
    fn read_line(
        &mut self,
        raw: &str,
        seen: &mut BTreeSet<String>,
        last_started: &mut Option<String>,
    ) {
        if self.read_line_fast(raw, seen, last_started).is_none() {
            self.read_line_value(raw, seen, last_started);
        }
    }

    /// The fast path of [`Scan::read_line`] (see `common::strict`); `None` (having read
    /// nothing) leaves the line to the `Value` path.
    fn read_line_fast(
        &mut self,
        raw: &str,
        seen: &mut BTreeSet<String>,
        last_started: &mut Option<String>,
    ) -> Option<()> {
        let hint = common::line_type(raw)?;
        match hint.as_ref() {
            "assistant" => {
                let l: ScanAssistantLine<'_> = strict::from_str(raw).ok()?;
                if l.r#type != hint || l.is_api_error_message || l.error.is_some() {
                    // API errors (rare) need the blocks' text: the `Value` path.
                    return None;
                }
                let fields = AssistantErrorFields {
                    error: l.error,
                    is_api_error_message: l.is_api_error_message,
                    api_error_status: l.api_error_status,
                    api_error_type: l.api_error_type,
                    api_error: l.api_error,
                };
                self.read_assistant(
                    l.message.id.as_ref().map(CowStr::as_str),
                    l.message.model.as_ref().map(CowStr::as_str),
                    fields,
                    std::iter::empty(),
                    seen,
                );
            }
            "stream_event" => {
                let l: ScanStreamLine<'_> = strict::from_str(raw).ok()?;
                if l.r#type != hint {
                    return None;
                }
                self.read_stream_event(l.facts(), seen, last_started);
            }
            "system" | "result" => return None,
            other => {
                // Nothing to read from a line of another type, whether or not it is
                // valid JSON: a shallow read (which sees a repeated `type`) is enough.
                if common::shallow_type(raw)?.as_ref() != other {
                    return None;
                }
            }
        }
        Some(())
    }

    /// The `Value` path of [`Scan::read_line`].
    fn read_line_value(
        &mut self,
        raw: &str,
        seen: &mut BTreeSet<String>,
        last_started: &mut Option<String>,
    ) {
        let Ok(v) = serde_json::from_str::<Value>(raw) else {
            return;
        };
        match v.get("type").and_then(Value::as_str) {
            Some("system") if v.get("subtype").and_then(Value::as_str) == Some("init") => {
                self.init = Some(v);
            }
            Some("result") => {
                if let Ok(r) = common::from_value_lenient::<ResultLine>(v.clone()) {
                    self.result = Some((r, v));
                }
            }
            Some("assistant") => {
                let Ok(l) = common::from_value_lenient::<AssistantLine>(v.clone()) else {
                    return;
                };
                let fields = AssistantErrorFields {
                    error: l.error,
                    is_api_error_message: l.is_api_error_message,
                    api_error_status: l.api_error_status,
                    api_error_type: l.api_error_type,
                    api_error: l.api_error,
                };
                self.read_assistant(
                    l.message.id.as_deref(),
                    l.message.model.as_deref(),
                    fields,
                    l.message
                        .content
                        .iter()
                        .filter_map(|b| b.get("text").and_then(Value::as_str)),
                    seen,
                );
            }
            Some("stream_event") => {
                self.read_stream_event(stream_facts(&v), seen, last_started);
            }
            _ => {}
        }
    }

    fn note_message(&mut self, id: &str, seen: &mut BTreeSet<String>) {
        if !id.is_empty() && !seen.contains(id) {
            seen.insert(id.to_owned());
            self.message_ids.push(id.to_owned());
        }
    }

    /// An `assistant` line: its message id (`message.id`, `message.model`), or the facts
    /// of its API error (`texts`: the `text` of its content blocks).
    fn read_assistant<'t>(
        &mut self,
        id: Option<&str>,
        model: Option<&str>,
        l: AssistantErrorFields,
        texts: impl Iterator<Item = &'t str>,
        seen: &mut BTreeSet<String>,
    ) {
        let synthetic = model == Some(SYNTHETIC_MODEL);
        if l.is_api_error_message || l.error.is_some() {
            let text = texts.collect::<Vec<_>>().join("\n");
            self.api_error = Some(ApiErrorFacts {
                status: l.api_error_status,
                api_error_type: l.api_error_type,
                api_error: l.api_error,
                error_word: l.error,
                text,
            });
        } else if !synthetic && let Some(id) = id {
            self.note_message(id, seen);
        }
    }

    fn read_stream_event(
        &mut self,
        facts: StreamFacts<'_>,
        seen: &mut BTreeSet<String>,
        last_started: &mut Option<String>,
    ) {
        match facts {
            StreamFacts::Start { id, model, usage } => {
                if model == Some(SYNTHETIC_MODEL) {
                    return;
                }
                self.note_message(id, seen);
                self.streamed.insert(
                    id.to_owned(),
                    StreamedMessage {
                        model: model.map(str::to_owned),
                        usage,
                    },
                );
                *last_started = Some(id.to_owned());
            }
            StreamFacts::Delta {
                api_message_id,
                output_tokens,
                input_tokens,
            } => {
                let id = api_message_id
                    .map(str::to_owned)
                    .or_else(|| last_started.clone());
                let Some(entry) = id.and_then(|id| self.streamed.get_mut(&id)) else {
                    return;
                };
                // message_delta counts are cumulative for the message.
                if let Some(o) = output_tokens {
                    entry.usage.output_tokens = o;
                }
                if let Some(i) = input_tokens {
                    entry.usage.input_tokens = i;
                }
            }
            StreamFacts::Other => {}
        }
    }

    /// The model: from `system/init`, else the result's `modelUsage`, else as requested.
    fn model(&self, ctx: &ParseContext) -> Option<String> {
        self.init
            .as_ref()
            .and_then(|v| v.get("model"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| {
                self.result
                    .as_ref()
                    .and_then(|(r, _)| r.model_usage.as_ref())
                    .and_then(|m| m.keys().next().cloned())
            })
            .or_else(|| ctx.model.clone())
    }

    /// `request_count`: distinct model responses.
    fn request_count(&self) -> u64 {
        self.message_ids.len() as u64
    }
}

/// What a `stream_event` line tells the result builder.
enum StreamFacts<'a> {
    /// `message_start` of a message with an id.
    Start {
        id: &'a str,
        model: Option<&'a str>,
        /// The input side, from `message.usage` (absent counts as 0).
        usage: CanonicalUsage,
    },
    /// `message_delta`.
    Delta {
        api_message_id: Option<&'a str>,
        output_tokens: Option<u64>,
        input_tokens: Option<u64>,
    },
    /// Nothing the result uses.
    Other,
}

/// The usage of a `message_start`, counted as one request.
fn started_usage(input: u64, output: u64, cache_read: u64, cache_write: u64) -> CanonicalUsage {
    CanonicalUsage {
        input_tokens: input,
        output_tokens: output,
        cache_read,
        cache_write,
        reasoning_tokens: 0,
        request_count: 1,
    }
}

/// The [`StreamFacts`] of a `stream_event` line read as a `Value` (fields of another type
/// read as absent).
fn stream_facts(v: &Value) -> StreamFacts<'_> {
    let Some(event) = v.get("event") else {
        return StreamFacts::Other;
    };
    match event.get("type").and_then(Value::as_str) {
        Some("message_start") => {
            let msg = event.get("message").unwrap_or(&Value::Null);
            let Some(id) = msg.get("id").and_then(Value::as_str) else {
                return StreamFacts::Other;
            };
            let u = msg.get("usage").unwrap_or(&Value::Null);
            StreamFacts::Start {
                id,
                model: msg.get("model").and_then(Value::as_str),
                usage: started_usage(
                    common::u64_at(u, "input_tokens"),
                    common::u64_at(u, "output_tokens"),
                    common::u64_at(u, "cache_read_input_tokens"),
                    common::u64_at(u, "cache_creation_input_tokens"),
                ),
            }
        }
        Some("message_delta") => {
            let u = event.get("usage").unwrap_or(&Value::Null);
            StreamFacts::Delta {
                api_message_id: v.get("api_message_id").and_then(Value::as_str),
                output_tokens: u.get("output_tokens").and_then(Value::as_u64),
                input_tokens: u.get("input_tokens").and_then(Value::as_u64),
            }
        }
        _ => StreamFacts::Other,
    }
}

/// An `assistant` line as the result builder reads it (fast path): every field of
/// [`AssistantLine`]; the blocks are read and dropped (only an API error, which goes the
/// `Value` path, needs their text).
#[derive(Deserialize)]
struct ScanAssistantLine<'a> {
    #[serde(borrow)]
    r#type: Cow<'a, str>,
    #[serde(default, borrow)]
    message: ScanAssistantMessage<'a>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    is_api_error_message: bool,
    #[serde(default)]
    api_error_status: Option<u16>,
    #[serde(default)]
    api_error_type: Option<String>,
    #[serde(default)]
    api_error: Option<String>,
    /// Read for its shape only (the `Value` path requires it).
    #[serde(default, deserialize_with = "null_default", rename = "tool_use_meta")]
    _tool_use_meta: Vec<ToolUseMeta>,
}

/// `assistant.message` for the result builder.
#[derive(Default, Deserialize)]
#[serde(default)]
struct ScanAssistantMessage<'a> {
    #[serde(borrow)]
    id: Option<CowStr<'a>>,
    #[serde(borrow)]
    model: Option<CowStr<'a>>,
    /// Read for its shape only (an array or null, as in [`AssistantMessage`]).
    #[serde(deserialize_with = "null_default", rename = "content")]
    _content: Vec<serde::de::IgnoredAny>,
}

/// A `stream_event` line as the result builder reads it (fast path).
#[derive(Deserialize)]
struct ScanStreamLine<'a> {
    #[serde(borrow)]
    r#type: Cow<'a, str>,
    #[serde(default, borrow)]
    event: Option<ScanStreamEvent<'a>>,
    #[serde(default, borrow)]
    api_message_id: Option<CowStr<'a>>,
}

/// `stream_event.event` for the result builder.
#[derive(Deserialize)]
struct ScanStreamEvent<'a> {
    #[serde(default, borrow)]
    r#type: Option<CowStr<'a>>,
    #[serde(default, borrow)]
    message: Option<ScanStreamMessage<'a>>,
    #[serde(default)]
    usage: Option<ScanUsage>,
}

/// `stream_event.event.message` (of a `message_start`).
#[derive(Deserialize)]
struct ScanStreamMessage<'a> {
    #[serde(default, borrow)]
    id: Option<CowStr<'a>>,
    #[serde(default, borrow)]
    model: Option<CowStr<'a>>,
    #[serde(default)]
    usage: Option<ScanUsage>,
}

/// The token counts of a `message_start` or `message_delta`.
#[derive(Default, Deserialize)]
#[serde(default)]
struct ScanUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
}

impl ScanStreamLine<'_> {
    fn facts(&self) -> StreamFacts<'_> {
        let Some(event) = &self.event else {
            return StreamFacts::Other;
        };
        match event.r#type.as_ref().map(CowStr::as_str) {
            Some("message_start") => {
                let Some(msg) = &event.message else {
                    return StreamFacts::Other;
                };
                let Some(id) = &msg.id else {
                    return StreamFacts::Other;
                };
                let u = msg.usage.as_ref();
                let n = |f: fn(&ScanUsage) -> Option<u64>| u.and_then(f).unwrap_or(0);
                StreamFacts::Start {
                    id: id.as_str(),
                    model: msg.model.as_ref().map(CowStr::as_str),
                    usage: started_usage(
                        n(|u| u.input_tokens),
                        n(|u| u.output_tokens),
                        n(|u| u.cache_read_input_tokens),
                        n(|u| u.cache_creation_input_tokens),
                    ),
                }
            }
            Some("message_delta") => StreamFacts::Delta {
                api_message_id: self.api_message_id.as_ref().map(CowStr::as_str),
                output_tokens: event.usage.as_ref().and_then(|u| u.output_tokens),
                input_tokens: event.usage.as_ref().and_then(|u| u.input_tokens),
            },
            _ => StreamFacts::Other,
        }
    }
}

/// Usage, cost and session totals of a run.
#[derive(Debug)]
struct Accounting {
    usage: CanonicalUsage,
    cost: Cost,
    totals: Option<SessionTotals>,
}

impl ClaudeProvider {
    /// Usage, cost and session totals (see the module docs for the rules).
    fn accounting(&self, scan: &Scan, ctx: &ParseContext, model: Option<&str>) -> Accounting {
        let requests = scan.request_count();
        let streamed: Option<CanonicalUsage> = (!scan.streamed.is_empty()).then(|| {
            scan.streamed
                .values()
                .fold(CanonicalUsage::default(), |acc, m| acc + m.usage)
        });
        let estimate_one = |usage: &CanonicalUsage| {
            Cost::estimated(model.and_then(|m| self.config.prices.estimate([(m, usage)])))
        };
        let Some((r, _)) = &scan.result else {
            // No result line: rebuild from partial messages, or say we do not know.
            return match streamed {
                Some(mut usage) => {
                    usage.request_count = requests;
                    let per_model: Vec<(String, CanonicalUsage)> = scan
                        .streamed
                        .values()
                        .map(|m| {
                            let name = m.model.clone().or(model.map(str::to_owned));
                            (name.unwrap_or_default(), m.usage)
                        })
                        .collect();
                    let usd = self
                        .config
                        .prices
                        .estimate(per_model.iter().map(|(m, u)| (m.as_str(), u)));
                    Accounting {
                        usage,
                        cost: Cost::estimated(usd),
                        totals: None,
                    }
                }
                None => Accounting {
                    usage: CanonicalUsage {
                        request_count: requests,
                        ..CanonicalUsage::default()
                    },
                    cost: Cost::unknown(),
                    totals: None,
                },
            };
        };
        let mut usage = r
            .usage
            .as_ref()
            .map(ResultUsage::canonical)
            .or_else(|| {
                r.model_usage_since_last_result
                    .as_ref()
                    .map(sum_model_usage)
            })
            .or(streamed)
            .unwrap_or_default();
        usage.request_count = requests;
        let prior = ctx.prior.as_ref();
        let since = r
            .model_usage_since_last_result
            .as_ref()
            .and_then(sum_model_cost);
        let cost = match (since, r.total_cost_usd, prior.and_then(|p| p.cost_usd)) {
            (Some(run), _, _) => Cost::reported(run),
            // A prior above the session total cannot be this session's: keep the total.
            (None, Some(total), Some(before)) if total >= before => Cost::reported(total - before),
            (None, Some(total), _) => Cost::reported(total),
            (None, None, _) => estimate_one(&usage),
        };
        let totals = r.model_usage.as_ref().map(|m| {
            let mut u = sum_model_usage(m);
            u.request_count = prior.map_or(0, |p| p.usage.request_count) + requests;
            SessionTotals {
                usage: u,
                cost_usd: r.total_cost_usd,
            }
        });
        Accounting {
            usage,
            cost,
            totals,
        }
    }

    fn build_result(
        &self,
        events: &[AgentEvent],
        stderr: &str,
        exit_code: Option<i32>,
        ctx: &ParseContext,
    ) -> SessionResult {
        let b = common::basics(events);
        let mut r = common::base_result(&self.name, &b);
        r.exit_code = exit_code;
        let scan = Scan::of(events);
        r.model = scan.model(ctx);
        if r.session_id.is_none() {
            r.session_id = scan.result.as_ref().and_then(|(l, _)| l.session_id.clone());
        }
        let acc = self.accounting(&scan, ctx, r.model.as_deref());
        r.canonical_usage = acc.usage;
        r.set_cost(acc.cost);
        r.session_totals = acc.totals;
        r.provider_data = provider_data(&scan);

        if let Some((line, _)) = &scan.result {
            r.num_turns = line.num_turns;
            r.duration_ms = line.duration_ms.unwrap_or(0);
            match verdict(line, scan.api_error.as_ref(), stderr) {
                Ok(()) => {
                    r.succeed();
                    r.response = line.result.clone().unwrap_or_default();
                }
                Err((kind, message)) => {
                    let api_error = line.terminal_reason.as_deref() == Some("api_error");
                    if !api_error {
                        // An API error's text is the CLI's, not the agent's answer.
                        r.response = line.result.clone().unwrap_or_default();
                    }
                    let message = match kind {
                        ErrorKind::Auth => self.auth_message(&message),
                        ErrorKind::RateLimit
                        | ErrorKind::Overloaded
                        | ErrorKind::ServerError
                        | ErrorKind::BadRequest
                        | ErrorKind::Network
                        | ErrorKind::MaxTurns
                        | ErrorKind::Budget
                        | ErrorKind::InvalidResume
                        | ErrorKind::Permission
                        | ErrorKind::Timeout
                        | ErrorKind::Cancelled
                        | ErrorKind::NotInstalled
                        | ErrorKind::Crashed
                        | ErrorKind::Protocol
                        | ErrorKind::Unknown => message,
                    };
                    if kind == ErrorKind::InvalidResume {
                        // The id names no session: do not offer it for a later resume.
                        r.session_id = b.session_id.clone();
                        r.session_totals = None;
                    }
                    r.fail(kind, message);
                }
            }
            return r;
        }
        if let Some(EventKind::Final {
            success,
            text,
            error_kind,
            error,
            num_turns,
            duration_ms,
            ..
        }) = &scan.final_kind
        {
            // A final event whose line could not be re-read (made by hand, not by claude).
            r.num_turns = *num_turns;
            r.duration_ms = duration_ms.unwrap_or(0);
            r.response = text.clone().unwrap_or_default();
            if *success {
                r.succeed();
            } else {
                r.fail(
                    error_kind.unwrap_or(ErrorKind::Unknown),
                    error
                        .clone()
                        .unwrap_or_else(|| "claude reported an error".into()),
                );
            }
            return r;
        }

        // No result line.
        r.response = partial_response(events, &scan);
        if common::looks_foreign(events) && !claude_unknowns(events) {
            r.fail(ErrorKind::Protocol, foreign_message(events));
            return r;
        }
        let auth = self.detect_auth_error(stderr, exit_code, events);
        if auth.is_none()
            && let Some(line) = stderr
                .lines()
                .map(str::trim)
                .find(|l| l.contains(ROOT_BYPASS))
        {
            r.fail(
                ErrorKind::Permission,
                format!(
                    "{line} (claude refuses to bypass permissions as root unless IS_SANDBOX=1 \
                     is set; aicli sets it for root runs in bypass mode: run as a normal user, \
                     inside a container, or with another permission mode)"
                ),
            );
            return r;
        }
        if auth.is_none()
            && let Some(line) = stderr
                .lines()
                .map(str::trim)
                .find(|l| l.contains(UNKNOWN_SESSION))
        {
            r.fail(ErrorKind::InvalidResume, line.to_owned());
            return r;
        }
        let (kind, message) =
            common::classify_without_final("Claude Code", &b, stderr, exit_code, auth);
        r.fail(kind, message);
        r
    }
}

/// Whether some unknown line is of a type claude prints (so the stream is not foreign).
fn claude_unknowns(events: &[AgentEvent]) -> bool {
    events.iter().any(|e| match &e.kind {
        EventKind::Unknown {
            vendor_type: Some(t),
        } => {
            let head = t.split('/').next().unwrap_or_default();
            CLAUDE_LINE_TYPES.contains(&head)
        }
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
        | EventKind::Final { .. }
        | EventKind::Log { .. }
        | EventKind::Question { .. }
        | EventKind::Protocol { .. }
        | EventKind::Unknown { vendor_type: None } => false,
    })
}

/// Says what a foreign stream looked like.
fn foreign_message(events: &[AgentEvent]) -> String {
    let mut types: Vec<&str> = Vec::new();
    let mut count = 0;
    for e in events {
        if let EventKind::Unknown { vendor_type } = &e.kind {
            count += 1;
            let t = vendor_type.as_deref().unwrap_or("(no type)");
            if !types.contains(&t) && types.len() < 5 {
                types.push(t);
            }
        }
    }
    format!(
        "the stream is not Claude Code stream-json: {count} JSON lines of types claude does \
         not print ({}); was it recorded from another CLI?",
        types.join(", ")
    )
}

/// The agent's text of a run without a result line: whole text blocks (not API-error
/// texts), else the streamed deltas.
fn partial_response(events: &[AgentEvent], scan: &Scan) -> String {
    let blocks: Vec<&AgentEvent> = events
        .iter()
        .filter(|e| {
            matches!(e.kind, EventKind::AssistantText { delta: false, .. })
                && !scan.error_lines.contains(&line_id(&e.raw))
        })
        .collect();
    if !blocks.is_empty() {
        return common::assistant_text_of(blocks);
    }
    common::assistant_text_of(
        events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::AssistantText { delta: true, .. })),
    )
}

/// Vendor facts with no neutral field, under the vendor's own key names; absent and null
/// facts are left out.
fn provider_data(scan: &Scan) -> Value {
    let mut m = Map::new();
    let mut put = |key: &str, v: Option<&Value>| {
        if let Some(v) = v.filter(|v| !v.is_null()) {
            m.insert(key.to_owned(), v.clone());
        }
    };
    if let Some((_, v)) = &scan.result {
        for key in [
            "subtype",
            "terminal_reason",
            "stop_reason",
            "is_error",
            "api_error_status",
            "api_error_type",
            "api_error",
            "errors",
            "permission_denials",
            "total_cost_usd",
            "duration_api_ms",
            "modelUsage",
            "model_usage_since_last_result",
        ] {
            put(key, v.get(key));
        }
    }
    if let Some(word) = scan.api_error.as_ref().and_then(|a| a.error_word.clone()) {
        put("assistant_error", Some(&Value::String(word)));
    }
    if let Some(init) = &scan.init {
        for key in ["permissionMode", "apiKeySource"] {
            put(key, init.get(key));
        }
        put(
            "mcp_servers",
            init.get("mcp_servers")
                .filter(|v| v.as_array().is_some_and(|a| !a.is_empty())),
        );
    }
    if scan.retries > 0 {
        put("api_retries", Some(&Value::from(scan.retries)));
    }
    if m.is_empty() {
        Value::Null
    } else {
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use pretty_assertions::assert_eq;
    use serde_json::{Value, json};

    use super::*;
    use crate::config::AiCliConfig;
    use crate::provider::BinaryLocation;
    use crate::replay;
    use crate::result::SessionStatus;
    use crate::task::TaskSpec;
    use crate::usage::CostSource;

    // -- helpers --------------------------------------------------------------------

    fn config() -> ProviderConfig {
        AiCliConfig::builtin().unwrap().providers["claude"].clone()
    }

    fn provider() -> ClaudeProvider {
        ClaudeProvider::new("claude", config())
    }

    /// A recorded transcript from `fixtures/claude/`.
    struct Fixture {
        stdout: &'static [u8],
        stderr: &'static str,
        exit: &'static str,
        meta: &'static str,
    }

    macro_rules! fixture {
        ($name:literal) => {
            Fixture {
                stdout: include_bytes!(concat!("../../fixtures/claude/", $name, ".ndjson")),
                stderr: include_str!(concat!("../../fixtures/claude/", $name, ".stderr")),
                exit: include_str!(concat!("../../fixtures/claude/", $name, ".exit")),
                meta: include_str!(concat!("../../fixtures/claude/", $name, ".meta.json")),
            }
        };
    }

    impl Fixture {
        fn exit_code(&self) -> Option<i32> {
            self.exit.trim().parse().ok()
        }

        fn context(&self) -> ParseContext {
            let meta: Value = serde_json::from_str(self.meta).unwrap();
            serde_json::from_value(meta["context"].clone()).unwrap()
        }

        fn run(&self) -> (Vec<AgentEvent>, SessionResult) {
            replay::replay(
                &provider(),
                self.stdout,
                self.stderr,
                self.exit_code(),
                &self.context(),
            )
        }

        /// The lines, without the ones for which `drop` is true.
        fn lines_without(&self, drop: impl Fn(&str) -> bool) -> String {
            let text = std::str::from_utf8(self.stdout).unwrap();
            text.lines()
                .filter(|l| !drop(l))
                .map(|l| format!("{l}\n"))
                .collect()
        }
    }

    fn kinds(events: &[AgentEvent]) -> Vec<EventKind> {
        events.iter().map(|e| e.kind.clone()).collect()
    }

    /// The facts of a result every scenario test compares whole.
    #[derive(Debug, Clone, PartialEq)]
    struct Facts {
        status: SessionStatus,
        error_kind: Option<ErrorKind>,
        error: Option<String>,
        response: String,
        session_id: Option<String>,
        model: Option<String>,
        cost_usd: Option<f64>,
        cost_source: CostSource,
        usage: CanonicalUsage,
        num_turns: Option<u32>,
        tool_calls: u32,
        exit_code: Option<i32>,
        protocol_errors: u32,
    }

    impl Facts {
        fn of(r: &SessionResult) -> Facts {
            Facts {
                status: r.status,
                error_kind: r.error_kind,
                error: r.error.clone(),
                response: r.response.clone(),
                session_id: r.session_id.clone(),
                model: r.model.clone(),
                cost_usd: r.cost_usd,
                cost_source: r.cost_source,
                usage: r.canonical_usage,
                num_turns: r.num_turns,
                tool_calls: r.tool_calls,
                exit_code: r.exit_code,
                protocol_errors: r.protocol_errors,
            }
        }

        /// A successful run of the fake API's one-request answer.
        fn ok(session: &str, response: &str, usage: CanonicalUsage, cost: f64) -> Facts {
            Facts {
                status: SessionStatus::Succeeded,
                error_kind: None,
                error: None,
                response: response.to_owned(),
                session_id: Some(session.to_owned()),
                model: Some("claude-opus-5-5".to_owned()),
                cost_usd: Some(cost),
                cost_source: CostSource::Reported,
                usage,
                num_turns: Some(1),
                tool_calls: 0,
                exit_code: Some(0),
                protocol_errors: 0,
            }
        }

        /// A failed run.
        fn failed(kind: ErrorKind, error: &str) -> Facts {
            Facts {
                status: SessionStatus::Failed,
                error_kind: Some(kind),
                error: Some(error.to_owned()),
                response: String::new(),
                session_id: None,
                model: None,
                cost_usd: None,
                cost_source: CostSource::Unknown,
                usage: CanonicalUsage::default(),
                num_turns: None,
                tool_calls: 0,
                exit_code: Some(1),
                protocol_errors: 0,
            }
        }
    }

    fn usage(i: u64, o: u64, cr: u64, cw: u64, requests: u64) -> CanonicalUsage {
        CanonicalUsage {
            input_tokens: i,
            output_tokens: o,
            cache_read: cr,
            cache_write: cw,
            reasoning_tokens: 0,
            request_count: requests,
        }
    }

    /// What the fake API bills per request: 12 in, 7 out, 56 cache read, 34 cache write.
    fn per_request(n: u64) -> CanonicalUsage {
        usage(12 * n, 7 * n, 56 * n, 34 * n, n)
    }

    const TOOLS: [&str; 22] = [
        "Task",
        "Bash",
        "CronCreate",
        "CronDelete",
        "CronList",
        "Edit",
        "EnterWorktree",
        "ExitWorktree",
        "ListAgents",
        "Monitor",
        "NotebookEdit",
        "Read",
        "ReportFindings",
        "ScheduleWakeup",
        "SendMessage",
        "Skill",
        "TaskStop",
        "ToolSearch",
        "WebFetch",
        "WebSearch",
        "Workflow",
        "Write",
    ];

    fn text(t: &str) -> EventKind {
        EventKind::AssistantText {
            text: t.to_owned(),
            delta: false,
        }
    }

    fn bash_echo(id: &str, description: &str) -> EventKind {
        EventKind::ToolCall {
            id: id.to_owned(),
            name: "Bash".to_owned(),
            input: json!({"command": "echo hi", "description": description}),
            mcp_server: None,
        }
    }

    fn tool_result(id: &str, output: &str, is_error: bool) -> EventKind {
        EventKind::ToolResult {
            id: id.to_owned(),
            name: None,
            output: output.to_owned(),
            is_error,
            exit_code: None,
        }
    }

    // -- scenario families, from the real transcripts ---------------------------------

    #[test]
    fn plain_text_run() {
        let (events, r) = fixture!("text").run();
        assert_eq!(
            kinds(&events),
            vec![
                EventKind::SessionStarted {
                    session_id: "20d19ac2-06fa-4ed4-8c4f-6e8abb872002".into(),
                    model: Some("claude-opus-5-5".into()),
                    cwd: Some("/workspace/demo".into()),
                    tools: TOOLS.iter().map(|t| t.to_string()).collect(),
                    mcp_servers: vec![],
                    cli_version: Some("2.1.332".into()),
                },
                text("Hello from the fake Anthropic API."),
                EventKind::Final {
                    success: true,
                    text: Some("Hello from the fake Anthropic API.".into()),
                    error_kind: None,
                    error: None,
                    usage: Some(usage(12, 7, 56, 34, 0)),
                    cost_usd: Some(0.0003692),
                    num_turns: Some(1),
                    duration_ms: Some(203),
                },
            ]
        );
        assert_eq!(
            Facts::of(&r),
            Facts::ok(
                "20d19ac2-06fa-4ed4-8c4f-6e8abb872002",
                "Hello from the fake Anthropic API.",
                per_request(1),
                0.0003692
            )
        );
        assert_eq!(r.cli_version.as_deref(), Some("2.1.332"));
        assert_eq!(r.duration_ms, 203);
        assert_eq!(
            r.session_totals,
            Some(SessionTotals {
                usage: per_request(1),
                cost_usd: Some(0.0003692)
            })
        );
        assert_eq!(r.provider_data["terminal_reason"], json!("completed"));
        assert_eq!(r.provider_data["apiKeySource"], json!("ANTHROPIC_API_KEY"));
        assert!(provider().is_final_event(&events[2]));
    }

    #[test]
    fn bash_allowed_runs_the_command() {
        let (events, r) = fixture!("bash_allowed").run();
        assert_eq!(
            kinds(&events)[1..],
            [
                text("I will run echo."),
                bash_echo("toolu_fakec1c77acfee3947a1", "Print hi"),
                tool_result("toolu_fakec1c77acfee3947a1", "hi", false),
                text("The tool returned: hi"),
                EventKind::Final {
                    success: true,
                    text: Some("The tool returned: hi".into()),
                    error_kind: None,
                    error: None,
                    usage: Some(usage(24, 14, 112, 68, 0)),
                    cost_usd: Some(0.0007384),
                    num_turns: Some(2),
                    duration_ms: Some(266),
                },
            ]
        );
        // The text and the tool call of one message are two lines with one message id.
        assert_eq!(
            Facts::of(&r),
            Facts {
                num_turns: Some(2),
                tool_calls: 1,
                ..Facts::ok(
                    "55e98bea-4c3c-4d63-9536-e9e8a28a0793",
                    "The tool returned: hi",
                    per_request(2),
                    0.0007384
                )
            }
        );
    }

    #[test]
    fn bash_denied_in_default_mode_is_a_denial_not_a_failure() {
        let (events, r) = fixture!("bash_write_default_perms").run();
        let denial = "touch in '/workspace/demo/created_by_claude.txt' needs approval. The path is inside the working directories for this session ('/workspace/demo'), and Claude Code asks before a shell command creates, changes or removes files there.";
        assert_eq!(
            kinds(&events)[3..5],
            [
                EventKind::PermissionDenied {
                    tool: "Bash".into(),
                    tool_call_id: Some("toolu_fakeeddf1e23c0fd4f63".into()),
                    message: denial.into(),
                },
                tool_result("toolu_fakeeddf1e23c0fd4f63", denial, true),
            ]
        );
        assert_eq!(r.status, SessionStatus::Succeeded);
        assert_eq!(
            r.provider_data["permission_denials"],
            json!([{
                "tool_name": "Bash",
                "tool_use_id": "toolu_fakeeddf1e23c0fd4f63",
                "tool_input": {"command": "touch created_by_claude.txt", "description": "Run it"}
            }])
        );
        // Allowed, the same command runs.
        let (events, r) = fixture!("bash_write_allowed").run();
        assert_eq!(
            kinds(&events)[3],
            tool_result(
                "toolu_fake19f900d5c94c43c5",
                "(Bash completed with no output)",
                false
            )
        );
        assert_eq!(r.provider_data["permission_denials"], json!([]));
    }

    #[test]
    fn permission_denied_without_an_approval_surface() {
        let (events, r) = fixture!("bash_write_permprompts_none").run();
        let EventKind::PermissionDenied {
            tool,
            tool_call_id,
            message,
        } = &events[3].kind
        else {
            panic!("{:?}", events[3].kind)
        };
        assert_eq!(
            (tool.as_str(), tool_call_id.as_deref()),
            ("Bash", Some("toolu_fakeca12a48112304f7d"))
        );
        assert!(message.starts_with("Permission for this tool use was denied."));
        assert_eq!(r.status, SessionStatus::Succeeded);
        assert_eq!(r.tool_calls, 1);
    }

    #[test]
    fn mcp_tool_found_through_tool_search() {
        let (events, r) = fixture!("mcp").run();
        let EventKind::SessionStarted {
            mcp_servers, tools, ..
        } = &events[0].kind
        else {
            panic!("{:?}", events[0].kind)
        };
        assert_eq!(
            mcp_servers,
            &vec![McpServerStatus {
                name: "echo".into(),
                status: "connected".into()
            }]
        );
        assert!(tools.contains(&"mcp__echo__echo".to_owned()));
        assert_eq!(
            kinds(&events)[1..5],
            [
                EventKind::ToolCall {
                    id: "toolu_fake74d52ffcdb7f4b3f".into(),
                    name: "ToolSearch".into(),
                    input: json!({"query": "select:mcp__echo__echo", "max_results": 5}),
                    mcp_server: None,
                },
                tool_result(
                    "toolu_fake74d52ffcdb7f4b3f",
                    r#"[{"type":"tool_reference","tool_name":"mcp__echo__echo"}]"#,
                    false
                ),
                EventKind::ToolCall {
                    id: "toolu_fakee73049f73f324437".into(),
                    name: "echo".into(),
                    input: json!({"text": "ping from fake model"}),
                    mcp_server: Some("echo".into()),
                },
                tool_result(
                    "toolu_fakee73049f73f324437",
                    r#"{"result":"echo: ping from fake model"}"#,
                    false
                ),
            ]
        );
        assert_eq!(
            Facts::of(&r),
            Facts {
                num_turns: Some(3),
                tool_calls: 2,
                ..Facts::ok(
                    "d1450a1b-2b77-42f7-933d-7028314805ee",
                    r#"The MCP tool returned: {"result":"echo: ping from fake model"}"#,
                    per_request(3),
                    0.0011075999999999998
                )
            }
        );
        // Without --allowedTools the MCP call is denied.
        let (events, _) = fixture!("mcp_default_perms").run();
        assert_eq!(
            events[4].kind,
            EventKind::PermissionDenied {
                tool: "mcp__echo__echo".into(),
                tool_call_id: Some("toolu_fakeed0023bffc624f85".into()),
                message:
                    "Claude requested permissions to use mcp__echo__echo, but you haven't granted it yet."
                        .into(),
            }
        );
    }

    /// An API error: the failed run's facts (no tokens, nothing billed).
    fn api_failure(session: &str, kind: ErrorKind, error: &str) -> Facts {
        Facts {
            session_id: Some(session.into()),
            model: Some("claude-opus-5-5".into()),
            cost_usd: Some(0.0),
            cost_source: CostSource::Reported,
            num_turns: Some(1),
            ..Facts::failed(kind, error)
        }
    }

    #[test]
    fn http_errors_are_classified_from_the_status() {
        let cases = [
            (
                fixture!("err400_retries1"),
                "72159acb-27d7-4f30-a11d-9c4e2e191e04",
                ErrorKind::BadRequest,
                400,
                "API Error: 400 messages: text content blocks must be non-empty",
                0,
            ),
            (
                fixture!("err429_retries1"),
                "e527ab59-e9b2-49d1-99c3-ac7701f618cc",
                ErrorKind::RateLimit,
                429,
                "API Error: Request rejected (429) · Number of request tokens has exceeded your per-minute rate limit",
                1,
            ),
            (
                fixture!("err500_retries1"),
                "a94c7647-99a2-496a-94cf-1fd6724462cd",
                ErrorKind::ServerError,
                500,
                "API Error: 500 Internal server error. This is a server-side issue, usually temporary — try again in a moment. If it persists, check your inference gateway (127.0.0.1:8781).",
                1,
            ),
            // The assistant line says `server_error`; the status says overloaded.
            (
                fixture!("err529_retries1"),
                "7933d5ff-845a-4f36-aee0-71584cfddaf3",
                ErrorKind::Overloaded,
                529,
                "API Error: 529 Overloaded. This is a server-side issue, usually temporary — try again in a moment. If it persists, check your inference gateway (127.0.0.1:8781).",
                1,
            ),
        ];
        for (f, session, kind, status, message, retries) in cases {
            let (events, r) = f.run();
            assert_eq!(
                Facts::of(&r),
                api_failure(session, kind, message),
                "{status}"
            );
            let errors: Vec<EventKind> = kinds(&events)
                .into_iter()
                .filter(|k| matches!(k, EventKind::Error { .. }))
                .collect();
            assert_eq!(
                errors,
                vec![EventKind::Error {
                    error_kind: kind,
                    message: message.into(),
                    fatal: true,
                    http_status: Some(status),
                }]
            );
            let retry_events = events
                .iter()
                .filter(|e| matches!(e.kind, EventKind::Retry { .. }))
                .count();
            assert_eq!(retry_events, retries, "{status}");
            assert_eq!(r.provider_data["api_error_status"], json!(status));
        }
    }

    #[test]
    fn a_retry_line_becomes_a_retry_event() {
        let (events, _) = fixture!("err429_retries1").run();
        assert_eq!(
            events[1].kind,
            EventKind::Retry {
                attempt: Some(1),
                max_retries: Some(1),
                delay_ms: Some(515),
                http_status: Some(429),
                error_kind: ErrorKind::RateLimit,
                message: "API request failed (HTTP 429, error rate_limit); retry 1 of 1 in 515 ms"
                    .into(),
            }
        );
    }

    #[test]
    fn a_rejected_key_is_an_auth_failure_that_says_what_to_do() {
        let (events, r) = fixture!("err401_retries1").run();
        let msg = "Invalid API key · Fix external API key: Claude Code is not logged in or its credentials were rejected; run `claude auth login`, or set ANTHROPIC_API_KEY to a valid API key";
        assert_eq!(
            Facts::of(&r),
            api_failure("bc63bf80-24db-4826-95f6-e893cb10d2d0", ErrorKind::Auth, msg)
        );
        let f = fixture!("err401_retries1");
        assert_eq!(
            provider().detect_auth_error(f.stderr, f.exit_code(), &events),
            Some(msg.to_owned())
        );
    }

    #[test]
    fn no_key_is_an_auth_failure_that_says_what_to_do() {
        let f = fixture!("unauth_nokey");
        let (events, r) = f.run();
        let msg = "Not logged in · Please run /login: Claude Code is not logged in or its credentials were rejected; run `claude auth login`, or set ANTHROPIC_API_KEY to a valid API key";
        assert_eq!(
            Facts::of(&r),
            api_failure("4bba3ae2-5856-4a5c-a4b9-049178125ac3", ErrorKind::Auth, msg)
        );
        // The assistant line carries the structured `authentication_failed`.
        assert_eq!(
            kinds(&events)[1..3],
            [
                text("Not logged in · Please run /login"),
                EventKind::Error {
                    error_kind: ErrorKind::Auth,
                    message: "Not logged in · Please run /login".into(),
                    fatal: true,
                    http_status: None,
                },
            ]
        );
        assert_eq!(r.provider_data["apiKeySource"], json!("none"));
        assert_eq!(
            r.provider_data["assistant_error"],
            json!("authentication_failed")
        );
        assert_eq!(
            provider().detect_auth_error(f.stderr, f.exit_code(), &events),
            Some(msg.to_owned())
        );
        // A successful run has no auth error.
        let f = fixture!("text");
        let (events, _) = f.run();
        assert_eq!(
            provider().detect_auth_error(f.stderr, f.exit_code(), &events),
            None
        );
    }

    #[test]
    fn auth_errors_on_stderr_are_found_as_a_last_resort() {
        let msg = provider().detect_auth_error(
            "boom\nInvalid API key · Fix external API key\n",
            Some(1),
            &[],
        );
        assert_eq!(
            msg.as_deref(),
            Some(
                "Invalid API key · Fix external API key: Claude Code is not logged in or its credentials were rejected; run `claude auth login`, or set ANTHROPIC_API_KEY to a valid API key"
            )
        );
        let r = provider().event_to_session_result(
            &[],
            "Invalid API key · Fix external API key\n",
            Some(1),
            &ParseContext::default(),
        );
        assert_eq!(r.error_kind, Some(ErrorKind::Auth));
    }

    #[test]
    fn unreachable_api_is_a_network_failure() {
        let msg =
            "API Error: Connection refused — a firewall or proxy may be blocking it (ECONNREFUSED)";
        let (events, r) = fixture!("conn_refused_default_retries").run();
        assert_eq!(
            Facts::of(&r),
            api_failure(
                "919eee69-cb1e-4470-a802-8ffdce3500db",
                ErrorKind::Network,
                msg
            )
        );
        let retries: Vec<(Option<u32>, ErrorKind, Option<u16>)> = events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::Retry {
                    attempt,
                    error_kind,
                    http_status,
                    ..
                } => Some((*attempt, *error_kind, *http_status)),
                _ => None,
            })
            .collect();
        assert_eq!(
            retries,
            (1..=10)
                .map(|a| (Some(a), ErrorKind::Network, None))
                .collect::<Vec<_>>()
        );
        assert_eq!(r.provider_data["api_error"], json!("connection_failed"));
        assert_eq!(r.provider_data["api_retries"], json!(10));
    }

    #[test]
    fn a_bad_key_without_network_is_a_network_failure_not_auth() {
        // The key is never checked: claude cannot reach the API (EAI_AGAIN).
        let (_, r) = fixture!("badkey_long").run();
        assert_eq!(
            Facts::of(&r),
            api_failure(
                "61121204-eab6-4d8f-9b81-123080e6869c",
                ErrorKind::Network,
                "API Error: Can't reach the API server — check your internet or DNS (EAI_AGAIN)"
            )
        );
        assert_eq!(r.duration_ms, 182_295);
        // Cut by a 90 s timeout (exit 124) during the retries: still network, no cost.
        let (_, r) = fixture!("badkey").run();
        assert_eq!(
            Facts::of(&r),
            Facts {
                session_id: Some("da51e006-4bab-48db-a942-0982071d6c1d".into()),
                model: Some("claude-opus-5-5".into()),
                exit_code: Some(124),
                ..Facts::failed(
                    ErrorKind::Network,
                    "API request failed (no HTTP response, error unknown); retry 7 of 10 in 33504 ms (the CLI ended without a final event, exit code 124)"
                )
            }
        );
    }

    #[test]
    fn max_turns() {
        let (_, r) = fixture!("maxturns1").run();
        assert_eq!(
            Facts::of(&r),
            Facts {
                session_id: Some("8d556cff-4123-4a5b-9f70-e3979d4db8ea".into()),
                model: Some("claude-opus-5-5".into()),
                cost_usd: Some(0.0003692),
                cost_source: CostSource::Reported,
                usage: per_request(1),
                // The CLI counts the turn it refused to start.
                num_turns: Some(2),
                tool_calls: 1,
                ..Facts::failed(ErrorKind::MaxTurns, "Reached maximum number of turns (1)")
            }
        );
        let (_, r) = fixture!("maxturns3").run();
        assert_eq!(
            (r.error_kind, r.error.as_deref(), r.canonical_usage),
            (
                Some(ErrorKind::MaxTurns),
                Some("Reached maximum number of turns (3)"),
                per_request(3)
            )
        );
    }

    #[test]
    fn resume_of_an_unknown_session() {
        let (events, r) = fixture!("resume_unknown_id").run();
        assert_eq!(events.len(), 1);
        // The prior in the fixture's context is above the line's total: the total (0)
        // is this run's cost, not a negative difference.
        assert_eq!(
            Facts::of(&r),
            Facts {
                cost_usd: Some(0.0),
                cost_source: CostSource::Reported,
                num_turns: Some(0),
                ..Facts::failed(
                    ErrorKind::InvalidResume,
                    "No conversation found with session ID: 11111111-2222-3333-4444-555555555555"
                )
            }
        );
        assert_eq!(r.session_totals, None);
    }

    #[test]
    fn a_preset_session_id_is_the_session_id() {
        let (_, r) = fixture!("session_id_preset").run();
        assert_eq!(
            Facts::of(&r),
            Facts::ok(
                "0a0a0a0a-1111-4222-8333-444444444444",
                "This request carried 2 messages.",
                per_request(1),
                0.0003692
            )
        );
    }

    #[test]
    fn partial_messages_give_deltas_and_the_same_result() {
        let f = fixture!("bash_partial");
        let (events, r) = f.run();
        let deltas: Vec<EventKind> = kinds(&events)
            .into_iter()
            .filter(|k| matches!(k, EventKind::AssistantText { delta: true, .. }))
            .collect();
        let d = |t: &str| EventKind::AssistantText {
            text: t.into(),
            delta: true,
        };
        assert_eq!(
            deltas,
            vec![
                d("I "),
                d("will "),
                d("run "),
                d("a "),
                d("command."),
                d("The "),
                d("tool "),
                d("returned: "),
                d("hi")
            ]
        );
        assert_eq!(
            kinds(&events)[1..4],
            [
                EventKind::Unknown {
                    vendor_type: Some("system/status".into())
                },
                EventKind::Unknown {
                    vendor_type: Some("stream_event/message_start".into())
                },
                EventKind::Unknown {
                    vendor_type: Some("stream_event/content_block_start".into())
                },
            ]
        );
        assert_eq!(
            Facts::of(&r),
            Facts {
                num_turns: Some(2),
                tool_calls: 1,
                ..Facts::ok(
                    "195ae492-f15c-45a3-80ba-520f91e85fb5",
                    "The tool returned: hi",
                    per_request(2),
                    0.0007384
                )
            }
        );
        // Without its result line, the usage is rebuilt from the partial messages and
        // the cost estimated from the price table (claude-opus-5-5: 4 / 0.2 / 5 / 20, the
        // CLI's own list price: the estimate equals what the result line reported).
        let cut = f.lines_without(|l| l.contains(r#""type":"result""#));
        let (_, r) = replay::replay(
            &provider(),
            cut.as_bytes(),
            "",
            None,
            &ParseContext::default(),
        );
        let expected_usd = (24.0 * 4.0 + 112.0 * 0.2 + 68.0 * 5.0 + 14.0 * 20.0) / 1e6;
        assert!(
            (expected_usd - 0.0007384_f64).abs() < 1e-12,
            "{expected_usd}"
        );
        assert_eq!(
            Facts::of(&r),
            Facts {
                session_id: Some("195ae492-f15c-45a3-80ba-520f91e85fb5".into()),
                model: Some("claude-opus-5-5".into()),
                response: "I will run a command.\n\nThe tool returned: hi".into(),
                cost_usd: Some(expected_usd),
                cost_source: CostSource::Estimated,
                usage: per_request(2),
                tool_calls: 1,
                exit_code: None,
                ..Facts::failed(
                    ErrorKind::Crashed,
                    "the CLI ended without a final event (killed by a signal)"
                )
            }
        );
    }

    #[test]
    fn other_output_formats() {
        // `--output-format json`: one result object, no assistant lines to count.
        let (_, r) = fixture!("text_json_output").run();
        assert_eq!(
            Facts::of(&r),
            Facts::ok(
                "da575889-df85-4864-94ff-41d11b6832a8",
                "Hello from the fake Anthropic API.",
                per_request(1).saturating_sub(&usage(0, 0, 0, 0, 1)),
                0.0003692
            )
        );
        // Plain text output is not stream-json at all.
        let (_, r) = fixture!("text_plain_output").run();
        assert_eq!(
            Facts::of(&r),
            Facts {
                exit_code: Some(0),
                protocol_errors: 1,
                ..Facts::failed(
                    ErrorKind::Protocol,
                    "no line was a valid Claude Code event (1 malformed or over-long lines; exit code 0)"
                )
            }
        );
        // stream-json without --verbose: the CLI refuses.
        let (_, r) = fixture!("text_no_verbose").run();
        assert_eq!(
            Facts::of(&r),
            Facts::failed(
                ErrorKind::Crashed,
                "the CLI ended without any Claude Code event (exit code 1); stderr: Error: When using --print, --output-format=stream-json requires --verbose"
            )
        );
    }

    #[test]
    fn models_come_from_init() {
        let (_, r) = fixture!("text_model_sonnet").run();
        assert_eq!(
            (r.model.as_deref(), r.cost_usd),
            (Some("claude-sonnet-5-5"), Some(0.0001846))
        );
        let (_, r) = fixture!("text_model_custom").run();
        assert_eq!(r.model.as_deref(), Some("fake-model-x"));
        assert_eq!(r.status, SessionStatus::Succeeded);
    }

    #[test]
    fn root_bypass_without_is_sandbox_is_a_permission_failure() {
        for f in [
            fixture!("bash_write_bypass_root"),
            fixture!("bash_write_skipperms_root"),
        ] {
            let (events, r) = f.run();
            assert!(events.is_empty());
            assert_eq!(r.error_kind, Some(ErrorKind::Permission));
            let e = r.error.unwrap_or_default();
            assert!(
                e.starts_with(
                    "--dangerously-skip-permissions cannot be used with root/sudo privileges"
                ) && e.contains("IS_SANDBOX=1"),
                "{e}"
            );
        }
        let (_, r) = fixture!("bash_write_skipperms_root_issandbox").run();
        assert_eq!(r.status, SessionStatus::Succeeded);
        assert_eq!(
            r.provider_data["permissionMode"],
            json!("bypassPermissions")
        );
    }

    #[test]
    fn canonical_usage_agrees_with_the_result_for_every_fixture() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/claude");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|x| x != "ndjson") {
                continue;
            }
            let stem = path.with_extension("");
            let with = |ext: &str| PathBuf::from(format!("{}.{ext}", stem.display()));
            let meta: Value =
                serde_json::from_slice(&std::fs::read(with("meta.json")).unwrap()).unwrap();
            let ctx: ParseContext = serde_json::from_value(meta["context"].clone()).unwrap();
            let stdout = std::fs::read(&path).unwrap();
            let stderr = std::fs::read_to_string(with("stderr")).unwrap();
            let exit = std::fs::read_to_string(with("exit"))
                .unwrap()
                .trim()
                .parse()
                .ok();
            let p = provider();
            let (events, r) = replay::replay(&p, &stdout, &stderr, exit, &ctx);
            assert_eq!(
                p.canonical_usage(&events, &ctx),
                r.canonical_usage,
                "{}",
                path.display()
            );
            assert!(r.cost_usd.is_none_or(|c| c >= 0.0), "{}", path.display());
            if r.cost_usd.is_none() {
                assert_eq!(r.cost_source, CostSource::Unknown);
            }
            n += 1;
        }
        assert!(n >= 30, "{n}");
    }

    // -- lines the transcripts do not show -------------------------------------------

    #[test]
    fn one_line_with_several_blocks_shares_its_raw_line() {
        let line = r#"{"type":"assistant","message":{"id":"msg_1","model":"claude-opus-5-5","content":[{"type":"thinking","thinking":"Let me think.","signature":"sig"},{"type":"text","text":"Done."},{"type":"tool_use","id":"t1","name":"mcp__aicli__ask_user","input":{"question":"Which?"}},{"type":"redacted_thinking","data":"x"}]},"session_id":"s"}"#;
        let events = provider().parse_event(line);
        assert_eq!(
            kinds(&events),
            vec![
                EventKind::Thinking {
                    text: "Let me think.".into()
                },
                text("Done."),
                EventKind::ToolCall {
                    id: "t1".into(),
                    name: "ask_user".into(),
                    input: json!({"question": "Which?"}),
                    mcp_server: Some("aicli".into()),
                },
                EventKind::Unknown {
                    vendor_type: Some("assistant/redacted_thinking".into())
                },
            ]
        );
        assert!(events.iter().all(|e| Arc::ptr_eq(&e.raw, &events[0].raw)));
        assert_eq!(&*events[0].raw, line);
    }

    #[test]
    fn thinking_deltas_rate_limits_and_unknown_types() {
        let p = provider();
        let thinking = r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Hmm"}},"session_id":"s"}"#;
        assert_eq!(
            kinds(&p.parse_event(thinking)),
            vec![EventKind::Thinking { text: "Hmm".into() }]
        );
        let rate = r#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed_warning","resetsAt":1796000000,"rateLimitType":"five_hour","utilization":0.9},"session_id":"s"}"#;
        assert_eq!(
            kinds(&p.parse_event(rate)),
            vec![EventKind::RateLimit {
                status: "allowed_warning".into(),
                resets_at: Some(1_796_000_000),
                limit_type: Some("five_hour".into()),
            }]
        );
        assert_eq!(
            kinds(&p.parse_event(r#"{"type":"system","subtype":"compact_boundary"}"#)),
            vec![EventKind::Unknown {
                vendor_type: Some("system/compact_boundary".into())
            }]
        );
        assert_eq!(
            kinds(&p.parse_event(r#"{"type":"tool_progress","x":1}"#)),
            vec![EventKind::Unknown {
                vendor_type: Some("tool_progress".into())
            }]
        );
        assert_eq!(
            kinds(&p.parse_event(r#"{"x":1}"#)),
            vec![EventKind::Unknown { vendor_type: None }]
        );
        // A known type with a broken shape is a protocol event naming it.
        assert_eq!(
            kinds(&p.parse_event(r#"{"type":"result","num_turns":"many"}"#)),
            vec![EventKind::Protocol {
                message: "claude `result` does not have the expected shape: invalid type: string \"many\", expected u32".into(),
                line_bytes: 36,
            }]
        );
    }

    /// The text fixture's result line, rewritten as after `--resume`: session-cumulative
    /// `total_cost_usd` and `modelUsage` (two runs), this run in `since`.
    fn resumed_result_line(with_since: bool) -> String {
        let f = fixture!("text");
        let text = std::str::from_utf8(f.stdout).unwrap();
        let last = text.lines().last().unwrap();
        let mut v: Value = serde_json::from_str(last).unwrap();
        v["total_cost_usd"] = json!(0.0007384);
        v["modelUsage"]["claude-opus-5-5"] = json!({
            "inputTokens": 24, "outputTokens": 14, "cacheReadInputTokens": 112,
            "cacheCreationInputTokens": 68, "thinkingTokens": 0, "costUSD": 0.0007384
        });
        if !with_since {
            v.as_object_mut()
                .unwrap()
                .remove("model_usage_since_last_result");
        }
        let lines: Vec<&str> = text.lines().collect();
        format!("{}\n{}\n{v}\n", lines[0], lines[1])
    }

    #[test]
    fn cost_after_resume_is_per_run() {
        let prior = SessionTotals {
            usage: per_request(1),
            cost_usd: Some(0.0003692),
        };
        let ctx = ParseContext {
            model: None,
            prior: Some(prior),
        };
        let p = provider();
        // `model_usage_since_last_result` gives the run's cost.
        let (_, r) = replay::replay(&p, resumed_result_line(true).as_bytes(), "", Some(0), &ctx);
        assert_eq!(
            (r.cost_usd, r.cost_source, r.canonical_usage),
            (Some(0.0003692), CostSource::Reported, per_request(1))
        );
        assert_eq!(
            r.session_totals,
            Some(SessionTotals {
                usage: per_request(2),
                cost_usd: Some(0.0007384)
            })
        );
        // Without it: the cumulative total minus the prior total.
        let (_, r) = replay::replay(&p, resumed_result_line(false).as_bytes(), "", Some(0), &ctx);
        assert_eq!(r.cost_source, CostSource::Reported);
        assert!(
            (r.cost_usd.unwrap_or(-1.0) - 0.0003692).abs() < 1e-12,
            "{:?}",
            r.cost_usd
        );
        // Without either: the total as reported.
        let (_, r) = replay::replay(
            &p,
            resumed_result_line(false).as_bytes(),
            "",
            Some(0),
            &ParseContext::default(),
        );
        assert_eq!(r.cost_usd, Some(0.0007384));
    }

    #[test]
    fn a_result_without_any_cost_is_estimated_and_never_zero() {
        let line = r#"{"type":"result","subtype":"success","is_error":false,"terminal_reason":"completed","result":"ok","session_id":"s","usage":{"input_tokens":1000000,"output_tokens":0,"cache_read_input_tokens":0,"cache_creation_input_tokens":0}}"#;
        let p = provider();
        let ctx = ParseContext {
            model: Some("claude-haiku-5".into()),
            prior: None,
        };
        let r = p.event_to_session_result(&p.parse_event(line), "", Some(0), &ctx);
        assert_eq!(
            (r.cost_usd, r.cost_source),
            (Some(1.0), CostSource::Estimated)
        );
        let ctx = ParseContext {
            model: Some("no-such-model".into()),
            prior: None,
        };
        let r = p.event_to_session_result(&p.parse_event(line), "", Some(0), &ctx);
        assert_eq!((r.cost_usd, r.cost_source), (None, CostSource::Unknown));
    }

    // -- bad input ---------------------------------------------------------------------

    #[test]
    fn a_malformed_line_is_a_protocol_event_and_the_rest_still_counts() {
        let f = fixture!("text");
        let text = std::str::from_utf8(f.stdout).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let stream = format!(
            "{}\n{{\"type\": \"assistant\", oops\n{}\n{}\n",
            lines[0], lines[1], lines[2]
        );
        let (events, r) = replay::replay(
            &provider(),
            stream.as_bytes(),
            "",
            Some(0),
            &ParseContext::default(),
        );
        assert_eq!(
            events[1].kind,
            EventKind::Protocol {
                message: "malformed JSON: key must be a string at line 1 column 23".into(),
                line_bytes: 26,
            }
        );
        assert_eq!(events.len(), 4);
        // The result line's verdict still stands; the bad line is counted.
        assert_eq!(
            Facts::of(&r),
            Facts {
                protocol_errors: 1,
                ..Facts::ok(
                    "20d19ac2-06fa-4ed4-8c4f-6e8abb872002",
                    "Hello from the fake Anthropic API.",
                    per_request(1),
                    0.0003692
                )
            }
        );
    }

    #[test]
    fn invalid_utf8_and_over_long_lines_are_protocol_events() {
        let p = provider();
        let f = fixture!("text");
        let init = std::str::from_utf8(f.stdout)
            .unwrap()
            .lines()
            .next()
            .unwrap();
        let mut stream = format!("{init}\n").into_bytes();
        stream.extend_from_slice(b"{\"type\":\"assistant\",\"x\":\"\xff\xfe\"}\n");
        let events = replay::parse_bytes(&p, &stream, replay::DEFAULT_LINE_CAP);
        assert_eq!(
            events[1].kind,
            EventKind::Protocol {
                message: "line is not valid UTF-8 (invalid byte at offset 25)".into(),
                line_bytes: 29,
            }
        );
        let r = p.event_to_session_result(&events, "", Some(1), &ParseContext::default());
        assert_eq!(
            Facts::of(&r),
            Facts {
                session_id: Some("20d19ac2-06fa-4ed4-8c4f-6e8abb872002".into()),
                model: Some("claude-opus-5-5".into()),
                protocol_errors: 1,
                ..Facts::failed(
                    ErrorKind::Protocol,
                    "the stream ended without a final event after 1 malformed or over-long lines (exit code 1)"
                )
            }
        );

        // A 10 MB line against a 1 MiB cap: one protocol event keeping 4 KiB.
        let mut big = br#"{"type":"user","message":{"content":""#.to_vec();
        big.resize(10 * 1024 * 1024, b'a');
        big.extend_from_slice(b"\"}}");
        let events = replay::parse_line_bytes(&p, &big, 1024 * 1024);
        assert_eq!(events.len(), 1);
        assert_eq!(
            events[0].kind,
            EventKind::Protocol {
                message: format!(
                    "line of {} bytes exceeds the cap of 1048576 bytes; kept its first 4096 bytes",
                    big.len()
                ),
                line_bytes: big.len() as u64,
            }
        );
        assert_eq!(events[0].raw.len(), 4096);
        let r = p.event_to_session_result(&events, "", Some(0), &ParseContext::default());
        assert_eq!(r.error_kind, Some(ErrorKind::Protocol));
    }

    #[test]
    fn an_empty_stream_is_a_crash() {
        let (events, r) = replay::replay(&provider(), b"", "", Some(0), &ParseContext::default());
        assert!(events.is_empty());
        assert_eq!(
            Facts::of(&r),
            Facts {
                exit_code: Some(0),
                ..Facts::failed(
                    ErrorKind::Crashed,
                    "the CLI ended without any Claude Code event (exit code 0)"
                )
            }
        );
    }

    #[test]
    fn a_stream_cut_mid_line_keeps_what_parsed() {
        let f = fixture!("text");
        let cut = &f.stdout[..f.stdout.len() - 200];
        let (events, r) = replay::replay(&provider(), cut, "", None, &ParseContext::default());
        assert_eq!(events.len(), 3);
        assert!(matches!(events[2].kind, EventKind::Protocol { .. }));
        assert_eq!(
            Facts::of(&r),
            Facts {
                session_id: Some("20d19ac2-06fa-4ed4-8c4f-6e8abb872002".into()),
                model: Some("claude-opus-5-5".into()),
                response: "Hello from the fake Anthropic API.".into(),
                usage: usage(0, 0, 0, 0, 1),
                exit_code: None,
                protocol_errors: 1,
                ..Facts::failed(
                    ErrorKind::Protocol,
                    "the stream ended without a final event after 1 malformed or over-long lines (killed by a signal)"
                )
            }
        );
    }

    #[test]
    fn a_stream_without_a_result_line_is_a_crash_with_unknown_cost() {
        let f = fixture!("text");
        let stream = f.lines_without(|l| l.contains(r#""type":"result""#));
        let (events, r) = replay::replay(
            &provider(),
            stream.as_bytes(),
            "",
            Some(0),
            &ParseContext::default(),
        );
        assert_eq!(events.len(), 2);
        assert_eq!(
            Facts::of(&r),
            Facts {
                session_id: Some("20d19ac2-06fa-4ed4-8c4f-6e8abb872002".into()),
                model: Some("claude-opus-5-5".into()),
                response: "Hello from the fake Anthropic API.".into(),
                usage: usage(0, 0, 0, 0, 1),
                exit_code: Some(0),
                ..Facts::failed(
                    ErrorKind::Crashed,
                    "the CLI ended without a final event (exit code 0)"
                )
            }
        );
    }

    #[test]
    fn a_codex_transcript_is_rejected_as_foreign() {
        let codex = br#"{"type":"thread.started","thread_id":"01a22a82-66e8-7cf1-b039-f1b85ea2a9e0"}
{"type":"turn.started"}
{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"Hello from the fake OpenAI Responses API."}}
{"type":"turn.completed","usage":{"input_tokens":120,"cached_input_tokens":30,"cache_write_input_tokens":0,"output_tokens":9,"reasoning_output_tokens":4}}
"#;
        let (events, r) = replay::replay(&provider(), codex, "", Some(0), &ParseContext::default());
        assert_eq!(events.len(), 4);
        assert_eq!(
            Facts::of(&r),
            Facts {
                exit_code: Some(0),
                ..Facts::failed(
                    ErrorKind::Protocol,
                    "the stream is not Claude Code stream-json: 4 JSON lines of types claude does not print (thread.started, turn.started, item.completed, turn.completed); was it recorded from another CLI?"
                )
            }
        );
    }

    // -- argv --------------------------------------------------------------------------

    fn endpoint() -> McpEndpoint {
        McpEndpoint {
            name: "aicli".into(),
            url: "http://127.0.0.1:4000/mcp".into(),
            token: "tok-123".into(),
            tools: vec!["ask_user".into(), "log".into()],
        }
    }

    const MCP_JSON: &str = r#"{"mcpServers":{"aicli":{"type":"http","url":"http://127.0.0.1:4000/mcp","headers":{"Authorization":"Bearer tok-123"}}}}"#;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn argv_with_every_flag() {
        let mut cfg = config();
        cfg.default_model = Some("opus".into());
        cfg.allowed_tools = strings(&["Read"]);
        cfg.disallowed_tools = strings(&["WebFetch"]);
        cfg.extra_args = strings(&["--fallback-model", "sonnet"]);
        cfg.env.insert("A".into(), "1".into());
        let p = ClaudeProvider::new("claude", cfg);
        let task = TaskSpec {
            prompt: "Fix the bug".into(),
            model: Some("sonnet".into()),
            append_system_prompt: Some("Be brief.".into()),
            max_turns: Some(5),
            max_budget_usd: Some(2.0),
            allowed_tools: strings(&["Bash(git log:*)", "Read"]),
            disallowed_tools: strings(&["WebSearch"]),
            permission_mode: Some(PermissionMode::Plan),
            resume_session_id: Some("sess-1".into()),
            extra_args: strings(&["--add-dir", "/x"]),
            env: BTreeMap::from([("A".into(), "override".into()), ("B".into(), "2".into())]),
            cwd: Some("sub".into()),
            ..TaskSpec::default()
        };
        let binary = BinaryLocation::Path("/usr/bin/claude".into());
        let ep = endpoint();
        let ctx = LaunchContext {
            env: &std::collections::BTreeMap::new(),
            task: &task,
            binary: &binary,
            // The engine joins the task's cwd into the workdir it hands over.
            workdir: Path::new("/w/sub"),
            private_dir: Path::new("/p"),
            mcp: Some(&ep),
            budget_remaining_usd: Some(0.5),
            is_root: true,
            in_container: false,
        };
        let c = p.headless_argv(&ctx).unwrap();
        assert_eq!(
            c,
            CommandSpec {
                program: "/usr/bin/claude".into(),
                args: strings(&[
                    "-p",
                    "Fix the bug",
                    "--output-format",
                    "stream-json",
                    "--verbose",
                    "--model",
                    "sonnet",
                    "--max-turns",
                    "5",
                    "--max-budget-usd",
                    "0.5",
                    "--append-system-prompt",
                    "Be brief.",
                    "--permission-mode",
                    "plan",
                    "--resume",
                    "sess-1",
                    "--mcp-config",
                    "/p/claude-mcp.json",
                    "--strict-mcp-config",
                    "--allowedTools",
                    "Read",
                    "Bash(git log:*)",
                    "mcp__aicli__ask_user",
                    "mcp__aicli__log",
                    "--disallowedTools",
                    "WebFetch",
                    "WebSearch",
                    "--fallback-model",
                    "sonnet",
                    "--add-dir",
                    "/x",
                ]),
                env: BTreeMap::from([
                    ("A".into(), "override".into()),
                    ("B".into(), "2".into()),
                    (
                        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
                        "1".into()
                    ),
                ]),
                env_remove: vec![],
                env_clear: false,
                stdin: None,
                cwd: "/w/sub".into(),
                files: vec![FileSpec {
                    path: "/p/claude-mcp.json".into(),
                    contents: MCP_JSON.into(),
                    mode: 0o600,
                }],
                links: vec![],
            }
        );
    }

    fn argv_for(task: &TaskSpec, is_root: bool, remaining: Option<f64>) -> CommandSpec {
        let binary = BinaryLocation::Path("/usr/bin/claude".into());
        let ctx = LaunchContext {
            env: &std::collections::BTreeMap::new(),
            task,
            binary: &binary,
            workdir: Path::new("/w"),
            private_dir: Path::new("/p"),
            mcp: None,
            budget_remaining_usd: remaining,
            is_root,
            in_container: false,
        };
        provider().headless_argv(&ctx).unwrap()
    }

    #[test]
    fn minimal_argv_uses_the_config_defaults() {
        let c = argv_for(&TaskSpec::new("Say hello"), false, None);
        assert_eq!(
            c.args,
            strings(&[
                "-p",
                "Say hello",
                "--output-format",
                "stream-json",
                "--verbose",
                "--permission-mode",
                "acceptEdits"
            ])
        );
        assert_eq!(c.cwd, PathBuf::from("/w"));
        assert_eq!(c.stdin, None);
        assert!(c.files.is_empty());
    }

    #[test]
    fn permission_modes_map_to_flags_and_root_bypass_sets_is_sandbox() {
        let with = |mode| TaskSpec {
            permission_mode: Some(mode),
            ..TaskSpec::new("x")
        };
        let tail = |c: &CommandSpec| c.args[5..].to_vec();
        assert_eq!(
            tail(&argv_for(&with(PermissionMode::Default), true, None)),
            Vec::<String>::new()
        );
        assert_eq!(
            tail(&argv_for(&with(PermissionMode::Plan), false, None)),
            strings(&["--permission-mode", "plan"])
        );
        assert_eq!(
            tail(&argv_for(&with(PermissionMode::AcceptEdits), true, None)),
            strings(&["--permission-mode", "acceptEdits"])
        );
        let root = argv_for(&with(PermissionMode::Bypass), true, None);
        assert_eq!(
            tail(&root),
            strings(&["--permission-mode", "bypassPermissions"])
        );
        assert_eq!(root.env.get("IS_SANDBOX").map(String::as_str), Some("1"));
        let user = argv_for(&with(PermissionMode::Bypass), false, None);
        assert_eq!(user.env.get("IS_SANDBOX"), None);
        let plan_root = argv_for(&with(PermissionMode::Plan), true, None);
        assert_eq!(plan_root.env.get("IS_SANDBOX"), None);
    }

    #[test]
    fn budget_is_the_smaller_of_the_task_and_what_remains() {
        let budget = |task_budget: Option<f64>, remaining: Option<f64>| {
            let t = TaskSpec {
                max_budget_usd: task_budget,
                permission_mode: Some(PermissionMode::Default),
                ..TaskSpec::new("x")
            };
            let c = argv_for(&t, false, remaining);
            c.args
                .iter()
                .position(|a| a == "--max-budget-usd")
                .map(|i| c.args[i + 1].clone())
        };
        assert_eq!(budget(Some(2.0), Some(0.25)), Some("0.25".into()));
        assert_eq!(budget(Some(0.1), Some(5.0)), Some("0.1".into()));
        assert_eq!(budget(Some(1.5), None), Some("1.5".into()));
        assert_eq!(budget(None, Some(3.0)), Some("3".into()));
        assert_eq!(budget(None, None), None);
        // Nothing left: the run is refused rather than started without a limit.
        for (task_budget, remaining) in [
            (None, Some(-1.0)),
            (Some(1.0), Some(0.0)),
            (Some(0.0), None),
        ] {
            let t = TaskSpec {
                max_budget_usd: task_budget,
                ..TaskSpec::new("x")
            };
            let binary = BinaryLocation::Path("/c".into());
            let ctx = LaunchContext {
                env: &std::collections::BTreeMap::new(),
                task: &t,
                binary: &binary,
                workdir: Path::new("/w"),
                private_dir: Path::new("/p"),
                mcp: None,
                budget_remaining_usd: remaining,
                is_root: false,
                in_container: false,
            };
            let err = provider().headless_argv(&ctx).err().map(|e| e.to_string());
            assert_eq!(
                err.as_deref(),
                Some(
                    "invalid task for provider claude: no budget left for this run (--max-budget-usd would be 0)"
                )
            );
        }
        // The config's limit stands in for the task's.
        let mut cfg = config();
        cfg.max_budget_usd = Some(0.75);
        cfg.max_turns = Some(9);
        let p = ClaudeProvider::new("claude", cfg);
        let t = TaskSpec::new("x");
        let binary = BinaryLocation::Path("/c".into());
        let ctx = LaunchContext {
            env: &std::collections::BTreeMap::new(),
            task: &t,
            binary: &binary,
            workdir: Path::new("/w"),
            private_dir: Path::new("/p"),
            mcp: None,
            budget_remaining_usd: Some(1.0),
            is_root: false,
            in_container: false,
        };
        let c = p.headless_argv(&ctx).unwrap();
        assert_eq!(
            c.args[5..9],
            strings(&["--max-turns", "9", "--max-budget-usd", "0.75"])
        );
    }

    #[test]
    fn a_prompt_starting_with_a_dash_goes_after_double_dash() {
        let t = TaskSpec {
            permission_mode: Some(PermissionMode::Default),
            allowed_tools: strings(&["Bash"]),
            ..TaskSpec::new("- fix the list")
        };
        let c = argv_for(&t, false, None);
        assert_eq!(
            c.args,
            strings(&[
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
                "--allowedTools",
                "Bash",
                "--",
                "- fix the list"
            ])
        );
    }

    #[test]
    fn an_empty_prompt_is_refused() {
        let t = TaskSpec {
            resume_session_id: Some("s".into()),
            ..TaskSpec::new("  ")
        };
        let binary = BinaryLocation::Path("/c".into());
        let ctx = LaunchContext {
            env: &std::collections::BTreeMap::new(),
            task: &t,
            binary: &binary,
            workdir: Path::new("/w"),
            private_dir: Path::new("/p"),
            mcp: None,
            budget_remaining_usd: None,
            is_root: false,
            in_container: false,
        };
        let err = provider().headless_argv(&ctx).err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "invalid task for provider claude: claude -p needs a non-empty prompt (also when resuming a session)"
            )
        );
    }

    #[test]
    fn mcp_wiring_writes_a_private_config_and_allows_the_tools() {
        let w = provider().mcp_wiring(&endpoint(), Path::new("/p")).unwrap();
        assert_eq!(
            w,
            McpWiring {
                args: strings(&[
                    "--mcp-config",
                    "/p/claude-mcp.json",
                    "--strict-mcp-config",
                    "--allowedTools",
                    "mcp__aicli__ask_user",
                    "mcp__aicli__log"
                ]),
                env: BTreeMap::new(),
                files: vec![FileSpec {
                    path: "/p/claude-mcp.json".into(),
                    contents: MCP_JSON.into(),
                    mode: 0o600,
                }],
                links: vec![],
            }
        );
        let parsed: Value = serde_json::from_str(&w.files[0].contents).unwrap();
        assert_eq!(
            parsed["mcpServers"]["aicli"]["headers"]["Authorization"],
            json!("Bearer tok-123")
        );
        // A server whose tools are not listed is allowed as a whole.
        let ep = McpEndpoint {
            tools: vec![],
            ..endpoint()
        };
        let w = provider().mcp_wiring(&ep, Path::new("/p")).unwrap();
        assert_eq!(w.args[3..], strings(&["--allowedTools", "mcp__aicli"]));
    }

    #[test]
    fn ide_lockfile_names_the_port_and_carries_the_token() {
        let (name, contents) = provider()
            .ide_lockfile(&endpoint(), 4711, Path::new("/w/repo"), 42)
            .unwrap();
        assert_eq!(name, "4711.lock");
        assert_eq!(
            serde_json::from_str::<Value>(&contents).unwrap(),
            json!({
                "pid": 42,
                "workspaceFolders": ["/w/repo"],
                "ideName": "aicli",
                "transport": "ws",
                "authToken": "tok-123"
            })
        );
        let p = provider();
        assert_eq!(p.ide_lock_env_var(), Some("CLAUDE_CODE_SSE_PORT"));
        assert_eq!(p.ide_lockfile_dir(), Some(".claude/ide"));
        assert!(crate::provider::Feature::ALL.iter().all(|f| p.supports(*f)));
    }

    // -- auth status -------------------------------------------------------------------

    /// `claude auth status` with ANTHROPIC_API_KEY=sk-invalid (exit 0; the key is not checked).
    const AUTHSTATUS_BADKEY: &str = r#"{
  "loggedIn": true,
  "authMethod": "api_key",
  "apiProvider": "firstParty",
  "analyticsDisabled": false,
  "projectsDirectory": "/home/tester/claude-as2/.claude/projects",
  "configDirectory": "/home/tester/claude-as2/.claude",
  "loginExpiresAt": null,
  "consoleProfileSignInOffered": true,
  "apiKeySource": "ANTHROPIC_API_KEY"
}
"#;

    /// `claude auth status` with no credentials (exit 1).
    const AUTHSTATUS_NOKEY: &str = r#"{
  "loggedIn": false,
  "authMethod": "none",
  "apiProvider": "firstParty",
  "analyticsDisabled": false,
  "projectsDirectory": "/home/tester/claude-as/.claude/projects",
  "configDirectory": "/home/tester/claude-as/.claude",
  "loginExpiresAt": null,
  "consoleProfileSignInOffered": true
}
"#;

    /// `claude auth status --text` with no credentials (exit 1).
    const AUTHSTATUS_NOKEY_TEXT: &str = "Not logged in. Run claude auth login to authenticate.\n";

    #[test]
    fn auth_status_probe_outputs() {
        let p = provider();
        let logged_out = AuthStatus::LoggedOut {
            hint: "not logged in: run `claude auth login`, or set ANTHROPIC_API_KEY to a valid API key"
                .into(),
        };
        assert_eq!(
            p.parse_auth_status(AUTHSTATUS_BADKEY, "", Some(0)),
            AuthStatus::LoggedIn {
                method: Some("api_key".into())
            }
        );
        assert_eq!(
            p.parse_auth_status(AUTHSTATUS_NOKEY, "", Some(1)),
            logged_out
        );
        assert_eq!(
            p.parse_auth_status(AUTHSTATUS_NOKEY_TEXT, "", Some(1)),
            logged_out
        );
        assert_eq!(
            p.parse_auth_status("", "", None),
            AuthStatus::Unknown {
                detail: "the status probe was killed".into()
            }
        );
        assert_eq!(
            p.parse_auth_status("Logged in.", "", Some(0)),
            AuthStatus::LoggedIn { method: None }
        );
        assert_eq!(p.auth_status_argv(), Some(strings(&["auth", "status"])));
    }

    // -- classification tables -----------------------------------------------------------

    #[test]
    fn structured_fields_win_over_words_and_text() {
        let facts = |status,
                     api_type: Option<&str>,
                     api_error: Option<&str>,
                     word: Option<&str>,
                     text: &str| {
            ApiErrorFacts {
                status,
                api_error_type: api_type.map(str::to_owned),
                api_error: api_error.map(str::to_owned),
                error_word: word.map(str::to_owned),
                text: text.to_owned(),
            }
            .classify()
        };
        assert_eq!(
            facts(Some(529), None, None, Some("server_error"), ""),
            ErrorKind::Overloaded
        );
        assert_eq!(
            facts(
                None,
                None,
                Some("connection_failed"),
                Some("server_error"),
                ""
            ),
            ErrorKind::Network
        );
        assert_eq!(
            facts(None, Some("rate_limit_error"), None, None, ""),
            ErrorKind::RateLimit
        );
        assert_eq!(
            facts(None, None, None, Some("authentication_failed"), ""),
            ErrorKind::Auth
        );
        assert_eq!(
            facts(
                None,
                None,
                None,
                Some("unknown"),
                "Not logged in · Please run /login"
            ),
            ErrorKind::Auth
        );
        assert_eq!(
            facts(None, None, None, Some("unknown"), "something"),
            ErrorKind::Unknown
        );
        assert_eq!(retry_kind(None, Some("unknown")), ErrorKind::Network);
        assert_eq!(
            retry_kind(Some(529), Some("overloaded")),
            ErrorKind::Overloaded
        );
        assert_eq!(retry_kind(None, Some("rate_limit")), ErrorKind::RateLimit);
    }

    #[test]
    fn budget_and_turn_limits_from_the_result_line() {
        let p = provider();
        let budget = r#"{"type":"result","subtype":"error_max_budget_usd","is_error":true,"terminal_reason":"budget_exhausted","errors":["Reached maximum budget ($0.001)"],"total_cost_usd":0.0012,"session_id":"s"}"#;
        let r = p.event_to_session_result(
            &p.parse_event(budget),
            "",
            Some(1),
            &ParseContext::default(),
        );
        assert_eq!(
            (r.error_kind, r.error.as_deref(), r.cost_usd),
            (
                Some(ErrorKind::Budget),
                Some("Reached maximum budget ($0.001)"),
                Some(0.0012)
            )
        );
    }

    // -- the fast path --------------------------------------------------------------

    /// Wherever the fast path answers, for a line or for the result builder's re-read of
    /// a line, it answers what the `Value` path does: over every fixture line of every
    /// vendor, and variants of each (fields replaced, dropped, added, repeated; numbers
    /// out of range, lone surrogates, deep nesting; cut lines).
    #[test]
    fn the_fast_path_agrees_with_the_value_path() {
        let lines = common::test_lines::fixture_lines();
        // Message ids the fixtures use, so that `message_delta` lines find their message.
        let mut seed = Scan::default();
        for id in ["prev".to_owned()]
            .into_iter()
            .chain(lines.iter().flat_map(|l| {
                let v: Value = serde_json::from_str(l).unwrap_or_default();
                [
                    v.get("api_message_id")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    v.pointer("/event/message/id")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                ]
                .into_iter()
                .flatten()
            }))
        {
            seed.streamed.insert(id, StreamedMessage::default());
        }
        let (mut total, mut fast, mut scanned) = (0, 0, 0);
        for v in common::test_lines::all() {
            total += 1;
            if let Some(kinds) = fast_kinds(v) {
                fast += 1;
                assert_eq!(Ok(kinds), value_kinds(v), "{v}");
            }
            let mut a = Scan {
                streamed: seed.streamed.clone(),
                ..Scan::default()
            };
            let mut b = Scan {
                streamed: seed.streamed.clone(),
                ..Scan::default()
            };
            let (mut seen_a, mut seen_b) = (BTreeSet::new(), BTreeSet::new());
            let (mut last_a, mut last_b) = (Some("prev".to_owned()), Some("prev".to_owned()));
            if a.read_line_fast(v, &mut seen_a, &mut last_a).is_some() {
                scanned += 1;
                b.read_line_value(v, &mut seen_b, &mut last_b);
                assert_eq!(
                    format!("{a:?} {seen_a:?} {last_a:?}"),
                    format!("{b:?} {seen_b:?} {last_b:?}"),
                    "{v}"
                );
            }
        }
        assert!(
            fast * 4 > total && scanned * 4 > total,
            "{fast}, {scanned} of {total}"
        );
    }
}
