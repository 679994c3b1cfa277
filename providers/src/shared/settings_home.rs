//! A run's own settings home, for a CLI that reads everything it is not given by flag
//! from `$HOME/<dir>/<settings file>` and can be pointed at another home by a variable
//! (Gemini: `GEMINI_CLI_HOME`, `~/.gemini/settings.json`). The run's home lives in its
//! private directory: its settings file is the user's own with the run's settings merged
//! over it the way Gemini merges a higher settings layer, and every other entry of the
//! user's directory is a symbolic link to the real one (login, sessions, history), the
//! directories every run writes created first so that what a run writes there outlives
//! it. The gemini adapter and ACP entries with `acp.settings_home` use it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::provider::{FileSpec, LinkSpec, McpWiring};

/// Where a CLI keeps its settings, and what of the user's a run's home links to.
#[derive(Debug, Clone, Copy)]
pub struct SettingsHome<'a> {
    /// The CLI's name in messages ("Gemini").
    pub label: &'a str,
    /// The variable that points the CLI at a home (`GEMINI_CLI_HOME`).
    pub env: &'a str,
    /// The run's home, a directory in the run's private directory (`gemini-home`).
    pub home_dir: &'a str,
    /// The CLI's directory in a home (`.gemini`).
    pub dir: &'a str,
    /// Its settings file in that directory (`settings.json`).
    pub settings_file: &'a str,
    /// Directories of the user's directory that every run writes (Gemini's `tmp`, whose
    /// `<project>/chats` holds the sessions a resume finds, and `history`): linked even
    /// when the user has none yet (the engine creates them first).
    pub kept_dirs: &'a [&'a str],
    /// Entries of the home itself the CLI reads, linked when the user has them
    /// (Gemini's `.env` and `.agents`).
    pub home_entries: &'a [&'a str],
}

impl SettingsHome<'_> {
    /// The run's home under `private_dir` as `self.env`, its settings file (0600) and the
    /// links: the user's settings (in `user_home`, when there is one) with `overlay`
    /// merged over them ([`merge_layer`]), then `finish` applied to the result. Errors
    /// name the user's file that cannot be used.
    pub fn wiring(
        &self,
        overlay: &Map<String, Value>,
        private_dir: &Path,
        user_home: Option<&Path>,
        finish: impl FnOnce(&mut Map<String, Value>),
    ) -> Result<McpWiring, String> {
        let home = private_dir.join(self.home_dir);
        let dir = home.join(self.dir);
        let mut merged = Map::new();
        let mut links = Vec::new();
        if let Some(user_home) = user_home {
            let user_dir = user_home.join(self.dir);
            let entries = list_dir(&user_dir)?;
            if let Some(user) = read_user_settings(&user_dir.join(self.settings_file), self.label)?
            {
                merged = user;
            }
            for name in entries {
                if name == self.settings_file || self.kept_dirs.iter().any(|k| name == *k) {
                    continue;
                }
                links.push(LinkSpec {
                    link: dir.join(&name),
                    target: user_dir.join(&name),
                    create_target_dir: false,
                });
            }
            links.extend(self.kept_dirs.iter().map(|name| LinkSpec {
                link: dir.join(name),
                target: user_dir.join(name),
                create_target_dir: true,
            }));
            links.sort_by(|a, b| a.link.cmp(&b.link));
            for name in self.home_entries {
                let target = user_home.join(name);
                if target.symlink_metadata().is_ok() {
                    links.push(LinkSpec {
                        link: home.join(name),
                        target,
                        create_target_dir: false,
                    });
                }
            }
        }
        merge_layer(&mut merged, overlay, &[]);
        finish(&mut merged);
        let contents = serde_json::to_string_pretty(&merged)
            .map_err(|e| format!("cannot write the settings file: {e}"))?;
        let mut env = BTreeMap::new();
        env.insert(self.env.to_owned(), home.display().to_string());
        Ok(McpWiring {
            args: Vec::new(),
            env,
            files: vec![FileSpec {
                path: dir.join(self.settings_file),
                contents: contents + "\n",
                mode: 0o600,
            }],
            links,
        })
    }
}

/// The home of the user a run is for: `HOME` from the task's env, else the config's,
/// else the one of the environment the engine runs the CLI with, else aicli's own.
/// `None` when unset or relative.
pub fn user_home(
    task_env: Option<&BTreeMap<String, String>>,
    config_env: &BTreeMap<String, String>,
    run_home: Option<&Path>,
) -> Option<PathBuf> {
    task_env
        .and_then(|e| e.get("HOME"))
        .or_else(|| config_env.get("HOME"))
        .map(PathBuf::from)
        .or_else(|| run_home.map(Path::to_path_buf))
        .or_else(|| std::env::var("HOME").ok().map(PathBuf::from))
        .filter(|h| h.is_absolute())
}

/// The user's settings at `path` (`~/.gemini/settings.json`): `None` when there is no
/// such file; an error message naming the file when it cannot be used. Read as Gemini
/// reads it: JSON with `//` and `/* */` comments, a JSON object at the top. (Gemini stops
/// with "Please fix the configuration file(s)" on the same files.) `label` names the CLI.
fn read_user_settings(path: &Path, label: &str) -> Result<Option<Map<String, Value>>, String> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(format!(
                "cannot read your {label} settings {}: {e}",
                path.display()
            ));
        }
    };
    let bad = |what: String| {
        format!(
            "your {label} settings {} cannot be used: {what} ({label} itself would refuse to \
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
fn list_dir(dir: &Path) -> Result<Vec<std::ffi::OsString>, String> {
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
pub fn merge_layer(lower: &mut Map<String, Value>, higher: &Map<String, Value>, path: &[&str]) {
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
