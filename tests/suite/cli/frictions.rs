//! The frictions a new user hit in the first ten minutes (issue 11), each through the
//! real `aicli` binary: output, exit codes, input checks, records.

use std::process::Stdio;

use super::super::support::{fixture, git};
use super::*;

/// Spawns `aicli ARGS` with its stdout closed before it writes anything: every write
/// hits a broken pipe.
fn with_closed_stdout(cli: &Cli, args: &[&str]) -> std::process::Output {
    let mut child = cli
        .command(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn aicli");
    drop(child.stdout.take());
    child.wait_with_output().expect("aicli ends")
}

#[test]
fn f1_a_closed_stdout_ends_quietly() {
    let cli = Cli::new();
    let out = cli.run(&["run", "hello", "--no-mcp"]);
    assert_code(&out, 0, "a first run");
    let batch = only_batch(cli.repo.path());
    for args in [
        vec!["runs"],
        vec!["runs", "show", batch.as_str()],
        vec!["run", "--json", "hello again", "--no-mcp"],
        vec!["providers", "--json"],
    ] {
        let out = with_closed_stdout(&cli, &args);
        let err = stderr(&out);
        assert!(
            !err.contains("panicked") && !err.contains("Broken pipe"),
            "aicli {args:?} complained about the closed pipe: {err}"
        );
        assert_ne!(
            out.status.code(),
            Some(101),
            "aicli {args:?} panicked: {err}"
        );
    }
}

#[test]
fn f2_one_exit_code_rule() {
    let cli = Cli::new();
    let not_a_repo = tempfile::tempdir().unwrap();
    let transcript = fixture("claude", "text").with_extension("ndjson");
    let cases: Vec<(Vec<String>, i32, &str)> = vec![
        (
            vec!["runs".into(), "show".into(), "nosuch".into()],
            2,
            "no batch 'nosuch'",
        ),
        (
            vec!["resume".into(), "nosuch".into(), "--no-mcp".into()],
            2,
            "no batch 'nosuch'",
        ),
        (
            vec![
                "worktrees".into(),
                "--repo".into(),
                not_a_repo.path().display().to_string(),
            ],
            2,
            "not a git repository",
        ),
        (
            vec!["parse".into(), transcript.display().to_string()],
            2,
            "--provider is required",
        ),
        (
            vec![
                "answer".into(),
                "nope".into(),
                "x".into(),
                "--no-mcp".into(),
            ],
            2,
            "no task 'nope'",
        ),
    ];
    for (args, code, says) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = cli.run(&args);
        assert_code(&out, code, &format!("aicli {args:?}"));
        assert!(
            stderr(&out).contains(says),
            "aicli {args:?}: {}",
            stderr(&out)
        );
    }
    // A batch with a failed task: 4, not 1 ("aicli failed").
    let tasks = cli.file(
        "tasks.json",
        &serde_json::json!([
            replaying("ok", "text", &[]),
            replaying("bad", "unauth_nokey", &[])
        ])
        .to_string(),
    );
    let out = cli.run(&["batch", tasks.to_str().unwrap(), "--no-mcp"]);
    assert_code(&out, 4, "a batch with a failed task");
}

#[test]
fn f3_every_json_output_is_one_json_document_per_line() {
    let cli = Cli::new();
    let out = cli.run(&["run", "--json", "hello", "--no-mcp"]);
    assert_code(&out, 0, "run --json");
    let lines = json_lines(&out);
    assert!(lines.len() > 1, "events, then the result");
    assert_eq!(lines.last().unwrap()["type"], "session_result");
    assert!(
        lines[..lines.len() - 1]
            .iter()
            .all(|l| l["type"].is_string())
    );
    let batch = only_batch(cli.repo.path());
    let tasks = cli.file("tasks.json", r#"[{"id": "a", "prompt": "x"}]"#);
    for args in [
        vec!["batch", tasks.to_str().unwrap(), "--json", "--no-mcp"],
        vec!["runs", "--json"],
        vec!["runs", "show", batch.as_str(), "--json"],
        vec!["blocked", "--json"],
        vec!["worktrees", "--json"],
        vec!["providers", "--json"],
    ] {
        let out = cli.run(&args);
        assert_code(&out, 0, &format!("aicli {args:?}"));
        assert_eq!(
            json_lines(&out).len(),
            1,
            "aicli {args:?}: {}",
            stdout(&out)
        );
    }
}

#[test]
fn f4_gemini_text_deltas_print_as_one_line() {
    let cli = Cli::new();
    let out = cli.run(&["run", "hello", "--provider", "fakegem", "--no-mcp"]);
    assert_code(&out, 0, "gemini run");
    let text = stdout(&out);
    assert!(
        text.lines()
            .any(|l| l.starts_with("The tool run_shell_command returned: {\"output\":")),
        "the answer's chunks are not one line:\n{text}"
    );
}

#[test]
fn f5_f6_empty_answers_and_zero_limits_are_refused() {
    let cli = Cli::new();
    for (args, says) in [
        (vec!["answer", "some-task", "  "], "is empty"),
        (vec!["run", "x", "--timeout", "0"], "at least 1 second"),
        (vec!["run", "x", "--idle-timeout", "0"], "at least 1 second"),
        (vec!["batch", "t.json", "--max-parallel", "0"], "at least 1"),
    ] {
        let out = cli.run(&args);
        assert_code(&out, 2, &format!("aicli {args:?}"));
        assert!(
            stderr(&out).contains(says),
            "aicli {args:?}: {}",
            stderr(&out)
        );
    }
    let tasks = cli.file(
        "zero.json",
        r#"{"max_parallel": 0, "tasks": [{"prompt": "x"}]}"#,
    );
    let out = cli.run(&["batch", tasks.to_str().unwrap(), "--no-mcp"]);
    assert_code(&out, 2, "max_parallel 0 in the file");
    let err = stderr(&out);
    assert!(
        err.contains("zero.json") && err.contains("at least 1"),
        "{err}"
    );
}

#[test]
fn f7_repository_errors_say_what_to_do() {
    let cli = Cli::new();
    let out = cli.run(&["run", "x", "--repo", "/no/such/dir", "--no-mcp"]);
    assert_code(&out, 2, "a missing --repo");
    assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));
    let empty = tempfile::tempdir().unwrap();
    git(empty.path(), &["init", "-q"]);
    let out = cli.run(&[
        "run",
        "x",
        "--repo",
        empty.path().to_str().unwrap(),
        "--no-mcp",
    ]);
    assert_code(&out, 2, "a repository without commits");
    assert!(
        stderr(&out).contains("make a first commit"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("fatal:"), "{}", stderr(&out));
    let plain = tempfile::tempdir().unwrap();
    let out = cli.run(&[
        "run",
        "x",
        "--repo",
        plain.path().to_str().unwrap(),
        "--no-mcp",
    ]);
    assert_code(&out, 2, "not a repository");
    assert!(stderr(&out).contains("git init"), "{}", stderr(&out));
}

#[test]
fn f8_a_dirty_repository_warns_and_include_uncommitted_carries_the_changes() {
    // The fake CLI exits 3 unless the untracked file is in its working directory.
    let cli = Cli::with_providers(serde_json::json!({
        "needsfile": {"adapter": "claude", "binary_path": super::super::support::fake_cli(),
            "extra_args": ["--replay", fixture("claude", "text").with_extension("ndjson"),
                           "--require-file", "new-file.txt"]}
    }));
    make_dirty(cli.repo.path());
    let out = cli.run(&["run", "x", "--provider", "needsfile", "--no-mcp"]);
    assert!(
        stderr(&out).contains("uncommitted changes")
            && stderr(&out).contains("--include-uncommitted"),
        "{}",
        stderr(&out)
    );
    assert_ne!(
        out.status.code(),
        Some(0),
        "the task did not see the untracked file"
    );
    let out = cli.run(&[
        "run",
        "x",
        "--provider",
        "needsfile",
        "--include-uncommitted",
        "--no-mcp",
    ]);
    assert_code(&out, 0, "with --include-uncommitted");
    // The worktree saw the edit too, and the main checkout is untouched.
    let v: serde_json::Value =
        serde_json::from_slice(&cli.run(&["runs", "--json"]).stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2);
    assert_eq!(
        std::fs::read_to_string(cli.repo.path().join("README.md")).unwrap(),
        "# edited, not committed\n"
    );
    assert!(git(cli.repo.path(), &["for-each-ref", "refs/aicli/uncommitted"]).contains("commit"));
}

#[test]
fn f9_global_options_work_after_subcommands() {
    let cli = Cli::new();
    assert_code(&cli.run(&["run", "x", "--no-mcp"]), 0, "a run");
    let batch = only_batch(cli.repo.path());
    let elsewhere = tempfile::tempdir().unwrap();
    for args in [
        vec!["runs", "show", batch.as_str(), "--repo", &cli.repo_arg()],
        vec!["worktrees", "prune", "--repo", &cli.repo_arg()],
        vec!["blocked", "--repo", &cli.repo_arg(), "--json"],
    ] {
        let out = cli
            .command(&args)
            .current_dir(elsewhere.path())
            .output()
            .unwrap();
        assert_code(&out, 0, &format!("aicli {args:?}"));
    }
}

#[test]
fn f10_config_errors_once_and_tasks_file_errors_name_the_file() {
    let cli = Cli::new();
    let bad = cli.file("bad.json", r#"{"providers": {},}"#);
    let out = std::process::Command::new(aicli_bin())
        .args(["--config", bad.to_str().unwrap(), "providers"])
        .output()
        .unwrap();
    assert_code(&out, 2, "a bad config");
    let err = stderr(&out);
    assert_eq!(
        err.matches("trailing comma").count(),
        1,
        "said more than once: {err}"
    );
    assert!(err.contains("bad.json"), "{err}");
    let unknown = cli.file("unknown.json", r#"[{"prompt": "x", "provider": "nosuch"}]"#);
    let dup = cli.file(
        "dup.json",
        r#"[{"id": "a", "prompt": "x"}, {"id": "a", "prompt": "y"}]"#,
    );
    for (file, says) in [(&unknown, "nosuch"), (&dup, "a")] {
        let out = cli.run(&["batch", file.to_str().unwrap(), "--no-mcp"]);
        assert_code(&out, 2, "a bad tasks file");
        let err = stderr(&out);
        assert!(
            err.contains(file.to_str().unwrap()) && err.contains(says),
            "{err}"
        );
    }
}

#[test]
fn f11_single_runs_get_distinct_task_ids() {
    let cli = Cli::new();
    assert_code(&cli.run(&["run", "one", "--no-mcp"]), 0, "first");
    assert_code(&cli.run(&["run", "two", "--no-mcp"]), 0, "second");
    let out = cli.run(&["runs", "--json"]);
    let batches: Vec<String> = json_lines(&out)[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["batch_id"].as_str().unwrap().to_owned())
        .collect();
    let mut ids = Vec::new();
    for b in &batches {
        let show = json_lines(&cli.run(&["runs", "show", b, "--json"]));
        ids.push(
            show[0]["tasks"][0]["task"]["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1], "{ids:?}");
    assert!(ids.iter().all(|i| i.starts_with("run-")), "{ids:?}");
}

#[test]
fn f13_f14_ctrl_c_says_interrupted_parse_agrees_and_resume_finishes_with_known_costs() {
    let cli = Cli::new();
    let tasks = cli.file(
        "tasks.json",
        &serde_json::json!({"max_parallel": 2, "tasks": [
            replaying("slow1", "text", &["--line-delay-ms", "1500"]),
            replaying("slow2", "text", &["--line-delay-ms", "1500"]),
        ]})
        .to_string(),
    );
    let child = cli
        .command(&["batch", tasks.to_str().unwrap(), "--no-mcp"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupt once both have printed their first line (their session ids).
    let runs = cli.repo.path().join(".aicli/runs");
    interrupt_once(&child, || {
        std::fs::read_dir(&runs)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(Result::ok)
            .is_some_and(|b| printed(&b.path().join("tasks"), &["slow1", "slow2"]))
    });
    let out = child.wait_with_output().unwrap();
    assert_code(&out, 5, "an interrupted batch");
    let batch = only_batch(cli.repo.path());
    let text = stdout(&out);
    assert!(text.contains("2 interrupted"), "{text}");
    assert!(!text.contains("2 failed"), "{text}");
    assert!(text.contains(&format!("aicli resume {batch}")), "{text}");

    // The record's verdict, not the stream's: interrupted.
    let dir = cli
        .repo
        .path()
        .join(".aicli/runs")
        .join(&batch)
        .join("tasks/slow1");
    let parsed = json_lines(&cli.run(&["parse", dir.to_str().unwrap()]));
    assert_eq!(parsed[0]["status"], "interrupted", "{}", parsed[0]);

    let out = cli.run(&["resume", &batch, "--no-mcp"]);
    assert_code(&out, 0, "the resume");
    let text = stdout(&out);
    assert!(text.contains("2 succeeded"), "{text}");
    assert!(
        !text.contains("unknown"),
        "the resumed runs' costs cover the interrupted ones: {text}"
    );
}

#[test]
fn f19_mixed_batches_name_their_providers_and_an_overspend_says_by_how_much() {
    let cli = Cli::new();
    let tasks = cli.file(
        "tasks.json",
        r#"{"budget_usd": 0.000001, "max_parallel": 2, "tasks": [
            {"id": "c", "prompt": "x", "provider": "fake"},
            {"id": "g", "prompt": "y", "provider": "fakegem"}]}"#,
    );
    let out = cli.run(&["batch", tasks.to_str().unwrap(), "--no-mcp"]);
    let text = stdout(&out);
    assert!(text.contains("over budget by $"), "{text}");
    assert!(!text.contains("$0.0000 left"), "{text}");
    let header = text.lines().next().unwrap_or_default();
    for col in ["provider", "in", "out", "cache", "cost", "source"] {
        assert!(
            header.split_whitespace().any(|c| c == col),
            "no {col} column: {header}"
        );
    }
    let batch = only_batch(cli.repo.path());
    let show = stdout(&cli.run(&["runs", "show", &batch]));
    assert!(
        show.lines()
            .next()
            .unwrap_or_default()
            .contains("providers fake, fakegem"),
        "{show}"
    );
}

#[test]
fn f24_an_auth_error_is_said_once() {
    let cli = Cli::with_providers(serde_json::json!({
        "noauth": {"adapter": "claude", "binary_path": super::super::support::fake_cli(),
            "extra_args": ["--replay", fixture("claude", "unauth_nokey").with_extension("ndjson"),
                           "--exit-file", fixture("claude", "unauth_nokey").with_extension("exit")]}
    }));
    let out = cli.run(&["run", "x", "--provider", "noauth", "--no-mcp"]);
    assert_code(&out, 10, "auth");
    let text = stdout(&out);
    assert_eq!(text.matches("Not logged in").count(), 1, "{text}");
}
