//! The screenshots of the web view in docs/img/, made from a real `aicli web` over a real
//! run record in headless Chromium. Not a measurement: a generator, so that they can be
//! made again when the page changes.
//!
//! ```text
//! cargo bench --bench web_screenshots -- docs/img     # default: $CARGO_TARGET_DIR/web-screenshots
//! ```
//!
//! Needs Debian's `chromium` and `chromedriver` (`.ci/install-browser.sh`).
//!
//! A temp repository and one `aicli batch` of three tasks, each the real vendor adapter
//! over `aicli-fake-cli` replaying a recorded transcript: `add-tests` (Claude's
//! `bash_allowed`: a shell tool call, then succeeded with reported tokens and cost),
//! `document-api` (Codex's `shell`, which stops after its tool call and stays running)
//! and `rename-parser` (Claude, which asks aicli's `ask_user` tool a question with two
//! options over the MCP server, so the task ends blocked). While the batch still runs,
//! `aicli web` serves the record and the browser takes:
//!
//! - `web-batch-desktop.png` (1280 × 800) and `web-batch-phone.png` (390 × 844): the
//!   batch page;
//! - `web-index-desktop.png`: the index, the blocked question on top;
//! - `web-task-phone.png`: the blocked task's page on the phone (its state, question
//!   form, transcript), the whole page's height.
//!
//! Every process started here (the batch, `aicli web`, chromedriver and its browsers) is
//! stopped before it returns.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// How often a wait looks at its condition.
const POLL: Duration = Duration::from_millis(50);

#[path = "../tests/support/mod.rs"]
mod support;
use support::browser::{Browser, Driver, PHONE, Stopped, Web, screenshot_dir, until};
use support::fake::{fake_cli, fixture, replay_args};
use support::git::init_repo;

/// The desktop window of the screenshots.
const DESKTOP: (u32, u32) = (1280, 800);
/// The tallest a whole-page screenshot is made.
const MAX_HEIGHT: u32 = 2400;

fn aicli_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_aicli"))
}

/// `extra_args` of a task replaying `vendor`'s transcript `scenario`, with `more` after.
fn replay(vendor: &str, scenario: &str, more: &[&str]) -> Vec<String> {
    let mut a = replay_args(&fixture(vendor, scenario));
    a.extend(more.iter().map(|s| (*s).to_owned()));
    a
}

fn write_config(path: &Path) {
    let provider = |adapter: &str| {
        serde_json::json!({
            "adapter": adapter,
            "binary_path": fake_cli(),
            // It reads its prompt as the real CLI does.
            "extra_args": ["--record-stdin", "/dev/null"],
            // So that the adapters' quick credentials check passes.
            "env": {"ANTHROPIC_API_KEY": "demo", "CODEX_API_KEY": "demo"},
        })
    };
    let cfg = serde_json::json!({
        "default_provider": "fake-claude",
        "providers": {"fake-claude": provider("claude"), "fake-codex": provider("codex")},
        "engine": {"retry": {"max_attempts": 1}},
    });
    std::fs::write(path, cfg.to_string()).unwrap();
}

/// Task `task`'s record as aicli reads it (the batch journal's last line for it).
fn task_json(runs: &Path, batch: &str, task: &str) -> Option<serde_json::Value> {
    let rec = aicli::record::task_at(&runs.join(batch).join("tasks").join(task))?.ok()?;
    serde_json::to_value(rec).ok()
}

fn state(runs: &Path, batch: &str, task: &str) -> String {
    task_json(runs, batch, task)
        .and_then(|v| v["state"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The viewport as `name`.png in `out`; with `whole`, the window is made as tall as the
/// page first (up to [`MAX_HEIGHT`]) and put back after.
async fn shoot(b: &Browser, out: &Path, name: &str, size: (u32, u32), whole: bool) -> PathBuf {
    if whole {
        let h = b
            .js("return Math.ceil(document.documentElement.scrollHeight)")
            .await
            .as_u64()
            .unwrap_or(size.1 as u64) as u32;
        b.resize((size.0, h.clamp(size.1, MAX_HEIGHT))).await;
    }
    // Let a resize's layout settle, and the live parts their next update.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let png = b.client.screenshot().await.expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    let path = out.join(format!("{name}.png"));
    std::fs::write(&path, &png).unwrap();
    println!("{}: {:.0} KiB", path.display(), png.len() as f64 / 1024.0);
    if whole {
        b.resize(size).await;
    }
    path
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let out = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .map(PathBuf::from)
        .unwrap_or_else(screenshot_dir);
    std::fs::create_dir_all(&out).unwrap();
    let Some(driver) = Driver::start_or_skip("bench web_screenshots").await else {
        return;
    };

    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("parser");
    std::fs::create_dir_all(&repo).unwrap();
    init_repo(&repo);
    // Where aicli keeps them by default.
    let runs = repo.join(".aicli").join("runs");
    let cfg = tmp.path().join("aicli.json");
    write_config(&cfg);
    let asked = tmp.path().join("asked.json");
    let question = serde_json::json!({
        "question": "The parser's entry point: which name should it have?",
        "options": ["parse_args", "read_args", "keep parse"],
    })
    .to_string();
    let tasks = serde_json::json!({"max_parallel": 3, "tasks": [
        {"id": "add-tests", "provider": "fake-claude",
         "prompt": "Add a unit test for the parser",
         "extra_args": replay("claude", "bash_allowed", &["--line-delay-ms", "150"])},
        {"id": "document-api", "provider": "fake-codex",
         "prompt": "Document the public functions of src/lib.rs",
         "extra_args": replay("codex", "shell", &["--line-delay-ms", "150", "--hang-after", "4"])},
        {"id": "rename-parser", "provider": "fake-claude",
         "prompt": "Rename the parser's entry point",
         "extra_args": replay("claude", "text", &[
             "--mcp-call", "ask_user", &question, asked.to_str().unwrap()])},
    ]});
    let tasks_file = tmp.path().join("tasks.json");
    std::fs::write(&tasks_file, tasks.to_string()).unwrap();
    let err = std::fs::File::create(tmp.path().join("batch.err")).unwrap();
    let batch = Stopped(
        Command::new(aicli_bin())
            .arg("--config")
            .arg(&cfg)
            .arg("batch")
            .arg(&tasks_file)
            .arg("--repo")
            .arg(&repo)
            .arg("--runs-dir")
            .arg(&runs)
            .current_dir(&repo)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("aicli batch"),
    );
    let mut id = String::new();
    until("the batch's record", POLL, || {
        let found = std::fs::read_dir(&runs)
            .into_iter()
            .flatten()
            .flatten()
            .find(|e| e.path().join("tasks").is_dir());
        if let Some(e) = found {
            id = e.file_name().to_string_lossy().into_owned();
        }
        !id.is_empty()
    })
    .await;
    let batch_err = || std::fs::read_to_string(tmp.path().join("batch.err")).unwrap_or_default();
    until("add-tests succeeded, rename-parser blocked", POLL, || {
        let (a, r) = (
            state(&runs, &id, "add-tests"),
            state(&runs, &id, "rename-parser"),
        );
        assert!(
            !["failed", "interrupted"].contains(&a.as_str())
                && !["failed", "interrupted", "succeeded"].contains(&r.as_str()),
            "add-tests {a}, rename-parser {r}: {}",
            batch_err()
        );
        a == "succeeded" && r == "blocked"
    })
    .await;
    assert_eq!(
        state(&runs, &id, "document-api"),
        "running",
        "{}",
        batch_err()
    );

    let web = Web::start(&aicli_bin(), &cfg, &repo, &runs, &[]);
    let b = driver.session(DESKTOP).await;
    b.goto(&web.url).await;
    b.wait_for("the index", "h1").await;

    // The batch page, once every row has its status and the finished one its figures.
    b.goto(&format!("{}/batches/{id}", web.page)).await;
    b.wait_js(
        "the rows: running, blocked, succeeded with tokens, cost and last lines",
        r#"var r = {};
document.querySelectorAll("tr[data-task]").forEach(function (t) {
  var q = function (c) { var e = t.querySelector(c); return e ? e.textContent.trim() : ""; };
  var s = t.querySelector("td.status");
  r[t.getAttribute("data-task")] = [s ? s.getAttribute("data-state") : "", q("td.tokens"), q("td.cost"), q("td.last")];
});
var ok = r["add-tests"] && r["add-tests"][0] === "succeeded" && /\d/.test(r["add-tests"][1]) && /\$/.test(r["add-tests"][2])
  && r["document-api"] && r["document-api"][0] === "running" && r["document-api"][3]
  && r["rename-parser"] && r["rename-parser"][0] === "blocked";
return ok ? r : null;"#,
    )
    .await;
    shoot(&b, &out, "web-batch-desktop", DESKTOP, false).await;
    b.resize(PHONE).await;
    shoot(&b, &out, "web-batch-phone", PHONE, false).await;
    b.resize(DESKTOP).await;

    // The index: the question first, with its options.
    b.goto(&format!("{}/", web.page)).await;
    b.wait_for(
        "the blocked task on the index",
        "section#blocked form.answer button.option",
    )
    .await;
    shoot(&b, &out, "web-index-desktop", DESKTOP, false).await;

    // The blocked task's page on the phone: the question form and the transcript.
    b.resize(PHONE).await;
    b.goto(&format!("{}/batches/{id}/tasks/rename-parser", web.page))
        .await;
    b.wait_for(
        "the answer form",
        "form.answer button.option[data-answer=\"parse_args\"]",
    )
    .await;
    b.wait_js(
        "the transcript",
        "var e = document.getElementById('events'); return e && e.children.length >= 2;",
    )
    .await;
    shoot(&b, &out, "web-task-phone", PHONE, true).await;

    b.close().await;
    drop(web);
    drop(batch);
    drop(driver);
}
