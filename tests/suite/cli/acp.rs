//! The ACP entries as a user runs them: the real `aicli` binary with `--fake-api`, the
//! real agents from npm (`aicli install`), through `run`, `batch`, `answer` and `resume`
//! (after a `kill -9` of aicli mid-turn). Three entries come with the built-in config
//! (`gemini-acp`, `claude-acp`, `codex-acp`); the fourth, OpenCode (`opencode acp`), is an
//! agent aicli has no code for at all: it runs from the config entry in
//! `tests/data/opencode.json` alone.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Cli, assert_code, json_lines, kill_9, stderr, stdout};

/// The config-only OpenCode entry (`tests/data/opencode.json`).
fn opencode_entry() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/opencode.json");
    let v: Value = serde_json::from_slice(&std::fs::read(&path).expect("opencode.json"))
        .expect("opencode.json is JSON");
    v["providers"]["opencode"].clone()
}

/// The agent's binary, installed by `aicli install` (`.ci/install-clis.sh`).
fn installed(name: &str) -> PathBuf {
    aicli_testkit::installed_binary(name)
        .unwrap_or_else(|e| panic!("the ACP CLI tests need the real agents: {e}"))
}

/// A repository and config for `provider`; OpenCode's entry is added from its file and
/// its `HOME` under `--fake-api` pre-seeded, so that it does not fetch its plugin package
/// from the npm registry at start (what a first online start leaves behind).
fn setup(provider: &str) -> Cli {
    let cli = if provider == "opencode" {
        let mut entry = opencode_entry();
        entry["binary_path"] = Value::from(installed("opencode").display().to_string());
        Cli::with_providers(serde_json::json!({ "opencode": entry }))
    } else {
        Cli::new()
    };
    if provider == "opencode" {
        let dir = cli
            .repo
            .path()
            .join(".aicli/fake-api-home/.config/opencode");
        std::fs::create_dir_all(dir.join("node_modules")).expect("opencode config dir");
        std::fs::write(
            dir.join("package-lock.json"),
            r#"{"lockfileVersion":3,"packages":{"":{"dependencies":{"@opencode-ai/plugin":"1.18.33"}}}}"#,
        )
        .expect("package-lock.json");
    }
    cli
}

/// The last JSON line (the result) of `out`.
fn result_of(out: &std::process::Output) -> Value {
    json_lines(out)
        .pop()
        .unwrap_or_else(|| panic!("no JSON output: {}", stderr(out)))
}

/// Runs `provider` through `aicli run`, `batch` (a question), `answer` and, after a
/// `kill -9` of `aicli batch` mid-turn, `aicli resume`.
fn run_batch_answer_resume(provider: &str) {
    let cli = setup(provider);
    // run: a plain answer, the result as the last JSON line.
    let out = cli.run(&[
        "run",
        "Say hi",
        "--provider",
        provider,
        "--fake-api=text:Hello over ACP.",
        "--json",
    ]);
    assert_code(&out, 0, "aicli run");
    let r = result_of(&out);
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(r["response"], "Hello over ACP.", "{r}");
    assert_eq!(r["provider"], provider);
    assert!(r["session_id"].is_string(), "{r}");
    assert!(
        r["canonical_usage"]["output_tokens"].as_u64() > Some(0),
        "{r}"
    );

    // batch: the agent asks through aicli's MCP server; the batch ends blocked (exit 3).
    let tasks = cli.file(
        "tasks.json",
        &serde_json::json!({"provider": provider, "tasks": [{"id": "ask", "prompt": "Set up DB"}]})
            .to_string(),
    );
    let out = cli.run(&[
        "batch",
        tasks.to_str().expect("path"),
        "--fake-api=ask:Which database?|Postgres|SQLite",
        "--json",
    ]);
    assert_code(&out, 3, "a blocked batch");
    let b = result_of(&out);
    let batch = b["batch_id"].as_str().expect("batch id").to_owned();
    assert_eq!(b["tasks"][0]["status"], "blocked", "{b}");
    assert_eq!(b["tasks"][0]["question"]["question"], "Which database?");
    let session = b["tasks"][0]["session_id"].clone();

    // answer: the same session continues (session/resume, or gemini's session/load).
    let task_ref = format!("{batch}/ask");
    let out = cli.run(&["answer", &task_ref, "Postgres", "--fake-api", "--json"]);
    assert_code(&out, 0, "aicli answer");
    let r = result_of(&out);
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(r["continuation"]["mode"], "resume", "{r}");
    assert_eq!(r["session_id"], session, "the same session: {r}");

    // resume: `aicli batch` killed with SIGKILL while the agent streams its answer; the
    // agent dies with aicli, and `aicli resume` continues its session.
    let out = cli.run(&["runs", "--json"]);
    let before = json_lines(&out)[0].as_array().map_or(0, Vec::len);
    let slow = cli.file(
        "slow.json",
        &serde_json::json!({"provider": provider, "tasks": [{"id": "slow", "prompt": "Say hi"}]})
            .to_string(),
    );
    let mut child = cli
        .command(&[
            "batch",
            slow.to_str().expect("path"),
            "--fake-api=text:One two three four five six seven eight;delay=1500",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("aicli batch");
    let runs = cli.repo.path().join(".aicli/runs");
    let deadline = Instant::now() + Duration::from_secs(120);
    let (slow_batch, session) = loop {
        assert!(Instant::now() < deadline, "the slow batch never streamed");
        std::thread::sleep(Duration::from_millis(200));
        let found = std::fs::read_dir(&runs)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().join("tasks/slow/events.ndjson").is_file())
            .find_map(|e| {
                let text =
                    std::fs::read_to_string(e.path().join("tasks/slow/events.ndjson")).ok()?;
                // The agent has started its answer: a chunk of it is in the record after
                // the prompt (gemini says its mode as a chunk before it).
                let after_prompt = &text[text.find("\"method\":\"session/prompt\"")?..];
                after_prompt.contains("agent_message_chunk").then(|| {
                    let sid = text
                        .lines()
                        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                        .find_map(|v| v.pointer("/result/sessionId").cloned());
                    (e.file_name().to_string_lossy().into_owned(), sid)
                })
            });
        if let Some((b, Some(sid))) = found {
            break (b, sid);
        }
    };
    kill_9(&mut child);
    let out = cli.run(&["resume", &slow_batch, "--fake-api=text:Done.", "--json"]);
    assert_code(&out, 0, "aicli resume");
    let b = result_of(&out);
    let t = &b["tasks"][0];
    assert_eq!(t["status"], "succeeded", "{t}");
    assert_eq!(t["response"], "Done.", "{t}");
    assert_eq!(t["continuation"]["mode"], "resume", "{t}");
    assert_eq!(
        t["session_id"], session,
        "the interrupted session continued: {t}"
    );
    let out = cli.run(&["runs", "--json"]);
    assert_eq!(
        json_lines(&out)[0].as_array().map_or(0, Vec::len),
        before + 1,
        "{}",
        stdout(&out)
    );
}

#[test]
fn gemini_acp_runs_batches_answers_and_resumes() {
    run_batch_answer_resume("gemini-acp");
}

#[test]
fn claude_acp_runs_batches_answers_and_resumes() {
    run_batch_answer_resume("claude-acp");
}

#[test]
fn codex_acp_runs_batches_answers_and_resumes() {
    run_batch_answer_resume("codex-acp");
}

#[test]
fn opencode_from_a_config_entry_alone_runs_batches_answers_and_resumes() {
    run_batch_answer_resume("opencode");
}

#[test]
fn parse_replays_a_recorded_acp_run_to_its_result() {
    // `aicli parse --provider gemini-acp FILE`: both directions of a recorded run (the
    // agent's lines, aicli's behind `aicli_stdin`) replay to the committed result.
    for (provider, scenario) in [
        ("gemini-acp", "rec_text"),
        ("claude-acp", "rec_permission_default"),
        ("codex-acp", "rec_err429"),
    ] {
        let fx = super::super::support::fixture(provider, scenario);
        let cli = Cli::new();
        let out = cli.run(&[
            "parse",
            "--provider",
            provider,
            fx.with_extension("ndjson").to_str().expect("path"),
        ]);
        let r = result_of(&out);
        let want: Value = serde_json::from_slice(
            &std::fs::read(fx.with_extension("result.json")).expect("result.json"),
        )
        .expect("json");
        for k in [
            "status",
            "response",
            "session_id",
            "error_kind",
            "canonical_usage",
            "question",
        ] {
            assert_eq!(r[k], want[k], "{provider}/{scenario} {k}");
        }
    }
}
