//! The web view's live transcript, end to end: from a CLI's line landing in the run
//! record to a real browser's DOM showing it.
//!
//! `cargo bench --bench web_browser [-- LINES [GAP_MS]]` (default 250 lines, one every
//! 40 ms). Needs Debian's `chromium` and `chromedriver` (`.ci/install-browser.sh`).
//!
//! A temp repository and `aicli batch` running one task whose CLI is `aicli-fake-cli`: it
//! prints the first line of Claude's `bash_allowed` transcript (the session's start) and
//! then hangs, so the task stays `running`. `aicli web` serves the record; headless
//! Chromium opens the task's page, whose script follows the events over SSE, and a plain
//! SSE client (reqwest, in this process) follows the same stream. The bench then appends
//! LINES lines of Claude's stream-json to the task's `events.ndjson`, one `write` each,
//! GAP_MS apart: a mix, in turn, of an assistant text, a `Bash` tool call, its tool
//! result (every second one 16 KiB of output, which the page folds) and a longer text,
//! each carrying `bench line K`. It notes the wall clock (SystemTime, epoch ms) right
//! after each write and how long the write took. The SSE client notes when the first
//! event holding `bench line K` arrives; in the page a `MutationObserver` on `#events`
//! notes `performance.timeOrigin + performance.now()` (the same wall clock) when the
//! `<li>` holding it is added. Reported side by side, p50 / p95 / p99 / max: the write,
//! write → SSE client, write → DOM, and DOM / SSE at each quantile. Every line must
//! arrive at both, once.
//!
//! What the figures hold: the server's wake-up (its inotify watch on the task's
//! directory, `src/web/watch.rs`) and look at the file, decoding, SSE over loopback; for
//! the DOM also the page's parse and DOM insert. Not paint (the observer runs before the
//! next frame).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often a wait looks at its condition.
const POLL: Duration = Duration::from_millis(20);

#[path = "../tests/support/mod.rs"]
mod support;
use support::browser::{DESKTOP, Driver, Stopped, Web, until};
use support::fake::{fake_cli, fixture, replay_args};
use support::git::init_repo;

fn aicli_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_aicli"))
}

fn epoch_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1000.0
}

/// The `q` quantile (0..=1) of sorted `v`, nearest rank.
fn quantile(v: &[f64], q: f64) -> f64 {
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

/// Records, in the page, when each `#events` line holding `bench line K` is added (the
/// same clock as SystemTime): `[K, t]`; returns how many lines there were before.
const OBSERVER: &str = r#"
var box = document.getElementById("events");
window.__seen = [];
new MutationObserver(function (muts) {
  var t = performance.timeOrigin + performance.now();
  muts.forEach(function (m) {
    m.addedNodes.forEach(function (n) {
      if (n.nodeType !== 1) { return; }
      var k = /bench line (\d+)/.exec(n.textContent);
      if (k) { window.__seen.push([parseInt(k[1], 10), t]); }
    });
  });
}).observe(box, {childList: true});
return box.children.length;"#;

/// The K in the first `bench line K` of `s`.
fn marker(s: &str) -> Option<usize> {
    let rest = &s[s.find("bench line ")? + "bench line ".len()..];
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// The lines appended, made from the transcript's own: its text (line 1), its tool
/// call (line 2) and that call's result (line 3).
struct Templates {
    text: serde_json::Value,
    call: serde_json::Value,
    result: serde_json::Value,
}

impl Templates {
    fn new(transcript: &str) -> Templates {
        let l: Vec<serde_json::Value> = transcript
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(l[1]["message"]["content"][0]["type"], "text");
        assert_eq!(l[2]["message"]["content"][0]["type"], "tool_use");
        assert_eq!(l[3]["message"]["content"][0]["type"], "tool_result");
        Templates {
            text: l[1].clone(),
            call: l[2].clone(),
            result: l[3].clone(),
        }
    }

    /// Line `k` of the mix, with its newline.
    fn line(&self, k: usize) -> String {
        let id = format!("toolu_bench{k:06}");
        let mut v;
        match k % 4 {
            0 => {
                v = self.text.clone();
                v["message"]["content"][0]["text"] =
                    format!("bench line {k}: I will run the tests.").into();
            }
            1 => {
                v = self.call.clone();
                v["message"]["content"][0]["id"] = id.into();
                v["message"]["content"][0]["input"] = serde_json::json!({
                    "command": format!("echo bench line {k} && cargo test -q parser"),
                    "description": "Run the parser's tests",
                });
            }
            2 => {
                v = self.result.clone();
                v["message"]["content"][0]["tool_use_id"] =
                    format!("toolu_bench{:06}", k - 1).into();
                let mut out = format!("bench line {k}\n");
                if k % 8 == 2 {
                    // 16 KiB of test output.
                    while out.len() < 16 * 1024 {
                        out.push_str("test parser::tests::parses_a_flag_with_its_value ... ok\n");
                    }
                } else {
                    out.push_str("test result: ok. 12 passed; 0 failed");
                }
                v["message"]["content"][0]["content"] = out.into();
            }
            _ => {
                v = self.text.clone();
                v["message"]["content"][0]["text"] = format!(
                    "bench line {k}: the tests pass. The parser now takes `--flag=value` as well as `--flag value`, and an unknown flag is an error that names it; I added a test for each case and left the public functions as they were."
                )
                .into();
            }
        }
        format!("{v}\n")
    }
}

/// Follows the task's events over SSE as a plain client: the wall clock (epoch ms)
/// when the first event holding `bench line K` arrived, by K. `ready` once it has the
/// events already in the record.
async fn sse_client(
    url: String,
    token: String,
    seen: Arc<Mutex<Vec<Option<f64>>>>,
    ready: tokio::sync::oneshot::Sender<()>,
) {
    let mut r = reqwest::Client::new()
        .get(&url)
        .bearer_auth(&token)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{url}: {}", r.status());
    let mut ready = Some(ready);
    let mut buf: Vec<u8> = Vec::new();
    while let Ok(Some(c)) = r.chunk().await {
        let t = epoch_ms();
        buf.extend_from_slice(&c);
        while let Some(i) = buf.windows(2).position(|w| w == b"\n\n") {
            let frame: Vec<u8> = buf.drain(..i + 2).collect();
            let text = String::from_utf8_lossy(&frame);
            if !text.lines().any(|l| l.starts_with("data:")) {
                continue;
            }
            if let Some(r) = ready.take() {
                let _ = r.send(());
            }
            if let Some(k) = marker(&text) {
                let mut s = seen.lock().unwrap();
                if let Some(slot) = s.get_mut(k) {
                    slot.get_or_insert(t);
                }
            }
        }
    }
}

/// p50, p95 and p99 of `v` (sorted here), and its table row (with max and mean).
fn row(name: &str, v: &mut [f64], unit: &str) -> ([f64; 3], String) {
    v.sort_by(f64::total_cmp);
    let q = [quantile(v, 0.50), quantile(v, 0.95), quantile(v, 0.99)];
    let f = |x: f64| format!("{x:.1} {unit}");
    (
        q,
        format!(
            "| {name} | {} | {} | {} | {} | {} |",
            f(q[0]),
            f(q[1]),
            f(q[2]),
            f(v[v.len() - 1]),
            f(v.iter().sum::<f64>() / v.len() as f64),
        ),
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let lines: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(250);
    let gap = Duration::from_millis(args.get(1).and_then(|a| a.parse().ok()).unwrap_or(40));
    let Some(driver) = Driver::start_or_skip("bench web_browser").await else {
        return;
    };

    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    init_repo(&repo);
    let runs = tmp.path().join("runs");
    let fx = fixture("claude", "bash_allowed");
    let mut fake_args = replay_args(&fx);
    fake_args.extend(["--hang-after".into(), "1".into()]);
    let cfg = tmp.path().join("aicli.json");
    std::fs::write(
        &cfg,
        serde_json::json!({
            "default_provider": "fake",
            "providers": {"fake": {"adapter": "claude", "binary_path": fake_cli(), "extra_args": fake_args}},
        })
        .to_string(),
    )
    .unwrap();
    let tasks = tmp.path().join("tasks.json");
    std::fs::write(&tasks, r#"{"tasks": [{"id": "t", "prompt": "stream"}]}"#).unwrap();
    let batch = Stopped(
        Command::new(aicli_bin())
            .arg("--config")
            .arg(&cfg)
            .arg("batch")
            .arg(&tasks)
            .args(["--batch-id", "bench", "--no-mcp"])
            .arg("--repo")
            .arg(&repo)
            .arg("--runs-dir")
            .arg(&runs)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("aicli batch"),
    );
    let events = runs.join("bench/tasks/t/events.ndjson");
    until("the task prints its first line", POLL, || {
        std::fs::metadata(&events).is_ok_and(|m| m.len() > 0) && running(&runs)
    })
    .await;

    let web = Web::start(&aicli_bin(), &cfg, &repo, &runs, &[]);
    let b = driver.session(DESKTOP).await;
    b.goto(&web.url).await;
    b.wait_for("the index", "h1").await;
    b.goto(&format!("{}/batches/bench/tasks/t", web.page)).await;
    b.wait_js(
        "the transcript shows the session's start",
        "var e = document.getElementById('events'); return e && e.children.length >= 1;",
    )
    .await;
    let before = b.js(OBSERVER).await.as_u64().unwrap() as usize;

    let templates = Templates::new(&std::fs::read_to_string(fx.with_extension("ndjson")).unwrap());
    let seen_sse = Arc::new(Mutex::new(vec![None; lines]));
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let sse = tokio::spawn(sse_client(
        format!("{}/api/batches/bench/tasks/t/events", web.base),
        web.token.clone(),
        seen_sse.clone(),
        ready_tx,
    ));
    ready_rx
        .await
        .expect("the SSE client gets the session's start");

    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&events)
        .unwrap();
    let mut written = Vec::with_capacity(lines);
    let mut write_us = Vec::with_capacity(lines);
    let mut bytes = 0;
    let start = Instant::now();
    for k in 0..lines {
        let line = templates.line(k);
        bytes += line.len();
        let t = Instant::now();
        file.write_all(line.as_bytes()).unwrap();
        write_us.push(t.elapsed().as_secs_f64() * 1e6);
        written.push(epoch_ms());
        let next = start + gap * (k as u32 + 1);
        tokio::time::sleep_until(next.into()).await;
    }
    let seen = b
        .wait_js(
            "every line in the DOM",
            &format!("return window.__seen.length >= {lines} ? window.__seen : null;"),
        )
        .await;
    until("every line at the SSE client", POLL, || {
        seen_sse.lock().unwrap().iter().all(Option::is_some)
    })
    .await;
    sse.abort();
    let mut dom = vec![None; lines];
    let mut dup = 0;
    for s in seen.as_array().unwrap() {
        let k = s[0].as_u64().unwrap() as usize;
        if dom[k].replace(s[1].as_f64().unwrap()).is_some() {
            dup += 1;
        }
    }
    assert_eq!(dup, 0, "a line shown twice");
    assert!(dom.iter().all(Option::is_some), "a line missing");
    let sse_at: Vec<f64> = seen_sse
        .lock()
        .unwrap()
        .iter()
        .map(|t| t.unwrap())
        .collect();
    let dom_at: Vec<f64> = dom.into_iter().map(Option::unwrap).collect();
    let mut lat_sse: Vec<f64> = (0..lines).map(|k| sse_at[k] - written[k]).collect();
    let mut lat_dom: Vec<f64> = (0..lines).map(|k| dom_at[k] - written[k]).collect();
    println!(
        "web_browser: {lines} lines ({:.0} KiB: text, tool call, tool result (every second 16 KiB), longer text, in turn), {} ms apart, appended to a running task's events.ndjson ({before} line(s) on the page before)",
        bytes as f64 / 1024.0,
        gap.as_millis()
    );
    println!();
    println!("| | p50 | p95 | p99 | max | mean |");
    println!("|---|---|---|---|---|---|");
    let (w, w_row) = row(
        "the record write (one `write` of a line)",
        &mut write_us,
        "µs",
    );
    let (s, s_row) = row("write → SSE client (reqwest, loopback)", &mut lat_sse, "ms");
    let (d, d_row) = row(
        "write → the page's DOM (headless Chromium)",
        &mut lat_dom,
        "ms",
    );
    for r in [w_row, s_row, d_row] {
        println!("{r}");
    }
    println!();
    // Both streams are woken by the same change: the DOM's extra is the browser's.
    println!(
        "DOM / SSE client: p50 {:.2}x, p95 {:.2}x, p99 {:.2}x; SSE client / the write at p50: {:.0}x",
        d[0] / s[0],
        d[1] / s[1],
        d[2] / s[2],
        s[0] * 1000.0 / w[0]
    );
    b.close().await;
    drop(web);
    drop(batch);
    drop(driver);
}

/// Whether the bench batch's task is running.
fn running(runs: &Path) -> bool {
    aicli::record::task_at(&runs.join("bench/tasks/t"))
        .and_then(Result::ok)
        .is_some_and(|r| r.state == aicli::record::TaskState::Running)
}
