//! The command: `codex exec -C <workdir> [--sandbox M] [resume] --json
//! --skip-git-repo-check ... -- [<thread_id>] -`, the prompt on stdin.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{CodexProvider, MCP_TOKEN_ENV};
use crate::error::ProviderError;
use crate::provider::{
    BinaryLocation, CommandSpec, LaunchContext, LinkSpec, McpEndpoint, McpWiring,
};
use crate::shared::args;
use crate::task::PermissionMode;

impl CodexProvider {
    /// The command for `ctx.task` (see the module docs).
    pub(super) fn build_command(
        &self,
        ctx: &LaunchContext<'_>,
    ) -> Result<CommandSpec, ProviderError> {
        let task = ctx.task;
        let config = &self.config;
        let workdir = ctx.workdir.to_str().ok_or_else(|| {
            self.invalid_task(format!(
                "the working directory {} is not valid UTF-8",
                ctx.workdir.display()
            ))
        })?;
        if task.resume_session_id.is_some() && task.prompt.trim().is_empty() {
            return Err(self.invalid_task("resuming a Codex thread needs a prompt"));
        }
        let mode = task.permission_mode.unwrap_or(config.permission_mode);
        let mut c = CommandSpec::new(ctx.binary, ctx.workdir);
        c.args(["exec", "-C", workdir]);
        if let Some(sandbox) = sandbox_of(mode, ctx.in_container) {
            c.args(["--sandbox", sandbox]);
            if sandbox != "danger-full-access" {
                sandbox_helper(&mut c, ctx);
            }
        }
        if task.resume_session_id.is_some() {
            c.args(["resume"]);
        }
        c.args(["--json", "--skip-git-repo-check"]);
        if let Some(model) = task.model.clone().or_else(|| config.default_model.clone()) {
            c.args(args::opt("-m", &model));
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
            Some(endpoint) => Some(self.mcp_wiring(endpoint)?),
            None => None,
        };
        if let Some(w) = &wiring {
            c.args(w.args.iter().cloned());
        }
        c.args(args::extra_args(config, task));
        c.env.extend(args::env(config, task));
        if let Some(w) = wiring {
            // After the task's env: the run's token must be the one the server checks.
            c.env.extend(w.env);
            c.files.extend(w.files);
        }
        // `--` ends the options, so a thread id is never taken for a flag; `-` reads the
        // prompt from stdin (it never shows in the process list).
        c.args(["--"]);
        if let Some(id) = &task.resume_session_id {
            c.args([id.clone()]);
        }
        c.args(["-"]);
        c.stdin = Some(task.prompt.clone());
        Ok(c)
    }

    /// `-c mcp_servers.<name>={...}` and the token's variable for `endpoint`.
    fn mcp_wiring(&self, endpoint: &McpEndpoint) -> Result<McpWiring, ProviderError> {
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
}

/// The name Codex's sandbox runs its helper by, inside bubblewrap.
const SANDBOX_HELPER: &str = "codex-linux-sandbox";

/// Puts `codex-linux-sandbox` (a link to Codex's native binary, which acts on the name it
/// is run by) first on the run's `PATH`. Measured with codex 0.171.0: where the system
/// has its own `bwrap` (Debian's bubblewrap, which Claude Code's sandbox needs), Codex's
/// sandbox runs it and has it exec the helper by name. Codex links the name itself under
/// `CODEX_HOME`, but refuses to where that is under `/tmp` ("Refusing to create helper
/// binaries under temporary dir"), and then every command fails with "bwrap: execvp
/// codex-linux-sandbox: No such file or directory". Without a system `bwrap` Codex uses
/// its bundled one and needs no help.
/// Nothing is added when the native binary cannot be found next to the launcher.
fn sandbox_helper(c: &mut CommandSpec, ctx: &LaunchContext<'_>) {
    let BinaryLocation::Path(launcher) = ctx.binary else {
        return;
    };
    let Some(native) = native_binary(launcher) else {
        return;
    };
    let dir = ctx.private_dir.join("codex-path");
    c.links.push(LinkSpec {
        link: dir.join(SANDBOX_HELPER),
        target: native,
        create_target_dir: false,
    });
    let path = ctx
        .env
        .get("PATH")
        .map(String::as_str)
        .unwrap_or("/usr/bin:/bin");
    c.env("PATH", format!("{}:{path}", dir.display()));
}

/// Codex's native executable for the command `launcher` names: the file itself when it
/// is not npm's `codex.js`, else the platform package's `vendor/<target>/bin/codex`
/// beside it (`node_modules/@openai/codex-<platform>`).
fn native_binary(launcher: &Path) -> Option<PathBuf> {
    let real = std::fs::canonicalize(launcher).ok()?;
    if real.extension().is_none_or(|e| e != "js") {
        return Some(real);
    }
    // node_modules/@openai/codex/bin/codex.js -> node_modules/@openai
    let scope = real.parent()?.parent()?.parent()?;
    let mut found = None;
    for entry in std::fs::read_dir(scope).ok()?.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with("codex-linux-") {
            continue;
        }
        for target in std::fs::read_dir(entry.path().join("vendor"))
            .ok()?
            .flatten()
        {
            let bin = target.path().join("bin").join("codex");
            if bin.is_file() {
                found = Some(bin);
            }
        }
    }
    found
}

/// The `--sandbox` value for a permission mode (bypass uses its own flag). In a
/// container Codex's sandbox cannot start (bubblewrap needs user namespaces, which the
/// container's seccomp profile refuses: every command fails), and the container is the
/// sandbox: `accept_edits` and `sandbox` are `danger-full-access` there. `plan` stays
/// `read-only`, so commands fail closed. Outside a container `accept_edits` and `sandbox`
/// are the same: Codex's workspace-write runs commands without asking, confined.
pub(crate) fn sandbox_of(mode: PermissionMode, in_container: bool) -> Option<&'static str> {
    match mode {
        PermissionMode::Plan => Some("read-only"),
        PermissionMode::Default | PermissionMode::Bypass => None,
        PermissionMode::AcceptEdits | PermissionMode::Sandbox if in_container => {
            Some("danger-full-access")
        }
        PermissionMode::AcceptEdits | PermissionMode::Sandbox => Some("workspace-write"),
    }
}

/// The `-c` override that adds `endpoint` as a streamable-HTTP MCP server:
/// `mcp_servers.<name>={url="<url>", bearer_token_env_var="AICLI_MCP_TOKEN",
/// default_tools_approval_mode="approve"}`. Exec runs with approval `never`, so without
/// `approve` every MCP call fails with "MCP tool call requires approval, but approval
/// policy is never".
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
