//! The `ai_cli_providers.json` config: types (serde + schemars), loading, merging and
//! validation.
//!
//! The repository's `ai_cli_providers.json` is embedded as the defaults. A user file is
//! merged over it (JSON merge patch: objects merge key by key, anything else replaces,
//! `null` removes), so `{"providers": {"claude": {"binary_path": "/opt/claude"}}}` alone is
//! a valid user config. A provider entry that names an `adapter` and is not among the
//! defaults starts from the defaults of that adapter's built-in entry.
//!
//! Where the user file comes from, first match wins: the path given to
//! [`AiCliConfig::load`] (`--config PATH`), the `AICLI_CONFIG` environment variable,
//! `$XDG_CONFIG_HOME/aicli/ai_cli_providers.json` (or `~/.config/aicli/...`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::docker_config::{DockerConfig, RunnerKind};
use crate::error::ConfigError;
use crate::mcp_tools::{McpToolConfig, McpUpstreamConfig};
use crate::provider::Feature;
use crate::task::PermissionMode;
use crate::usage::PriceTable;

/// The built-in defaults: the repository's `ai_cli_providers.json`.
pub const DEFAULT_CONFIG_JSON: &str = include_str!("../../ai_cli_providers.json");

/// The origin name used in errors about the built-in defaults.
pub const BUILTIN_ORIGIN: &str = "built-in defaults (ai_cli_providers.json)";

/// The environment variable that names a user config file.
pub const CONFIG_ENV_VAR: &str = "AICLI_CONFIG";

/// The whole config file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AiCliConfig {
    /// Where the JSON Schema of this file is (editors use it).
    #[serde(rename = "$schema", default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// The provider used when a task or command names none.
    pub default_provider: String,
    /// The providers, by name.
    pub providers: BTreeMap<String, ProviderConfig>,
    /// Engine settings (parallelism, timeouts, retries, records, MCP server).
    #[serde(default)]
    pub engine: EngineConfig,
    /// Command-backed tools aicli's MCP server offers to the tasks granted them, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mcp_tools: BTreeMap<String, McpToolConfig>,
    /// Upstream MCP servers whose tools aicli's MCP server offers (as
    /// `<upstream>__<tool>`) to the tasks granted them, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mcp_upstreams: BTreeMap<String, McpUpstreamConfig>,
}

/// One provider entry: facts about a CLI and the defaults its runs get.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// The adapter (implementation) that drives this CLI; defaults to the entry's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<String>,
    /// The npm package that ships the CLI.
    pub package: String,
    /// The executable's name on PATH.
    pub binary_name: String,
    /// An explicit executable path; overrides discovery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary_path: Option<PathBuf>,
    /// The CLI version this config and the fixtures were made with (the pin `.ci/run`
    /// installs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// When the binary is not found, run it through `npx --yes <package>@<version>`.
    /// Off by default: it downloads code at run time.
    #[serde(default)]
    pub npx_fallback: bool,
    /// argv (after the binary) that logs in interactively.
    #[serde(default)]
    pub login_argv: Vec<String>,
    /// argv (after the binary) that prints the auth status; empty when the CLI has none.
    #[serde(default)]
    pub auth_status_argv: Vec<String>,
    /// argv (after the binary) that prints the version.
    #[serde(default = "default_version_argv")]
    pub version_argv: Vec<String>,
    /// The model used when a task names none; the CLI's own default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_model: Option<String>,
    /// Turn limit when a task names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// Per-task dollar limit when a task names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_budget_usd: Option<f64>,
    /// Tools allowed without asking, added to each task's.
    #[serde(default)]
    pub allowed_tools: Vec<String>,
    /// Tools refused, added to each task's.
    #[serde(default)]
    pub disallowed_tools: Vec<String>,
    /// Permission mode when a task names none.
    #[serde(default = "default_permission_mode")]
    pub permission_mode: PermissionMode,
    /// The features this CLI supports.
    #[serde(default)]
    pub supports: Vec<Feature>,
    /// Environment given to every run (over the variables passed from aicli's own
    /// environment, under the task's).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The provider's own variables passed from aicli's environment to its CLI, besides
    /// `engine.env_passthrough` and `auth_env_vars`: its endpoints, config directories
    /// and credentials. A name, or a prefix ending in `*` (`ANTHROPIC_*`). Nothing else
    /// of aicli's environment reaches the CLI.
    #[serde(default)]
    pub env_passthrough: Vec<String>,
    /// Arguments appended to every run's argv (before the task's own).
    #[serde(default)]
    pub extra_args: Vec<String>,
    /// Environment variables any one of which counts as credentials for the quick
    /// pre-flight auth check (besides the CLI's own login files). They are passed from
    /// aicli's environment to the CLI.
    #[serde(default)]
    pub auth_env_vars: Vec<String>,
    /// Files (relative to the home directory) any one of which counts as a login.
    #[serde(default)]
    pub auth_files: Vec<String>,
    /// The env var through which the CLI finds an IDE lockfile's port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ide_lock_env_var: Option<String>,
    /// Where the CLI looks for IDE lockfiles, relative to the home directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ide_lockfile_dir: Option<String>,
    /// Prices per model, USD per million tokens, for estimating cost where the CLI
    /// reports none.
    #[serde(default)]
    pub prices: PriceTable,
    /// `aicli install` installs the package with `npm install --omit=optional`, into a
    /// prefix of its own (`<cache>/slim`), so that the other CLIs' optional native
    /// packages stay: for wrappers whose optional dependency is a whole CLI that aicli
    /// already pins (claude-agent-acp bundles Claude Code, codex-acp Codex).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub npm_omit_optional: bool,
    /// How aicli drives an ACP agent (entries with `"adapter": "acp"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acp: Option<crate::acp::AcpConfig>,
    /// Where this provider's tasks run when the task and the batch name no runner
    /// (`engine.runner` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<RunnerKind>,
    /// Files under the user's home (relative paths) that hold this CLI's login: a
    /// container run gets a private copy of each that exists, in the task's own home
    /// (never in an image).
    #[serde(default)]
    pub container_home_files: Vec<String>,
}

fn default_version_argv() -> Vec<String> {
    vec!["--version".to_owned()]
}

fn default_permission_mode() -> PermissionMode {
    PermissionMode::AcceptEdits
}

impl ProviderConfig {
    /// The adapter for an entry called `name`.
    pub fn adapter_name<'a>(&'a self, name: &'a str) -> &'a str {
        self.adapter.as_deref().unwrap_or(name)
    }

    /// A minimal entry for a CLI (everything else at its default).
    pub fn new(package: impl Into<String>, binary_name: impl Into<String>) -> ProviderConfig {
        ProviderConfig {
            adapter: None,
            package: package.into(),
            binary_name: binary_name.into(),
            binary_path: None,
            version: None,
            npx_fallback: false,
            login_argv: Vec::new(),
            auth_status_argv: Vec::new(),
            version_argv: default_version_argv(),
            default_model: None,
            max_turns: None,
            max_budget_usd: None,
            allowed_tools: Vec::new(),
            disallowed_tools: Vec::new(),
            permission_mode: default_permission_mode(),
            supports: Vec::new(),
            env: BTreeMap::new(),
            env_passthrough: Vec::new(),
            extra_args: Vec::new(),
            auth_env_vars: Vec::new(),
            auth_files: Vec::new(),
            ide_lock_env_var: None,
            ide_lockfile_dir: None,
            prices: PriceTable::default(),
            npm_omit_optional: false,
            acp: None,
            runner: None,
            container_home_files: Vec::new(),
        }
    }
}

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
    /// A command (argv) run with a blocked task's question as JSON on stdin.
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
            kill_grace_ms: 3000,
            retry: RetryConfig::default(),
            runs_dir: None,
            worktrees_dir: None,
            skills_dir: None,
            skills: Vec::new(),
            mcp_tools: Vec::new(),
            credentials_file: None,
            mcp: McpServerConfig::default(),
            notify_hook: Vec::new(),
            auth_precheck: true,
            runner: RunnerKind::Local,
            docker: DockerConfig::default(),
            env_passthrough: default_env_passthrough(),
            cgroups: CgroupMode::Auto,
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
}

impl Default for RetryConfig {
    fn default() -> RetryConfig {
        RetryConfig {
            max_attempts: 3,
            base_delay_ms: 2000,
            max_delay_ms: 120_000,
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

/// A loaded config and where it came from.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    /// The merged config.
    pub config: AiCliConfig,
    /// The user file merged over the defaults, if any.
    pub user_file: Option<PathBuf>,
}

impl AiCliConfig {
    /// The built-in defaults alone.
    pub fn builtin() -> Result<AiCliConfig, ConfigError> {
        let v = parse_json(DEFAULT_CONFIG_JSON, BUILTIN_ORIGIN)?;
        from_merged(v, None, BUILTIN_ORIGIN)
    }

    /// Loads the defaults and merges the user file over them: `explicit` if given,
    /// else `$AICLI_CONFIG` (read from `env`), else the user config dir's file if it
    /// exists. `env` is a lookup, so tests need not touch the process environment.
    pub fn load(
        explicit: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<LoadedConfig, ConfigError> {
        let user_file = match explicit {
            Some(p) => Some(p.to_path_buf()),
            None => match env(CONFIG_ENV_VAR).filter(|s| !s.is_empty()) {
                Some(p) => Some(PathBuf::from(p)),
                None => user_config_path(&env).filter(|p| p.is_file()),
            },
        };
        let config = match &user_file {
            None => AiCliConfig::builtin()?,
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.clone(),
                    source,
                })?;
                AiCliConfig::from_user_json(&text, &path.display().to_string())?
            }
        };
        Ok(LoadedConfig { config, user_file })
    }

    /// The defaults with `user_json` (named `origin` in errors) merged over them.
    pub fn from_user_json(user_json: &str, origin: &str) -> Result<AiCliConfig, ConfigError> {
        let mut base = parse_json(DEFAULT_CONFIG_JSON, BUILTIN_ORIGIN)?;
        let user = parse_json(user_json, origin)?;
        if !user.is_object() {
            return Err(ConfigError::Shape {
                origin: origin.to_owned(),
                json_path: "$".to_owned(),
                message: "expected a JSON object".to_owned(),
            });
        }
        inherit_adapter_defaults(&mut base, &user);
        merge_patch(&mut base, &user);
        from_merged(base, Some(&user), origin)
    }

    /// Checks what types cannot: the default provider exists, numbers are in range.
    pub fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        let invalid = |json_path: String, message: String| ConfigError::Invalid {
            origin: origin.to_owned(),
            json_path,
            message,
        };
        if !self.providers.contains_key(&self.default_provider) {
            return Err(invalid(
                "default_provider".into(),
                format!(
                    "'{}' is not one of the providers ({})",
                    self.default_provider,
                    self.providers
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        if self.engine.max_parallel == 0 {
            return Err(invalid(
                "engine.max_parallel".into(),
                "must be at least 1".into(),
            ));
        }
        if self.engine.retry.max_attempts == 0 {
            return Err(invalid(
                "engine.retry.max_attempts".into(),
                "must be at least 1".into(),
            ));
        }
        if self.engine.line_cap_bytes < 1024 {
            return Err(invalid(
                "engine.line_cap_bytes".into(),
                "must be at least 1024".into(),
            ));
        }
        if let Err((path, message)) = self.engine.docker.check() {
            return Err(invalid(format!("engine.docker.{path}"), message));
        }
        check_env_patterns(
            &self.engine.env_passthrough,
            "engine.env_passthrough",
            &invalid,
        )?;
        for (name, v) in self.engine.mcp.limits.named() {
            if v == 0 {
                return Err(invalid(
                    format!("engine.mcp.limits.{name}"),
                    "must be at least 1".into(),
                ));
            }
        }
        let path = std::env::var("PATH").ok();
        crate::mcp_tools::check(
            &self.mcp_tools,
            &self.mcp_upstreams,
            &self.engine.mcp_tools,
            path.as_deref(),
            &invalid,
            &|patterns, at| check_env_patterns(patterns, at, &invalid),
        )?;
        for (name, p) in &self.providers {
            check_env_patterns(
                &p.env_passthrough,
                &format!("providers.{name}.env_passthrough"),
                &invalid,
            )?;
            check_env_patterns(
                &p.auth_env_vars,
                &format!("providers.{name}.auth_env_vars"),
                &invalid,
            )?;
            if let Some(f) = p.container_home_files.iter().find(|f| {
                let p = Path::new(f);
                p.is_absolute()
                    || p.components()
                        .any(|c| matches!(c, std::path::Component::ParentDir))
            }) {
                return Err(invalid(
                    format!("providers.{name}.container_home_files"),
                    format!("'{f}' must be a relative path inside the home directory"),
                ));
            }
            if p.binary_name.trim().is_empty() {
                return Err(invalid(
                    format!("providers.{name}.binary_name"),
                    "must not be empty".into(),
                ));
            }
            if let Some(b) = p.max_budget_usd
                && !(b.is_finite() && b >= 0.0)
            {
                return Err(invalid(
                    format!("providers.{name}.max_budget_usd"),
                    format!("{b} is not a non-negative number"),
                ));
            }
            for (model, price) in &p.prices.0 {
                let all = [
                    Some(price.input),
                    price.cached_input,
                    price.cache_write,
                    Some(price.output),
                ];
                if all
                    .into_iter()
                    .flatten()
                    .any(|x| !(x.is_finite() && x >= 0.0))
                {
                    return Err(invalid(
                        format!("providers.{name}.prices.{model}"),
                        "prices must be non-negative numbers".into(),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The first of `grants` (a task's `mcp_tools`) that names neither a configured tool
    /// nor an upstream: its index and what is wrong.
    pub fn unknown_mcp_grant(&self, grants: &[String]) -> Option<(usize, String)> {
        crate::mcp_tools::unknown_grant(&self.mcp_tools, &self.mcp_upstreams, grants)
    }

    /// The entry of provider `name`, or an error listing the known ones.
    pub fn provider(&self, name: &str) -> Result<&ProviderConfig, ConfigError> {
        self.providers
            .get(name)
            .ok_or_else(|| ConfigError::UnknownProvider {
                name: name.to_owned(),
                known: self.providers.keys().cloned().collect(),
            })
    }
}

/// `$XDG_CONFIG_HOME/aicli/ai_cli_providers.json`, else `$HOME/.config/aicli/...`.
pub fn user_config_path(env: &impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let base = env("XDG_CONFIG_HOME")
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("aicli").join("ai_cli_providers.json"))
}

fn parse_json(text: &str, origin: &str) -> Result<Value, ConfigError> {
    serde_json::from_str(text).map_err(|source| ConfigError::Syntax {
        origin: origin.to_owned(),
        source,
    })
}

/// A new provider entry that names an adapter starts from that adapter's built-in entry.
fn inherit_adapter_defaults(base: &mut Value, user: &Value) {
    let Some(user_providers) = user.get("providers").and_then(Value::as_object) else {
        return;
    };
    let Some(base_providers) = base.get_mut("providers").and_then(Value::as_object_mut) else {
        return;
    };
    for (name, entry) in user_providers {
        if base_providers.contains_key(name) {
            continue;
        }
        let Some(adapter) = entry.get("adapter").and_then(Value::as_str) else {
            continue;
        };
        if let Some(template) = base_providers.get(adapter).cloned() {
            base_providers.insert(name.clone(), template);
        }
    }
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(target_map) = target {
        for (k, v) in patch_map {
            if v.is_null() {
                target_map.remove(k);
            } else {
                merge_patch(target_map.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// Each entry must be a variable name (letters, digits, `_`), or one followed by `*`.
fn check_env_patterns(
    patterns: &[String],
    json_path: &str,
    invalid: &dyn Fn(String, String) -> ConfigError,
) -> Result<(), ConfigError> {
    for (i, p) in patterns.iter().enumerate() {
        let name = p.strip_suffix('*').unwrap_or(p);
        let ok = !p.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(invalid(
                format!("{json_path}[{i}]"),
                format!(
                    "{p:?} is not a variable name or a prefix ending in '*' (letters, digits and '_')"
                ),
            ));
        }
    }
    Ok(())
}

fn from_merged(
    merged: Value,
    user: Option<&Value>,
    user_origin: &str,
) -> Result<AiCliConfig, ConfigError> {
    let config: AiCliConfig = serde_path_to_error::deserialize(&merged).map_err(|e| {
        let json_path = e.path().to_string();
        // Blame the user file when the failing path is one it sets.
        let origin = match user {
            Some(u) if path_exists(u, &json_path) => user_origin,
            Some(_) => BUILTIN_ORIGIN,
            None => user_origin,
        };
        ConfigError::Shape {
            origin: origin.to_owned(),
            json_path,
            message: e.into_inner().to_string(),
        }
    })?;
    let origin = if user.is_some() {
        user_origin
    } else {
        BUILTIN_ORIGIN
    };
    config.validate(origin)?;
    Ok(config)
}

fn path_exists(doc: &Value, path: &str) -> bool {
    let mut cur = doc;
    for seg in path.split('.').filter(|s| !s.is_empty() && *s != "?") {
        // serde_path_to_error renders sequence indices as `name[3]`.
        let (key, idx) = match seg.find('[') {
            Some(i) => (
                &seg[..i],
                seg[i + 1..].trim_end_matches(']').parse::<usize>().ok(),
            ),
            None => (seg, None),
        };
        match cur.get(key) {
            Some(v) => cur = v,
            None => return false,
        }
        if let Some(i) = idx {
            match cur.get(i) {
                Some(v) => cur = v,
                None => return false,
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn builtin_config_loads_and_validates() {
        let c = AiCliConfig::builtin().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.default_provider, "claude");
        for p in ["claude", "codex", "gemini"] {
            assert!(c.providers.contains_key(p), "{p}");
        }
    }

    #[test]
    fn a_one_line_user_config_is_merged_over_the_defaults() {
        let c = AiCliConfig::from_user_json(
            r#"{"providers": {"claude": {"binary_path": "/opt/claude"}}}"#,
            "user.json",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let claude = &c.providers["claude"];
        assert_eq!(
            claude.binary_path.as_deref(),
            Some(Path::new("/opt/claude"))
        );
        assert_eq!(claude.package, "@anthropic-ai/claude-code");
        assert!(c.providers.contains_key("codex"));
    }

    #[test]
    fn a_new_entry_naming_an_adapter_inherits_its_defaults() {
        let c = AiCliConfig::from_user_json(
            r#"{"providers": {"claude-sonnet": {"adapter": "claude", "default_model": "sonnet"}}}"#,
            "user.json",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let p = &c.providers["claude-sonnet"];
        assert_eq!(p.adapter_name("claude-sonnet"), "claude");
        assert_eq!(p.default_model.as_deref(), Some("sonnet"));
        assert_eq!(p.binary_name, "claude");
    }

    #[test]
    fn shape_errors_name_the_file_and_json_path() {
        let err = AiCliConfig::from_user_json(
            r#"{"providers": {"claude": {"max_turns": "many"}}}"#,
            "/home/u/aicli.json",
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(err.starts_with("config /home/u/aicli.json: at providers.claude.max_turns: invalid type: string \"many\", expected u32"), "{err}");

        let err = AiCliConfig::from_user_json(r#"{"engine": {"max_paralel": 3}}"#, "u.json")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains(
                "at engine.max_paralel: unknown field `max_paralel`, expected one of `max_parallel`"
            ),
            "{err}"
        );

        let err = AiCliConfig::from_user_json(r#"{"default_provider": "claud"}"#, "u.json")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains(
                "at default_provider: 'claud' is not one of the providers (claude, claude-acp, codex, codex-acp, gemini, gemini-acp)"
            ),
            "{err}"
        );

        let err = AiCliConfig::from_user_json("{\"providers\": ", "u.json")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.starts_with("config u.json is not valid JSON"), "{err}");

        let err = AiCliConfig::from_user_json(
            r#"{"providers": {"acme": {"binary_name": "acme"}}}"#,
            "u.json",
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(
            err.contains("at providers.acme: missing field `package`"),
            "{err}"
        );
    }

    #[test]
    fn merge_patch_follows_rfc7386() {
        let mut t = json!({"a": {"b": 1, "c": 2}, "d": [1]});
        merge_patch(&mut t, &json!({"a": {"b": null, "e": 3}, "d": [2]}));
        assert_eq!(t, json!({"a": {"c": 2, "e": 3}, "d": [2]}));
    }

    #[test]
    fn load_prefers_explicit_then_env_then_user_dir() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let explicit = dir.path().join("x.json");
        std::fs::write(&explicit, r#"{"default_provider": "codex"}"#).unwrap_or_default();
        let envfile = dir.path().join("env.json");
        std::fs::write(&envfile, r#"{"default_provider": "gemini"}"#).unwrap_or_default();
        let xdg = dir.path().join("xdg");
        std::fs::create_dir_all(xdg.join("aicli")).unwrap_or_default();
        std::fs::write(
            xdg.join("aicli/ai_cli_providers.json"),
            r#"{"engine": {"max_parallel": 9}}"#,
        )
        .unwrap_or_default();
        let envs = |with_env: bool| {
            let envfile = envfile.clone();
            let xdg = xdg.clone();
            move |k: &str| match k {
                "AICLI_CONFIG" if with_env => Some(envfile.display().to_string()),
                "XDG_CONFIG_HOME" => Some(xdg.display().to_string()),
                _ => None,
            }
        };
        let l = AiCliConfig::load(Some(&explicit), envs(true)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(l.config.default_provider, "codex");
        let l = AiCliConfig::load(None, envs(true)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(l.config.default_provider, "gemini");
        let l = AiCliConfig::load(None, envs(false)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(l.config.engine.max_parallel, 9);
        let l = AiCliConfig::load(None, |_| None).unwrap_or_else(|e| panic!("{e}"));
        assert!(l.user_file.is_none());
        let err = AiCliConfig::load(Some(&dir.path().join("missing.json")), |_| None)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.starts_with("cannot read config"), "{err}");
    }
}
