//! A new user's frictions, round 4 (issue 37), each through the real binary: the items
//! landed so far, a test each that fails on the binary before the fix.

use super::*;

/// Item 14: a `--fake-api` script is played for every task's conversation, not once per
/// fake: two tasks of each real CLI in one batch each run the script's command.
#[test]
fn every_task_of_a_fake_api_batch_follows_the_script() {
    let cli = Cli::new();
    let mut tasks = Vec::new();
    for (p, settings) in [
        ("claude", serde_json::json!({"allowed_tools": ["Bash"]})),
        (
            "codex",
            serde_json::json!({"permission_mode": "accept_edits"}),
        ),
        ("gemini", serde_json::json!({"permission_mode": "bypass"})),
    ] {
        for n in 1..=2 {
            let mut t = serde_json::json!({"id": format!("{p}-{n}"), "provider": p, "prompt": "Write same.txt"});
            for (k, v) in settings.as_object().unwrap() {
                t[k] = v.clone();
            }
            tasks.push(t);
        }
    }
    let file = cli.file("tasks.json", &serde_json::Value::Array(tasks).to_string());
    for parallel in ["1", "6"] {
        let out = cli.run(&[
            "batch",
            file.to_str().unwrap(),
            "--json",
            "--max-parallel",
            parallel,
            "--fake-api=shell:od -An -N8 -x /dev/urandom > same.txt",
        ]);
        assert_code(&out, 0, "the batch");
        let b: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        for t in b["tasks"].as_array().unwrap() {
            let id = t["task_id"].as_str().unwrap();
            assert_eq!(
                t["tool_calls"], 1,
                "parallel {parallel}: {id} ran the script's command: {t}"
            );
            let commit = t["work"]["commit"]
                .as_str()
                .unwrap_or_else(|| panic!("{id}: {t}"));
            let files = git(
                cli.repo.path(),
                &["show", "--name-only", "--format=", commit],
            );
            assert_eq!(files, "same.txt", "{id}");
        }
    }
}
