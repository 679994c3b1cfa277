//! The web view in a real browser: headless Chromium driven over WebDriver (Debian's
//! `chromium` and `chromedriver`, `tests/support/browser.rs`), against the real `aicli
//! web` and `aicli batch` binaries on loopback, with the real CLIs on `--fake-api` (the
//! fake model APIs that speak each vendor's wire format) or with `aicli-fake-cli`.
//!
//! Each test skips, loudly, only when Chromium is not installed and
//! `AICLI_REQUIRE_BROWSER` is not set; CI sets it (`.ci/run`). Screenshots of the pages
//! at desktop and phone widths go to `$CARGO_TARGET_DIR/web-screenshots/`.
//!
//! The `--fake-api` script is the batch's: every CLI of a batch gets the same one. So the
//! live batch of three CLIs (`live`) answers text, and the question comes from a second
//! batch (`ask`, one Codex task) run at the same time in the same repository.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::support::*;
use crate::support::browser::{
    DEADLINE, DESKTOP, Driver, PHONE, POLL, Stopped, Web, descendants, truthy, until,
};

fn aicli() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_aicli"))
}

/// The skip guard every test starts with.
macro_rules! driver_or_skip {
    ($name:expr) => {
        match Driver::start_or_skip($name).await {
            Some(d) => d,
            None => return,
        }
    };
}

/// A repository, a config (provider `fake`: `aicli-fake-cli` replaying Claude's `text`
/// transcript with `fake_args`; the built-in CLIs besides) and a runs directory.
struct Setup {
    repo: tempfile::TempDir,
    dir: tempfile::TempDir,
    cfg: PathBuf,
    runs: PathBuf,
}

impl Setup {
    fn new(fake_args: &[&str]) -> Setup {
        let repo = git_repo();
        let dir = tempfile::tempdir().unwrap();
        let runs = dir.path().join("runs");
        let cfg = fake_cli_config(dir.path(), fake_args);
        Setup {
            repo,
            dir,
            cfg,
            runs,
        }
    }

    fn web(&self, args: &[&str]) -> Web {
        Web::start(aicli(), &self.cfg, self.repo.path(), &self.runs, args)
    }

    /// `aicli batch FILE --batch-id ID ARGS` in the background (another process than
    /// the web view), its output in `ID.out` / `ID.err` beside the config.
    fn batch(&self, id: &str, tasks: &Value, args: &[&str]) -> Stopped {
        let file = self.dir.path().join(format!("{id}.tasks.json"));
        std::fs::write(&file, tasks.to_string()).unwrap();
        let out = std::fs::File::create(self.dir.path().join(format!("{id}.out"))).unwrap();
        let err = std::fs::File::create(self.dir.path().join(format!("{id}.err"))).unwrap();
        Stopped(
            Command::new(aicli())
                .arg("--config")
                .arg(&self.cfg)
                .arg("batch")
                .arg(&file)
                .args(["--batch-id", id])
                .arg("--repo")
                .arg(self.repo.path())
                .arg("--runs-dir")
                .arg(&self.runs)
                .args(args)
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
                .expect("aicli batch starts"),
        )
    }

    /// What batch `id`'s process printed on stderr (for failure messages).
    fn batch_err(&self, id: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{id}.err"))).unwrap_or_default()
    }

    fn task_dir(&self, batch: &str, task: &str) -> PathBuf {
        self.runs.join(batch).join("tasks").join(task)
    }

    /// Task `task`'s record, once written.
    fn task(&self, batch: &str, task: &str) -> Option<Value> {
        task_record(&self.runs.join(batch), task)
    }

    fn state(&self, batch: &str, task: &str) -> Option<String> {
        self.task(batch, task)
            .and_then(|v| v["state"].as_str().map(str::to_owned))
    }

    /// Waits until task `task` of `batch` is in state `want` (panics, with the record
    /// and the batch's stderr, on another final state or after [`DEADLINE`]).
    async fn until_state(&self, batch: &str, task: &str, want: &str) -> Value {
        let start = Instant::now();
        loop {
            if let Some(v) = self.task(batch, task) {
                let s = v["state"].as_str().unwrap_or_default();
                if s == want {
                    return v;
                }
                let final_ = ["succeeded", "failed", "interrupted"].contains(&s);
                assert!(
                    !(final_ && ["succeeded", "failed", "interrupted"].contains(&want)),
                    "{batch}/{task} ended {s}, not {want}: {v}\n{}",
                    self.batch_err(batch)
                );
            }
            assert!(
                start.elapsed() < DEADLINE,
                "{batch}/{task} not {want} within {DEADLINE:?}: {:?}\n{}",
                self.task(batch, task),
                self.batch_err(batch)
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// The events of a task's record, as `aicli parse --events` decodes them.
    fn parsed_events(&self, batch: &str, task: &str) -> Vec<Value> {
        let out =
            succeeds(aicli_with(&self.cfg, &["parse", "--events"]).arg(self.task_dir(batch, task)));
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// Waits for a child to exit: its exit code.
async fn exit_code(child: &mut Stopped, what: &str) -> Option<i32> {
    let start = Instant::now();
    loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            return s.code();
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{what}: still running after {DEADLINE:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Processes (other than `except` and this test) whose working directory is under one
/// of `dirs` or whose command line names one: what a run would leave behind.
fn processes_under(dirs: &[&Path], except: &[u32]) -> Vec<String> {
    let me = std::process::id();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me || except.contains(&pid) || !alive(pid) {
            continue;
        }
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or_default();
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        if dirs
            .iter()
            .any(|d| cwd.starts_with(d) || cmd.contains(&*d.to_string_lossy()))
        {
            out.push(format!("{pid} (cwd {}): {cmd}", cwd.display()));
        }
    }
    out
}

/// Waits until no process is left under `dirs` (but `except`).
async fn until_no_process_under(dirs: &[&Path], except: &[u32]) {
    let start = Instant::now();
    loop {
        let left = processes_under(dirs, except);
        if left.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "processes left behind:\n{}",
            left.join("\n")
        );
        tokio::time::sleep(POLL).await;
    }
}

/// The real CLIs, installed by `.ci/install-clis.sh`.
fn require_real_clis() {
    for v in [
        aicli_testkit::Vendor::Anthropic,
        aicli_testkit::Vendor::OpenAi,
        aicli_testkit::Vendor::Gemini,
    ] {
        if let Err(e) = aicli_testkit::installed_cli(v) {
            panic!("{e}: run .ci/install-clis.sh");
        }
    }
}

/// A JS string literal of `s`.
fn js_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// The rows of the batch page: task id → `[data-state, status text, tokens, cost, last]`.
const ROWS: &str = r#"
var out = {};
document.querySelectorAll("tr[data-task]").forEach(function (r) {
  var q = function (c) { var e = r.querySelector(c); return e ? e.textContent.trim() : null; };
  var st = r.querySelector("td.status");
  out[r.getAttribute("data-task")] = [st ? st.getAttribute("data-state") : null,
    q("td.status"), q("td.tokens"), q("td.cost"), q("td.last")];
});
return out;"#;

/// The transcript: `[kind, text]` per `#events li`.
const TRANSCRIPT: &str = r##"
return Array.prototype.map.call(document.querySelectorAll("#events > li"), function (li) {
  var k = li.querySelector(".kind"), t = li.querySelector(".text");
  return [k ? k.textContent : "", t ? t.textContent : ""];
});"##;

/// Three real CLIs in one batch on the fake APIs, paced: the batch page shows each row
/// move to succeeded without a reload, with its tokens, cost and last line. Meanwhile a
/// second batch's Codex task asks a question: the index lists it with its options, a
/// click on one answers it, and the task page follows the task to its end, live; the
/// record holds the answer. Screenshots of every page at both widths.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_clis_update_the_batch_page_live_and_a_click_answers_a_question() {
    let driver =
        driver_or_skip!("three_clis_update_the_batch_page_live_and_a_click_answers_a_question");
    require_real_clis();
    let s = Setup::new(&[]);
    let web = s.web(&[]);
    let b = driver.session(DESKTOP).await;
    b.goto(&web.url).await;
    b.wait_for("the index after the login", "h1").await;

    let live_tasks = json!({"tasks": [
        {"id": "claude", "provider": "claude", "prompt": "Say hello"},
        {"id": "codex", "provider": "codex", "prompt": "Say hello"},
        {"id": "gemini", "provider": "gemini", "prompt": "Say hello"},
    ]});
    let mut live = s.batch(
        "live",
        &live_tasks,
        &["--fake-api=text:Hello from the browser test.;delay=700"],
    );
    let ask_tasks =
        json!({"tasks": [{"id": "ask", "provider": "codex", "prompt": "Paint the shed"}]});
    let mut ask = s.batch(
        "ask",
        &ask_tasks,
        &["--fake-api=ask:Which colour?|red|blue"],
    );

    // The batch page, loaded once while the tasks run.
    until("batch live is recorded", POLL, || {
        ["claude", "codex", "gemini"]
            .iter()
            .all(|t| s.task("live", t).is_some())
    })
    .await;
    b.goto(&format!("{}/batches/live", web.page)).await;
    b.wait_for("the batch's rows", "tr[data-task] td.status")
        .await;
    b.js("window.__sameDocument = 'live'; return 1").await;
    let first = b.js(ROWS).await;
    let ids = ["claude", "codex", "gemini"];
    for t in ids {
        let st = first[t][0].as_str().unwrap_or_default();
        assert!(
            ["queued", "running"].contains(&st),
            "{t} is {st:?} when the page loads: the test wants to see it change ({first})"
        );
    }
    // Every change of each row, as the page shows it, until all three succeeded.
    let mut seen: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    let start = Instant::now();
    loop {
        let rows = b.js(ROWS).await;
        for t in ids {
            let st = rows[t][0].as_str().unwrap_or_default().to_owned();
            let v = seen.entry(t).or_default();
            if v.last() != Some(&st) {
                v.push(st);
            }
        }
        if ids.iter().all(|t| rows[*t][0] == "succeeded") {
            break;
        }
        if let Some(t) = ids.iter().find(|t| rows[**t][0] == "failed") {
            panic!(
                "{t} failed: {:?}\n{}",
                s.task("live", t),
                s.batch_err("live")
            );
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the rows did not all reach succeeded: {rows}\n{}",
            s.batch_err("live")
        );
        tokio::time::sleep(POLL).await;
    }
    assert_eq!(
        b.js("return window.__sameDocument").await,
        "live",
        "the page was reloaded: the rows must update in place"
    );
    for t in ids {
        let states = &seen[t];
        assert!(
            states.len() >= 2 && states.last().map(String::as_str) == Some("succeeded"),
            "{t}: the page showed {states:?}"
        );
    }
    // The last line, tokens and cost land too (once the record has them).
    let rows = b
        .wait_js(
            "every row's last line, tokens and cost",
            &format!(
                "var r = (function () {{ {ROWS} }})(); var ok = {ids:?}.every(function (t) {{ return r[t] && r[t][4] && r[t][4].indexOf('Hello from the browser test.') >= 0 && r[t][2] && r[t][3]; }}); return ok ? r : null;"
            ),
        )
        .await;
    for t in ids {
        assert_eq!(s.state("live", t).as_deref(), Some("succeeded"), "{t}");
        assert!(
            rows[t][2]
                .as_str()
                .unwrap()
                .chars()
                .any(|c| c.is_ascii_digit()),
            "{t}'s tokens: {rows}"
        );
    }
    assert_eq!(
        exit_code(&mut live, "batch live").await,
        Some(0),
        "{}",
        s.batch_err("live")
    );
    b.screenshot("batch-desktop").await;
    b.resize(PHONE).await;
    b.screenshot("batch-phone").await;
    b.resize(DESKTOP).await;

    // The question: on the index, with its options.
    assert_eq!(
        exit_code(&mut ask, "batch ask").await,
        Some(3),
        "a blocked batch exits 3: {}",
        s.batch_err("ask")
    );
    assert_eq!(s.state("ask", "ask").as_deref(), Some("blocked"));
    b.goto(&format!("{}/", web.page)).await;
    let form = "section#blocked form.answer[data-batch=\"ask\"][data-task=\"ask\"]";
    b.wait_for("the blocked task on the index", form).await;
    let q = b
        .js(&format!(
            "var f = document.querySelector({}); return [f.querySelector('.q').textContent, Array.prototype.map.call(f.querySelectorAll('button.option'), function (o) {{ return o.getAttribute('data-answer'); }})];",
            js_str(form)
        ))
        .await;
    assert!(q[0].as_str().unwrap().contains("Which colour?"), "{q}");
    assert_eq!(q[1], json!(["red", "blue"]), "one button per option");
    b.screenshot("index-desktop").await;
    b.resize(PHONE).await;
    b.screenshot("index-phone").await;
    b.resize(DESKTOP).await;

    // The task page: blocked, with the same form; a click on "blue" answers.
    b.goto(&format!("{}/batches/ask/tasks/ask", web.page)).await;
    b.wait_js(
        "the task page says blocked",
        "var s = document.getElementById('state'); return s && s.getAttribute('data-state') === 'blocked';",
    )
    .await;
    b.wait_for(
        "the answer form",
        "form.answer button.option[data-answer=\"blue\"]",
    )
    .await;
    b.screenshot("task-blocked-desktop").await;
    b.js("window.__sameDocument = 'ask'; return 1").await;
    b.click(
        "the option blue",
        "form.answer button.option[data-answer=\"blue\"]",
    )
    .await;
    b.wait_js(
        "the action box shows the answer's progress",
        "var a = document.getElementById('action'); return a && a.textContent.trim();",
    )
    .await;
    let rec = s.until_state("ask", "ask", "succeeded").await;
    b.wait_js(
        "the task page follows the task to succeeded",
        "var s = document.getElementById('state'); return s && s.getAttribute('data-state') === 'succeeded';",
    )
    .await;
    let action = b
        .wait_js(
            "the action box says the answer is done",
            "var a = document.getElementById('action'); return a && /done/.test(a.textContent) ? a.textContent : null;",
        )
        .await;
    assert!(action.as_str().unwrap().contains("answer"), "{action}");
    assert_eq!(
        b.js("return window.__sameDocument").await,
        "ask",
        "the task page followed the answer in place, without a reload"
    );
    assert_eq!(rec["answers"][0]["answer"], "blue", "{rec}");
    assert_eq!(rec["answers"][0]["question"], "Which colour?", "{rec}");
    let last = rec["attempts"].as_array().unwrap().last().unwrap();
    assert_eq!(last["result"]["status"], "succeeded", "{rec}");
    assert!(
        last["result"]["response"]
            .as_str()
            .unwrap_or_default()
            .contains("Thanks for the answer"),
        "{rec}"
    );
    // Its MCP call (the question) is listed; the transcript (loaded anew from the
    // record) shows the question, then the answer, then the answer's turn.
    b.goto(&format!("{}/batches/ask/tasks/ask", web.page)).await;
    b.wait_for("the MCP calls", "section#mcp-calls tr.mcp-call")
        .await;
    b.wait_js(
        "the transcript shows the question, the answer and the answer's turn, in order",
        &format!("var t = (function () {{ {TRANSCRIPT} }})(); var at = function (k, s) {{ for (var i = 0; i < t.length; i++) {{ if ((k === null || t[i][0] === k) && t[i][1].indexOf(s) >= 0) {{ return i; }} }} return -1; }}; var q = at('question', 'Which colour?'), a = at('answer', 'blue'), r = at(null, 'Thanks for the answer'); return q >= 0 && a > q && r > a;"),
    )
    .await;
    b.screenshot("task-desktop").await;
    b.resize(PHONE).await;
    b.screenshot("task-phone").await;
    b.close().await;

    until_no_process_under(&[s.repo.path(), &s.runs], &[web.pid()]).await;
}

/// A transcript of `n` text lines (Claude's `text` fixture with its one text line made
/// `n`, "line K of N"), written to `path`.
fn long_transcript(path: &Path, n: usize) {
    let fx = std::fs::read_to_string(fixture("claude", "text").with_extension("ndjson")).unwrap();
    let lines: Vec<&str> = fx.lines().collect();
    let text_line = lines
        .iter()
        .position(|l| l.contains("Hello from the fake Anthropic API."))
        .unwrap();
    let mut out = String::new();
    for (i, l) in lines.iter().enumerate() {
        if i == text_line {
            for k in 1..=n {
                out.push_str(&l.replace(
                    "Hello from the fake Anthropic API.",
                    &format!("line {k:02} of {n}"),
                ));
                out.push('\n');
            }
        } else {
            out.push_str(l);
            out.push('\n');
        }
    }
    std::fs::write(path, out).unwrap();
}

/// A reload while the task runs: the page shows the whole transcript again, no event
/// lost and none twice, the same as `aicli parse --events` of the finished record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_mid_run_loses_no_event_and_repeats_none() {
    let driver = driver_or_skip!("a_reload_mid_run_loses_no_event_and_repeats_none");
    let s = Setup::new(&[]);
    let n = 40;
    let transcript = s.dir.path().join("long.ndjson");
    long_transcript(&transcript, n);
    let tasks = json!({"tasks": [{"id": "long", "prompt": "count",
        "extra_args": ["--replay", transcript, "--line-delay-ms", "150"]}]});
    let web = s.web(&[]);
    let b = driver.session(DESKTOP).await;
    b.goto(&web.url).await;
    b.wait_for("the index", "h1").await;
    let mut batch = s.batch("reload", &tasks, &[]);
    until("the task starts printing", POLL, || {
        task_printed(&s.runs.join("reload"), "long")
    })
    .await;
    b.goto(&format!("{}/batches/reload/tasks/long", web.page))
        .await;
    let before = b
        .wait_js(
            "a few lines of the transcript",
            &format!(
                "var t = (function () {{ {TRANSCRIPT} }})(); return t.length >= 8 ? t : null;"
            ),
        )
        .await;
    assert_eq!(
        s.state("reload", "long").as_deref(),
        Some("running"),
        "the reload is to happen mid-run"
    );
    b.client.refresh().await.unwrap();
    let after = b
        .wait_js(
            "the whole transcript after the reload, to the final event",
            &format!("var t = (function () {{ {TRANSCRIPT} }})(); return t.length && t[t.length - 1][0] === 'final' ? t : null;"),
        )
        .await;
    assert_eq!(exit_code(&mut batch, "the batch").await, Some(0));

    let want = s.parsed_events("reload", "long");
    let want_texts: Vec<&str> = want
        .iter()
        .filter(|e| e["type"] == "assistant_text")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(want_texts.len(), n, "{want:?}");
    let shown = want
        .iter()
        .filter(|e| !["usage", "status"].contains(&e["type"].as_str().unwrap_or_default()))
        .count();
    let texts = |t: &Value| -> Vec<String> {
        t.as_array()
            .unwrap()
            .iter()
            .filter(|l| l[0] == "text")
            .map(|l| l[1].as_str().unwrap().to_owned())
            .collect()
    };
    let after_texts = texts(&after);
    assert_eq!(
        after_texts, want_texts,
        "after the reload: every line once, in order"
    );
    assert_eq!(
        after.as_array().unwrap().len(),
        shown,
        "one line per event (but usage): {after}"
    );
    let before_texts = texts(&before);
    assert!(
        !before_texts.is_empty() && before_texts.len() < n,
        "{before_texts:?}"
    );
    assert_eq!(
        before_texts[..],
        want_texts[..before_texts.len()],
        "before the reload: the beginning, in order"
    );
    // No line arrives twice later either.
    let again = b.js(TRANSCRIPT).await;
    assert_eq!(again, after);
    b.close().await;
}

/// A real Claude on the fake API runs a shell command that writes a file: the task
/// page's diff shows the file with its added line, and the record's files link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_diff_view_shows_the_file_the_task_wrote() {
    let driver = driver_or_skip!("the_diff_view_shows_the_file_the_task_wrote");
    require_real_clis();
    let s = Setup::new(&[]);
    let tasks = json!({"tasks": [{"id": "write", "provider": "claude",
        "prompt": "Write the notes file", "allowed_tools": ["Bash"]}]});
    let mut batch = s.batch(
        "diff",
        &tasks,
        &["--fake-api=shell:echo written-by-the-agent > notes.txt"],
    );
    assert_eq!(
        exit_code(&mut batch, "the batch").await,
        Some(0),
        "{}",
        s.batch_err("diff")
    );
    let web = s.web(&[]);
    let b = driver.session(DESKTOP).await;
    b.goto(&web.url).await;
    b.wait_for("the index", "h1").await;
    b.goto(&format!("{}/batches/diff/tasks/write", web.page))
        .await;
    let diff = b
        .wait_js(
            "the diff names notes.txt",
            "var d = document.querySelector('section#diff pre.diff'); if (!d) return null; var f = Array.prototype.map.call(d.querySelectorAll('span.file'), function (e) { return e.textContent; }); var a = Array.prototype.map.call(d.querySelectorAll('span.add'), function (e) { return e.textContent; }); return f.some(function (x) { return x.indexOf('notes.txt') >= 0; }) ? [f, a] : null;",
        )
        .await;
    assert!(
        diff[1]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l.as_str().unwrap().contains("+written-by-the-agent")),
        "the added line: {diff}"
    );
    // The same diff over the API.
    let api = reqwest::Client::new()
        .get(format!("{}/api/batches/diff/tasks/write/diff", web.base))
        .bearer_auth(&web.token)
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), 200);
    assert!(api.text().await.unwrap().contains("written-by-the-agent"));
    // The record's files: links that download.
    let link = b
        .wait_for("the record's files", "section#files a.file")
        .await
        .attr("href")
        .await
        .unwrap()
        .expect("a link");
    let status = b
        .js_async(&format!(
            "var done = arguments[arguments.length - 1]; fetch({}, {{credentials: 'same-origin'}}).then(function (r) {{ done(r.status); }}, function (e) {{ done(String(e)); }});",
            js_str(&link)
        ))
        .await;
    assert_eq!(status, 200, "{link}");
    b.close().await;
}

/// The cancel buttons of a batch that another `aicli batch` process runs: one task from
/// its page (it ends failed, cancelled, its processes gone), then the batch from its page
/// (the other task ends interrupted, the batch process exits, nothing is left, the
/// record is complete); then the batch page's resume button runs the interrupted task
/// to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_from_the_page_stops_another_process_s_batch_and_resume_finishes_it() {
    let driver = driver_or_skip!(
        "cancel_from_the_page_stops_another_process_s_batch_and_resume_finishes_it"
    );
    let s = Setup::new(&[]);
    let pid = |t: &str| s.dir.path().join(format!("{t}.pids"));
    let once = |t: &str| s.dir.path().join(format!("{t}.once"));
    // Each hangs after its first line with a grandchild, the first time only.
    let hang = |t: &str| {
        json!({"id": t, "prompt": t, "extra_args": ["--hang-after", "1", "--once", once(t),
            "--spawn-grandchildren", "1", "--pid-file", pid(t)]})
    };
    let tasks = json!({"max_parallel": 2, "tasks": [hang("a"), hang("b")]});
    let mut batch = s.batch("cancel", &tasks, &[]);
    until("both tasks started", POLL, || {
        pid("a").exists() && pid("b").exists()
    })
    .await;
    until("both tasks printed", POLL, || {
        task_printed(&s.runs.join("cancel"), "a") && task_printed(&s.runs.join("cancel"), "b")
    })
    .await;
    let web = s.web(&[]);
    let b = driver.session(DESKTOP).await;
    b.goto(&web.url).await;
    b.wait_for("the index", "h1").await;

    // One task, from its page.
    b.goto(&format!("{}/batches/cancel/tasks/a", web.page))
        .await;
    b.wait_js(
        "task a shows running",
        "var s = document.getElementById('state'); return s && s.getAttribute('data-state') === 'running';",
    )
    .await;
    b.click("the task's cancel button", "button#cancel-task")
        .await;
    let rec = s.until_state("cancel", "a", "failed").await;
    let last = rec["attempts"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["result"]["error_kind"], "cancelled", "{rec}");
    assert_all_gone(&pid("a"), Duration::from_secs(30)).await;
    b.wait_js(
        "task a's page shows failed",
        "var s = document.getElementById('state'); return s && s.getAttribute('data-state') === 'failed';",
    )
    .await;
    assert_eq!(
        s.state("cancel", "b").as_deref(),
        Some("running"),
        "b goes on"
    );

    // The whole batch, from its page.
    b.goto(&format!("{}/batches/cancel", web.page)).await;
    b.wait_for("the batch's rows", "tr[data-task=\"b\"] td.status")
        .await;
    b.click("the batch's cancel button", "button#cancel-batch")
        .await;
    let code = exit_code(&mut batch, "the cancelled batch").await;
    assert_ne!(code, Some(0), "a cancelled batch does not exit 0");
    assert_all_gone(&pid("b"), Duration::from_secs(30)).await;
    let rec = s.task("cancel", "b").unwrap();
    assert_eq!(rec["state"], "interrupted", "{rec}");
    let last = rec["attempts"].as_array().unwrap().last().unwrap();
    assert_eq!(last["result"]["error_kind"], "cancelled", "{rec}");
    assert!(last["finished_at"].is_string(), "{rec}");
    let result: Value =
        serde_json::from_slice(&std::fs::read(s.runs.join("cancel/result.json")).unwrap()).unwrap();
    // a, cancelled alone, failed; b, cut off with the batch, is interrupted.
    assert_eq!(
        (&result["n_failed"], &result["n_interrupted"]),
        (&json!(1), &json!(1)),
        "{result}"
    );
    let control = std::fs::read_to_string(s.runs.join("cancel/control.ndjson")).unwrap();
    assert_eq!(
        control.matches("\"by\":\"web\"").count(),
        2,
        "both requests came from the page: {control}"
    );
    b.wait_js(
        "the batch page shows b interrupted",
        "var s = document.querySelector('tr[data-task=\"b\"] td.status'); return s && s.getAttribute('data-state') === 'interrupted';",
    )
    .await;
    until_no_process_under(&[s.repo.path(), &s.runs], &[web.pid()]).await;

    // Resume, from the batch page: b runs again (it behaves now) to its end.
    b.goto(&format!("{}/batches/cancel", web.page)).await;
    b.click("the batch's resume button", "button#resume-batch")
        .await;
    // The record says `interrupted` until the resumed run writes its second attempt.
    until("b's second attempt", POLL, || {
        s.task("cancel", "b")
            .and_then(|v| v["attempts"].as_array().map(Vec::len))
            .is_some_and(|n| n >= 2)
    })
    .await;
    s.until_state("cancel", "b", "succeeded").await;
    b.wait_js(
        "the batch page shows b succeeded",
        "var s = document.querySelector('tr[data-task=\"b\"] td.status'); return s && s.getAttribute('data-state') === 'succeeded';",
    )
    .await;
    assert_eq!(
        s.state("cancel", "a").as_deref(),
        Some("failed"),
        "a stays cancelled"
    );
    until_no_process_under(&[s.repo.path(), &s.runs], &[web.pid()]).await;
    b.close().await;
}

/// The index's forms: a task started from the page runs to its end (the action box
/// follows it and links its batch, whose page shows it succeeded), and so does a batch
/// pasted as a tasks file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_and_a_batch_started_from_the_page_run_to_their_end() {
    let driver = driver_or_skip!("a_task_and_a_batch_started_from_the_page_run_to_their_end");
    let s = Setup::new(&["--line-delay-ms", "200"]);
    let web = s.web(&[]);
    let b = driver.session(DESKTOP).await;
    b.goto(&web.url).await;
    b.wait_for("the start form", "form#start-task textarea[name=prompt]")
        .await
        .send_keys("Say hello from the page")
        .await
        .unwrap();
    let provider = b
        .wait_for("the provider", "form#start-task select[name=provider]")
        .await;
    provider.select_by_value("fake").await.unwrap();
    b.wait_for("the runner", "form#start-task select[name=runner]")
        .await
        .select_by_value("local")
        .await
        .unwrap();
    b.wait_for("the model", "form#start-task input[name=model]")
        .await;
    b.click("start", "form#start-task button[type=submit]")
        .await;
    let href = b
        .wait_js(
            "a link to the new batch",
            "var a = document.getElementById('action-batch'); return a && a.getAttribute('href');",
        )
        .await;
    let href = href.as_str().unwrap().to_owned();
    let id = href.rsplit('/').next().unwrap().to_owned();
    assert!(href.starts_with("/batches/"), "{href}");
    b.wait_js(
        "the action box says the task's run is done",
        "var a = document.getElementById('action'); return a && /done/.test(a.textContent);",
    )
    .await;
    let tasks = std::fs::read_dir(s.runs.join(&id).join("tasks"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect::<Vec<_>>();
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    let rec = s.task(&id, &tasks[0]).unwrap();
    assert_eq!(rec["state"], "succeeded", "{rec}");
    assert_eq!(rec["provider"], "fake", "{rec}");
    b.click("the new batch's link", "a#action-batch").await;
    b.wait_js(
        "the new batch's page shows the task succeeded",
        &format!(
            "var s = document.querySelector('tr[data-task={}] td.status'); return s && s.getAttribute('data-state') === 'succeeded';",
            js_str(&tasks[0])
        ),
    )
    .await;

    // A batch from a tasks file's JSON.
    b.goto(&format!("{}/", web.page)).await;
    b.wait_for("the batch form", "form#start-batch textarea[name=tasks]")
        .await
        .send_keys(r#"{"tasks": [{"id": "one", "prompt": "1"}, {"id": "two", "prompt": "2"}]}"#)
        .await
        .unwrap();
    b.click("start the batch", "form#start-batch button[type=submit]")
        .await;
    let href2 = b
        .wait_js(
            "a link to the second batch",
            &format!(
                "var a = document.getElementById('action-batch'); var h = a && a.getAttribute('href'); return h && h !== {} ? h : null;",
                js_str(&href)
            ),
        )
        .await;
    let id2 = href2
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned();
    for t in ["one", "two"] {
        s.until_state(&id2, t, "succeeded").await;
    }
    b.goto(&format!("{}{}", web.page, href2.as_str().unwrap()))
        .await;
    b.wait_js(
        "the second batch's page shows both succeeded",
        "var r = document.querySelectorAll('tr[data-task] td.status[data-state=\"succeeded\"]'); return r.length === 2;",
    )
    .await;
    b.close().await;
    until_no_process_under(&[s.repo.path(), &s.runs], &[web.pid()]).await;
}

/// The markup an agent could print: a script and an image whose error handler runs
/// script. Both set `window.__pwned` if they ever run.
const EVIL: &str = r#"<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">"#;

/// Claude's `bash_allowed` transcript with `EVIL` as the tool's output and in the final
/// text, written to `path`.
fn evil_transcript(path: &Path) {
    let fx = std::fs::read_to_string(fixture("claude", "bash_allowed").with_extension("ndjson"))
        .unwrap();
    let evil = serde_json::to_string(EVIL).unwrap();
    let evil = &evil[1..evil.len() - 1];
    let mut out = String::new();
    for l in fx.lines() {
        let mut v: Value = serde_json::from_str(l).unwrap();
        if let Some(content) = v["message"]["content"].as_array_mut() {
            for c in content {
                if c["type"] == "tool_result" {
                    c["content"] = json!(format!("tool output: {EVIL}"));
                }
                if c["type"] == "text"
                    && c["text"].as_str().unwrap_or_default().contains("returned")
                {
                    c["text"] = json!(format!("The tool returned: {EVIL}"));
                }
            }
        }
        if v["type"] == "result" {
            v["result"] = json!(format!("The tool returned: {EVIL}"));
        }
        out.push_str(&v.to_string());
        out.push('\n');
    }
    assert!(
        out.contains(evil) || out.contains(EVIL),
        "the markup is in the transcript"
    );
    std::fs::write(path, out).unwrap();
}

/// What the browser may not do: a second session without the cookie sees no data; a
/// POST from the page without the CSRF token is refused; markup in a tool's output and
/// in the response is shown as text and runs nothing. Over plain HTTP: a wrong Host is
/// refused, and every page has the Content-Security-Policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_browser_shows_agent_markup_as_text_and_gets_nothing_without_its_session() {
    let driver = driver_or_skip!(
        "the_browser_shows_agent_markup_as_text_and_gets_nothing_without_its_session"
    );
    let s = Setup::new(&[]);
    let transcript = s.dir.path().join("evil.ndjson");
    evil_transcript(&transcript);
    let tasks =
        json!({"tasks": [{"id": "xss", "prompt": "x", "extra_args": ["--replay", transcript]}]});
    let mut batch = s.batch("sec", &tasks, &[]);
    assert_eq!(
        exit_code(&mut batch, "the batch").await,
        Some(0),
        "{}",
        s.batch_err("sec")
    );
    let web = s.web(&[]);

    // Plain HTTP: the headers, the Host check.
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let page = format!("{}/batches/sec/tasks/xss", web.base);
    let r = http
        .get(&page)
        .bearer_auth(&web.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
        "{csp}"
    );
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    let r = http
        .get(&page)
        .bearer_auth(&web.token)
        .header("host", "attacker.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "a wrong Host");
    assert!(!r.text().await.unwrap().contains("__pwned"));

    // The logged-in browser: the markup is text, nothing of it runs.
    let page = format!("{}/batches/sec/tasks/xss", web.page);
    let b = driver.session(DESKTOP).await;
    b.goto(&web.url).await;
    b.wait_for("the index", "h1").await;
    b.goto(&page).await;
    let shown = b
        .wait_js(
            "the tool's output in the transcript, as text",
            &format!(
                "var t = (function () {{ {TRANSCRIPT} }})(); var hit = t.filter(function (l) {{ return l[1].indexOf({}) >= 0; }}); return hit.length >= 2 ? hit : null;",
                js_str(EVIL)
            ),
        )
        .await;
    assert!(
        shown.as_array().unwrap().iter().any(|l| l[1]
            .as_str()
            .unwrap()
            .contains(&format!("tool output: {EVIL}"))),
        "{shown}"
    );
    let visible = b
        .js(&format!(
            "return document.body.innerText.indexOf({}) >= 0",
            js_str(EVIL)
        ))
        .await;
    assert_eq!(visible, true, "the markup shows as text on the page");
    let dom = b
        .js("return [typeof window.__pwned, document.querySelectorAll('img').length, Array.prototype.map.call(document.scripts, function (s) { return s.getAttribute('src'); })]")
        .await;
    assert_eq!(
        dom,
        json!(["undefined", 0, ["/static/app.js"]]),
        "no script of the agent's ran, no element of its markup exists"
    );
    for p in [
        format!("{}/batches/sec", web.page),
        format!("{}/", web.page),
    ] {
        b.goto(&p).await;
        b.wait_for("the page", "h1").await;
        let dom = b
            .js("return [typeof window.__pwned, document.querySelectorAll('img[src=\"x\"]').length]")
            .await;
        assert_eq!(dom, json!(["undefined", 0]), "{p}");
    }

    // A POST from the page's own context without the CSRF token: refused. The same with
    // the token passes that check (and is refused for what it asks: the task is not
    // blocked).
    b.goto(&page).await;
    b.wait_for("the task page", "h1").await;
    let forged = b
        .js_async(
            r#"var done = arguments[arguments.length - 1];
fetch("/api/batches/sec/tasks/xss/answer", {method: "POST", credentials: "same-origin",
  headers: {"Content-Type": "application/json"}, body: JSON.stringify({text: "yes"})})
  .then(function (r) { return r.text().then(function (t) { done([r.status, t]); }); },
        function (e) { done(String(e)); });"#,
        )
        .await;
    assert_eq!(forged[0], 403, "{forged}");
    let with_token = b
        .js_async(
            r#"var done = arguments[arguments.length - 1];
fetch("/api/session", {credentials: "same-origin"}).then(function (r) { return r.json(); })
  .then(function (s) {
    return fetch("/api/batches/sec/tasks/xss/answer", {method: "POST", credentials: "same-origin",
      headers: {"Content-Type": "application/json", "X-CSRF-Token": s.csrf}, body: JSON.stringify({text: "yes"})});
  }).then(function (r) { done(r.status); }, function (e) { done(String(e)); });"#,
        )
        .await;
    assert_eq!(
        with_token, 409,
        "with its token the request gets past the CSRF check"
    );
    let cancel = b
        .js_async(
            r#"var done = arguments[arguments.length - 1];
fetch("/api/batches/sec/cancel", {method: "POST", credentials: "same-origin"})
  .then(function (r) { done(r.status); }, function (e) { done(String(e)); });"#,
        )
        .await;
    assert_eq!(cancel, 403, "a cancel without the token");

    // A second browser: no cookie, no data. The login link is spent.
    let other = driver.session(DESKTOP).await;
    for p in [
        format!("{}/", web.page),
        format!("{}/api/batches", web.page),
        page.clone(),
        format!("{}/api/batches/sec/tasks/xss/events", web.page),
        web.url.clone(),
    ] {
        other.goto(&p).await;
        let text = other.body_text().await;
        assert!(
            !text.contains("sec") && !text.contains("xss") && !text.contains("__pwned"),
            "{p} shows data to a browser without the session:\n{text}"
        );
        let status = other
            .js_async(&format!(
                "var done = arguments[arguments.length - 1]; fetch({}, {{credentials: 'same-origin'}}).then(function (r) {{ done(r.status); }}, function (e) {{ done(String(e)); }});",
                js_str(&p)
            ))
            .await;
        assert_eq!(status, 401, "{p}: {text}");
    }
    assert!(
        !truthy(&other.js("return document.cookie").await),
        "no cookie"
    );
    other.close().await;
    b.close().await;
}

/// The driver's processes go with its guard: chromedriver and every browser it started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_browser_harness_leaves_no_process_behind() {
    let driver = driver_or_skip!("the_browser_harness_leaves_no_process_behind");
    let b = driver.session(PHONE).await;
    b.goto("about:blank").await;
    let size = b.js("return [window.innerWidth, window.innerHeight]").await;
    assert_eq!(size, json!([PHONE.0, PHONE.1]), "the phone's viewport");
    let mut pids = descendants(driver.pid());
    assert!(
        !pids.is_empty(),
        "a browser runs below chromedriver: {pids:?}"
    );
    pids.push(driver.pid());
    pids.retain(|p| alive(*p));
    // Dropped without closing the session, as a panicking test would.
    drop(b);
    drop(driver);
    until(
        "every process of the driver and its browsers ends",
        POLL,
        || pids.iter().all(|p| !alive(*p)),
    )
    .await;
}
