//! The config's `engine` section ([`EngineConfig`]): limits, retries, the MCP server, env.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::commit::CommitConfig;
use super::notify::NotifyConfig;
use crate::docker_config::{DockerConfig, RunnerKind};

/// Engine settings. Every field has a default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// Sessions running at once.
    pub max_parallel: usize,
    /// Wall-clock limit per run, seconds.
    pub timeout_secs: u64,
    /// Idle limit per run (no output for this long), seconds.
    pub idle_timeout_secs: u64,
    /// Longest stdout line accepted, bytes; a longer one becomes a `protocol` event.
    pub line_cap_bytes: usize,
    /// How much of stderr is kept (the tail), bytes.
    pub stderr_tail_bytes: usize,
    /// Longest prompt accepted (a task's, an answer's), bytes; a longer one is refused
    /// before anything is written or run.
    pub max_prompt_bytes: usize,
    /// Between SIGTERM and SIGKILL of a run's process group, milliseconds.
    pub kill_grace_ms: u64,
    /// Retries of rate-limited or overloaded tasks.
    pub retry: RetryConfig,
    /// Where run records go; `<repo>/.aicli/runs` when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs_dir: Option<PathBuf>,
    /// Where worktrees go; `<repo>/.aicli/worktrees` when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktrees_dir: Option<PathBuf>,
    /// Where skills live; `<repo>/.aicli/skills` when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skills_dir: Option<PathBuf>,
    /// Skills connected to every task, besides each task's own.
    pub skills: Vec<String>,
    /// Names in `mcp_tools` or `mcp_upstreams` granted to every task, besides each
    /// task's own `mcp_tools`.
    pub mcp_tools: Vec<String>,
    /// A JSON file of credential name -> value for the MCP `getCredential` tool (values
    /// are otherwise read from the environment).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credentials_file: Option<PathBuf>,
    /// The agent MCP server.
    pub mcp: McpServerConfig,
    /// Notifications when a task blocks, finishes or fails, and when a batch ends: a
    /// webhook and/or a command.
    pub notify: NotifyConfig,
    /// Deprecated (`engine.notify.command` replaces it): a command (argv) run with a
    /// blocked task's question as JSON on stdin. It still runs, on `blocked` only, and
    /// each batch that uses it logs a warning saying where to move it.
    pub notify_hook: Vec<String>,
    /// Look for credentials before starting a CLI (env vars and login files the provider
    /// config names), and fail the run as `auth` at once when there are none. Turn off
    /// for credentials aicli cannot see (an OS keychain).
    pub auth_precheck: bool,
    /// Where tasks run when neither the task, the batch nor the provider names a runner.
    pub runner: RunnerKind,
    /// The Docker runner: engines, images, limits.
    pub docker: DockerConfig,
    /// The variables every CLI gets from aicli's environment (names, or prefixes ending
    /// in `*`): the base a program needs to run (paths, locale, terminal, time zone,
    /// proxies, CA bundles). A CLI's environment is built from nothing: this set, then its
    /// provider's `auth_env_vars` and `env_passthrough`, then the provider's `env` and
    /// the task's `env`. Nothing else of aicli's environment reaches it.
    pub env_passthrough: Vec<String>,
    /// Whether each run's processes get a cgroup of their own, killed as a whole when
    /// the run ends (and by `aicli resume` after aicli itself was killed): `auto` uses
    /// cgroup v2 where aicli may make one (root, or a delegated subtree), else cgroup v1
    /// (the freezer or pids hierarchy), else none; `v2` and `v1` use only that version;
    /// `off` never makes one. Without a cgroup, a run's processes are its process group
    /// and the orphans aicli adopts as their subreaper.
    pub cgroups: CgroupMode,
    /// Each attempt's work committed on the task's branch (`auto`, the default) or left
    /// uncommitted in its worktree (`off`); the largest file committed; the author when
    /// the repository has no identity.
    pub commit: CommitConfig,
}

/// See [`EngineConfig::cgroups`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CgroupMode {
    /// v2 where possible, else v1, else none.
    #[default]
    Auto,
    /// cgroup v2 only.
    V2,
    /// cgroup v1 only (the freezer, else the pids hierarchy).
    V1,
    /// No cgroups.
    Off,
}

/// The default [`EngineConfig::env_passthrough`].
pub fn default_env_passthrough() -> Vec<String> {
    [
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "LC_*",
        "TERM",
        "TMPDIR",
        "TZ",
        "XDG_*",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "all_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "ALL_PROXY",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "NODE_EXTRA_CA_CERTS",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect()
}

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig {
            max_parallel: 4,
            timeout_secs: 1800,
            idle_timeout_secs: 600,
            line_cap_bytes: 8 * 1024 * 1024,
            stderr_tail_bytes: 64 * 1024,
            max_prompt_bytes: 4 * 1024 * 1024,
            kill_grace_ms: 3000,
            retry: RetryConfig::default(),
            runs_dir: None,
            worktrees_dir: None,
            skills_dir: None,
            skills: Vec::new(),
            mcp_tools: Vec::new(),
            credentials_file: None,
            mcp: McpServerConfig::default(),
            notify: NotifyConfig::default(),
            notify_hook: Vec::new(),
            auth_precheck: true,
            runner: RunnerKind::Local,
            docker: DockerConfig::default(),
            env_passthrough: default_env_passthrough(),
            cgroups: CgroupMode::Auto,
            commit: CommitConfig::default(),
        }
    }
}

/// Back-off and retry of rate-limited or overloaded tasks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RetryConfig {
    /// Attempts per task in all (1 = no retry).
    pub max_attempts: u32,
    /// First back-off delay, milliseconds (doubled per attempt, with jitter).
    pub base_delay_ms: u64,
    /// Longest back-off delay, milliseconds (a reset time the CLI gives may be later).
    pub max_delay_ms: u64,
    /// How often a task may park at its provider's usage limit in one invocation before
    /// it fails with `usage_limit` (a limit that is still on after its reset parks it
    /// again). 0: never park; a usage limit fails the task at once.
    pub max_parks: u32,
    /// How long a task parks when the CLI does not say when its usage limit resets,
    /// seconds.
    pub unknown_reset_secs: u64,
}

impl Default for RetryConfig {
    fn default() -> RetryConfig {
        RetryConfig {
            max_attempts: 3,
            base_delay_ms: 2000,
            max_delay_ms: 120_000,
            max_parks: 5,
            unknown_reset_secs: 1800,
        }
    }
}

/// The agent MCP server's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct McpServerConfig {
    /// Start the server with each run or batch and wire it into each CLI.
    pub enabled: bool,
    /// Address to bind (`127.0.0.1:0` = loopback, ephemeral port).
    pub bind: String,
    /// Extra Host header values to accept (besides loopback and the bind host).
    pub allowed_hosts: Vec<String>,
    /// Timeouts, connection and session limits, and the caps on tool arguments.
    pub limits: McpLimits,
}

impl Default for McpServerConfig {
    fn default() -> McpServerConfig {
        McpServerConfig {
            enabled: true,
            bind: "127.0.0.1:0".to_owned(),
            allowed_hosts: Vec::new(),
            limits: McpLimits::default(),
        }
    }
}

/// The agent MCP server's limits: every connection has a timeout, every token a number
/// of sessions, every request and tool argument a size. Each must be at least 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct McpLimits {
    /// A request's head must have arrived this many seconds after the connection became
    /// ready for it (a new connection, or a kept-alive one after its last response): a
    /// slow or partial header, and a kept-alive connection left idle, are closed then.
    pub header_read_timeout_secs: u64,
    /// A connection on which no byte moves either way for this many seconds is closed,
    /// whatever it is doing (a request body that stalls, a response nobody reads). Event
    /// streams send a keep-alive every 15 s, so a live stream never idles.
    pub idle_timeout_secs: u64,
    /// Open connections at most; more are closed as soon as they are accepted.
    pub max_connections: usize,
    /// Largest request body, bytes (larger: 413).
    pub max_body_bytes: usize,
    /// MCP sessions one token (one task run) may hold at once; a new one beyond is
    /// refused with 429 until one is closed or expires.
    pub max_sessions_per_token: usize,
    /// A session with no request for this many seconds is closed and its memory freed
    /// (a client that comes back gets 404 and starts a new one, as MCP says).
    pub session_idle_timeout_secs: u64,
    /// `broadcastLog`'s `message`, characters; a longer one is cut (and the answer says so).
    pub log_message_chars: usize,
    /// `broadcastLog`'s `source`, characters.
    pub log_source_chars: usize,
    /// `ask_user`'s `question`, characters.
    pub question_chars: usize,
    /// `ask_user`'s `options`: how many.
    pub max_options: usize,
    /// Each of `ask_user`'s `options`, characters.
    pub option_chars: usize,
    /// `getWorkspaceFiles`' `path`, characters.
    pub path_chars: usize,
    /// `getWorkspaceFiles`' `pattern`, characters.
    pub pattern_chars: usize,
    /// `getSkill`'s and `getCredential`'s `name`, characters.
    pub name_chars: usize,
    /// The arguments of a call to a granted tool (a command-backed tool of `mcp_tools`,
    /// or an upstream's tool), bytes of their JSON; a larger call is refused with a
    /// JSON-RPC error and nothing runs or is forwarded.
    pub tool_argument_bytes: usize,
}

impl Default for McpLimits {
    fn default() -> McpLimits {
        McpLimits {
            header_read_timeout_secs: 10,
            idle_timeout_secs: 30,
            max_connections: 256,
            max_body_bytes: 1024 * 1024,
            max_sessions_per_token: 32,
            session_idle_timeout_secs: 300,
            log_message_chars: 5_000,
            log_source_chars: 200,
            question_chars: 4_000,
            max_options: 20,
            option_chars: 500,
            path_chars: 4_096,
            pattern_chars: 1_024,
            name_chars: 256,
            tool_argument_bytes: 64 * 1024,
        }
    }
}

impl McpLimits {
    /// Each limit by its config name, for validation and messages.
    pub fn named(&self) -> [(&'static str, u64); 15] {
        [
            ("header_read_timeout_secs", self.header_read_timeout_secs),
            ("idle_timeout_secs", self.idle_timeout_secs),
            ("max_connections", self.max_connections as u64),
            ("max_body_bytes", self.max_body_bytes as u64),
            ("max_sessions_per_token", self.max_sessions_per_token as u64),
            ("session_idle_timeout_secs", self.session_idle_timeout_secs),
            ("log_message_chars", self.log_message_chars as u64),
            ("log_source_chars", self.log_source_chars as u64),
            ("question_chars", self.question_chars as u64),
            ("max_options", self.max_options as u64),
            ("option_chars", self.option_chars as u64),
            ("path_chars", self.path_chars as u64),
            ("pattern_chars", self.pattern_chars as u64),
            ("name_chars", self.name_chars as u64),
            ("tool_argument_bytes", self.tool_argument_bytes as u64),
        ]
    }
}
