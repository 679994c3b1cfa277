//! The run's Gemini settings: aicli's per-run keys, merged over the user's own
//! `~/.gemini/settings.json` the way Gemini merges a higher settings layer.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::provider::McpEndpoint;
use crate::task::PermissionMode;

/// `--approval-mode` for a neutral permission mode.
///
/// In a headless run Gemini's policy engine turns every "ask the user" into "deny", and it
/// does not even declare a denied tool to the model. So in `default` (seen in the
/// `shell_default_mode` fixture) and in `auto_edit` (accept_edits; the same policy rules
/// in the 0.61 bundle) the shell tool and untrusted MCP tools are silently withheld,
/// unless `allowed_tools` allows them (`run_shell_command(git)` declares the shell tool
/// and allows only `git ...`). A task that must run arbitrary commands needs `bypass`.
pub(super) fn approval_mode(mode: PermissionMode) -> &'static str {
    match mode {
        PermissionMode::Plan => "plan",
        PermissionMode::Default => "default",
        PermissionMode::AcceptEdits => "auto_edit",
        // Only where something else confines the run (the caller checks).
        PermissionMode::Sandbox | PermissionMode::Bypass => "yolo",
    }
}

/// aicli's per-run settings (Gemini's settings.json keys), merged over the user's.
#[derive(Debug, Serialize)]
pub(super) struct RunSettings<'a> {
    /// Always off: it stops the CLI's `play.googleapis.com` traffic.
    privacy: PrivacySettings,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<ModelSettings>,
    #[serde(skip_serializing_if = "ToolSettings::is_empty")]
    tools: ToolSettings<'a>,
    #[serde(rename = "mcpServers", skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) mcp_servers: BTreeMap<&'a str, McpServerSettings>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct PrivacySettings {
    usage_statistics_enabled: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ModelSettings {
    /// Model calls per run; the run ends with exit 53 (`FatalTurnLimitedError`) at the limit.
    max_session_turns: u32,
}

#[derive(Debug, Serialize)]
struct ToolSettings<'a> {
    /// Tools that run without confirmation (what `--allowed-tools` sets; replaces the
    /// user's list, as the flag does).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    allowed: Vec<&'a str>,
    /// Tools never offered to the model (merged with the user's list).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    exclude: Vec<&'a str>,
}

impl ToolSettings<'_> {
    fn is_empty(&self) -> bool {
        self.allowed.is_empty() && self.exclude.is_empty()
    }
}

/// One streamable-HTTP MCP server.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct McpServerSettings {
    http_url: String,
    headers: BTreeMap<&'static str, String>,
    /// Without it Gemini does not declare the server's tools to the model.
    trust: bool,
}

impl<'a> RunSettings<'a> {
    pub(super) fn new(
        max_turns: Option<u32>,
        allowed: Vec<&'a str>,
        exclude: Vec<&'a str>,
        mcp: Option<&'a McpEndpoint>,
    ) -> RunSettings<'a> {
        let mut mcp_servers = BTreeMap::new();
        if let Some(m) = mcp {
            let mut headers = BTreeMap::new();
            headers.insert("Authorization", format!("Bearer {}", m.token));
            mcp_servers.insert(
                m.name.as_str(),
                McpServerSettings {
                    http_url: m.url.clone(),
                    headers,
                    trust: true,
                },
            );
        }
        RunSettings {
            privacy: PrivacySettings {
                usage_statistics_enabled: false,
            },
            model: max_turns.map(|n| ModelSettings {
                max_session_turns: n,
            }),
            tools: ToolSettings { allowed, exclude },
            mcp_servers,
        }
    }

    /// Gemini expands `$VAR` and `${VAR}` in every string of a settings file: a value with
    /// a `$` would not reach the CLI as written.
    pub(super) fn check(&self) -> Result<(), String> {
        let mut strings: Vec<(&str, &str)> = Vec::new();
        strings.extend(self.tools.allowed.iter().map(|t| ("allowed tool", *t)));
        strings.extend(self.tools.exclude.iter().map(|t| ("disallowed tool", *t)));
        for (name, server) in &self.mcp_servers {
            strings.push(("MCP server name", name));
            strings.push(("MCP server URL", server.http_url.as_str()));
            strings.extend(server.headers.values().map(|v| ("MCP token", v.as_str())));
        }
        match strings.iter().find(|(_, s)| s.contains('$')) {
            // Never echo the value: it may be the token.
            Some((what, _)) => Err(format!(
                "the {what} contains '$', which Gemini would expand as an environment variable \
                 in its settings file"
            )),
            None => Ok(()),
        }
    }
}

/// Lets aicli's MCP servers through the user's own MCP server filters: added to a
/// non-empty `mcp.allowed` (Gemini blocks every server not in it), taken out of
/// `mcp.excluded`.
pub(super) fn admit_mcp_servers(settings: &mut Map<String, Value>, names: &[&str]) {
    let Some(Value::Object(mcp)) = settings.get_mut("mcp") else {
        return;
    };
    if let Some(Value::Array(allowed)) = mcp.get_mut("allowed")
        && !allowed.is_empty()
    {
        for name in names {
            if !allowed.iter().any(|v| v == name) {
                allowed.push(Value::from(*name));
            }
        }
    }
    if let Some(Value::Array(excluded)) = mcp.get_mut("excluded") {
        excluded.retain(|v| !names.iter().any(|name| v == name));
    }
}
