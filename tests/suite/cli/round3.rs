//! Issue 21, round 3 of the outside measurements: what a user met, each as a test.

use super::*;

/// F2–F4: budgets and time limits that are not numbers aicli can keep are usage errors
/// (exit 2, naming the flag or the JSON path) before anything is written or run, for
/// `batch` as for `run`. (A NaN budget used to hang the batch; `inf` wrote
/// `"reserved_usd": null`, which aicli could not read back; -1, 0 and a zero timeout
/// failed every task after writing their records.)
#[test]
fn bad_budgets_and_time_limits_are_refused_before_anything_is_written() {
    let cli = Cli::new();
    let tasks = cli.file("t.json", r#"[{"id": "a", "prompt": "x"}]"#);
    let t = tasks.to_str().unwrap();
    let refused = |args: &[&str], says: &[&str]| {
        let started = std::time::Instant::now();
        let out = cli.run(args);
        assert_code(&out, 2, &format!("aicli {args:?}"));
        let err = stderr(&out);
        for s in says {
            assert!(err.contains(s), "aicli {args:?}: {s:?} not in: {err}");
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "aicli {args:?} took {:?}",
            started.elapsed()
        );
        assert!(
            no_batches(cli.repo.path()),
            "aicli {args:?} wrote a run record"
        );
    };
    for (flag, value, says) in [
        ("--budget", "NaN", "NaN"),
        ("--budget", "inf", "finite"),
        ("--budget", "-inf", "finite"),
        ("--budget", "-1", "negative"),
        ("--budget", "0", "0 would let nothing run"),
    ] {
        let arg = format!("{flag}={value}");
        refused(&["batch", t, "--no-mcp", &arg], &["--budget", says]);
        refused(&["batch", t, "--no-mcp", flag, value], &["--budget", says]);
        refused(&["run", "x", "--no-mcp", &arg], &["budget", says]);
    }
    refused(
        &["batch", t, "--no-mcp", "--max-parallel", "-1"],
        &["--max-parallel", "at least 1"],
    );
    refused(
        &["batch", t, "--no-mcp", "--timeout", "-5"],
        &["--timeout", "at least 1 second"],
    );
    let file_budget = cli.file(
        "b.json",
        r#"{"budget_usd": -5, "tasks": [{"prompt": "x"}]}"#,
    );
    refused(
        &["batch", file_budget.to_str().unwrap(), "--no-mcp"],
        &["b.json", "budget_usd", "negative"],
    );
    let file_timeout = cli.file("z.json", r#"[{"prompt": "x", "timeout_secs": 0}]"#);
    refused(
        &["batch", file_timeout.to_str().unwrap(), "--no-mcp"],
        &["z.json", "tasks[0].timeout_secs", "at least 1"],
    );
    // A good budget runs.
    let out = cli.run(&["batch", t, "--no-mcp", "--budget", "5", "--json"]);
    assert_code(&out, 0, "a batch with a budget of $5");
}

/// Friction 1: an answer run as the hint prints it (without `--fake-api`) talks to the
/// fakes the batch ran against; an answer that cannot start (the CLI is not installed)
/// leaves the task blocked with its question, and a later answer goes through.
#[test]
fn an_answer_uses_the_batch_s_fake_api_and_one_that_cannot_start_keeps_the_question() {
    let cli = Cli::new();
    let out = cli.run(&[
        "run",
        "Paint the shed",
        "--provider",
        "codex",
        "--fake-api=ask:Which colour?|red|blue",
    ]);
    assert_code(&out, 3, "a blocked run");
    let batch = only_batch(cli.repo.path());
    let task_ref = stdout(&out)
        .lines()
        .find_map(|l| l.trim().strip_prefix("answer with: aicli answer "))
        .and_then(|h| h.split_whitespace().next())
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no hint in {}", stdout(&out)));
    // A config whose codex is not installed: the answer cannot start.
    let broken = cli.file(
        "broken.json",
        r#"{"providers": {"codex": {"binary_path": "/nonexistent/codex", "npx_fallback": false}}}"#,
    );
    let out = std::process::Command::new(aicli_bin())
        .arg("--config")
        .arg(&broken)
        .args(["answer", &task_ref, "red"])
        .current_dir(cli.repo.path())
        .output()
        .unwrap();
    assert!(
        !matches!(out.status.code(), Some(0) | Some(3)),
        "an answer that cannot start: {:?}\n{}",
        out.status,
        stderr(&out)
    );
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(said.contains("still blocked"), "{said}");
    let blocked = json_lines(&cli.run(&["blocked", "--json"]));
    assert_eq!(
        blocked[0][0]["question"]["question"], "Which colour?",
        "the question is intact: {blocked:?}"
    );
    let show = &json_lines(&cli.run(&["runs", "show", &batch, "--json"]))[0];
    let t = &show["tasks"][0];
    assert_eq!(t["state"], "blocked", "{t}");
    assert_eq!(t["answers"].as_array().map(Vec::len), Some(0), "{t}");
    assert_eq!(t["attempts"].as_array().map(Vec::len), Some(1), "{t}");
    // As the hint says, without --fake-api: the batch's fakes, the same session.
    let out = cli.run(&["answer", &task_ref, "red", "--json"]);
    assert_code(&out, 0, "the answer as printed");
    assert!(stderr(&out).contains("fake model APIs"), "{}", stderr(&out));
    let r = json_lines(&out).pop().unwrap();
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(r["continuation"]["mode"], "resume", "{r}");
}

/// Friction 2: `aicli resume` of a `--fake-api` batch whose aicli was killed, run as
/// printed, runs against the same fakes and finishes the task.
#[test]
fn a_resume_uses_the_batch_s_fake_api() {
    let cli = Cli::new();
    let tasks = cli.file(
        "t.json",
        r#"{"provider": "codex", "tasks": [{"id": "slow", "prompt": "Say hello"}]}"#,
    );
    let mut child = cli
        .command(&[
            "batch",
            tasks.to_str().unwrap(),
            "--fake-api=text;delay=400",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Killed once the CLI has printed something.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let runs = cli.repo.path().join(".aicli/runs");
        let printed = std::fs::read_dir(&runs)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| {
                let f = e.ok()?.path().join("tasks/slow/events.ndjson");
                std::fs::metadata(f).ok().map(|m| m.len() > 0)
            });
        if printed == Some(true) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the CLI never printed"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    kill_9(&mut child);
    let batch = only_batch(cli.repo.path());
    let out = cli.run(&["resume", &batch, "--json"]);
    assert_code(&out, 0, "the resume as printed");
    let b = json_lines(&out).pop().unwrap();
    assert_eq!(b["tasks"][0]["status"], "succeeded", "{b}");
}
