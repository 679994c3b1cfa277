//! The vendor-neutral description of one task ([`TaskSpec`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How much the agent may do without asking, in vendor-neutral words. Each adapter maps
/// it onto its CLI's flags (Claude `--permission-mode` and sandbox settings, Codex
/// `--sandbox`, Gemini `--approval-mode`); `docs/permissions.md` has the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PermissionMode {
    /// Read and plan only; no edits, no commands that change anything.
    Plan,
    /// The CLI's own default (in headless mode: ask -> refuse).
    Default,
    /// File edits inside the workspace are allowed; other actions follow the allowlist.
    AcceptEdits,
    /// Edits and commands, confined: the CLI may change files only in its working
    /// directory (and its own state and temporary files) and runs commands without
    /// asking, inside its own sandbox (Claude Code's sandbox, Codex's workspace-write),
    /// inside bubblewrap where the CLI has no sandbox that works here (Gemini), or in
    /// its container under the Docker runner. The built-in entries' default.
    Sandbox,
    /// Everything is allowed, no sandbox. Use only inside a container or a throwaway tree.
    Bypass,
}

impl PermissionMode {
    /// The serialized name.
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::Plan => "plan",
            PermissionMode::Default => "default",
            PermissionMode::AcceptEdits => "accept_edits",
            PermissionMode::Sandbox => "sandbox",
            PermissionMode::Bypass => "bypass",
        }
    }

    /// Every mode, in order from the least allowed to the most.
    pub const ALL: [PermissionMode; 5] = [
        PermissionMode::Plan,
        PermissionMode::Default,
        PermissionMode::AcceptEdits,
        PermissionMode::Sandbox,
        PermissionMode::Bypass,
    ];

    /// The mode named `s` (its serialized name; `-` may stand for `_`).
    pub fn parse(s: &str) -> Option<PermissionMode> {
        let s = s.replace('-', "_");
        PermissionMode::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

/// One task: a prompt for one CLI run, and everything that shapes that run. Fields left
/// out take the provider's configured defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TaskSpec {
    /// A name for the task, unique in its batch (`[A-Za-z0-9._-]`, at most 64 chars);
    /// assigned (`task-1`, ...) when empty.
    pub id: String,
    /// The prompt.
    pub prompt: String,
    /// The provider to run, overriding the batch's.
    pub provider: Option<String>,
    /// The model, overriding the provider's default.
    pub model: Option<String>,
    /// A system prompt appended to the CLI's own, where the CLI supports it.
    pub append_system_prompt: Option<String>,
    /// Turn limit, where the CLI supports one.
    pub max_turns: Option<u32>,
    /// Dollar limit for this task, where the CLI supports one.
    pub max_budget_usd: Option<f64>,
    /// Tools allowed without asking (vendor tool names, e.g. `Bash`, `Edit`).
    pub allowed_tools: Vec<String>,
    /// Tools refused outright.
    pub disallowed_tools: Vec<String>,
    /// How much the agent may do without asking.
    pub permission_mode: Option<PermissionMode>,
    /// Resume this CLI session instead of starting a new one.
    pub resume_session_id: Option<String>,
    /// Wall-clock limit in seconds.
    pub timeout_secs: Option<u64>,
    /// Idle limit in seconds: no output for this long ends the run.
    pub idle_timeout_secs: Option<u64>,
    /// Extra arguments appended to the CLI's argv.
    pub extra_args: Vec<String>,
    /// Extra environment for the CLI (over the inherited one and the provider's).
    pub env: BTreeMap<String, String>,
    /// A subdirectory of the workspace to run in.
    pub cwd: Option<PathBuf>,
    /// Skills (names in the skills directory) the agent may read through MCP.
    pub skills: Vec<String>,
    /// Credential names the agent may read through MCP.
    pub credentials: Vec<String>,
    /// Where the task runs (`local`, `docker` or `swarm`), overriding the batch's and
    /// the provider's runner.
    pub runner: Option<crate::docker_config::RunnerKind>,
    /// Names in the config's `mcp_tools` or `mcp_upstreams` the agent may call through
    /// aicli's MCP server (besides `engine.mcp_tools`, granted to every task).
    pub mcp_tools: Vec<String>,
    /// Resources of the task's container or swarm job, each over `engine.docker`'s.
    pub resources: Option<crate::placement::TaskResources>,
    /// Swarm placement constraints (`node.labels.gpu==true`, `node.role!=manager`),
    /// besides the provider's in `engine.docker.constraints`; only the swarm runner
    /// places by them.
    pub constraints: Vec<String>,
}

impl TaskSpec {
    /// A task with just a prompt.
    pub fn new(prompt: impl Into<String>) -> TaskSpec {
        TaskSpec {
            prompt: prompt.into(),
            ..TaskSpec::default()
        }
    }

    /// Checks what can be checked without a provider: the id's characters and length,
    /// a non-empty prompt, non-negative budget. The error names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.prompt.trim().is_empty() && self.resume_session_id.is_none() {
            return Err("prompt: must not be empty".into());
        }
        if self.id.len() > 64 {
            return Err(format!("id: '{}' is longer than 64 characters", self.id));
        }
        if let Some(bad) = self
            .id
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            return Err(format!(
                "id: '{}' contains '{bad}'; use letters, digits, '.', '_' and '-'",
                self.id
            ));
        }
        if self.id.starts_with('.') || self.id.contains("..") || self.id.ends_with(".lock") {
            return Err(format!(
                "id: '{}' must not start with '.', contain '..' or end with '.lock' (it names a git branch)",
                self.id
            ));
        }
        if let Some(b) = self.max_budget_usd {
            check_budget(b).map_err(|m| format!("max_budget_usd: {m}"))?;
        }
        if self.timeout_secs == Some(0) {
            return Err("timeout_secs: must be at least 1 (0 would stop the run at once)".into());
        }
        if self.idle_timeout_secs == Some(0) {
            return Err(
                "idle_timeout_secs: must be at least 1 (0 would stop the run at once)".into(),
            );
        }
        if let Some(r) = &self.resources {
            let defaults = crate::DockerConfig::default();
            // Each given number checked against the others given (a reservation above
            // the engine's limit is the runner's to refuse, where that limit is known).
            let given = crate::placement::Resources {
                cpus: r.cpus.unwrap_or(0.0),
                memory_mb: r.memory_mb.unwrap_or(0),
                reserve_cpus: r.reserve_cpus.unwrap_or(defaults.reserve_cpus),
                reserve_memory_mb: r.reserve_memory_mb.unwrap_or(defaults.reserve_memory_mb),
            };
            given
                .check()
                .map_err(|(f, m)| format!("resources.{f}: {m}"))?;
        }
        for (i, c) in self.constraints.iter().enumerate() {
            crate::placement::check_constraint(c).map_err(|m| format!("constraints[{i}]: {m}"))?;
        }
        if let Some(cwd) = &self.cwd
            && (cwd.is_absolute()
                || cwd
                    .components()
                    .any(|c| matches!(c, std::path::Component::ParentDir)))
        {
            return Err(format!(
                "cwd: '{}' must be a relative path inside the workspace",
                cwd.display()
            ));
        }
        Ok(())
    }
}

/// Whether `usd` can be a budget: a finite number above 0 (NaN, infinities, negative
/// numbers and 0 are refused, with the reason).
pub fn check_budget(usd: f64) -> Result<(), String> {
    if usd.is_nan() {
        Err("NaN is not an amount of dollars".to_owned())
    } else if usd.is_infinite() {
        Err(format!(
            "{usd} is not a finite amount of dollars (leave the budget out for none)"
        ))
    } else if usd < 0.0 {
        Err(format!("{usd} is negative"))
    } else if usd == 0.0 {
        Err("0 would let nothing run (leave the budget out for none)".to_owned())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_names_the_bad_field() {
        let mut t = TaskSpec::new("do it");
        assert_eq!(t.validate(), Ok(()));
        t.id = "a/b".into();
        assert!(
            t.validate()
                .unwrap_err()
                .starts_with("id: 'a/b' contains '/'")
        );
        t.id = "ok-1".into();
        t.max_budget_usd = Some(-1.0);
        assert!(t.validate().unwrap_err().starts_with("max_budget_usd"));
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0] {
            t.max_budget_usd = Some(bad);
            let err = t.validate().unwrap_err();
            assert!(err.starts_with("max_budget_usd: "), "{bad}: {err}");
        }
        t.max_budget_usd = Some(0.01);
        assert_eq!(t.validate(), Ok(()));
        t.max_budget_usd = None;
        t.timeout_secs = Some(0);
        assert!(t.validate().unwrap_err().starts_with("timeout_secs: "));
        t.timeout_secs = Some(1);
        t.idle_timeout_secs = Some(0);
        assert!(t.validate().unwrap_err().starts_with("idle_timeout_secs: "));
        t.idle_timeout_secs = None;
        t.cwd = Some("../x".into());
        assert!(t.validate().unwrap_err().starts_with("cwd"));
        t.cwd = None;
        t.prompt = "  ".into();
        assert_eq!(t.validate(), Err("prompt: must not be empty".into()));
    }

    #[test]
    fn unknown_task_fields_are_rejected() {
        let err = serde_json::from_str::<TaskSpec>(r#"{"prompt":"x","promt":"y"}"#)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("unknown field `promt`"), "{err}");
    }
}
