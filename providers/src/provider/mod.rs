//! The [`AiCliProvider`] trait and the plain data it speaks: [`Feature`],
//! [`LaunchContext`], [`CommandSpec`] (with its [`FileSpec`]s and [`LinkSpec`]s),
//! [`McpEndpoint`], [`McpWiring`], [`AuthStatus`].
//!
//! A provider is pure where it can be: it turns a task into a command to run and the
//! CLI's lines into events and a result. It never spawns processes or does I/O except
//! for the small local checks named below (finding the binary, a pre-flight look for
//! credentials); the engine runs what the provider describes.
//!
//! The data is split by what it is for: `command` (what the engine gives a provider and
//! the command it gets back), `binary` (where the executable is and how it is found) and
//! `auth` (the auth-status probe's outcome and the pre-flight look for credentials).

mod auth;
mod binary;
mod command;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use auth::{AuthStatus, default_auth_precheck};
pub use binary::{BinaryLocation, default_binary_path};
pub use command::{CommandSpec, FileSpec, LaunchContext, LinkSpec, McpEndpoint, McpWiring};

use crate::config::ProviderConfig;
use crate::decode::{Decoder, ExitStatus};
use crate::error::ProviderError;
use crate::result::ParseContext;
use crate::task::{PermissionMode, TaskSpec};

/// Something a CLI may or may not support.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Feature {
    /// A per-run dollar limit (Claude `--max-budget-usd`).
    MaxBudget,
    /// A per-run turn limit.
    MaxTurns,
    /// The CLI reports a session id.
    SessionId,
    /// A run can resume an earlier session.
    Resume,
    /// An MCP server can be wired in per run.
    McpRuntime,
    /// The CLI reports its own cost.
    JsonCost,
    /// The CLI finds an IDE through a lockfile.
    IdeLockfile,
    /// The CLI has its own sandbox or permission modes.
    Sandbox,
}

impl Feature {
    /// Every feature, in declaration order.
    pub const ALL: [Feature; 8] = [
        Feature::MaxBudget,
        Feature::MaxTurns,
        Feature::SessionId,
        Feature::Resume,
        Feature::McpRuntime,
        Feature::JsonCost,
        Feature::IdeLockfile,
        Feature::Sandbox,
    ];

    /// The serialized name.
    pub fn as_str(self) -> &'static str {
        match self {
            Feature::MaxBudget => "max_budget",
            Feature::MaxTurns => "max_turns",
            Feature::SessionId => "session_id",
            Feature::Resume => "resume",
            Feature::McpRuntime => "mcp_runtime",
            Feature::JsonCost => "json_cost",
            Feature::IdeLockfile => "ide_lockfile",
            Feature::Sandbox => "sandbox",
        }
    }

    /// Parses a serialized name.
    pub fn parse(s: &str) -> Option<Feature> {
        Feature::ALL.into_iter().find(|f| f.as_str() == s)
    }
}

/// A CLI vendor: everything vendor-specific about running one AI coding CLI headlessly.
///
/// The engine holds providers as `Arc<dyn AiCliProvider>` and never names a vendor. The
/// required core is four methods: [`name`](AiCliProvider::name),
/// [`config`](AiCliProvider::config), [`command`](AiCliProvider::command) (the command
/// for a task: argv, env, stdin, files) and [`decoder`](AiCliProvider::decoder) (one
/// streaming [`Decoder`] per run). Everything else has a default from the config.
pub trait AiCliProvider: Send + Sync + std::fmt::Debug {
    /// The provider's name (its key in the config).
    fn name(&self) -> &str;

    /// This provider's config entry (facts and defaults).
    fn config(&self) -> &ProviderConfig;

    /// The command that runs `ctx.task` headlessly with NDJSON output: argv, env, stdin
    /// (the prompt: never in argv), files (MCP wiring included when `ctx.mcp` is set).
    /// Pure: no I/O.
    fn command(&self, ctx: &LaunchContext<'_>) -> Result<CommandSpec, ProviderError>;

    /// A decoder for one run: it reads the run's lines as they arrive and gives the
    /// result at the end. `ctx` says what the lines do not (the model asked for, the
    /// prior session totals of a resumed session).
    fn decoder(&self, ctx: &ParseContext) -> Box<dyn Decoder>;

    /// Finds the executable: the configured `binary_path`, else `binary_name` on
    /// `search_path` (the process `PATH` when `None`), else `npx --yes
    /// <package>@<version>` when `npx_fallback` is on, else a
    /// [`ProviderError::NotInstalled`] naming the npm package.
    fn binary_path(&self, search_path: Option<&str>) -> Result<BinaryLocation, ProviderError> {
        default_binary_path(self.name(), self.config(), search_path)
    }

    /// Reads the output of the auth-status probe (`config().auth_status_argv`). The
    /// default goes by the exit code.
    fn parse_auth_status(&self, stdout: &str, stderr: &str, exit_code: Option<i32>) -> AuthStatus {
        let _ = (stdout, stderr);
        let c = self.config();
        match exit_code {
            Some(0) => AuthStatus::LoggedIn { method: None },
            Some(_) => AuthStatus::LoggedOut {
                hint: format!("run: {} {}", c.binary_name, c.login_argv.join(" ")),
            },
            None => AuthStatus::Unknown {
                detail: "the status probe was killed".to_owned(),
            },
        }
    }

    /// A quick look for credentials before spawning (local files and `env`, no
    /// network; blocking, so the engine calls it off its async threads): `Some(message)`
    /// when there are certainly none. `env` is the run's full environment, `home` its
    /// home directory, `args` the CLI's arguments as built (they may say where the key
    /// comes from). The default looks for any of `auth_env_vars` and `auth_files`, and
    /// says nothing when the config lists neither.
    fn auth_precheck(
        &self,
        env: &BTreeMap<String, String>,
        home: &Path,
        args: &[String],
    ) -> Option<String> {
        let _ = args;
        default_auth_precheck(self.config(), env, home)
    }

    /// An auth failure the CLI's stderr and exit status show (the decoder also reads
    /// the structured signals of the stream). `Some(message)` when found.
    fn detect_auth_error(&self, stderr: &str, exit: ExitStatus) -> Option<String> {
        let _ = (stderr, exit);
        None
    }

    /// Whether the CLI supports `feature` (the config's `supports`).
    fn supports(&self, feature: Feature) -> bool {
        self.config().supports.contains(&feature)
    }

    /// Whether the CLI is spoken to while it runs (its commands keep stdin open for the
    /// decoder's messages, [`CommandSpec::stdin_open`]): an ACP agent. Such a provider
    /// needs a runner that keeps a CLI's stdin open (the local one). Default: `false`.
    fn two_way(&self) -> bool {
        false
    }

    /// Whether a later run can resume the session `last` ran in (an answer, a
    /// recovery), as far as the provider knows from that run: the default is
    /// [`Feature::Resume`]; an ACP agent says at `initialize` which ways it offers.
    fn resumable(&self, last: &crate::result::SessionResult) -> bool {
        let _ = last;
        self.supports(Feature::Resume)
    }

    /// The earliest time a later run may continue the session `last` ran in, when the
    /// CLI needs one (the ACP entry's `load_in_a_new_minute`); `last_used` is a time by
    /// which every earlier run of the session had started (the end of its latest run).
    /// Default: no pause.
    fn resume_not_before(
        &self,
        last: &crate::result::SessionResult,
        last_used: std::time::SystemTime,
    ) -> Option<std::time::SystemTime> {
        let _ = (last, last_used);
        None
    }

    /// The IDE lockfile to write for a run (file name and JSON contents), given the MCP
    /// endpoint's port and the workspace. `None` when the CLI uses none.
    fn ide_lockfile(
        &self,
        endpoint: &McpEndpoint,
        port: u16,
        workspace: &Path,
        pid: u32,
    ) -> Option<(String, String)> {
        let _ = (endpoint, port, workspace, pid);
        None
    }
}

/// Conveniences that read a provider's config.
impl dyn AiCliProvider {
    /// The npm package that ships the CLI.
    pub fn package_name(&self) -> &str {
        &self.config().package
    }

    /// The executable's name.
    pub fn binary_name(&self) -> &str {
        &self.config().binary_name
    }

    /// argv (after the binary) that logs in interactively.
    pub fn login_argv(&self) -> Vec<String> {
        self.config().login_argv.clone()
    }

    /// argv (after the binary) that prints the auth status, if the CLI has one.
    pub fn auth_status_argv(&self) -> Option<Vec<String>> {
        let a = &self.config().auth_status_argv;
        (!a.is_empty()).then(|| a.clone())
    }

    /// The env var through which the CLI finds an IDE lockfile's port, if it uses one.
    pub fn ide_lock_env_var(&self) -> Option<&str> {
        self.config().ide_lock_env_var.as_deref()
    }

    /// Where the CLI looks for IDE lockfiles, relative to the home directory.
    pub fn ide_lockfile_dir(&self) -> Option<&str> {
        self.config().ide_lockfile_dir.as_deref()
    }

    /// The permission mode a task runs with.
    pub fn permission_mode(&self, task: &TaskSpec) -> PermissionMode {
        task.permission_mode
            .unwrap_or(self.config().permission_mode)
    }

    /// The model a task runs with, when one is chosen.
    pub fn model_for(&self, task: &TaskSpec) -> Option<String> {
        task.model
            .clone()
            .or_else(|| self.config().default_model.clone())
    }

    /// Reads a `--version` output into a version string.
    pub fn parse_version(&self, stdout: &str) -> Option<String> {
        stdout
            .split_whitespace()
            .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))
            .map(|w| {
                w.trim_matches(|c: char| !(c.is_ascii_alphanumeric() || c == '.'))
                    .to_owned()
            })
    }
}

/// A shared handle to a provider.
pub type SharedProvider = Arc<dyn AiCliProvider>;

#[cfg(test)]
mod tests;
