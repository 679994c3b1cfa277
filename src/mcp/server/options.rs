//! [`McpServerOptions`]: how to start the server, by hand or from a config.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use aicli_providers::{AiCliConfig, CgroupMode, McpLimits, McpToolConfig, McpUpstreamConfig};

use crate::mcp::{CredentialSource, EnvLookup};

/// How to start the server.
#[derive(Debug, Clone)]
pub struct McpServerOptions {
    /// Address to bind: `127.0.0.1:0` (loopback, ephemeral port) by default; e.g.
    /// `172.17.0.1:0` for agents in Docker containers.
    pub bind: String,
    /// Extra `Host` values to accept (`host` or `host:port`), besides loopback and the
    /// bind host; e.g. `host.docker.internal`.
    pub allowed_hosts: Vec<String>,
    /// Where skills live (`<dir>/<name>/SKILL.md`).
    pub skills_dir: PathBuf,
    /// Where `getCredential` finds values.
    pub credentials: CredentialSource,
    /// Timeouts, connection and session limits, caps on tool arguments.
    pub limits: McpLimits,
    /// Command-backed tools, by name (served only to the tokens granted them).
    pub tools: BTreeMap<String, McpToolConfig>,
    /// Upstream MCP servers, by name (their tools served, as `<name>__<tool>`, only to
    /// the tokens granted them).
    pub upstreams: BTreeMap<String, McpUpstreamConfig>,
    /// aicli's environment: where the tools' and stdio upstreams' `env_passthrough` and
    /// the base set come from, and what `${NAME}` in an upstream's headers names.
    pub env: BTreeMap<String, String>,
    /// The base set every tool and stdio upstream gets from `env`
    /// (`engine.env_passthrough`).
    pub env_passthrough: Vec<String>,
    /// Whether each tool call and upstream gets a cgroup of its own.
    pub cgroups: CgroupMode,
    /// Between SIGTERM and SIGKILL of a tool's or upstream's process tree.
    pub kill_grace: Duration,
    /// The repository: a stdio upstream's working directory unless it names one.
    pub repo: PathBuf,
}

impl Default for McpServerOptions {
    fn default() -> McpServerOptions {
        McpServerOptions {
            bind: "127.0.0.1:0".into(),
            allowed_hosts: Vec::new(),
            skills_dir: PathBuf::from(".aicli/skills"),
            credentials: CredentialSource::default(),
            limits: McpLimits::default(),
            tools: BTreeMap::new(),
            upstreams: BTreeMap::new(),
            env: crate::env::process_env(),
            env_passthrough: aicli_providers::config::default_env_passthrough(),
            cgroups: CgroupMode::Auto,
            kill_grace: Duration::from_secs(3),
            repo: PathBuf::from("."),
        }
    }
}

impl McpServerOptions {
    /// The options a config implies for a repository: `mcp.bind`, `mcp.allowed_hosts`,
    /// `skills_dir` (default `<repo>/.aicli/skills`), `credentials_file` over the process
    /// environment, the `mcp_tools` and `mcp_upstreams` with the engine's base
    /// environment, cgroups and kill grace.
    pub fn from_config(config: &AiCliConfig, repo: &Path) -> McpServerOptions {
        let engine = &config.engine;
        McpServerOptions {
            bind: engine.mcp.bind.clone(),
            allowed_hosts: engine.mcp.allowed_hosts.clone(),
            skills_dir: engine
                .skills_dir
                .clone()
                .unwrap_or_else(|| repo.join(".aicli").join("skills")),
            credentials: CredentialSource {
                env: EnvLookup::Process,
                file: engine.credentials_file.clone(),
            },
            limits: engine.mcp.limits.clone(),
            tools: config.mcp_tools.clone(),
            upstreams: config.mcp_upstreams.clone(),
            env: crate::env::process_env(),
            env_passthrough: engine.env_passthrough.clone(),
            cgroups: engine.cgroups,
            kill_grace: Duration::from_millis(engine.kill_grace_ms),
            repo: repo.to_path_buf(),
        }
    }
}
