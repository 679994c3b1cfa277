//! `aicli land` (issue 36, stage 4) through the real binary and real git: a batch's
//! succeeded tasks land in order, the one that conflicts is skipped naming its file, and
//! the repository is clean after (never mid-merge); `--squash`, `--rebase`, `--into` a
//! branch no checkout has; never over the user's uncommitted changes; `--prune`;
//! `worktrees prune` knows a landed task holds no unlanded work; `--push` to a bare
//! repository, of the result or of the task branches.

use std::path::Path;

use serde_json::{Value, json};

use super::commits::Setup;
use super::support::*;

const SHARED: &str = "1\n2\n3\n4\n5\n6\n7\n8\n";

fn setup() -> Setup {
    let s = Setup::new(json!({}));
    std::fs::write(s.repo.path().join("shared.txt"), SHARED).unwrap();
    git(s.repo.path(), &["add", "shared.txt"]);
    git(s.repo.path(), &["commit", "-q", "-m", "shared"]);
    s
}

fn edit(id: &str, file: &str, text: &str) -> Value {
    json!({"id": id, "prompt": format!("edit {file}\nmore"), "extra_args": ["--write", file, text]})
}

fn land(s: &Setup, args: &[&str]) -> (Option<i32>, String, String) {
    let out = s.cmd(&[&["land"][..], args].concat()).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn read(repo: &Path, file: &str) -> String {
    std::fs::read_to_string(repo.join(file)).unwrap_or_default()
}

#[test]
fn a_batch_lands_its_clean_tasks_in_order_and_skips_the_conflicting_one() {
    let s = setup();
    let before = s.git(&["rev-parse", "HEAD"]);
    let (code, b) = s.batch(
        "lb",
        json!([
            edit("a", "shared.txt", "ONE\n2\n3\n4\n5\n6\n7\n8\n"),
            edit("b", "shared.txt", "uno\n2\n3\n4\n5\n6\n7\n8\n"),
            edit("c", "shared.txt", "1\n2\n3\n4\n5\n6\n7\nEIGHT\n"),
            edit("d", "other.txt", "o\n"),
            {"id": "e", "prompt": "p", "timeout_secs": 2,
             "extra_args": ["--write", "e.txt", "e\n", "--hang-after", "1"]}
        ]),
    );
    assert_eq!(code, Some(4), "e times out: {b}");
    let (code, text, err) = land(&s, &["lb"]);
    assert_eq!(code, Some(4), "b is skipped: {text}{err}");
    for want in [
        "✔ lb/a landed into main (merge",
        "✘ lb/b not landed: conflicts with main on shared.txt",
        "✔ lb/c landed into main (merge",
        "✔ lb/d landed into main (merge",
        "✘ lb/e not landed: failed: land it alone (aicli land lb/e)",
        "3 tasks landed, 2 not · main moved",
    ] {
        assert!(text.contains(want), "{want:?} in:\n{text}");
    }
    // The work is on main, in the checkout, and nothing is half-done.
    assert_eq!(
        read(s.repo.path(), "shared.txt"),
        "ONE\n2\n3\n4\n5\n6\n7\nEIGHT\n"
    );
    assert_eq!(read(s.repo.path(), "other.txt"), "o\n");
    assert!(!s.repo.path().join("e.txt").exists());
    assert_eq!(s.git(&["status", "--porcelain"]), "");
    for marker in [
        "MERGE_HEAD",
        "rebase-merge",
        "rebase-apply",
        "CHERRY_PICK_HEAD",
    ] {
        assert!(
            !s.repo.path().join(".git").join(marker).exists(),
            "{marker}"
        );
    }
    let merges = s.git(&[
        "log",
        "--merges",
        "--format=%s|%(trailers:key=Aicli-Task,valueonly)",
        &format!("{before}..main"),
    ]);
    assert_eq!(
        merges.lines().filter(|l| !l.is_empty()).collect::<Vec<_>>(),
        [
            "Merge aicli task d: edit other.txt|d",
            "Merge aicli task c: edit shared.txt|c",
            "Merge aicli task a: edit shared.txt|a"
        ]
    );
    // The records say so; prune knows the landed worktrees hold no unlanded work.
    let rec: Value =
        serde_json::from_slice(&std::fs::read(s.runs().join("lb/tasks/a/task.json")).unwrap())
            .unwrap();
    assert_eq!(rec["landed"]["into"], "main");
    assert_eq!(rec["landed"]["how"], "merge");
    let list =
        String::from_utf8_lossy(&s.cmd(&["worktrees"]).output().unwrap().stdout).into_owned();
    assert!(
        list.contains("aicli/lb/a") && list.contains("landed (prunable)"),
        "{list}"
    );
    let pruned = String::from_utf8_lossy(&s.cmd(&["worktrees", "prune"]).output().unwrap().stdout)
        .into_owned();
    for t in ["a", "c", "d"] {
        assert!(
            pruned.contains(&format!("removed aicli/lb/{t}")),
            "{t}: {pruned}"
        );
    }
    assert!(
        pruned.contains("kept aicli/lb/b"),
        "b's work is not landed: {pruned}"
    );
    // Landing again: nothing new, and not a failure.
    let (code, text, _) = land(&s, &["lb/c"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("lb/c not landed: already landed into main (merge, "),
        "{text}"
    );
}

#[test]
fn squash_and_rebase_land_without_a_merge_commit_and_prune_still_knows() {
    let s = setup();
    let before = s.git(&["rev-parse", "HEAD"]);
    let (code, b) = s.batch(
        "sq",
        json!([edit("a", "a.txt", "a\n"), edit("b", "b.txt", "b\n")]),
    );
    assert_eq!(code, Some(0), "{b}");
    let (code, text, err) = land(&s, &["sq/a", "--squash"]);
    assert_eq!(code, Some(0), "{text}{err}");
    assert_eq!(
        s.git(&["log", "-1", "--format=%s|%P", "main"])
            .split('|')
            .next(),
        Some("a: edit a.txt")
    );
    assert_eq!(
        s.git(&["rev-list", "--count", &format!("{before}..main")]),
        "1",
        "one commit, no merge"
    );
    let (code, text, err) = land(&s, &["sq/b", "--rebase"]);
    assert_eq!(code, Some(0), "{text}{err}");
    // b's own commit, replayed: its message and author kept, the lander commits it.
    let last = s.git(&[
        "log",
        "-1",
        "--format=%s|%an|%(trailers:key=Aicli-Task,valueonly)",
        "main",
    ]);
    assert_eq!(last, "b: edit b.txt|aicli test|b");
    assert_eq!(
        s.git(&[
            "rev-list",
            "--merges",
            "--count",
            &format!("{before}..main")
        ]),
        "0"
    );
    assert_eq!(read(s.repo.path(), "a.txt"), "a\n");
    assert_eq!(read(s.repo.path(), "b.txt"), "b\n");
    // Neither branch's commits are on main (new commits were made), yet both landed.
    let pruned = String::from_utf8_lossy(&s.cmd(&["worktrees", "prune"]).output().unwrap().stdout)
        .into_owned();
    assert!(
        pruned.contains("removed aicli/sq/a") && pruned.contains("removed aicli/sq/b"),
        "{pruned}"
    );
}

#[test]
fn land_never_touches_uncommitted_changes_and_into_moves_a_branch_no_checkout_has() {
    let s = setup();
    let (code, b) = s.batch(
        "uc",
        json!([edit("a", "shared.txt", "ONE\n2\n3\n4\n5\n6\n7\n8\n")]),
    );
    assert_eq!(code, Some(0), "{b}");
    let head = s.git(&["rev-parse", "HEAD"]);
    // The user is editing the same file: refused, nothing moved, their edit intact.
    std::fs::write(s.repo.path().join("shared.txt"), "mine\n").unwrap();
    let (code, text, err) = land(&s, &["uc/a"]);
    assert_eq!(code, Some(2), "{text}{err}");
    assert!(
        err.contains("nothing landed: main is checked out in") && err.contains("shared.txt"),
        "{err}"
    );
    assert_eq!(read(s.repo.path(), "shared.txt"), "mine\n");
    assert_eq!(s.git(&["rev-parse", "HEAD"]), head);
    assert!(!s.repo.path().join(".git/MERGE_HEAD").exists());
    // Into a branch no checkout has: the ref moves, the user's checkout does not.
    s.git(&["branch", "release", &head]);
    let (code, text, err) = land(&s, &["uc/a", "--into", "release"]);
    assert_eq!(code, Some(0), "{text}{err}");
    assert_eq!(
        s.git(&["show", "release:shared.txt"]),
        "ONE\n2\n3\n4\n5\n6\n7\n8"
    );
    assert_eq!(read(s.repo.path(), "shared.txt"), "mine\n");
    assert_eq!(s.git(&["rev-parse", "main"]), head);
    // A change of the user's in another file stays as it is when main moves.
    std::fs::write(s.repo.path().join("shared.txt"), SHARED).unwrap();
    std::fs::write(s.repo.path().join("README.md"), "# mine\n").unwrap();
    let (code, text, err) = land(&s, &["uc/a", "--prune"]);
    assert_eq!(code, Some(0), "{text}{err}");
    assert_eq!(read(s.repo.path(), "README.md"), "# mine\n");
    assert_eq!(s.git(&["status", "--porcelain"]), "M README.md");
    assert!(
        text.contains("a: worktree and branch aicli/uc/a removed"),
        "{text}"
    );
    assert_eq!(s.git(&["branch", "--list", "aicli/*"]), "");
}

#[test]
fn push_sends_the_result_or_the_task_branches_to_a_remote() {
    let s = setup();
    let bare = s.dir.path().join("remote.git");
    git(
        s.dir.path(),
        &["init", "-q", "--bare", bare.to_str().unwrap()],
    );
    s.git(&["remote", "add", "origin", bare.to_str().unwrap()]);
    s.git(&["push", "-q", "origin", "main"]);
    let (code, b) = s.batch(
        "pu",
        json!([edit("a", "a.txt", "a\n"), edit("b", "b.txt", "b\n")]),
    );
    assert_eq!(code, Some(0), "{b}");
    // For pull requests: the task branches as they are, nothing landed.
    let (code, text, err) = land(&s, &["pu/b", "--push", "origin", "--branches-only"]);
    assert_eq!(code, Some(0), "{text}{err}");
    assert!(text.contains("pushed aicli/pu/b to origin"), "{text}");
    assert_eq!(
        git(&bare, &["rev-parse", "aicli/pu/b"]),
        s.git(&["rev-parse", "aicli/pu/b"])
    );
    assert_eq!(
        git(&bare, &["rev-parse", "main"]),
        git(s.repo.path(), &["rev-parse", "origin/main"])
    );
    // The result.
    let (code, text, err) = land(&s, &["pu/a", "--push", "origin", "--json"]);
    assert_eq!(code, Some(0), "{text}{err}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["landed"][0]["task"], "pu/a");
    assert_eq!(
        git(&bare, &["rev-parse", "main"]),
        s.git(&["rev-parse", "main"])
    );
    assert_eq!(git(&bare, &["show", "main:a.txt"]), "a");
}

#[test]
fn discard_says_what_it_loses_and_needs_yes_for_it() {
    let s = setup();
    let (code, b) = s.batch("dc", json!([edit("a", "a.txt", "a\n")]));
    assert_eq!(code, Some(0), "{b}");
    let wt = s.repo.path().join(".aicli/worktrees/dc/a");
    std::fs::write(wt.join("later.txt"), "later\n").unwrap();
    let out = s.cmd(&["discard", "dc/a"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("discarding dc/a would lose 1 commit not landed (+1 −0 in 1 file) and 1 uncommitted change"),
        "{err}"
    );
    assert!(wt.join("later.txt").exists(), "nothing was removed");
    let out = s.cmd(&["discard", "dc/a", "--yes"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(!wt.exists());
    assert_eq!(s.git(&["branch", "--list", "aicli/*"]), "");
    // Landed work is not lost: nothing to confirm.
    let (code, b) = s.batch("dl", json!([edit("b", "b.txt", "b\n")]));
    assert_eq!(code, Some(0), "{b}");
    let (code, text, err) = land(&s, &["dl/b", "--squash"]);
    assert_eq!(code, Some(0), "{text}{err}");
    let out = s.cmd(&["discard", "dl/b"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("lost: nothing"), "{text}");
}

/// `land --resolve` with each real CLI against the fake model API: a task's work
/// conflicts with what the branch got meanwhile; the task's own session resumes in its
/// worktree (the branch merged in, with markers), the fake's script for that turn
/// rewrites the file, the resolution is committed and the work lands.
#[test]
fn resolve_hands_the_conflict_back_to_the_real_cli_s_session_and_lands_it() {
    for (provider, settings) in [
        ("claude", json!({"allowed_tools": ["Bash"]})),
        ("codex", json!({"permission_mode": "accept_edits"})),
        ("gemini", json!({"permission_mode": "bypass"})),
    ] {
        let s = setup();
        let mut task = json!({"id": "t", "provider": provider, "prompt": "Rewrite shared.txt"});
        for (k, v) in settings.as_object().unwrap() {
            task[k] = v.clone();
        }
        let file = s.dir.path().join("tasks.json");
        std::fs::write(&file, json!([task]).to_string()).unwrap();
        let script = "--fake-api=shell:printf 'resolved\\n' > shared.txt";
        let out = s
            .cmd(&["batch", file.to_str().unwrap(), "--batch-id", "rs", script])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{provider}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Meanwhile, main changes the same line.
        std::fs::write(
            s.repo.path().join("shared.txt"),
            "first\n2\n3\n4\n5\n6\n7\n8\n",
        )
        .unwrap();
        s.git(&["commit", "-qam", "main moves"]);
        let (code, text, _) = land(&s, &["rs"]);
        assert_eq!(code, Some(4), "{provider}: {text}");
        assert!(
            text.contains("conflicts with main on shared.txt"),
            "{provider}: {text}"
        );
        let (code, text, err) = land(&s, &["rs", "--resolve"]);
        assert_eq!(code, Some(0), "{provider}: {text}\n{err}");
        assert!(
            text.contains("rs/t: resolved by its agent, then landed"),
            "{provider}: {text}"
        );
        assert_eq!(
            read(s.repo.path(), "shared.txt"),
            "resolved\n",
            "{provider}"
        );
        assert_eq!(s.git(&["status", "--porcelain"]), "", "{provider}");
        // The same session went on, with the conflict in its prompt.
        let rec: Value =
            serde_json::from_slice(&std::fs::read(s.runs().join("rs/tasks/t/task.json")).unwrap())
                .unwrap();
        let attempts = rec["attempts"].as_array().unwrap();
        let last = attempts.last().unwrap();
        assert_eq!(last["kind"], "resolve", "{provider}: {rec}");
        let first_session = attempts[0]["result"]["session_id"].clone();
        assert_eq!(
            last["result"]["continuation"]["mode"], "resume",
            "{provider}: {rec}"
        );
        assert_eq!(
            last["result"]["continuation"]["session_id"], first_session,
            "{provider}"
        );
        assert_eq!(rec["landed"]["into"], "main");
        // The resolution is a merge commit on the task's branch, with aicli's trailers.
        let branch = rec["branch"].as_str().unwrap();
        assert_eq!(
            s.git(&["log", "-1", "--format=%P", branch])
                .split(' ')
                .count(),
            2,
            "{provider}"
        );
        assert_eq!(
            s.git(&[
                "log",
                "-1",
                "--format=%(trailers:key=Aicli-Attempt,valueonly)",
                branch
            ]),
            attempts.len().to_string()
        );
    }
}

/// An agent that leaves the markers: nothing lands, and the task's worktree and branch
/// are as they were before `--resolve` (no merge in progress, no commit of markers).
#[test]
fn a_resolution_that_leaves_markers_is_undone() {
    let s = setup();
    let task = json!([{"id": "t", "provider": "codex", "prompt": "Rewrite shared.txt", "permission_mode": "accept_edits"}]);
    let file = s.dir.path().join("tasks.json");
    std::fs::write(&file, task.to_string()).unwrap();
    let script = "--fake-api=shell:printf 'mine\\n' > shared.txt";
    let out = s
        .cmd(&["batch", file.to_str().unwrap(), "--batch-id", "mk", script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(
        s.repo.path().join("shared.txt"),
        "first\n2\n3\n4\n5\n6\n7\n8\n",
    )
    .unwrap();
    s.git(&["commit", "-qam", "main moves"]);
    let main = s.git(&["rev-parse", "main"]);
    let branch_before = s.git(&["rev-parse", "aicli/mk/t"]);
    // This turn's script does nothing to the file.
    let (code, text, err) = land(&s, &["mk/t", "--resolve", "--fake-api=shell:true"]);
    assert_eq!(code, Some(4), "{text}\n{err}");
    assert!(
        text.contains(
            "mk/t: not resolved: conflict markers are left in shared.txt (its branch is as it was)"
        ),
        "{text}"
    );
    assert_eq!(s.git(&["rev-parse", "main"]), main);
    assert_eq!(s.git(&["rev-parse", "aicli/mk/t"]), branch_before);
    let wt = s.repo.path().join(".aicli/worktrees/mk/t");
    assert_eq!(git(&wt, &["status", "--porcelain"]), "");
    assert!(
        !wt.join(git(&wt, &["rev-parse", "--git-path", "MERGE_HEAD"]))
            .exists(),
        "no merge in progress"
    );
    assert_eq!(read(&wt, "shared.txt"), "mine\n");
}

/// The batch case: two tasks edit the same line; `land BATCH` lands the first and skips
/// the second; `land BATCH --resolve` hands the second back (the stand-in CLI's resumed
/// run writes its version of the file again, over the markers) and lands it too.
#[test]
fn resolve_makes_the_skipped_task_of_a_batch_land_too() {
    let s = setup();
    let (code, b) = s.batch(
        "two",
        json!([
            edit("a", "shared.txt", "ONE\n2\n3\n4\n5\n6\n7\n8\n"),
            edit("b", "shared.txt", "uno\n2\n3\n4\n5\n6\n7\n8\n")
        ]),
    );
    assert_eq!(code, Some(0), "{b}");
    assert_eq!(
        b["overlaps"][0]["conflicts"],
        json!(["shared.txt"]),
        "the summary flagged them"
    );
    let (code, text, _) = land(&s, &["two"]);
    assert_eq!(code, Some(4), "{text}");
    assert!(
        text.contains("✘ two/b not landed: conflicts with main on shared.txt"),
        "{text}"
    );
    assert_eq!(s.git(&["status", "--porcelain"]), "");
    let (code, text, err) = land(&s, &["two", "--resolve"]);
    assert_eq!(code, Some(0), "{text}\n{err}");
    assert!(
        text.contains("two/a not landed: already in main")
            || text.contains("two/a not landed: already"),
        "{text}"
    );
    assert!(
        text.contains("two/b: resolved by its agent, then landed"),
        "{text}"
    );
    assert_eq!(
        read(s.repo.path(), "shared.txt"),
        "uno\n2\n3\n4\n5\n6\n7\n8\n"
    );
    assert_eq!(s.git(&["status", "--porcelain"]), "");
}
