//! Task-scoped MCP tools in the config: command-backed tools (`mcp_tools`) and upstream
//! MCP servers (`mcp_upstreams`) that aicli's own MCP server offers to the tasks granted
//! them, with their credentials kept on aicli's side.
//!
//! ```json
//! "mcp_tools": {"run_tests": {"description": "Run the test suite",
//!               "command": ["cargo", "test", "--"],
//!               "input_schema": {"type": "object", "properties": {"filter": {"type": "string"}}},
//!               "cwd": "workspace", "timeout_secs": 600, "env": {"RUST_LOG": "info"}}},
//! "mcp_upstreams": {"fs": {"command": ["mcp-server-filesystem", "/data"]},
//!                   "tracker": {"url": "http://127.0.0.1:9000/mcp",
//!                               "headers": {"Authorization": "Bearer ${TRACKER_TOKEN}"}}}
//! ```
//!
//! A task grants them by name (`"mcp_tools": ["run_tests", "fs"]` in the task,
//! `engine.mcp_tools` for every task); an upstream's tools appear as `<upstream>__<tool>`.
//! This module holds the types, their checks ([`check`], called by
//! [`AiCliConfig::validate`](crate::AiCliConfig::validate)) and the compiled argument
//! schema ([`InputSchema`]) the engine validates calls with.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ConfigError;
use crate::shared::text::truncate_chars;

/// Characters of one argument error's message (it quotes the value it refuses).
const MAX_ERROR_CHARS: usize = 300;
/// Characters of one argument error's JSON pointer.
const MAX_ERROR_PATH_CHARS: usize = 200;

/// The tools aicli's MCP server always serves; a configured tool or upstream may not
/// take one of these names.
pub const BUILTIN_MCP_TOOLS: &[&str] = &[
    "askUser",
    "ask_user",
    "broadcastLog",
    "getCredential",
    "getSkill",
    "getWorkspaceFiles",
    "listSkills",
];

/// What separates an upstream's name from its tool's in the names aicli serves.
pub const UPSTREAM_SEPARATOR: &str = "__";

/// `cwd` value meaning the task's worktree.
pub const CWD_WORKSPACE: &str = "workspace";

fn default_cwd() -> String {
    CWD_WORKSPACE.to_owned()
}
fn default_input_schema() -> Value {
    serde_json::json!({"type": "object"})
}
fn default_tool_timeout() -> u64 {
    600
}
fn default_max_output() -> usize {
    1024 * 1024
}
fn default_max_message() -> usize {
    4 * 1024 * 1024
}
fn default_call_timeout() -> u64 {
    300
}
fn default_startup_timeout() -> u64 {
    60
}

/// A tool backed by a command: each call runs `command` with the arguments as JSON on
/// stdin; its stdout is the result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpToolConfig {
    /// What the tool does, for the model.
    #[serde(default)]
    pub description: String,
    /// The argv: a program (a name looked up on the tool's `PATH`, an absolute path, or
    /// a path relative to `cwd`) and its arguments. Required.
    #[serde(default)]
    pub command: Vec<String>,
    /// The JSON Schema of the arguments (an object schema). A call whose arguments do
    /// not match is refused before anything runs.
    #[serde(default = "default_input_schema")]
    pub input_schema: Value,
    /// Where it runs: `workspace` (the calling task's worktree) or an absolute directory.
    #[serde(default = "default_cwd")]
    pub cwd: String,
    /// A call still running after this many seconds is killed (its whole process tree).
    #[serde(default = "default_tool_timeout")]
    pub timeout_secs: u64,
    /// Most stdout bytes kept as the result; more is cut (the result says so).
    #[serde(default = "default_max_output")]
    pub max_output_bytes: usize,
    /// Variables the tool gets, with their values (over the base set).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Variables of aicli's own environment the tool gets (names, or prefixes ending in
    /// `*`), besides `engine.env_passthrough`: the place for a secret the tool needs and
    /// the agent must not see.
    #[serde(default)]
    pub env_passthrough: Vec<String>,
}

/// An upstream MCP server whose tools aicli serves, behind its own auth, to the tasks
/// granted it: either a command speaking MCP on stdio, or a streamable HTTP URL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpUpstreamConfig {
    /// What it offers (for people reading the config).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// A stdio server: its argv (a program on `PATH` or an absolute path, and its
    /// arguments). Exactly one of `command` and `url`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// A streamable HTTP server: its URL (`http://` or `https://`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// HTTP headers sent with every request to `url` (e.g. `Authorization`); `${NAME}`
    /// in a value is replaced by the variable `NAME` of aicli's environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Variables the stdio server gets, with their values (over the base set).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Variables of aicli's environment the stdio server gets (names or `PREFIX*`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_passthrough: Vec<String>,
    /// The stdio server's working directory (absolute); the repository when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// A forwarded call still unanswered after this many seconds fails.
    #[serde(default = "default_call_timeout")]
    pub timeout_secs: u64,
    /// Starting it (process, MCP handshake, first tool list) may take this long.
    #[serde(default = "default_startup_timeout")]
    pub startup_timeout_secs: u64,
    /// Most bytes of one message from it (a tool's result, its tool list). A larger
    /// result fails the call, and is never passed to the agent; a stdio server's line is
    /// not read past it: the server is stopped (a death: restarted once).
    #[serde(default = "default_max_message")]
    pub max_message_bytes: usize,
}

impl McpUpstreamConfig {
    /// Whether it is a stdio server (else an HTTP one).
    pub fn is_stdio(&self) -> bool {
        !self.command.is_empty()
    }
}

/// A compiled `input_schema`: validates a call's arguments. Never fetches a remote
/// `$ref` (only the schema itself is used).
#[derive(Debug)]
pub struct InputSchema {
    validator: jsonschema::Validator,
}

/// One way a call's arguments miss the schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArgumentError {
    /// JSON pointer to the offending value (`""` for the arguments object itself).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

/// Refuses every external `$ref`: a tool's schema is used as written.
struct NoRetrieve;

impl jsonschema::Retrieve for NoRetrieve {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        Err(format!("external schema references are not fetched ({uri})").into())
    }
}

impl InputSchema {
    /// Compiles `schema`; it must be a JSON Schema for an object.
    pub fn compile(schema: &Value) -> Result<InputSchema, String> {
        let Some(obj) = schema.as_object() else {
            return Err("must be a JSON Schema object".into());
        };
        match obj.get("type") {
            Some(Value::String(t)) if t == "object" => {}
            _ => {
                return Err("must have \"type\": \"object\" (tool arguments are an object)".into());
            }
        }
        jsonschema::meta::validate(schema).map_err(|e| {
            let at = e.instance_path.to_string();
            if at.is_empty() {
                format!("is not a valid JSON Schema: {e}")
            } else {
                format!("is not a valid JSON Schema: at {at}: {e}")
            }
        })?;
        let validator = jsonschema::options()
            .with_retriever(NoRetrieve)
            .build(schema)
            .map_err(|e| format!("is not a usable JSON Schema: {e}"))?;
        Ok(InputSchema { validator })
    }

    /// Checks a call's arguments; every mismatch (at most 20) when they do not fit, each
    /// message cut to a few hundred characters (they quote the offending value).
    pub fn check(&self, args: &Value) -> Result<(), Vec<ArgumentError>> {
        let errors: Vec<ArgumentError> = self
            .validator
            .iter_errors(args)
            .take(20)
            .map(|e| ArgumentError {
                path: truncate_chars(&e.instance_path.to_string(), MAX_ERROR_PATH_CHARS),
                message: truncate_chars(&e.to_string(), MAX_ERROR_CHARS),
            })
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

/// Whether `name` may name a configured tool or upstream: 1-64 of `[A-Za-z0-9_-]`, no
/// `__` (it separates an upstream's name from its tools').
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 64 {
        return Err("a name must have 1 to 64 characters".into());
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-')))
    {
        return Err(format!(
            "{name:?} contains {bad:?}: use letters, digits, '_' and '-'"
        ));
    }
    if name.contains(UPSTREAM_SEPARATOR) {
        return Err(format!(
            "{name:?} contains \"{UPSTREAM_SEPARATOR}\", which separates an upstream's name from its tools'"
        ));
    }
    if BUILTIN_MCP_TOOLS.contains(&name) {
        return Err(format!(
            "{name:?} is the name of one of aicli's own MCP tools"
        ));
    }
    Ok(())
}

/// Whether `program` can be started: an absolute path must be an executable file, a bare
/// name must be found on `path` (a relative path with a `/` is resolved against the
/// tool's working directory at call time and is not checked here).
fn check_program(program: &str, path: Option<&str>) -> Result<(), String> {
    if program.trim().is_empty() {
        return Err("the program must not be empty".into());
    }
    let p = Path::new(program);
    if p.is_absolute() {
        return if is_executable(p) {
            Ok(())
        } else {
            Err(format!("{program} does not exist or is not executable"))
        };
    }
    if program.contains('/') {
        return Ok(());
    }
    let search = path.unwrap_or_default();
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    which::which_in(program, Some(search), cwd)
        .map(|_| ())
        .map_err(|_| format!("{program:?} is not found on PATH ({search})"))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn check_env_names(
    env: &BTreeMap<String, String>,
    json_path: &str,
    invalid: &dyn Fn(String, String) -> ConfigError,
) -> Result<(), ConfigError> {
    for k in env.keys() {
        let ok = !k.is_empty()
            && !k.starts_with(|c: char| c.is_ascii_digit())
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(invalid(
                format!("{json_path}.{k}"),
                format!("{k:?} is not a variable name (letters, digits and '_')"),
            ));
        }
    }
    Ok(())
}

/// Checks a list of `env_passthrough` patterns at a JSON path.
pub(crate) type EnvPatternCheck<'a> = &'a dyn Fn(&[String], &str) -> Result<(), ConfigError>;

/// Checks both maps and the engine's grants. `path` is the `PATH` a bare program name is
/// looked up on (aicli's own, unless a tool's `env` sets one); `env_patterns` checks
/// `env_passthrough` lists.
pub(crate) fn check(
    tools: &BTreeMap<String, McpToolConfig>,
    upstreams: &BTreeMap<String, McpUpstreamConfig>,
    grants: &[String],
    path: Option<&str>,
    invalid: &dyn Fn(String, String) -> ConfigError,
    env_patterns: EnvPatternCheck<'_>,
) -> Result<(), ConfigError> {
    for (name, t) in tools {
        let at = format!("mcp_tools.{name}");
        check_name(name).map_err(|m| invalid(at.clone(), m))?;
        if upstreams.contains_key(name) {
            return Err(invalid(
                at,
                format!("{name:?} also names an upstream in mcp_upstreams"),
            ));
        }
        let Some(program) = t.command.first() else {
            return Err(invalid(
                format!("{at}.command"),
                "missing: the tool's command (argv) is required".into(),
            ));
        };
        let tool_path = t.env.get("PATH").map(String::as_str).or(path);
        check_program(program, tool_path).map_err(|m| invalid(format!("{at}.command[0]"), m))?;
        InputSchema::compile(&t.input_schema)
            .map_err(|m| invalid(format!("{at}.input_schema"), m))?;
        if t.cwd != CWD_WORKSPACE && !Path::new(&t.cwd).is_absolute() {
            return Err(invalid(
                format!("{at}.cwd"),
                format!("{:?} is neither \"workspace\" nor an absolute path", t.cwd),
            ));
        }
        if t.timeout_secs == 0 {
            return Err(invalid(
                format!("{at}.timeout_secs"),
                "must be at least 1".into(),
            ));
        }
        if t.max_output_bytes == 0 {
            return Err(invalid(
                format!("{at}.max_output_bytes"),
                "must be at least 1".into(),
            ));
        }
        check_env_names(&t.env, &format!("{at}.env"), invalid)?;
        env_patterns(&t.env_passthrough, &format!("{at}.env_passthrough"))?;
    }
    for (name, u) in upstreams {
        let at = format!("mcp_upstreams.{name}");
        check_name(name).map_err(|m| invalid(at.clone(), m))?;
        match (u.command.first(), &u.url) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    at,
                    "has both `command` and `url`: give one (stdio or HTTP)".into(),
                ));
            }
            (None, None) => {
                return Err(invalid(
                    at,
                    "needs `command` (a stdio server) or `url` (a streamable HTTP server)".into(),
                ));
            }
            (Some(program), None) => {
                let p = u.env.get("PATH").map(String::as_str).or(path);
                check_program(program, p).map_err(|m| invalid(format!("{at}.command[0]"), m))?;
                if !u.headers.is_empty() {
                    return Err(invalid(
                        format!("{at}.headers"),
                        "headers apply to an HTTP upstream (`url`) only; a stdio server gets `env`"
                            .into(),
                    ));
                }
                if let Some(cwd) = &u.cwd
                    && !cwd.is_absolute()
                {
                    return Err(invalid(
                        format!("{at}.cwd"),
                        format!("{} is not an absolute path", cwd.display()),
                    ));
                }
            }
            (None, Some(url)) => {
                let ok = url
                    .strip_prefix("http://")
                    .or_else(|| url.strip_prefix("https://"))
                    .is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/'));
                if !ok {
                    return Err(invalid(
                        format!("{at}.url"),
                        format!("{url:?} is not an http:// or https:// URL"),
                    ));
                }
                if !u.env.is_empty() || !u.env_passthrough.is_empty() || u.cwd.is_some() {
                    return Err(invalid(
                        at,
                        "`env`, `env_passthrough` and `cwd` apply to a stdio upstream (`command`) only; an HTTP one gets `headers`".into(),
                    ));
                }
                for h in u.headers.keys() {
                    let ok = !h.is_empty()
                        && h.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
                    if !ok {
                        return Err(invalid(
                            format!("{at}.headers.{h}"),
                            format!("{h:?} is not an HTTP header name"),
                        ));
                    }
                }
            }
        }
        for (what, v) in [
            ("timeout_secs", u.timeout_secs),
            ("startup_timeout_secs", u.startup_timeout_secs),
        ] {
            if v == 0 {
                return Err(invalid(format!("{at}.{what}"), "must be at least 1".into()));
            }
        }
        if u.max_message_bytes < 1024 {
            return Err(invalid(
                format!("{at}.max_message_bytes"),
                "must be at least 1024".into(),
            ));
        }
        check_env_names(&u.env, &format!("{at}.env"), invalid)?;
        env_patterns(&u.env_passthrough, &format!("{at}.env_passthrough"))?;
    }
    if let Some((i, m)) = unknown_grant(tools, upstreams, grants) {
        return Err(invalid(format!("engine.mcp_tools[{i}]"), m));
    }
    Ok(())
}

/// The first name in `grants` that names neither a tool nor an upstream: its index and
/// a message listing what is configured.
pub(crate) fn unknown_grant(
    tools: &BTreeMap<String, McpToolConfig>,
    upstreams: &BTreeMap<String, McpUpstreamConfig>,
    grants: &[String],
) -> Option<(usize, String)> {
    let (i, g) = grants
        .iter()
        .enumerate()
        .find(|(_, g)| !tools.contains_key(*g) && !upstreams.contains_key(*g))?;
    let known: Vec<&str> = tools
        .keys()
        .chain(upstreams.keys())
        .map(String::as_str)
        .collect();
    Some((
        i,
        if known.is_empty() {
            format!("unknown MCP tool {g:?}: the config defines no mcp_tools or mcp_upstreams")
        } else {
            format!(
                "unknown MCP tool {g:?}: not in mcp_tools or mcp_upstreams ({})",
                known.join(", ")
            )
        },
    ))
}

#[cfg(test)]
#[path = "mcp_tools_tests.rs"]
mod tests;
