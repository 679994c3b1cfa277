//! The environment a CLI gets: built from nothing, never inherited whole.
//!
//! aicli's own environment can hold anything (cloud keys, tokens of other tools). A CLI
//! gets only:
//!
//! 1. the base set, `engine.env_passthrough` (paths, locale, terminal, time zone,
//!    proxies, CA bundles), taken from aicli's environment;
//! 2. its provider's own variables, `auth_env_vars` and `env_passthrough`, taken from
//!    aicli's environment;
//! 3. the provider's `env` and the task's `env`, as configured;
//!
//! and then what the provider's command adds for the run (MCP wiring, a per-run home).
//! A credential a task needs beyond that goes through the MCP server's `getCredential`,
//! which serves only the names on the task's allowlist.
//!
//! [`cli_env`] builds it, for runs and for the status and login probes alike, so
//! `aicli status` sees what a run sees. [`explicit_env`] is the same rule for the
//! processes aicli's MCP server starts (command-backed tools, stdio upstreams): the base
//! set, the variables their config names, their configured `env`.

use std::collections::BTreeMap;

use aicli_providers::{ProviderConfig, TaskSpec};

/// aicli's own process environment (the default source of [`cli_env`]).
pub fn process_env() -> BTreeMap<String, String> {
    std::env::vars().collect()
}

/// Whether `name` matches `pattern`: the same name, or `pattern` is `PREFIX*` and `name`
/// starts with `PREFIX`.
pub fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// The environment a CLI of `provider` starts from: the variables of `source` (aicli's
/// environment) that `base` (`engine.env_passthrough`) or the provider's `auth_env_vars`
/// and `env_passthrough` name, then the provider's `env`, then `task`'s `env` (when
/// building a run's; the probes have no task). Nothing else of `source`.
pub fn cli_env(
    source: &BTreeMap<String, String>,
    base: &[String],
    provider: &ProviderConfig,
    task: Option<&TaskSpec>,
) -> BTreeMap<String, String> {
    let mut fixed = vec![&provider.env];
    if let Some(t) = task {
        fixed.push(&t.env);
    }
    explicit_env(
        source,
        &[base, &provider.auth_env_vars, &provider.env_passthrough],
        &fixed,
    )
}

/// An environment built from nothing: the variables of `source` that one of `patterns`
/// names (a name, or a prefix ending in `*`), then each of `fixed` in turn (later ones
/// win). What CLIs, command-backed MCP tools and stdio MCP upstreams get.
pub fn explicit_env(
    source: &BTreeMap<String, String>,
    patterns: &[&[String]],
    fixed: &[&BTreeMap<String, String>],
) -> BTreeMap<String, String> {
    let patterns: Vec<&str> = patterns
        .iter()
        .flat_map(|p| p.iter())
        .map(String::as_str)
        .collect();
    let mut env: BTreeMap<String, String> = source
        .iter()
        .filter(|(k, _)| patterns.iter().any(|p| matches(p, k)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for f in fixed {
        env.extend(f.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    env
}

/// The names of `env`, comma-separated, for logs (never the values).
pub fn names(env: &BTreeMap<String, String>) -> String {
    env.keys().cloned().collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn only_the_base_set_the_providers_variables_and_the_configured_env_pass() {
        let source = map(&[
            ("PATH", "/bin"),
            ("HOME", "/home/u"),
            ("LC_ALL", "C"),
            ("AWS_SECRET_ACCESS_KEY", "aws"),
            ("GITHUB_TOKEN", "gh"),
            ("ANTHROPIC_API_KEY", "sk"),
            ("CLAUDE_CONFIG_DIR", "/c"),
            ("CODEX_API_KEY", "not claude's"),
            ("PATHOLOGICAL", "no prefix match without a star"),
        ]);
        let base = vec!["PATH".to_owned(), "HOME".to_owned(), "LC_*".to_owned()];
        let mut p = ProviderConfig::new("@x/cli", "x");
        p.auth_env_vars = vec!["ANTHROPIC_API_KEY".into()];
        p.env_passthrough = vec!["CLAUDE_*".into()];
        p.env = map(&[("FROM_CONFIG", "1"), ("HOME", "/config-home")]);
        let mut t = TaskSpec::new("p");
        t.env = map(&[("FROM_TASK", "2"), ("FROM_CONFIG", "task wins")]);
        let env = cli_env(&source, &base, &p, Some(&t));
        assert_eq!(
            env,
            map(&[
                ("ANTHROPIC_API_KEY", "sk"),
                ("CLAUDE_CONFIG_DIR", "/c"),
                ("FROM_CONFIG", "task wins"),
                ("FROM_TASK", "2"),
                ("HOME", "/config-home"),
                ("LC_ALL", "C"),
                ("PATH", "/bin"),
            ])
        );
        // A probe has no task: the config's env still applies.
        let probe = cli_env(&source, &base, &p, None);
        assert_eq!(probe.get("FROM_CONFIG").map(String::as_str), Some("1"));
        assert!(!probe.contains_key("FROM_TASK"));
        assert_eq!(names(&map(&[("A", "secret"), ("B", "x")])), "A,B");
    }
}
