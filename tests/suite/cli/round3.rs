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
            !cli.repo.path().join(".aicli/runs").exists()
                || std::fs::read_dir(cli.repo.path().join(".aicli/runs"))
                    .unwrap()
                    .next()
                    .is_none(),
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
