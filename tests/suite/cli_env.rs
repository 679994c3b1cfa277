//! A CLI's environment is built, not inherited: secrets in aicli's own environment never
//! reach it, while a credential granted to the task reaches it through the MCP server's
//! `getCredential`. Proven around the real `aicli run` and `aicli batch` commands
//! (subprocesses, with the secrets set in their environment only), with the fake CLI
//! dumping the environment it got and calling `getCredential` like an agent would.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use super::support::{fake_cli, fixture, git_repo};

/// Secret-looking variables set around aicli. Values are unique, to be searched for.
const SECRETS: &[(&str, &str)] = &[
    ("AWS_SECRET_ACCESS_KEY", "aws-secret-value-5b2e91"),
    ("AWS_ACCESS_KEY_ID", "AKIA-value-77d0c4"),
    ("GITHUB_TOKEN", "ghp-secret-value-1f6a08"),
    ("NPM_TOKEN", "npm-secret-value-c3d9e2"),
    ("DATABASE_URL", "postgres://app:db-password-8e41@db/app"),
    ("SLACK_BOT_TOKEN", "xoxb-secret-value-40ab7f"),
    ("OPENAI_API_KEY", "sk-not-for-claude-93c1aa"),
];

/// The granted credential (it is also one of the secrets: the environment never carries
/// it, getCredential does).
const GRANTED: &str = "GITHUB_TOKEN";

fn value_of(name: &str) -> &'static str {
    SECRETS
        .iter()
        .find(|(k, _)| *k == name)
        .map(|(_, v)| *v)
        .unwrap()
}

/// A config whose default provider `fake` runs the fake CLI through the real Claude
/// adapter (so aicli's MCP server is wired in with `--mcp-config`, as for `claude`).
fn config(dir: &Path, extra: &[String]) -> PathBuf {
    let fx = fixture("claude", "text");
    let mut args = vec![
        "--replay".to_owned(),
        fx.with_extension("ndjson").display().to_string(),
    ];
    args.extend(extra.iter().cloned());
    let cfg = dir.join(format!("aicli-{}.json", rand_suffix()));
    std::fs::write(
        &cfg,
        json!({"default_provider": "fake", "providers": {"fake": {
            "adapter": "claude", "binary_path": fake_cli(), "extra_args": args}}})
        .to_string(),
    )
    .unwrap();
    cfg
}

fn rand_suffix() -> String {
    format!("{:08x}", rand::random::<u32>())
}

/// `aicli ARGS` with the secrets in its environment (the test's own stays untouched).
fn aicli(cfg: &Path, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_aicli"))
        .arg("--config")
        .arg(cfg)
        .args(args)
        .envs(SECRETS.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "aicli {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The environment the fake CLI dumped.
fn dumped(file: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(file)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn assert_no_secret(env: &BTreeMap<String, String>, what: &str) {
    for (name, value) in SECRETS {
        assert!(!env.contains_key(*name), "{what}: {name} reached the CLI");
        assert!(
            !env.values().any(|v| v.contains(value)),
            "{what}: the value of {name} reached the CLI"
        );
    }
    // What a CLI needs to run did reach it.
    for base in ["PATH", "HOME"] {
        assert!(env.contains_key(base), "{what}: {base} is missing: {env:?}");
    }
}

/// No file aicli wrote (records, worktrees) holds a secret's value.
fn assert_records_clean(dir: &Path) {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            } else if let Ok(bytes) = std::fs::read(&p) {
                let text = String::from_utf8_lossy(&bytes);
                for (name, value) in SECRETS {
                    assert!(
                        !text.contains(value),
                        "{name}'s value is in {}",
                        p.display()
                    );
                }
            }
        }
    }
}

#[test]
fn secrets_in_aicli_s_environment_never_reach_the_cli_but_a_granted_credential_does() {
    let repo = git_repo();
    let dir = tempfile::tempdir().unwrap();
    let path = |n: &str| dir.path().join(n).display().to_string();

    // `aicli batch`: one task granted the credential, one not (getCredential refuses it).
    let cfg = config(dir.path(), &[]);
    let tasks = dir.path().join("tasks.json");
    std::fs::write(
        &tasks,
        json!([
            {"id": "granted", "prompt": "g", "credentials": [GRANTED],
             "extra_args": ["--dump-env", path("granted-env"),
                            "--mcp-call", "getCredential", json!({"name": GRANTED}).to_string(),
                            path("granted-credential")]},
            {"id": "other", "prompt": "o",
             "extra_args": ["--dump-env", path("other-env"),
                            "--mcp-call", "getCredential",
                            json!({"name": "AWS_SECRET_ACCESS_KEY"}).to_string(),
                            path("other-credential")]}
        ])
        .to_string(),
    )
    .unwrap();
    aicli(
        &cfg,
        &[
            "batch",
            tasks.to_str().unwrap(),
            "--json",
            "--repo",
            repo.path().to_str().unwrap(),
        ],
    );
    for t in ["granted", "other"] {
        assert_no_secret(&dumped(&dir.path().join(format!("{t}-env"))), t);
    }
    let granted: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("granted-credential")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        granted["structuredContent"]["value"],
        value_of(GRANTED),
        "{granted}"
    );
    let other: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("other-credential")).unwrap(),
    )
    .unwrap();
    assert_eq!(other["isError"], true, "{other}");
    assert_eq!(other["structuredContent"]["status"], 403, "{other}");
    // `aicli run -v`, the task granted GITHUB_TOKEN.
    let cfg = config(
        dir.path(),
        &[
            "--dump-env".into(),
            path("run-env"),
            "--mcp-call".into(),
            "getCredential".into(),
            json!({"name": GRANTED}).to_string(),
            path("run-credential"),
        ],
    );
    let out = aicli(
        &cfg,
        &[
            "-v",
            "run",
            "say hello",
            "--credential",
            GRANTED,
            "--repo",
            repo.path().to_str().unwrap(),
        ],
    );
    let env = dumped(&dir.path().join("run-env"));
    assert_no_secret(&env, "aicli run");
    let cred: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("run-credential")).unwrap())
            .unwrap();
    assert_eq!(
        cred["structuredContent"],
        json!({"name": GRANTED, "value": value_of(GRANTED)}),
        "{cred}"
    );
    // `-v` lists what was passed, by name only.
    let log = String::from_utf8_lossy(&out.stderr);
    let line = log
        .lines()
        .find(|l| l.contains("environment passed to the CLI"))
        .unwrap_or_else(|| panic!("no environment line in:\n{log}"));
    for name in ["PATH", "HOME", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] {
        assert!(line.contains(name), "{line}");
    }
    for (name, value) in SECRETS {
        assert!(!line.contains(name), "{line}");
        assert!(!log.contains(value), "a secret's value is in the log");
    }

    assert_records_clean(&repo.path().join(".aicli"));
}

#[test]
fn status_probes_see_the_environment_a_run_gets() {
    // The status probe is the fake CLI: "logged in" (exit 0) only when the config's
    // `env` reached it and aicli's secrets did not.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("aicli.json");
    std::fs::write(
        &cfg,
        json!({"default_provider": "fake", "providers": {
            "claude": null, "codex": null, "gemini": null,
            "claude-acp": null, "codex-acp": null, "gemini-acp": null,
            "fake": {"adapter": "claude", "package": "@example/fake", "binary_name": "aicli-fake-cli",
                "binary_path": fake_cli(),
                "env": {"CORP_API_KEY": "from-the-config"},
                "auth_status_argv": ["--require-env", "CORP_API_KEY=from-the-config",
                                     "--require-env-unset", "AWS_SECRET_ACCESS_KEY"]}}})
        .to_string(),
    )
    .unwrap();
    let out = aicli(&cfg, &["status", "--json"]);
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows[0]["name"], "fake", "{rows}");
    assert_eq!(rows[0]["auth"]["state"], "logged_in", "{rows}");
}
