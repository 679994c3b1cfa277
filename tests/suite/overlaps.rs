//! Overlaps between a batch's tasks, found by trial merges when the batch settles (issue
//! 36, stage 3), through the real binary and git: two tasks that edit the same line are
//! flagged as a conflict in the batch's summary, its result, `aicli runs show` and the
//! web view; a task that changes the same file elsewhere merges cleanly and says so; a
//! task on another file is not mentioned; and a blocked task answered after the target
//! branch moved is checked against the target's new head. Nothing is merged, no
//! worktree or ref is touched.

use serde_json::{Value, json};

use super::commits::Setup;
use super::support::*;

fn shared(s: &Setup) {
    std::fs::write(s.repo.path().join("shared.txt"), "1\n2\n3\n4\n5\n6\n7\n8\n").unwrap();
    git(s.repo.path(), &["add", "shared.txt"]);
    git(s.repo.path(), &["commit", "-q", "-m", "shared"]);
}

fn write(file: &str, text: &str) -> Value {
    json!(["--write", file, text])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_that_edit_the_same_line_are_flagged_before_anyone_merges() {
    let s = Setup::new(json!({}));
    shared(&s);
    let tasks = json!([
        {"id": "a", "prompt": "p", "extra_args": write("shared.txt", "ONE\n2\n3\n4\n5\n6\n7\n8\n")},
        {"id": "b", "prompt": "p", "extra_args": write("shared.txt", "uno\n2\n3\n4\n5\n6\n7\n8\n")},
        {"id": "c", "prompt": "p", "extra_args": write("shared.txt", "1\n2\n3\n4\n5\n6\n7\nEIGHT\n")},
        {"id": "d", "prompt": "p", "extra_args": write("other.txt", "o\n")}
    ]);
    let file = s.dir.path().join("tasks.json");
    std::fs::write(&file, tasks.to_string()).unwrap();
    let head = s.git(&["rev-parse", "HEAD"]);
    let out = s
        .cmd(&["batch", file.to_str().unwrap(), "--batch-id", "ov"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("overlaps: 3 (1 would conflict; found by trial merges)"),
        "{text}"
    );
    assert!(text.contains("⚠ a and b conflict on shared.txt"), "{text}");
    assert!(
        text.contains("↔ a and c both change shared.txt: they merge cleanly"),
        "{text}"
    );
    assert!(
        text.contains("↔ b and c both change shared.txt: they merge cleanly"),
        "{text}"
    );
    assert!(!text.contains(" d "), "d overlaps nothing: {text}");
    let result: Value =
        serde_json::from_slice(&std::fs::read(s.runs().join("ov/result.json")).unwrap()).unwrap();
    assert_eq!(
        result["overlaps"][0],
        json!({"task": "a", "with": {"kind": "task", "id": "b"}, "files": ["shared.txt"], "conflicts": ["shared.txt"]})
    );
    assert_eq!(result["overlaps"].as_array().unwrap().len(), 3);
    // Nothing was merged or touched: the user's branch, its checkout, the task branches.
    assert_eq!(s.git(&["rev-parse", "HEAD"]), head);
    assert_eq!(s.git(&["status", "--porcelain"]), "");
    assert_eq!(s.git(&["branch", "--list", "aicli/*"]).lines().count(), 4);
    // The same in `aicli runs show` and on the web view's batch page.
    let show = s.cmd(&["runs", "show", "ov"]).output().unwrap();
    let show = String::from_utf8_lossy(&show.stdout);
    assert!(show.contains("⚠ a and b conflict on shared.txt"), "{show}");
    let web = super::web::Web::spawn(s.cmd(&["web", "--json"]));
    let page = reqwest::Client::new()
        .get(format!("{}/batches/ov", web.base))
        .bearer_auth(&web.token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains(
            r#"<li data-conflict="true"><span class="i i-warn" aria-hidden="true"></span>a and b conflict on shared.txt</li>"#
        ),
        "{page}"
    );
}

/// A blocked task's work is checked again when its answer settles the batch: against
/// the target branch's head as it is then.
#[test]
fn an_answered_task_is_checked_against_the_target_as_it_is_now() {
    let s = Setup::new(json!({}));
    shared(&s);
    let asked = s.dir.path().join("asked.json");
    let q = r#"{"question": "Go on?", "options": ["yes"]}"#;
    let mut args = write("shared.txt", "ONE\n2\n3\n4\n5\n6\n7\n8\n");
    for a in ["--mcp-call", "ask_user", q, asked.to_str().unwrap()] {
        args.as_array_mut().unwrap().push(a.into());
    }
    let (code, b) = s.batch(
        "ask",
        json!([{"id": "q", "prompt": "p", "extra_args": args}]),
    );
    assert_eq!(code, Some(3), "{b}");
    assert!(b.get("overlaps").is_none(), "the target has not moved: {b}");
    // Someone changes the same line on main meanwhile.
    std::fs::write(
        s.repo.path().join("shared.txt"),
        "first\n2\n3\n4\n5\n6\n7\n8\n",
    )
    .unwrap();
    s.git(&["commit", "-qam", "main moves"]);
    let out = s
        .cmd(&["answer", "ask/q", "yes", "--json"])
        .output()
        .unwrap();
    let b: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let result: Value =
        serde_json::from_slice(&std::fs::read(s.runs().join("ask/result.json")).unwrap()).unwrap();
    let head = s.git(&["rev-parse", "HEAD"]);
    assert_eq!(
        result["overlaps"],
        json!([{"task": "q", "with": {"kind": "target", "branch": "main", "head": head},
                "files": ["shared.txt"], "conflicts": ["shared.txt"]}]),
        "{b}"
    );
}
