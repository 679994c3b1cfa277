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

//!
//! The types are split by section: `provider` (one provider entry, [`ProviderConfig`]) and
//! `engine` (the `engine` section, [`EngineConfig`], and the MCP server's settings); this
//! module holds the whole file's type and its loading, merging and validation.

mod commit;
mod engine;
mod notify;
mod provider;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use commit::{CommitAuthor, CommitConfig, CommitMode, DEFAULT_MAX_FILE_BYTES};
pub use engine::{
    CgroupMode, EngineConfig, McpLimits, McpServerConfig, RetryConfig, default_env_passthrough,
};
pub use notify::{NotifyConfig, NotifyEvent};
pub use provider::ProviderConfig;

use crate::error::ConfigError;
use crate::mcp_tools::{McpToolConfig, McpUpstreamConfig};

/// The built-in defaults: the repository's `ai_cli_providers.json`.
pub const DEFAULT_CONFIG_JSON: &str = include_str!("../../../ai_cli_providers.json");

/// The origin name used in errors about the built-in defaults.
pub const BUILTIN_ORIGIN: &str = "built-in defaults (ai_cli_providers.json)";

/// The adapters built into the library, in the order they are listed to a user:
/// `ProviderRegistry::with_builtin_adapters` registers exactly these. A library may
/// register more.
pub const BUILTIN_ADAPTERS: [&str; 4] = ["claude", "codex", "gemini", "acp"];

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
        let unknown = unknown_adapters(&base, &user);
        merge_patch(&mut base, &user);
        from_merged(base, Some(&user), origin).map_err(|e| blame_unknown_adapter(e, &unknown))
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
        if self.engine.max_prompt_bytes == 0 {
            return Err(invalid(
                "engine.max_prompt_bytes".into(),
                "must be at least 1".into(),
            ));
        }
        if let Err((path, message)) = self.engine.notify.check() {
            return Err(invalid(format!("engine.notify.{path}"), message));
        }
        if !self.engine.notify_hook.is_empty() && !self.engine.notify.command.is_empty() {
            return Err(invalid(
                "engine.notify_hook".into(),
                "is deprecated and engine.notify.command is set too: keep engine.notify.command (engine.notify.on chooses the events)".into(),
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
            for (i, h) in p.egress_hosts.iter().enumerate() {
                crate::egress_config::HostPattern::parse(h)
                    .map_err(|e| invalid(format!("providers.{name}.egress_hosts[{i}]"), e))?;
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

/// The new entries of `user` (not in `base`) that name an adapter which is neither built
/// in nor a built-in entry to inherit from: `(entry, adapter)`.
fn unknown_adapters(base: &Value, user: &Value) -> Vec<(String, String)> {
    let (Some(user_providers), Some(base_providers)) = (
        user.get("providers").and_then(Value::as_object),
        base.get("providers").and_then(Value::as_object),
    ) else {
        return Vec::new();
    };
    user_providers
        .iter()
        .filter(|(name, _)| !base_providers.contains_key(*name))
        .filter_map(|(name, entry)| {
            let adapter = entry.get("adapter").and_then(Value::as_str)?;
            (!BUILTIN_ADAPTERS.contains(&adapter) && !base_providers.contains_key(adapter))
                .then(|| (name.clone(), adapter.to_owned()))
        })
        .collect()
}

/// An entry that names an unknown adapter and lacks a field (what the adapter's built-in
/// entry would have given it) is blamed on its adapter, not on the field.
fn blame_unknown_adapter(e: ConfigError, unknown: &[(String, String)]) -> ConfigError {
    let ConfigError::Shape {
        origin,
        json_path,
        message,
    } = e
    else {
        return e;
    };
    match unknown
        .iter()
        .find(|(name, _)| json_path == format!("providers.{name}"))
    {
        Some((provider, adapter)) if message.starts_with("missing field") => {
            ConfigError::UnknownAdapterIncomplete {
                origin,
                provider: provider.clone(),
                adapter: adapter.clone(),
                known: BUILTIN_ADAPTERS.iter().map(|a| (*a).to_owned()).collect(),
                message,
            }
        }
        Some(_) | None => ConfigError::Shape {
            origin,
            json_path,
            message,
        },
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
mod tests;
