//! The Agent Client Protocol adapter (`"adapter": "acp"`): one provider that runs any
//! ACP agent from a config entry — `gemini --acp`, `@agentclientprotocol/claude-agent-acp`,
//! `@agentclientprotocol/codex-acp`, OpenCode's `opencode acp`, or one aicli never heard
//! of. Pinned to the `agent-client-protocol` crate `=5.2.0` (its v1 types; schema crate
//! `=1.17.0`, protocol version 1).
//!
//! | module | owns |
//! |---|---|
//! | [`config`] | the entry's `acp` section: model option, modes, continuation, timeouts |
//! | `wire` | JSON-RPC 2.0 framing: a line into an envelope, messages built from the crate's types |
//! | `decode` | the decoder's state; the agent's lines and aicli's recorded lines folded alike |
//! | `responses` | the agent's responses to aicli's requests: capabilities, the session, the turn's end |
//! | `outgoing` | aicli's own messages (recorded or live): requests sent, cancel, answers to the agent |
//! | `live` | what aicli says in a live run: the setup, the prompt, deadlines; `live/answers`: its answers to the agent's requests, cancel |
//! | `updates` | `session/update` -> events |
//! | `permission` | the answer to `session/request_permission`, by permission mode |
//! | `usage` | tokens and cost over ACP |
//! | `classify` | JSON-RPC errors -> kinds |
//! | `result` | the final [`SessionResult`] |
//!
//! # A run
//!
//! ACP is JSON-RPC 2.0, one message per line, over the agent's stdio: a conversation,
//! not a stream to read. The command is the entry's binary with its `extra_args`
//! (`--acp` for gemini) and a stdin kept open ([`CommandSpec::stdin_open`]); the prompt
//! never goes in argv. The decoder speaks (see `live`): `initialize`, `session/new` (or
//! `session/resume` / `session/load` of the task's `resume_session_id`), the mode and
//! model of the task, `session/prompt`; then it reads `session/update`s and answers the
//! agent's own requests until the prompt's response gives the `stopReason`. The engine
//! writes what the decoder says, records each message behind the `aicli_stdin` marker
//! between the agent's own lines (the bearer token redacted), and closes stdin when the
//! turn is over; then the process group is killed as for any CLI (gemini with an HTTP MCP
//! server, and zed's codex-acp, never exit on EOF; claude-agent-acp leaves children). A
//! recorded run replays through the same decoder to the same result: aicli's recorded
//! lines are folded as the live decoder folded what it sent.
//!
//! - **Permission requests** follow the task's permission mode (see `permission`):
//!   `bypass` allows, `plan` rejects what is not a read, `default` asks a human (the
//!   turn is cancelled, the task ends blocked, `aicli answer` continues the session and
//!   the same request gets the human's answer). codex-acp and zed's codex-acp end the
//!   turn as `cancelled` on any rejection: that run fails as `permission`, not as a
//!   cancel.
//! - **Other requests**: aicli advertises no `fs`, `terminal` or elicitation capability
//!   (the agents read and write the worktree themselves; gemini, offered
//!   `fs.readTextFile`, fails to create new files), so `fs/*` and `terminal/*` get
//!   `-32601` (OpenCode sends `fs/write_text_file` anyway and writes the file itself);
//!   an `elicitation/create` becomes the run's question, as a permission request does.
//! - **Cancel** sends `session/cancel` and answers open requests `cancelled`; the agent
//!   has the kill grace to end the turn, then its process group is killed.
//! - **Setup deadlines**: each setup request has `acp.setup_timeout_secs` (default 60 s;
//!   gemini's `initialize` takes 1.5–5.5 s here, OpenCode's 4–10 s) before the run fails
//!   as `timeout`: an agent that never answers `initialize` (a CLI without `--acp`) is an
//!   error that says so, not a wait for the idle watchdog.
//! - **MCP**: aicli's server goes in `mcpServers` as HTTP with an `Authorization:
//!   Bearer` header where the agent advertises `mcpCapabilities.http` (all five measured
//!   agents do); otherwise the run goes on without it and a warning event says so.
//!
//! # Mapping
//!
//! See `updates` for `session/update`, `usage` for tokens and cost, `classify` for
//! errors. Stop reasons: `end_turn` succeeds (unless codex-acp's hidden API error, see
//! `classify`), `max_tokens` fails as `bad_request`, `max_turn_requests` as `max_turns`,
//! `refusal` as `permission`, `cancelled` as `cancelled` (or `blocked` when aicli
//! cancelled the turn to ask a human, `permission` after a rejection). A line that is
//! not JSON-RPC, a response to an id aicli never sent, a notification before
//! `initialize` was answered: each is a `protocol` event (the line kept), and a run that
//! had one fails as `protocol` even when its turn ended well, keeping everything else.
//!
//! # Continuing a session
//!
//! `acp.continue_with` lists the ways a later run (an answer, a recovery) may continue a
//! session; the first one the agent advertised at `initialize` is used
//! ([`AiCliProvider::resumable`] reads it from the run's `provider_data`), else the
//! continuation is a new session carrying the context (`continuation.mode = "new_run"`).
//! `session/resume` (claude-agent-acp, codex-acp, OpenCode) replays nothing;
//! `session/load` replays the history first, which the decoder skips. **gemini-acp loads
//! its session in a later minute than it began**: gemini 0.61 offers only `session/load`,
//! which starts a new recording named after the wall-clock minute before it reads the
//! session; in the minute the session began, that is the session's own file, so the load
//! answers "No previous sessions found" *and* has overwritten the history for good
//! (google-gemini/gemini-cli#28775). The entry sets `load_in_a_new_minute`, so the
//! engine waits for the next minute before such a load
//! ([`AiCliProvider::resume_not_before`]): an answer given at once waits up to a minute,
//! and so does a second answer within a minute of the first. Each load also leaves a
//! recording of the session with no content, and gemini's session cleanup at the next
//! start deletes every file of a session that has one (the real one too): the entry
//! turns that cleanup off in the run's own settings home (`acp.settings_home`, as the
//! gemini adapter's; a system-defaults file would not do: gemini reads one only when it
//! and every directory above it are root's and not group- or world-writable, so never
//! for other users nor under `/tmp`).
//!
//! # The measured agents (2026-12-01, against the testkit's fake model APIs)
//!
//! | | gemini `--acp` 0.61.0 | claude-agent-acp 0.101.0 | codex-acp 2.6.0 | OpenCode 1.18.33 |
//! |---|---|---|---|---|
//! | runs | itself | Claude Agent SDK -> `claude` (`CLAUDE_CODE_EXECUTABLE`: aicli's pinned 2.1.332) | `codex app-server` (`CODEX_PATH`: aicli's pinned 0.171.0) | itself |
//! | `session/resume` | no (`-32601`) | yes | yes | yes |
//! | `session/load` | yes (see above) | yes | yes | yes |
//! | MCP over HTTP | yes | yes | yes (no SSE) | yes |
//! | initial mode | `default` (asks) | `auto` (a classifier decides) | `agent` (extra "Guardian" model calls) | `build` |
//! | modes aicli sets | `plan`, `default`, `autoEdit`, `yolo` | `plan`, `default`, `acceptEdits`, `bypassPermissions` (`IS_SANDBOX=1` as root) | `read-only`, `read-only`, `workspace-write`, `agent-full-access` | `plan` or `build` (config option `mode`) |
//! | reject ends the turn | no | no | yes (`cancelled`) | no |
//! | tokens | `_meta.quota` (input with cache, no cache or thought figure) | `_meta.quota.model_usage` (includes the title call) | `usage` / `_meta.quota` | `usage` |
//! | cost | none (estimated) | `usage_update.cost`, session-cumulative (reported, per run by difference) | none (estimated) | none (estimated) |
//! | API errors | code = HTTP status | `-32000` auth; `-32603` + `data.errorKind` | `-32000` auth; most others hidden in an `end_turn` with `usage: null` | `-32603` + the provider's message (retried ~6 times over 70–80 s first) |
//!
//! What cannot be handled: codex-acp's hidden errors are recognised only by their shape
//! (`usage: null` and `_meta.quota.token_count: null` on `end_turn`) and their words; a
//! hidden error whose words say nothing known fails as `unknown` with the words as its
//! message, and one whose turn also produced other text is read from the text since the
//! last tool call. Claude-agent-acp's title call (a prompt of 10 characters or more) is
//! an extra model request. Gemini's usage leaves out thinking tokens and does not split
//! cached input, so its estimate is approximate.

mod classify;
pub mod config;
mod decode;
mod live;
mod outgoing;
mod permission;
mod responses;
mod result;
mod updates;
mod usage;
mod wire;

use std::path::PathBuf;

pub use config::{AcpConfig, AcpContinue, AcpMode, AcpModel, AcpModes, AcpSettingsHome};
pub use decode::AcpDecoder;
pub use updates::split_mcp;

use crate::config::ProviderConfig;
use crate::decode::Decoder;
use crate::error::ProviderError;
use crate::provider::{AiCliProvider, CommandSpec, Feature, LaunchContext};
use crate::result::{ParseContext, SessionResult};
use crate::shared::args;
use crate::shared::settings_home::SettingsHome;

/// An ACP agent, driven by its config entry.
#[derive(Debug, Clone)]
pub struct AcpProvider {
    name: String,
    config: ProviderConfig,
    acp: AcpConfig,
}

impl AcpProvider {
    /// A provider called `name` with config entry `config` (its `acp` section, or the
    /// defaults).
    pub fn new(name: &str, config: ProviderConfig) -> AcpProvider {
        AcpProvider {
            name: name.to_owned(),
            acp: config.acp.clone().unwrap_or_default(),
            config,
        }
    }

    /// The entry's `acp` section.
    pub fn acp(&self) -> &AcpConfig {
        &self.acp
    }
}

impl AiCliProvider for AcpProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn config(&self) -> &ProviderConfig {
        &self.config
    }

    fn command(&self, ctx: &LaunchContext<'_>) -> Result<CommandSpec, ProviderError> {
        let task = ctx.task;
        if task.prompt.trim().is_empty() {
            return Err(ProviderError::InvalidTask {
                provider: self.name.clone(),
                message: "an ACP prompt must not be empty, also when resuming a session".into(),
            });
        }
        let mut c = CommandSpec::new(ctx.binary, ctx.workdir);
        let model = task
            .model
            .clone()
            .or_else(|| self.config.default_model.clone());
        if let (Some(AcpModel::Arg(flag)), Some(m)) = (&self.acp.model, &model) {
            c.args(args::opt(flag, m));
        }
        c.args(args::extra_args(&self.config, task));
        let mode = task.permission_mode.unwrap_or(self.config.permission_mode);
        if let Some(m) = self.acp.modes.get(mode) {
            c.env.extend(m.env.clone());
        }
        c.env.extend(args::env(&self.config, task));
        if let (Some(AcpModel::Env(var)), Some(m)) = (&self.acp.model, &model) {
            c.env.insert(var.clone(), m.clone());
        }
        let path = ctx
            .search_path
            .map(str::to_owned)
            .or_else(|| ctx.env.get("PATH").cloned())
            .unwrap_or_default();
        for (var, binary) in &self.acp.env_executables {
            // In a container the image names them (aicli's ACP images set each variable
            // to its CLI's path inside); this machine's are not there.
            if c.env.contains_key(var) || ctx.in_container {
                continue;
            }
            let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
            let found = which::which_in(binary, Some(&path), cwd).map_err(|_| {
                ProviderError::MissingExecutable {
                    provider: self.name.clone(),
                    var: var.clone(),
                    binary: binary.clone(),
                    looked_in: "PATH".to_owned(),
                }
            })?;
            c.env.insert(var.clone(), found.display().to_string());
        }
        if let Some(h) = &self.acp.settings_home {
            if c.env.contains_key(&h.env) {
                return Err(ProviderError::InvalidTask {
                    provider: self.name.clone(),
                    message: format!(
                        "env {} is set by the task or the config, but aicli points it at the \
                         run's own settings home (acp.settings_home)",
                        h.env
                    ),
                });
            }
            let kept: Vec<&str> = h.kept_dirs.iter().map(String::as_str).collect();
            let entries: Vec<&str> = h.home_entries.iter().map(String::as_str).collect();
            let home = SettingsHome {
                label: &self.name,
                env: &h.env,
                home_dir: "settings-home",
                dir: &h.dir,
                settings_file: &h.settings_file,
                kept_dirs: &kept,
                home_entries: &entries,
            };
            let user_home = crate::shared::settings_home::user_home(
                Some(&task.env),
                &self.config.env,
                ctx.env.get("HOME").map(std::path::Path::new),
            );
            let wiring = home
                .wiring(&h.settings, ctx.private_dir, user_home.as_deref(), |_| {})
                .map_err(|message| ProviderError::InvalidTask {
                    provider: self.name.clone(),
                    message,
                })?;
            c.wire(wiring);
        }
        c.stdin_open = true;
        Ok(c)
    }

    fn two_way(&self) -> bool {
        true
    }

    fn decoder(&self, ctx: &ParseContext) -> Box<dyn Decoder> {
        Box::new(AcpDecoder::new(self.clone(), ctx.clone()))
    }

    /// A load (`session/load`) of an entry with `load_in_a_new_minute` waits for the
    /// first second of the minute after `began`.
    fn resume_not_before(
        &self,
        last: &SessionResult,
        last_used: std::time::SystemTime,
    ) -> Option<std::time::SystemTime> {
        let loads = last
            .provider_data
            .pointer("/acp/continue_with")
            .and_then(serde_json::Value::as_str)
            == Some(AcpContinue::Load.method());
        if !(self.acp.load_in_a_new_minute && loads) {
            return None;
        }
        let secs = last_used
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_secs();
        Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs((secs / 60 + 1) * 60 + 1))
    }

    /// Where the last run's agent advertised a way the entry's `continue_with` allows.
    fn resumable(&self, last: &SessionResult) -> bool {
        self.supports(Feature::Resume)
            && last
                .provider_data
                .pointer("/acp/continue_with")
                .is_some_and(serde_json::Value::is_string)
    }
}

#[cfg(test)]
mod tests;
