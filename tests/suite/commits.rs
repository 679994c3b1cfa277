//! The work committed on the task's branch when a run ends (issue 36, stage 1), through
//! the real `aicli` binary and real git: one commit per attempt with its provenance in
//! trailers, whatever the end (succeeded, blocked then answered, timed out, crashed,
//! cancelled); what `.gitignore` ignores and files over the size limit left in the
//! worktree and listed; no commit when nothing changed; nothing committed with
//! `engine.commit: off`; and nothing of aicli's (its scaffold, a token, a credential)
//! in any commit. The real CLIs' commits are in `e2e::commits`.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use super::support::*;

/// A repository that ignores `*.log`, a config whose provider `fake` is the stand-in
/// CLI (Claude's adapter) with `engine`, and a runs directory.
pub(crate) struct Setup {
    pub(crate) repo: tempfile::TempDir,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) cfg: PathBuf,
}

impl Setup {
    pub(crate) fn new(engine: Value) -> Setup {
        let repo = git_repo();
        std::fs::write(repo.path().join(".gitignore"), "*.log\n").unwrap();
        git(repo.path(), &["add", ".gitignore"]);
        git(repo.path(), &["commit", "-q", "-m", "ignore logs"]);
        let dir = tempfile::tempdir().unwrap();
        let cfg = fake_cli_config_with(dir.path(), &[], engine);
        Setup { repo, dir, cfg }
    }

    pub(crate) fn runs(&self) -> PathBuf {
        self.dir.path().join("runs")
    }

    /// `aicli ARGS` on the repository and its runs directory.
    pub(crate) fn cmd(&self, args: &[&str]) -> std::process::Command {
        let mut c = aicli_with(&self.cfg, args);
        c.arg("--repo")
            .arg(self.repo.path())
            .arg("--runs-dir")
            .arg(self.runs());
        c
    }

    /// `aicli batch --json` of `tasks` as batch `id`: its exit code and result.
    pub(crate) fn batch(&self, id: &str, tasks: Value) -> (Option<i32>, Value) {
        self.batch_with(id, tasks, &[])
    }

    /// [`Setup::batch`] with `env` added to aicli's environment.
    fn batch_with(&self, id: &str, tasks: Value, env: &[(&str, &str)]) -> (Option<i32>, Value) {
        let file = self.dir.path().join(format!("{id}.json"));
        std::fs::write(&file, tasks.to_string()).unwrap();
        let out = aicli_with(
            &self.cfg,
            &["batch", file.to_str().unwrap(), "--json", "--batch-id", id],
        )
        .envs(env.iter().copied())
        .arg("--repo")
        .arg(self.repo.path())
        .arg("--runs-dir")
        .arg(self.runs())
        .output()
        .unwrap();
        let result = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code(), result)
    }

    pub(crate) fn git(&self, args: &[&str]) -> String {
        git(self.repo.path(), args)
    }

    /// `aicli web` on the repository and its runs directory.
    pub(crate) fn web(&self) -> crate::support::browser::Web {
        crate::support::browser::Web::start(
            std::path::Path::new(env!("CARGO_BIN_EXE_aicli")),
            &self.cfg,
            self.repo.path(),
            &self.runs(),
            &[],
        )
    }

    /// The state of task `task` of batch `batch`, as recorded ("" before its record).
    pub(crate) fn state(&self, batch: &str, task: &str) -> String {
        task_state(&self.runs().join(batch), task).unwrap_or_default()
    }
}

fn task<'a>(b: &'a Value, id: &str) -> &'a Value {
    b["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["task_id"] == id)
        .unwrap_or_else(|| panic!("no task {id}: {b}"))
}

/// The commits on `branch` since `base`, newest first.
fn commits(s: &Setup, base: &str, branch: &str) -> Vec<String> {
    let out = s.git(&["rev-list", &format!("{base}..{branch}")]);
    out.lines().map(str::to_owned).collect()
}

/// The files `commit` changed.
fn files_of(s: &Setup, commit: &str) -> Vec<String> {
    let mut v: Vec<String> = s
        .git(&["show", "--name-only", "--format=", commit])
        .lines()
        .map(str::to_owned)
        .collect();
    v.sort();
    v
}

/// `commit`'s trailer `key`.
fn trailer(s: &Setup, commit: &str, key: &str) -> String {
    s.git(&[
        "log",
        "-1",
        &format!("--format=%(trailers:key={key},valueonly)"),
        commit,
    ])
}

fn base_of(s: &Setup) -> String {
    s.git(&["rev-parse", "HEAD"])
}

#[test]
fn an_attempt_s_work_is_one_commit_with_its_provenance_and_nothing_is_dropped_silently() {
    let s = Setup::new(json!({"commit": {"max_file_bytes": 1000}}));
    let base = base_of(&s);
    let big = "x".repeat(2000);
    let (code, b) = s.batch(
        "prov",
        json!([{"id": "two", "prompt": "Write two files\nand more detail",
                "extra_args": ["--write", "src/a.rs", "fn a() {}\n", "--write", "docs/b.md", "# b\n",
                               "--write", "build.log", "ignored\n", "--write", "big.bin", big]}]),
    );
    assert_eq!(code, Some(0), "{b}");
    let t = task(&b, "two");
    let branch = t["branch"].as_str().unwrap();
    let made = commits(&s, &base, branch);
    assert_eq!(made.len(), 1, "one commit for the attempt: {made:?}");
    let c = &made[0];
    assert_eq!(t["work"]["commit"], c.as_str(), "{t}");
    assert_eq!(t["work"]["files"], 2);
    assert_eq!(files_of(&s, c), ["docs/b.md", "src/a.rs"]);
    assert_eq!(
        s.git(&["log", "-1", "--format=%s", c]),
        "two: Write two files"
    );
    assert!(
        s.git(&["log", "-1", "--format=%b", c])
            .starts_with("Hello from the fake Anthropic API."),
        "the body is the agent's response"
    );
    for (k, v) in [
        ("Aicli-Task", "two".to_owned()),
        ("Aicli-Batch", "prov".to_owned()),
        ("Aicli-Attempt", "1".to_owned()),
        ("Aicli-Provider", "fake".to_owned()),
        ("Aicli-Status", "succeeded".to_owned()),
        (
            "Aicli-Session",
            t["session_id"].as_str().unwrap().to_owned(),
        ),
        ("Aicli-Model", t["model"].as_str().unwrap().to_owned()),
    ] {
        assert_eq!(trailer(&s, c, k), v, "{k}");
    }
    let cost = trailer(&s, c, "Aicli-Cost");
    assert!(cost.ends_with("USD (reported)"), "{cost}");
    // The repository's identity writes, aicli commits.
    assert_eq!(
        s.git(&["log", "-1", "--format=%an <%ae>|%cn <%ce>", c]),
        "aicli test <test@example.invalid>|aicli <aicli@localhost>"
    );

    // What was left out: listed, and still in the worktree.
    let left = t["work"]["left_out"].as_array().unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(
        left[0],
        json!({"path": "big.bin", "bytes": 2000, "reason": "too_large"})
    );
    assert_eq!(t["work"]["max_file_bytes"], 1000);
    let wt = PathBuf::from(t["worktree"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(wt.join("big.bin")).unwrap().len(),
        2000
    );
    assert!(
        wt.join("build.log").exists(),
        ".gitignore holds: the log stays, unlisted"
    );
    // The summary says so.
    let table = s.cmd(&["runs", "show", "prov"]).output().unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains(&format!("committed {} (2 files)", &c[..10]))
            && table.contains("1 file over 1000 bytes left uncommitted in the worktree"),
        "{table}"
    );
    // The branch merges: the work is home.
    s.git(&["merge", "-q", "--no-edit", branch]);
    assert_eq!(
        std::fs::read_to_string(s.repo.path().join("src/a.rs")).unwrap(),
        "fn a() {}\n"
    );
    assert!(s.repo.path().join("docs/b.md").exists());
    assert!(!s.repo.path().join("big.bin").exists());
}

#[test]
fn a_run_that_changes_nothing_adds_no_commit_and_off_commits_nothing() {
    let s = Setup::new(json!({}));
    let base = base_of(&s);
    let (code, b) = s.batch("nothing", json!([{"id": "idle", "prompt": "say hi"}]));
    assert_eq!(code, Some(0), "{b}");
    let t = task(&b, "idle");
    assert_eq!(t["work"], json!({"files": 0}), "{t}");
    assert!(
        t["branch"].is_null(),
        "no work: the worktree and branch are gone: {t}"
    );
    assert_eq!(s.git(&["branch", "--list", "aicli/*"]), "");
    assert_eq!(base_of(&s), base);

    let off = Setup::new(json!({"commit": "off"}));
    let base = base_of(&off);
    let (code, b) = off.batch(
        "off",
        json!([{"id": "w", "prompt": "write", "extra_args": ["--write", "a.txt", "a\n"]}]),
    );
    assert_eq!(code, Some(0), "{b}");
    let t = task(&b, "w");
    assert!(t.get("work").is_none(), "{t}");
    let branch = t["branch"].as_str().unwrap();
    assert!(
        commits(&off, &base, branch).is_empty(),
        "off: nothing committed"
    );
    let wt = PathBuf::from(t["worktree"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(wt.join("a.txt")).unwrap(),
        "a\n",
        "the work is in the worktree"
    );
}

/// ask -> blocked (a commit of the work so far) -> answer -> a second commit.
#[test]
fn a_blocked_attempt_and_its_answer_each_commit_their_work() {
    let s = Setup::new(json!({}));
    let base = base_of(&s);
    let asked = s.dir.path().join("asked.json");
    let q = r#"{"question": "Which colour?", "options": ["red", "blue"]}"#;
    let (code, b) = s.batch(
        "ask",
        json!([{"id": "q", "prompt": "paint",
                "extra_args": ["--record-env", "AICLI_ATTEMPT_MARK", "paint.txt",
                               "--mcp-call", "ask_user", q, asked]}]),
    );
    assert_eq!(code, Some(3), "blocked: {b}");
    let t = task(&b, "q");
    let branch = t["branch"].as_str().unwrap().to_owned();
    let first = commits(&s, &base, &branch);
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(trailer(&s, &first[0], "Aicli-Status"), "blocked");
    assert_eq!(files_of(&s, &first[0]), ["paint.txt"]);
    let out = s
        .cmd(&["answer", "ask/q", "blue", "--json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let made = commits(&s, &base, &branch);
    assert_eq!(
        made.len(),
        2,
        "a second commit for the answered attempt: {made:?}\n{err}"
    );
    assert_eq!(made[1], first[0], "the first stays as it was");
    assert_eq!(trailer(&s, &made[0], "Aicli-Attempt"), "2");
    let paint = s.git(&["show", &format!("{}:paint.txt", made[0])]);
    assert_eq!(paint.lines().count(), 2, "{paint}");
}

/// A run that times out, one whose CLI crashes mid-line, and one cancelled by `aicli
/// cancel`: each commits what it wrote, with how it ended.
#[test]
fn a_timeout_a_crash_and_a_cancel_still_commit_what_was_written() {
    let s = Setup::new(json!({}));
    let base = base_of(&s);
    // The start of a transcript, no final event: the CLI dies mid-line after it.
    let text = std::fs::read_to_string(fixture("claude", "text").with_extension("ndjson")).unwrap();
    let partial = s.dir.path().join("partial.ndjson");
    std::fs::write(
        &partial,
        text.lines()
            .take(2)
            .map(|l| format!("{l}\n"))
            .collect::<String>(),
    )
    .unwrap();
    let (code, b) = s.batch(
        "ends",
        json!([
            {"id": "slow", "prompt": "p", "timeout_secs": 2,
             "extra_args": ["--write", "slow.txt", "partial\n", "--hang-after", "1"]},
            {"id": "crash", "prompt": "p",
             "extra_args": ["--write", "crash.txt", "partial\n", "--replay", partial, "--crash-mid-line"]}
        ]),
    );
    assert_ne!(code, Some(0), "{b}");
    for (id, status) in [("slow", "failed (timeout)"), ("crash", "failed")] {
        let t = task(&b, id);
        let made = commits(&s, &base, t["branch"].as_str().unwrap());
        assert_eq!(made.len(), 1, "{id}: {t}");
        assert_eq!(files_of(&s, &made[0]), [format!("{id}.txt")]);
        let got = trailer(&s, &made[0], "Aicli-Status");
        assert!(got.starts_with(status), "{id}: {got}");
    }

    // Cancelled from another process while it runs.
    let file = s.dir.path().join("cancel.json");
    std::fs::write(
        &file,
        json!([{"id": "c", "prompt": "p", "extra_args": ["--write", "c.txt", "partial\n", "--hang-after", "1"]}]).to_string(),
    )
    .unwrap();
    let batch = aicli_with(
        &s.cfg,
        &[
            "batch",
            file.to_str().unwrap(),
            "--json",
            "--batch-id",
            "cancel",
        ],
    )
    .arg("--repo")
    .arg(s.repo.path())
    .arg("--runs-dir")
    .arg(s.runs())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    let tdir = s.runs().join("cancel/tasks/c");
    wait_for_batch(
        &s.runs(),
        Duration::from_secs(60),
        Duration::from_millis(50),
        "c runs",
        |_| {
            task_state(&s.runs().join("cancel"), "c").as_deref() == Some("running")
                && std::fs::read_to_string(tdir.join("events.ndjson")).is_ok_and(|e| !e.is_empty())
        },
    );
    let out = s.cmd(&["cancel", "cancel/c"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = batch.wait_with_output().unwrap();
    let b: Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = task(&b, "c");
    let made = commits(&s, &base, t["branch"].as_str().unwrap());
    assert_eq!(made.len(), 1, "{t}");
    assert_eq!(files_of(&s, &made[0]), ["c.txt"]);
    assert_eq!(
        trailer(&s, &made[0], "Aicli-Status"),
        "failed (cancelled)",
        "{t}"
    );
}

/// What the stand-in CLI was handed (its argv, its environment, every file they name:
/// the MCP config with the run's token), and a granted credential: none of it, and no
/// file of aicli's, is in the commit; only what the agent wrote.
#[test]
fn no_commit_holds_a_token_a_credential_or_a_scaffold_file() {
    let secret = "cred-value-5be1c3e0d1";
    let s = Setup::new(json!({}));
    let base = base_of(&s);
    let probe = s.dir.path().join("probe.json");
    let got = s.dir.path().join("cred.json");
    let (code, b) = s.batch_with(
        "leak",
        json!([{"id": "t", "prompt": "p", "credentials": ["AICLI_TEST_CRED"],
                "extra_args": ["--probe", probe, "--write", "out.txt", "work\n",
                               "--mcp-call", "getCredential", r#"{"name": "AICLI_TEST_CRED"}"#, got]}]),
        &[("AICLI_TEST_CRED", secret)],
    );
    assert_eq!(code, Some(0), "{b}");
    let served = std::fs::read_to_string(&got).unwrap();
    assert!(
        served.contains(secret),
        "the credential was served: {served}"
    );
    let t = task(&b, "t");
    let made = commits(&s, &base, t["branch"].as_str().unwrap());
    assert_eq!(made.len(), 1);
    assert_eq!(files_of(&s, &made[0]), ["out.txt"], "only the agent's file");
    let probe: Value = serde_json::from_slice(&std::fs::read(&probe).unwrap()).unwrap();
    let text = probe.to_string();
    // The token: the MCP config the CLI was handed names it.
    let token = text
        .split("Bearer ")
        .nth(1)
        .map(|r| {
            r.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                .collect::<String>()
        })
        .filter(|t| t.len() >= 16)
        .unwrap_or_else(|| panic!("no token in what the CLI was handed: {text}"));
    let everything = s.git(&["log", "-p", "--format=%B", &format!("{base}..{}", made[0])]);
    assert!(!everything.contains(&token), "the token is in a commit");
    assert!(
        !everything.contains(secret),
        "the credential is in a commit"
    );
}

/// `aicli diff`: a task's commits against its base (`--stat`, `--patch`, `--json`), what
/// is still uncommitted in its worktree; the figures in the result, the batch table and
/// the web view's diff (the branch's commits once a run committed them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aicli_diff_shows_a_task_s_commits_and_every_view_its_figures() {
    let s = Setup::new(json!({}));
    let file = s.dir.path().join("rev.json");
    std::fs::write(
        &file,
        json!([
            {"id": "t", "prompt": "p",
             "extra_args": ["--write", "src/a.rs", "1\n2\n3\n", "--write", "b.txt", "b\n"]},
            {"id": "none", "prompt": "p"}
        ])
        .to_string(),
    )
    .unwrap();
    // The batch's table (not --json): the task's figures in place of its branch.
    let out = s
        .cmd(&["batch", file.to_str().unwrap(), "--batch-id", "rev"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}");
    let row = table.lines().find(|l| l.starts_with("t ")).unwrap();
    assert!(row.ends_with("+4 −0 in 2 files"), "{table}");
    let rec: Value =
        serde_json::from_slice(&std::fs::read(s.runs().join("rev/tasks/t/task.json")).unwrap())
            .unwrap();
    let work = &rec["attempts"][0]["result"]["work"];
    assert_eq!(
        work["total"],
        json!({"commits": 1, "files": 2, "insertions": 4, "deletions": 0}),
        "{work}"
    );
    let branch = rec["branch"].as_str().unwrap();
    assert_eq!(work["head"], s.git(&["rev-parse", branch]).as_str());

    let diff = |args: &[&str]| {
        let out = s.cmd(&[&["diff"][..], args].concat()).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, text, err) = diff(&["rev/t"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        text.starts_with("rev/t on aicli/rev/t: +4 −0 in 2 files over 1 commit (against its base "),
        "{text}"
    );
    assert!(
        text.contains(" src/a.rs | 3 +++") && text.contains(" 2 files changed, 4 insertions(+)"),
        "{text}"
    );
    assert!(!text.contains("not committed"), "{text}");
    let (_, text, _) = diff(&["t", "--patch"]);
    assert!(
        text.contains("+++ b/src/a.rs\n@@ -0,0 +1,3 @@\n+1\n+2\n+3\n"),
        "{text}"
    );
    let (_, text, _) = diff(&["rev/t", "--json"]);
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["stat"]["insertions"], 4);
    assert_eq!(v["head"], work["head"]);
    let (code, text, _) = diff(&["rev/none"]);
    assert_eq!(code, Some(0));
    assert!(text.contains("rev/none: no work"), "{text}");
    let (code, _, err) = diff(&["nosuch"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("no task 'nosuch'"), "{err}");

    // A change made in the worktree afterwards: said, not hidden, and not in the diff.
    let wt = PathBuf::from(rec["worktree"].as_str().unwrap());
    std::fs::write(wt.join("later.txt"), "later\n").unwrap();
    let (_, text, _) = diff(&["rev/t"]);
    assert!(
        text.contains("not committed, in the worktree") && text.contains("?? later.txt"),
        "{text}"
    );
    let web = super::web::Web::spawn(s.cmd(&["web", "--json"]));
    let d = web.get("/api/batches/rev/tasks/t/diff").await;
    assert_eq!(d["source"], "commits", "{d}");
    let text = d["diff"].as_str().unwrap();
    assert!(
        text.contains("+++ b/src/a.rs") && !text.contains("later.txt"),
        "{d}"
    );
    assert!(
        d["note"]
            .as_str()
            .unwrap()
            .contains("1 change not committed"),
        "{d}"
    );
}
