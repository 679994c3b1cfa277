//! `aicli cancel`: a batch run by another `aicli batch` process is cancelled through its
//! record, one task first, then the whole batch, and nothing of it is left.

use std::path::Path;
use std::time::Duration;

use super::support::*;

fn cancel(cfg: &Path, repo: &Path, runs: &Path, target: &str) -> std::process::Output {
    aicli_with(cfg, &["cancel", target, "--json", "--wait", "20"])
        .arg("--repo")
        .arg(repo)
        .arg("--runs-dir")
        .arg(runs)
        .output()
        .expect("aicli cancel runs")
}

fn json_of(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_then_the_batch_of_another_process_are_cancelled_through_the_record() {
    let repo = git_repo();
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let cfg = fake_cli_config(dir.path(), &["--line-delay-ms", "200"]);
    let pid = |t: &str| dir.path().join(format!("{t}.pids"));
    // Each prints one line and then runs until it is stopped: none ends on its own, however
    // slow the machine is.
    let slow = |t: &str| {
        serde_json::json!({"id": t, "prompt": t, "extra_args": [
            "--hang-after", "1", "--spawn-grandchildren", "1", "--pid-file", pid(t)]})
    };
    let tasks = serde_json::json!({"max_parallel": 2, "tasks": [slow("a"), slow("b"), slow("c")]});
    let runs_arg = runs.to_str().unwrap();
    let mut batch = spawn_batch(
        &cfg,
        &tasks,
        &[
            "--repo",
            repo.path().to_str().unwrap(),
            "--runs-dir",
            runs_arg,
        ],
    );
    let b = wait_for_batch(
        &runs,
        Duration::from_secs(60),
        Duration::from_millis(50),
        "tasks a and b start printing",
        |b| task_printed(b, "a") && task_printed(b, "b") && pid("a").exists(),
    );
    let id = batch_id(&b);

    // One task: it ends cancelled, its processes are gone, the others go on.
    let v = json_of(&cancel(&cfg, repo.path(), &runs, &format!("{id}/a")));
    assert_eq!(v["settled"], true, "{v}");
    assert_eq!(v["tasks"][0]["task_id"], "a");
    assert_eq!(v["tasks"][0]["state"], "failed", "{v}");
    assert_eq!(v["tasks"][0]["error_kind"], "cancelled", "{v}");
    assert_all_gone(&pid("a"), Duration::from_secs(5)).await;
    assert_eq!(task_state(&b, "b").as_deref(), Some("running"));

    // a's place goes to c; then the whole batch, as Ctrl-C would.
    wait_for_batch(
        &runs,
        Duration::from_secs(30),
        Duration::from_millis(50),
        "c starts",
        |b| task_printed(b, "c") && pid("c").exists(),
    );
    let v = json_of(&cancel(&cfg, repo.path(), &runs, &id));
    assert_eq!(v["settled"], true, "{v}");
    let mut held: Vec<String> = v["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["task_id"].as_str().unwrap().to_owned())
        .collect();
    held.sort();
    assert_eq!(held, ["b", "c"], "a had settled already: {v}");
    let status = batch.wait().expect("the batch process ends");
    assert!(
        !status.success(),
        "a cancelled batch does not exit 0: {status:?}"
    );
    for t in ["a", "b", "c"] {
        assert_all_gone(&pid(t), Duration::from_secs(5)).await;
        let rec: serde_json::Value = serde_json::from_slice(
            &std::fs::read(b.join("tasks").join(t).join("task.json")).unwrap(),
        )
        .unwrap();
        // The task cancelled alone is over; the batch's others are interrupted, as by
        // Ctrl-C, for `aicli resume` to run again.
        let want = if t == "a" { "failed" } else { "interrupted" };
        assert_eq!(rec["state"], want, "{t}: {rec}");
        let last = rec["attempts"].as_array().unwrap().last().unwrap();
        assert_eq!(last["result"]["error_kind"], "cancelled", "{t}: {rec}");
    }
    let result: serde_json::Value =
        serde_json::from_slice(&std::fs::read(b.join("result.json")).unwrap()).unwrap();
    assert_eq!(
        (&result["n_failed"], &result["n_interrupted"]),
        (&serde_json::json!(1), &serde_json::json!(2)),
        "a failed, b and c are interrupted: {result}"
    );
    let control = std::fs::read_to_string(b.join("control.ndjson")).unwrap();
    assert_eq!(control.lines().count(), 2, "{control}");

    // Nothing runs it any more: a cancel is refused, and says why.
    let out = cancel(&cfg, repo.path(), &runs, &id);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("batch {id} is not running in any aicli process")),
        "{err}"
    );
    let out = cancel(&cfg, repo.path(), &runs, "nosuch");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no batch or task nosuch"));
}
