//! The command that runs a task: `claude -p --output-format stream-json --verbose ...`,
//! the prompt on stdin; the MCP config file; the IDE lockfile.

use std::path::Path;

use serde_json::{Map, json};

use super::ClaudeProvider;
use crate::error::ProviderError;
use crate::provider::{CommandSpec, FileSpec, LaunchContext, McpEndpoint};
use crate::shared::args;
use crate::task::PermissionMode;

/// The name of the MCP config file written into a run's private directory.
pub const MCP_CONFIG_FILE: &str = "claude-mcp.json";

impl ClaudeProvider {
    /// The command for `ctx.task` (see the module docs).
    pub(super) fn build_command(
        &self,
        ctx: &LaunchContext<'_>,
    ) -> Result<CommandSpec, ProviderError> {
        let task = ctx.task;
        if task.prompt.trim().is_empty() {
            return Err(ProviderError::InvalidTask {
                provider: self.name.clone(),
                message: "claude -p needs a non-empty prompt (also when resuming a session)"
                    .to_owned(),
            });
        }
        let config = &self.config;
        // `ctx.workdir` already is the task's subdirectory when it names one.
        let mut c = CommandSpec::new(ctx.binary, ctx.workdir);
        // With no prompt argument, `claude -p` reads the prompt from stdin: it never
        // shows in the process list.
        c.args(["-p", "--output-format", "stream-json", "--verbose"]);
        if let Some(model) = task
            .model
            .clone()
            .or_else(|| config.default_model.clone())
            .filter(|m| !m.is_empty())
        {
            c.args(args::opt("--model", &model));
        }
        if let Some(n) = task.max_turns.or(config.max_turns) {
            c.args(["--max-turns".to_owned(), n.to_string()]);
        }
        if let Some(usd) = budget_usd(
            task.max_budget_usd.or(config.max_budget_usd),
            ctx.budget_remaining_usd,
        ) {
            if usd <= 0.0 {
                // The CLI checks its budget after a model call, and may read 0 as "no
                // limit": a run with nothing left to spend must not start.
                return Err(ProviderError::NoBudget {
                    provider: self.name.clone(),
                    message: "--max-budget-usd would be 0".to_owned(),
                });
            }
            c.args(["--max-budget-usd".to_owned(), usd.to_string()]);
        }
        if let Some(s) = &task.append_system_prompt {
            c.args(args::opt("--append-system-prompt", s));
        }
        let mode = task.permission_mode.unwrap_or(config.permission_mode);
        let flag = permission_mode_flag(mode, ctx.in_container);
        if let Some(flag) = flag {
            c.args(["--permission-mode", flag]);
        }
        if mode == PermissionMode::Sandbox && !ctx.in_container {
            let file = FileSpec {
                path: ctx.private_dir.join(SANDBOX_SETTINGS_FILE),
                contents: SANDBOX_SETTINGS.to_owned(),
                mode: 0o600,
            };
            c.args(["--settings".to_owned(), path_arg(&self.name, &file.path)?]);
            c.files.push(file);
        }
        if let Some(id) = &task.resume_session_id {
            c.args(args::opt("--resume", id));
        }
        let mut allowed = args::allowed_tools(config, task);
        if let Some(endpoint) = ctx.mcp {
            let file = mcp_config_file(endpoint, ctx.private_dir);
            c.args([
                "--mcp-config".to_owned(),
                path_arg(&self.name, &file.path)?,
                "--strict-mcp-config".to_owned(),
            ]);
            c.files.push(file);
            allowed = args::unique([&allowed, &mcp_allowed_tools(endpoint)]);
        }
        // Both flags take several values; each is followed by another option or nothing.
        if !allowed.is_empty() {
            c.args(["--allowedTools".to_owned()]).args(allowed);
        }
        let disallowed = args::disallowed_tools(config, task);
        if !disallowed.is_empty() {
            c.args(["--disallowedTools".to_owned()]).args(disallowed);
        }
        if flag == Some(BYPASS) && ctx.is_root {
            // claude refuses to bypass permissions as root unless told it runs sandboxed.
            c.env("IS_SANDBOX", "1");
        }
        c.env.extend(args::env(config, task));
        c.args(args::extra_args(config, task));
        c.stdin = Some(task.prompt.clone());
        Ok(c)
    }
}

/// The settings file `sandbox` adds, in the run's private directory.
pub const SANDBOX_SETTINGS_FILE: &str = "claude-sandbox-settings.json";

/// Claude Code's own sandbox, on (bubblewrap and socat on Linux): commands run without
/// asking inside it, writes only in the working directory, never outside it (no
/// `dangerouslyDisableSandbox` retry), and no start without it.
const SANDBOX_SETTINGS: &str = r#"{"sandbox":{"enabled":true,"autoAllowBashIfSandboxed":true,"allowUnsandboxedCommands":false,"failIfUnavailable":true}}"#;

/// Claude's mode that asks nothing (as root it needs `IS_SANDBOX=1`).
const BYPASS: &str = "bypassPermissions";

/// `--permission-mode` for a neutral mode (`None`: the CLI's default, no flag). In a
/// container `sandbox` bypasses: the container is the sandbox.
fn permission_mode_flag(mode: PermissionMode, in_container: bool) -> Option<&'static str> {
    match mode {
        PermissionMode::Plan => Some("plan"),
        PermissionMode::Default => None,
        PermissionMode::AcceptEdits => Some("acceptEdits"),
        PermissionMode::Sandbox if in_container => Some(BYPASS),
        PermissionMode::Sandbox => Some("acceptEdits"),
        PermissionMode::Bypass => Some(BYPASS),
    }
}

/// The per-run dollar limit: the smaller of the task's (or config's) limit and what is
/// left of the batch budget; never negative.
pub(super) fn budget_usd(limit: Option<f64>, remaining: Option<f64>) -> Option<f64> {
    let finite = |x: f64| x.is_finite().then_some(x.max(0.0));
    match (limit.and_then(finite), remaining.and_then(finite)) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
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
pub(super) fn mcp_config_file(endpoint: &McpEndpoint, private_dir: &Path) -> FileSpec {
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

/// The IDE lockfile for a run: `<port>.lock` with the workspace and the run's token.
pub(super) fn ide_lockfile(
    endpoint: &McpEndpoint,
    port: u16,
    workspace: &Path,
    pid: u32,
) -> (String, String) {
    let contents = json!({
        "pid": pid,
        "workspaceFolders": [workspace.to_string_lossy()],
        "ideName": "aicli",
        "transport": "ws",
        "authToken": endpoint.token,
    });
    (format!("{port}.lock"), contents.to_string())
}
