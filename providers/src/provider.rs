//! The [`AiCliProvider`] trait and the plain data it speaks: [`Feature`],
//! [`LaunchContext`], [`CommandSpec`] (with its [`FileSpec`]s and [`LinkSpec`]s),
//! [`McpEndpoint`], [`McpWiring`], [`AuthStatus`].
//!
//! A provider is pure where it can be: it turns a task into a command to run and the
//! CLI's lines into events and a result. It never spawns processes or does I/O except
//! for the small local checks named below (finding the binary, a pre-flight look for
//! credentials); the engine runs what the provider describes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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

/// Where a CLI's executable is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum BinaryLocation {
    /// An executable file.
    Path(PathBuf),
    /// Run through `npx --yes <package>` (the configured fallback).
    Npx {
        /// The npx executable.
        npx: PathBuf,
        /// `package@version` to run.
        package: String,
    },
}

impl BinaryLocation {
    /// The program to execute and the arguments that come before the CLI's own.
    pub fn command_prefix(&self) -> (PathBuf, Vec<String>) {
        match self {
            BinaryLocation::Path(p) => (p.clone(), Vec::new()),
            BinaryLocation::Npx { npx, package } => (
                npx.clone(),
                vec!["--yes".to_owned(), package.clone(), "--".to_owned()],
            ),
        }
    }

    /// For display.
    pub fn describe(&self) -> String {
        match self {
            BinaryLocation::Path(p) => p.display().to_string(),
            BinaryLocation::Npx { npx, package } => {
                format!("{} --yes {package}", npx.display())
            }
        }
    }
}

/// aicli's MCP server as one run sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpEndpoint {
    /// The server's name in the CLI's config (`aicli`).
    pub name: String,
    /// The streamable-HTTP URL (`http://127.0.0.1:PORT/mcp`).
    pub url: String,
    /// The run's bearer token.
    pub token: String,
    /// The server's tool names (for allowlists such as Claude's `mcp__aicli__<tool>`).
    pub tools: Vec<String>,
}

/// A file the engine writes before the run (and removes with the run's private dir).
#[derive(Clone, PartialEq, Eq)]
pub struct FileSpec {
    /// Absolute path.
    pub path: PathBuf,
    /// Contents.
    pub contents: String,
    /// Unix mode (0o600 for anything holding a token).
    pub mode: u32,
}

impl std::fmt::Debug for FileSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Contents may hold a bearer token: never print them.
        f.debug_struct("FileSpec")
            .field("path", &self.path)
            .field("bytes", &self.contents.len())
            .field("mode", &format_args!("{:o}", self.mode))
            .finish()
    }
}

/// A symbolic link the engine creates before the run and removes after it (a CLI's
/// per-run home that shares the user's state, for instance).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkSpec {
    /// The link's absolute path, under the run's private directory. Missing parent
    /// directories are created (0700); a link or file already there is replaced, a
    /// directory there is an error.
    pub link: PathBuf,
    /// What the link points to (absolute). It need not exist, unless `create_target_dir`.
    pub target: PathBuf,
    /// Create `target` as a directory (0700, with missing parents) when nothing is there:
    /// for state the CLI writes through the link that must outlive the run.
    pub create_target_dir: bool,
}

/// How an MCP server is wired into one run of a CLI: arguments, environment, files and
/// links.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct McpWiring {
    /// Arguments to add.
    pub args: Vec<String>,
    /// Environment to add.
    pub env: BTreeMap<String, String>,
    /// Files to write first.
    pub files: Vec<FileSpec>,
    /// Links to create first.
    pub links: Vec<LinkSpec>,
}

/// Everything a provider needs to build a run's command. Built by the engine.
#[derive(Debug, Clone)]
pub struct LaunchContext<'a> {
    /// The task.
    pub task: &'a TaskSpec,
    /// The executable.
    pub binary: &'a BinaryLocation,
    /// The directory the CLI runs in: the task's worktree, or its `cwd` subdirectory
    /// (the engine has joined it already).
    pub workdir: &'a Path,
    /// A private directory for this run's config files (0700, outside the worktree).
    pub private_dir: &'a Path,
    /// aicli's MCP server, when it runs.
    pub mcp: Option<&'a McpEndpoint>,
    /// What this run may spend of the batch budget, USD, when the batch has one: the
    /// share the engine reserved for it before it started (the reservations of the runs
    /// in flight together fit in what is left). A CLI with a per-run cap
    /// ([`Feature::MaxBudget`]) gets it as its cap.
    pub budget_remaining_usd: Option<f64>,
    /// Whether the CLI runs as root (Claude needs `IS_SANDBOX=1` to bypass permissions).
    pub is_root: bool,
    /// Whether the CLI runs in a container (aicli's Docker runner): the container is its
    /// sandbox, and a CLI's own sandbox that needs kernel namespaces (Codex's bubblewrap)
    /// cannot start there.
    pub in_container: bool,
    /// The environment the CLI inherits before the provider's and the task's (e.g. its
    /// `HOME`).
    pub env: &'a BTreeMap<String, String>,
    /// The `PATH` binaries are found on (the run's `PATH`, then aicli's cache), for a
    /// command that names other executables (an ACP wrapper's `CLAUDE_CODE_EXECUTABLE`).
    pub search_path: Option<&'a str>,
}

/// A command to run: the output of [`AiCliProvider::command`].
#[derive(Clone, PartialEq)]
pub struct CommandSpec {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment set over the inherited one.
    pub env: BTreeMap<String, String>,
    /// Inherited variables to remove.
    pub env_remove: Vec<String>,
    /// Start from an empty environment (then `env`) instead of inheriting aicli's. The
    /// engine sets it with `env` holding the whole, explicit environment of the run.
    pub env_clear: bool,
    /// What to write to stdin (then close it); stdin is null when `None`. The prompt
    /// goes here, never into `args` (which any user of the machine can read).
    pub stdin: Option<String>,
    /// A two-way CLI: stdin stays open after `stdin` (if any) for the messages the
    /// run's decoder makes ([`crate::Decoder::take_stdin`]), and is closed when the
    /// decoder says it is finished.
    pub stdin_open: bool,
    /// The working directory.
    pub cwd: PathBuf,
    /// Files to write before starting.
    pub files: Vec<FileSpec>,
    /// Symbolic links to create before starting (before the files, so a file may go
    /// into a directory made for links); removed with the files after the run.
    pub links: Vec<LinkSpec>,
}

impl std::fmt::Debug for CommandSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Env values may be secrets: show names only.
        f.debug_struct("CommandSpec")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("env_remove", &self.env_remove)
            .field("env_clear", &self.env_clear)
            .field("stdin_bytes", &self.stdin.as_ref().map(String::len))
            .field("stdin_open", &self.stdin_open)
            .field("cwd", &self.cwd)
            .field("files", &self.files)
            .field("links", &self.links)
            .finish()
    }
}

impl CommandSpec {
    /// A command running `binary` (with its npx prefix, if any) in `cwd`.
    pub fn new(binary: &BinaryLocation, cwd: &Path) -> CommandSpec {
        let (program, args) = binary.command_prefix();
        CommandSpec {
            program,
            args,
            env: BTreeMap::new(),
            env_remove: Vec::new(),
            env_clear: false,
            stdin: None,
            stdin_open: false,
            cwd: cwd.to_path_buf(),
            files: Vec::new(),
            links: Vec::new(),
        }
    }

    /// Appends arguments.
    pub fn args<I, S>(&mut self, args: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable.
    pub fn env(&mut self, k: impl Into<String>, v: impl Into<String>) -> &mut Self {
        self.env.insert(k.into(), v.into());
        self
    }

    /// Adds an MCP wiring.
    pub fn wire(&mut self, w: McpWiring) -> &mut Self {
        self.args.extend(w.args);
        self.env.extend(w.env);
        self.files.extend(w.files);
        self.links.extend(w.links);
        self
    }
}

/// The outcome of a CLI's auth-status probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum AuthStatus {
    /// Logged in; `method` says how, when the CLI says.
    LoggedIn {
        /// e.g. `api_key`, `oauth`.
        method: Option<String>,
    },
    /// Not logged in; `hint` says what to run.
    LoggedOut {
        /// What to do about it.
        hint: String,
    },
    /// The CLI has no status probe or its answer was not understood.
    Unknown {
        /// Why.
        detail: String,
    },
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
    /// CLI needs one (the ACP entry's `load_in_a_new_minute`); `began` is a time the
    /// session had begun by (the end of the run that began it). Default: no pause.
    fn resume_not_before(
        &self,
        last: &crate::result::SessionResult,
        began: std::time::SystemTime,
    ) -> Option<std::time::SystemTime> {
        let _ = (last, began);
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

/// The default credentials look (see [`AiCliProvider::auth_precheck`]).
pub fn default_auth_precheck(
    c: &ProviderConfig,
    env: &BTreeMap<String, String>,
    home: &Path,
) -> Option<String> {
    if c.auth_env_vars.is_empty() && c.auth_files.is_empty() {
        return None;
    }
    if c.auth_env_vars
        .iter()
        .any(|v| env.get(v).is_some_and(|s| !s.is_empty()))
    {
        return None;
    }
    if c.auth_files.iter().any(|f| home.join(f).exists()) {
        return None;
    }
    let fix = if c.login_argv.is_empty() {
        format!(
            "set one of {} or log in once with `{}` interactively",
            c.auth_env_vars.join(", "),
            c.binary_name
        )
    } else {
        format!("run: {} {}", c.binary_name, c.login_argv.join(" "))
    };
    Some(format!(
        "not logged in: none of {} is set and no login file ({}) exists under {}; {fix}",
        c.auth_env_vars.join(", "),
        c.auth_files.join(", "),
        home.display(),
    ))
}

/// The default binary discovery (see [`AiCliProvider::binary_path`]).
pub fn default_binary_path(
    name: &str,
    config: &ProviderConfig,
    search_path: Option<&str>,
) -> Result<BinaryLocation, ProviderError> {
    // The npm package at the pinned version: what npx runs and what to install.
    let package = match &config.version {
        Some(v) => format!("{}@{v}", config.package),
        None => config.package.clone(),
    };
    if let Some(p) = &config.binary_path {
        return if is_executable(p) {
            Ok(BinaryLocation::Path(p.clone()))
        } else {
            Err(ProviderError::BadBinaryPath {
                provider: name.to_owned(),
                path: p.clone(),
                package,
            })
        };
    }
    let path_var = search_path
        .map(str::to_owned)
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_default();
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    if let Ok(p) = which::which_in(&config.binary_name, Some(&path_var), &cwd) {
        return Ok(BinaryLocation::Path(p));
    }
    if config.npx_fallback
        && let Ok(npx) = which::which_in("npx", Some(&path_var), &cwd)
    {
        return Ok(BinaryLocation::Npx { npx, package });
    }
    Err(ProviderError::NotInstalled {
        binary: config.binary_name.clone(),
        package,
        looked_in: if config.npx_fallback {
            "PATH, and npx is not on PATH".to_owned()
        } else {
            "PATH".to_owned()
        },
    })
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// A shared handle to a provider.
pub type SharedProvider = Arc<dyn AiCliProvider>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_cli_says_which_npm_package_installs_it() {
        let empty = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut config = ProviderConfig::new("@acme/cli", "acme");
        config.version = Some("1.2.3".into());
        let search = empty.path().display().to_string();
        // Not on the search path.
        let err = default_binary_path("acme", &config, Some(&search))
            .err()
            .map(|e| (e.kind(), e.to_string()));
        assert_eq!(
            err,
            Some((
                crate::ErrorKind::NotInstalled,
                "acme is not installed (looked in PATH and aicli's cache); install it with `aicli install`, or: npm install -g @acme/cli@1.2.3".to_owned()
            ))
        );
        // A configured binary_path that is not there.
        config.binary_path = Some(empty.path().join("acme"));
        let err = default_binary_path("acme", &config, Some(&search))
            .err()
            .map(|e| (e.kind(), e.to_string()));
        assert_eq!(
            err,
            Some((
                crate::ErrorKind::NotInstalled,
                format!(
                    "binary_path {}/acme for provider acme does not exist or is not executable; fix binary_path, or remove it and install the CLI with `aicli install acme` (or: npm install -g @acme/cli@1.2.3)",
                    empty.path().display()
                )
            ))
        );
    }
}
