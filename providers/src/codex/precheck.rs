//! The pre-flight credentials look: `codex exec` without credentials never fails on its
//! own (it retries "Reconnecting..." forever), so this check matters.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{ACCESS_TOKEN_ENV, API_KEY_ENV, CODEX_HOME_ENV, LOGIN_HINT};
use crate::config::ProviderConfig;

/// `Some(message)` when the run certainly has no credentials (reads `config.toml` and
/// looks for `auth.json` under `$CODEX_HOME`).
pub(super) fn auth_precheck(
    config: &ProviderConfig,
    env: &BTreeMap<String, String>,
    home: &Path,
    args: &[String],
) -> Option<String> {
    let codex_home = env
        .get(CODEX_HOME_ENV)
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".codex"));
    let look = AuthLook {
        config_toml: std::fs::read_to_string(codex_home.join("config.toml")).ok(),
        auth_json: codex_home.join("auth.json").is_file(),
        auth_files: config.auth_files.iter().any(|f| home.join(f).exists()),
        codex_home,
    };
    precheck(config, env, &look, args)
}

/// What `auth_precheck` found on disk.
struct AuthLook {
    codex_home: PathBuf,
    config_toml: Option<String>,
    auth_json: bool,
    auth_files: bool,
}

/// `Some(message)` when the run certainly has no credentials. Without credentials Codex
/// never fails on its own (it retries "Reconnecting..." forever), so this check matters.
fn precheck(
    config: &ProviderConfig,
    env: &BTreeMap<String, String>,
    look: &AuthLook,
    argv: &[String],
) -> Option<String> {
    let set = |var: &str| env.get(var).is_some_and(|v| !v.is_empty());
    let toml = look
        .config_toml
        .as_deref()
        .map(TomlFacts::read)
        .unwrap_or_default();
    // The built argv holds the config's and the task's extra args (and `-c` overrides).
    let args = if argv.is_empty() {
        ArgFacts::read(&config.extra_args)
    } else {
        ArgFacts::read(argv)
    };
    if args.oss {
        return None; // a local model server: no credentials
    }
    if config.auth_env_vars.iter().any(|v| set(v)) {
        return None;
    }
    let provider = args
        .model_provider
        .or(toml.model_provider)
        .unwrap_or_else(|| "openai".to_owned());
    if provider != "openai" {
        let env_key = args
            .env_keys
            .get(&provider)
            .or_else(|| toml.env_keys.get(&provider));
        return match env_key {
            // A provider without env_key (local models, a key in a header): can't tell.
            None => None,
            Some(var) if set(var) => None,
            Some(var) => Some(format!(
                "not logged in: model provider `{provider}` reads its API key from {var}, which is not set"
            )),
        };
    }
    if set(API_KEY_ENV) || set(ACCESS_TOKEN_ENV) || look.auth_json || look.auth_files {
        return None;
    }
    if toml.keyring_store {
        return None; // credentials may be in the OS keyring: can't tell
    }
    let openai_note = if set("OPENAI_API_KEY") {
        "; OPENAI_API_KEY is set but `codex exec` ignores it"
    } else {
        ""
    };
    Some(format!(
        "not logged in: {LOGIN_HINT} (no CODEX_API_KEY in the environment and no {}){openai_note}",
        look.codex_home.join("auth.json").display()
    ))
}

/// What a `config.toml` says about credentials, read line by line (top-level
/// `model_provider`, `cli_auth_credentials_store`, `[model_providers.X] env_key`).
#[derive(Debug, Default)]
struct TomlFacts {
    model_provider: Option<String>,
    env_keys: BTreeMap<String, String>,
    keyring_store: bool,
}

impl TomlFacts {
    fn read(text: &str) -> TomlFacts {
        let mut facts = TomlFacts::default();
        let mut table: Option<String> = None;
        for line in text.lines().map(str::trim) {
            if let Some(header) = line.strip_prefix('[') {
                table = Some(header.trim_end_matches(']').trim().to_owned());
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let (key, value) = (key.trim(), unquote(value));
            match table.as_deref() {
                None if key == "model_provider" => facts.model_provider = Some(value),
                None if key == "cli_auth_credentials_store" => {
                    facts.keyring_store = value != "file";
                }
                Some(t) if key == "env_key" => {
                    if let Some(name) = t.strip_prefix("model_providers.") {
                        facts.env_keys.insert(unquote(name), value);
                    }
                }
                _ => {}
            }
        }
        facts
    }
}

/// What `-c` overrides in the configured extra args say about credentials.
#[derive(Debug, Default)]
struct ArgFacts {
    model_provider: Option<String>,
    env_keys: BTreeMap<String, String>,
    oss: bool,
}

impl ArgFacts {
    fn read(args: &[String]) -> ArgFacts {
        let mut facts = ArgFacts::default();
        let mut overrides: Vec<&str> = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "-c" | "--config" => overrides.extend(it.next().map(String::as_str)),
                "--oss" => facts.oss = true,
                other => overrides.extend(
                    other
                        .strip_prefix("--config=")
                        .or_else(|| other.strip_prefix("-c")),
                ),
            }
        }
        for o in overrides {
            let Some((key, value)) = o.split_once('=') else {
                continue;
            };
            let key = key.trim();
            if key == "model_provider" {
                facts.model_provider = Some(unquote(value));
            } else if let Some(rest) = key.strip_prefix("model_providers.") {
                let (name, field) = rest.split_once('.').unwrap_or((rest, ""));
                let env_key = match field {
                    "env_key" => Some(unquote(value)),
                    "" => inline_field(value, "env_key"),
                    _ => None,
                };
                if let Some(var) = env_key {
                    facts.env_keys.insert(name.to_owned(), var);
                }
            }
        }
        facts
    }
}

/// A TOML scalar without its quotes (and without a trailing comment).
fn unquote(value: &str) -> String {
    let v = value.trim();
    for q in ['"', '\''] {
        if let Some(inner) = v.strip_prefix(q)
            && let Some(end) = inner.find(q)
        {
            return inner[..end].to_owned();
        }
    }
    v.split('#').next().unwrap_or_default().trim().to_owned()
}

/// `field = "value"` inside an inline table `{...}`.
fn inline_field(table: &str, field: &str) -> Option<String> {
    let mut search = table;
    while let Some(at) = search.find(field) {
        let before_ok = search[..at]
            .chars()
            .next_back()
            .is_none_or(|c| c == '{' || c == ',' || c.is_whitespace());
        let rest = search[at + field.len()..].trim_start();
        if before_ok && let Some(value) = rest.strip_prefix('=') {
            let value = unquote(value.trim_start());
            return Some(value.trim_end_matches(['}', ',']).to_owned());
        }
        search = &search[at + field.len()..];
    }
    None
}
