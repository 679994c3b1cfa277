//! Loading, merging and validating the config: defaults, user files and their errors.

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
    // The same account as the CLI it runs: their usage limits are one.
    assert_eq!(p.account.as_deref(), Some("anthropic"));
}

#[test]
fn a_cli_and_its_acp_entry_spend_one_account() {
    let c = AiCliConfig::builtin().unwrap_or_else(|e| panic!("{e}"));
    for (a, b, account) in [
        ("claude", "claude-acp", "anthropic"),
        ("codex", "codex-acp", "openai"),
        ("gemini", "gemini-acp", "google"),
    ] {
        assert_eq!(c.providers[a].account.as_deref(), Some(account), "{a}");
        assert_eq!(c.providers[b].account.as_deref(), Some(account), "{b}");
    }
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

    let err = AiCliConfig::from_user_json(
        r#"{"engine": {"notify": {"webhook": "127.0.0.1:9/hook"}}}"#,
        "u.json",
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(
        err.contains(
            "at engine.notify.webhook: '127.0.0.1:9/hook' is not an http:// or https:// URL"
        ),
        "{err}"
    );
    let err = AiCliConfig::from_user_json(
        r#"{"engine": {"notify_hook": ["a"], "notify": {"command": ["b"]}}}"#,
        "u.json",
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(
        err.contains("at engine.notify_hook: is deprecated and engine.notify.command is set too"),
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

#[test]
fn an_entry_naming_an_unknown_adapter_says_so_instead_of_a_missing_field() {
    let err = |json: &str| {
        AiCliConfig::from_user_json(json, "u.json")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    assert_eq!(
        err(r#"{"providers": {"x": {"adapter": "martian"}}}"#),
        "config u.json: at providers.x.adapter: unknown adapter \"martian\" (known: claude, \
         codex, gemini, acp); an entry for an adapter registered by a library must be \
         complete: missing field `package`"
    );
    // A known adapter without a built-in entry of its name (acp) needs its fields.
    assert!(
        err(r#"{"providers": {"x": {"adapter": "acp"}}}"#)
            .starts_with("config u.json: at providers.x: missing field `package`"),
    );
    // Another mistake in such an entry is still that mistake.
    assert!(
        err(r#"{"providers": {"x": {"adapter": "martian", "package": "p", "binary_name": "m", "max_turns": "many"}}}"#)
            .contains("at providers.x.max_turns: invalid type"),
    );
    // A complete entry for a library's own adapter loads (the registry that lacks the
    // adapter refuses it, see registry.rs).
    let c = AiCliConfig::from_user_json(
        r#"{"providers": {"x": {"adapter": "martian", "package": "p", "binary_name": "m"}}}"#,
        "u.json",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.providers["x"].adapter_name("x"), "martian");
}
