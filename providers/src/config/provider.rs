//! One provider entry ([`ProviderConfig`]): facts about a CLI and the defaults its runs get.

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::docker_config::RunnerKind;
use crate::provider::Feature;
use crate::task::PermissionMode;
use crate::usage::PriceTable;

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
    /// The vendor account its runs spend (default: the entry's name). Entries that name
    /// the same account share its usage limits and back-offs: a task that meets the
    /// account's usage limit parks every queued task of those entries with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// The hosts its CLI talks to (the model API, its login's token endpoint), which a
    /// container reaches through aicli's egress proxy: `host` (port 443), `host:port` or
    /// `host:*`. The hosts of the base URLs aicli gives the CLI are allowed on top.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress_hosts: Vec<String>,
    /// Tools allowed without asking, added to each task's.
    #[serde(default)]
    pub allowed_tools: Vec<String>,
    /// Tools refused, added to each task's.
    #[serde(default)]
    pub disallowed_tools: Vec<String>,
    /// Permission mode when a task names none.
    #[serde(default = "default_permission_mode")]
    pub permission_mode: PermissionMode,
    /// The most characters (Unicode scalar values) the CLI takes as a prompt, where it
    /// has a limit (codex 0.171: 1,048,576); aicli refuses a longer prompt before anything
    /// runs, naming the limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_prompt_chars: Option<u64>,
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
    PermissionMode::Sandbox
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
            account: None,
            egress_hosts: Vec::new(),
            allowed_tools: Vec::new(),
            disallowed_tools: Vec::new(),
            permission_mode: default_permission_mode(),
            max_prompt_chars: None,
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
