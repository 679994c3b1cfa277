//! The `acp` section of a provider entry: what aicli needs to know about one ACP agent
//! beyond the command that starts it.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::task::PermissionMode;

/// How aicli drives one ACP agent (the `acp` section of an entry with `"adapter":
/// "acp"`). Every field has a default, so `{}` (or no section at all) is a valid start.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AcpConfig {
    /// Which model API the agent calls (`anthropic`, `openai`, `gemini`): the built-in
    /// fake of that API serves it under `--fake-api` and `aicli record --fake`. Absent:
    /// those options do not serve this agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_api: Option<String>,
    /// How a task's model reaches the agent; absent: the agent's own default model is
    /// used and a task's `model` only names the model for prices.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<AcpModel>,
    /// The agent's session mode (and any variables) for each of aicli's permission
    /// modes; set with `session/set_mode` (or `session/set_config_option` `mode`) right
    /// after the session starts. A mode the agent does not offer fails the run.
    pub modes: AcpModes,
    /// How a later run continues a session (an answer, a recovery), in order of
    /// preference, each used only where the agent advertises it at `initialize`:
    /// `resume` (`session/resume`), `load` (`session/load`, whose replayed history is
    /// skipped). Empty: a continuation is a new session whose prompt carries the
    /// context (`continuation.mode = "new_run"`).
    pub continue_with: Vec<AcpContinue>,
    /// `session/load` only in a later wall-clock minute than the session was last used
    /// in: gemini 0.61 names a recording after the minute a run starts one (each load
    /// starts one, `session-<minute>-<id>`), and a load in the minute the session began,
    /// or in the minute of its last load, starts a recording over the session's own
    /// file, answers "No previous sessions found" and loses the history for good
    /// (google-gemini/gemini-cli#28775; a second answer within a minute of the first
    /// met it too). With this set, a continuation that loads waits for the minute after
    /// the session's last run first (at most a minute; the live stream says so).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub load_in_a_new_minute: bool,
    /// Seconds the agent has to answer each setup request (`initialize`,
    /// `session/new`/`load`/`resume`, a mode or model change) before the run fails as a
    /// timeout. The prompt itself is bounded by the task's timeouts.
    pub setup_timeout_secs: u64,
    /// Variables set to the absolute path of another executable, found the way binaries
    /// are (the run's `PATH`, then aicli's cache): `{"CLAUDE_CODE_EXECUTABLE": "claude"}`
    /// runs claude-agent-acp on aicli's pinned `claude`. A name not found is an error.
    pub env_executables: BTreeMap<String, String>,
    /// The agent's own settings home for each run, for an agent that reads its
    /// settings from `$HOME/<dir>` and can be pointed at another home by a variable
    /// (gemini: `GEMINI_CLI_HOME`, `.gemini/settings.json`): the user's settings with
    /// `settings` merged over them, every other entry of the user's directory linked
    /// (see [`AcpSettingsHome`]). Absent: the agent uses the user's home as it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settings_home: Option<AcpSettingsHome>,
}

/// A run's own settings home for an ACP agent ([`AcpConfig::settings_home`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AcpSettingsHome {
    /// The variable that points the agent at a home (`GEMINI_CLI_HOME`).
    pub env: String,
    /// The agent's directory in a home (`.gemini`).
    pub dir: String,
    /// Its settings file in that directory (`settings.json`).
    pub settings_file: String,
    /// Directories of the user's directory every run writes, linked (and created in
    /// the user's directory) even when missing, so that what a run writes there
    /// outlives it: gemini's `tmp` (sessions) and `history`.
    pub kept_dirs: Vec<String>,
    /// Entries of the home itself the agent reads, linked when the user has them
    /// (gemini's `.env`, `.agents`).
    pub home_entries: Vec<String>,
    /// Settings merged over the user's for every run, the way gemini merges a higher
    /// settings layer (gemini-acp turns its session cleanup off here).
    pub settings: serde_json::Map<String, serde_json::Value>,
}

/// The default [`AcpConfig::setup_timeout_secs`].
pub const DEFAULT_SETUP_TIMEOUT_SECS: u64 = 60;

impl AcpConfig {
    /// The setup timeout, with 0 meaning the default.
    pub fn setup_timeout(&self) -> std::time::Duration {
        let secs = match self.setup_timeout_secs {
            0 => DEFAULT_SETUP_TIMEOUT_SECS,
            s => s,
        };
        std::time::Duration::from_secs(secs)
    }
}

/// How the model of a task is given to an ACP agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AcpModel {
    /// As a command-line option: `{"arg": "-m"}` adds `-m MODEL`.
    Arg(String),
    /// In an environment variable: `{"env": "ANTHROPIC_MODEL"}`.
    Env(String),
    /// Through the session's config option of this id (`session/set_config_option`):
    /// `{"config_option": "model"}`.
    ConfigOption(String),
}

/// The agent's mode for each of aicli's permission modes (see [`PermissionMode`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AcpModes {
    /// For `plan`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<AcpMode>,
    /// For `default`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<AcpMode>,
    /// For `accept_edits`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accept_edits: Option<AcpMode>,
    /// For `sandbox`: a mode in which the agent confines its own commands.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<AcpMode>,
    /// For `bypass`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bypass: Option<AcpMode>,
}

impl AcpModes {
    /// The entry for `mode`.
    pub fn get(&self, mode: PermissionMode) -> Option<&AcpMode> {
        match mode {
            PermissionMode::Plan => self.plan.as_ref(),
            PermissionMode::Default => self.default.as_ref(),
            PermissionMode::AcceptEdits => self.accept_edits.as_ref(),
            PermissionMode::Sandbox => self.sandbox.as_ref(),
            PermissionMode::Bypass => self.bypass.as_ref(),
        }
    }
}

/// One permission mode's setting for an agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AcpMode {
    /// The agent's session mode id (`yolo`, `bypassPermissions`, `read-only`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Variables the agent needs for it (claude-agent-acp's `IS_SANDBOX=1` to bypass
    /// permissions as root).
    pub env: BTreeMap<String, String>,
    /// The session mode id in a container (aicli's Docker runner), when it differs:
    /// the container is the sandbox, and an agent's own sandbox that needs kernel
    /// namespaces (codex's bubblewrap) cannot start there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_container: Option<String>,
}

impl AcpMode {
    /// The session mode id to set, in a container or not.
    pub fn mode_id(&self, in_container: bool) -> Option<&str> {
        match (&self.in_container, in_container) {
            (Some(m), true) => Some(m),
            _ => self.mode.as_deref(),
        }
    }
}

/// A way to continue a session (see [`AcpConfig::continue_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AcpContinue {
    /// `session/resume` (advertised as `sessionCapabilities.resume`): no history replay.
    Resume,
    /// `session/load` (advertised as `loadSession`): the agent replays the history first.
    Load,
}

impl AcpContinue {
    /// The JSON-RPC method.
    pub fn method(self) -> &'static str {
        match self {
            AcpContinue::Resume => "session/resume",
            AcpContinue::Load => "session/load",
        }
    }
}
