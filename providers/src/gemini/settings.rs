//! The run's Gemini settings: aicli's per-run keys, merged over the user's own
//! `~/.gemini/settings.json` the way Gemini merges a higher settings layer.

use std::collections::BTreeMap;
use std::path::Path;

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
        PermissionMode::Bypass => "yolo",
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

/// The user's Gemini settings at `path` (`~/.gemini/settings.json`): `None` when there is
/// no such file; an error message naming the file when it cannot be used. Read as Gemini
/// reads it: JSON with `//` and `/* */` comments, a JSON object at the top. (Gemini stops
/// with "Please fix the configuration file(s)" on the same files.)
pub(super) fn read_user_settings(path: &Path) -> Result<Option<Map<String, Value>>, String> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(format!(
                "cannot read your Gemini settings {}: {e}",
                path.display()
            ));
        }
    };
    let bad = |what: String| {
        format!(
            "your Gemini settings {} cannot be used: {what} (gemini itself would refuse to \
             start with it; fix or move the file)",
            path.display()
        )
    };
    let text = String::from_utf8(bytes).map_err(|e| bad(format!("it is not UTF-8 ({e})")))?;
    match serde_json::from_str::<Value>(&strip_json_comments(&text)) {
        Ok(Value::Object(map)) => Ok(Some(map)),
        Ok(other) => Err(bad(format!(
            "it holds a JSON {}, not an object",
            json_type_name(&other)
        ))),
        Err(e) => Err(bad(format!("it is not valid JSON: {e}"))),
    }
}

fn json_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The names of the entries of `dir`, sorted; none when it does not exist.
pub(super) fn list_dir(dir: &Path) -> Result<Vec<std::ffi::OsString>, String> {
    let cannot = |e: std::io::Error| format!("cannot list {}: {e}", dir.display());
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(cannot(e)),
    };
    let mut names = entries
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(cannot)?;
    names.sort();
    Ok(names)
}

/// `text` without its `//` and `/* */` comments (outside strings), as Gemini reads
/// settings files (`strip-json-comments`). Comments become spaces and newlines stay, so
/// a JSON error's line and column still point into the file.
fn strip_json_comments(text: &str) -> String {
    #[derive(Clone, Copy, PartialEq)]
    enum At {
        Code,
        Str,
        Line,
        Block,
    }
    let mut out = String::with_capacity(text.len());
    let mut at = At::Code;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match at {
            At::Code => match (c, chars.peek()) {
                ('"', _) => {
                    at = At::Str;
                    out.push(c);
                }
                ('/', Some('/')) => {
                    chars.next();
                    at = At::Line;
                    out.push_str("  ");
                }
                ('/', Some('*')) => {
                    chars.next();
                    at = At::Block;
                    out.push_str("  ");
                }
                _ => out.push(c),
            },
            At::Str => {
                out.push(c);
                if c == '\\' {
                    if let Some(escaped) = chars.next() {
                        out.push(escaped);
                    }
                } else if c == '"' {
                    at = At::Code;
                }
            }
            At::Line => {
                if c == '\n' || c == '\r' {
                    at = At::Code;
                    out.push(c);
                } else {
                    out.push(' ');
                }
            }
            At::Block => {
                if c == '*' && chars.peek() == Some(&'/') {
                    chars.next();
                    at = At::Code;
                    out.push_str("  ");
                } else if c == '\n' || c == '\r' {
                    out.push(c);
                } else {
                    out.push(' ');
                }
            }
        }
    }
    out
}

/// Merges settings layer `higher` into `lower` the way Gemini 0.61 merges its layers
/// (`mergeRecursively` in `packages/cli/src/utils/deepMerge.ts`) for the keys aicli
/// writes: `mcpServers` merges by server name (a server of `higher` replaces the
/// same-named one whole), `tools.exclude` is a union, other objects merge key by key,
/// and everything else in `higher` replaces what `lower` has (`tools.allowed` too).
pub(super) fn merge_layer(
    lower: &mut Map<String, Value>,
    higher: &Map<String, Value>,
    path: &[&str],
) {
    for (key, value) in higher {
        let here: Vec<&str> = path.iter().copied().chain([key.as_str()]).collect();
        match (lower.get_mut(key), value) {
            (Some(Value::Object(low)), Value::Object(high)) if here == ["mcpServers"] => {
                for (name, server) in high {
                    low.insert(name.clone(), server.clone());
                }
            }
            (Some(Value::Array(low)), high) if here == ["tools", "exclude"] => {
                let high = match high {
                    Value::Array(items) => items.clone(),
                    item => vec![item.clone()],
                };
                let mut union: Vec<Value> = Vec::with_capacity(low.len() + high.len());
                for item in low.drain(..).chain(high) {
                    if !union.contains(&item) {
                        union.push(item);
                    }
                }
                *low = union;
            }
            (Some(Value::Object(low)), Value::Object(high)) => merge_layer(low, high, &here),
            _ => {
                lower.insert(key.clone(), value.clone());
            }
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
