//! Live pages follow the record to the end (issue 37, item 5), in headless Chromium: a
//! task page opened while its task runs, and the batch page opened while the batch runs,
//! show the final state, cost, tokens and diff once it ends, and no Cancel button, with
//! no reload. Skips (loudly) without Chromium unless `AICLI_REQUIRE_BROWSER` is set.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use super::commits::Setup;
use crate::support::browser::{DESKTOP, Driver, POLL, Stopped, until};

/// How long a page may lag behind the record: its script polls every 2 s.
const FOLLOWS: Duration = Duration::from_secs(15);

/// The text of `css` on the page, or null.
fn text_of(css: &str) -> String {
    format!(
        "var e = document.querySelector({}); return e ? e.textContent : null;",
        serde_json::to_string(css).unwrap()
    )
}

fn record(s: &Setup, batch: &str, task: &str) -> Option<Value> {
    crate::suite::support::task_record(&s.runs().join(batch), task)
}

/// The cost words the pages use for a result of `cost` USD reported by the CLI.
fn cost_words(rec: &Value) -> String {
    let r = rec["attempts"]
        .as_array()
        .and_then(|a| a.iter().rev().find_map(|a| a.get("result")))
        .unwrap_or_else(|| panic!("a result in {rec}"));
    let c = r["cost_usd"]
        .as_f64()
        .unwrap_or_else(|| panic!("a cost in {r}"));
    format!("${c:.4}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_pages_show_the_end_of_their_task_and_batch_without_a_reload() {
    let driver =
        driver_or_skip!("open_pages_show_the_end_of_their_task_and_batch_without_a_reload");
    let s = Setup::new(json!({}));
    let go = |t: &str| s.dir.path().join(format!("go-{t}"));
    let task = |id: &str| {
        json!({"id": id, "prompt": format!("write {id}"), "extra_args": [
            "--wait-for-file", go(id), "--write", format!("{id}.txt"), format!("{id}\n")
        ]})
    };
    let file = s.dir.path().join("lv.json");
    std::fs::write(&file, json!({"tasks": [task("a"), task("b")]}).to_string()).unwrap();
    let mut batch = Stopped(
        s.cmd(&["batch", file.to_str().unwrap(), "--batch-id", "lv"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(s.dir.path().join("lv.err")).unwrap())
            .spawn()
            .expect("aicli batch starts"),
    );
    let err = || std::fs::read_to_string(s.dir.path().join("lv.err")).unwrap_or_default();
    let web = s.web();
    let br = driver.session(DESKTOP).await;
    br.goto(&web.url).await;
    br.wait_for("the index", "h1").await;
    until("both tasks run", POLL, || {
        s.state("lv", "a") == "running" && s.state("lv", "b") == "running"
    })
    .await;

    // Task a's page, opened while it runs; the batch's, in a second tab.
    br.goto(&format!("{}/batches/lv/tasks/a", web.page)).await;
    br.wait_for("task a's Cancel while it runs", "#cancel-task")
        .await;
    let task_tab = br.client.window().await.unwrap();
    let batch_tab = br.client.new_window(true).await.unwrap().handle;
    br.client.switch_to_window(batch_tab.clone()).await.unwrap();
    br.goto(&format!("{}/batches/lv", web.page)).await;
    br.wait_for("the batch's Cancel while it runs", "#cancel-batch")
        .await;

    // Task a ends: its open page shows its end, its cost, tokens and diff.
    br.client.switch_to_window(task_tab).await.unwrap();
    std::fs::write(go("a"), "").unwrap();
    until("task a succeeds", POLL, || {
        s.state("lv", "a") == "succeeded"
    })
    .await;
    let rec = record(&s, "lv", "a").unwrap();
    let cost = cost_words(&rec);
    br.wait_js_within(
        "task a's page shows it succeeded, with no Cancel",
        "return document.getElementById('state').textContent.indexOf('succeeded') >= 0 && !document.getElementById('cancel-task');",
        FOLLOWS,
    )
    .await;
    br.wait_js_within(
        "task a's page shows its final cost and tokens",
        &format!(
            "var p = document.getElementById('summary'); return p && p.textContent.indexOf({}) >= 0 && p.textContent.indexOf('cost unknown') < 0;",
            serde_json::to_string(&cost).unwrap()
        ),
        FOLLOWS,
    )
    .await;
    let summary = br.js(&text_of("#summary")).await;
    let summary = summary.as_str().unwrap_or_default();
    assert!(summary.contains("branch aicli/lv/a"), "{summary}");
    let u = &rec["attempts"][0]["result"]["canonical_usage"];
    assert!(
        summary.contains(&format!("{} / {}", u["input_tokens"], u["output_tokens"])),
        "the tokens of {u} in {summary}"
    );
    let diff = br
        .wait_js_within(
            "task a's page shows its diff",
            "var d = document.getElementById('diff'); return d && d.textContent.indexOf('a.txt') >= 0 ? d.textContent : null;",
            FOLLOWS,
        )
        .await;
    let diff = diff.as_str().unwrap_or_default();
    assert!(!diff.contains("without a worktree"), "{diff}");
    assert!(diff.contains("+a"), "{diff}");

    // The batch ends: its open page shows every row's end, and no Cancel.
    br.client.switch_to_window(batch_tab).await.unwrap();
    assert_eq!(
        br.js("return !!document.getElementById('cancel-batch')")
            .await,
        true,
        "task b still runs: the batch can be cancelled"
    );
    std::fs::write(go("b"), "").unwrap();
    let start = std::time::Instant::now();
    while batch.0.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < Duration::from_secs(60), "{}", err());
        tokio::time::sleep(POLL).await;
    }
    assert_eq!(
        batch.0.try_wait().unwrap().and_then(|s| s.code()),
        Some(0),
        "{}",
        err()
    );
    br.wait_js_within(
        "the batch page drops its Cancel once the batch ends",
        "return !document.getElementById('cancel-batch') && !document.getElementById('resume-batch');",
        FOLLOWS,
    )
    .await;
    br.wait_js_within(
        "the batch page offers to land what succeeded",
        "return !!document.getElementById('land-batch');",
        FOLLOWS,
    )
    .await;
    let b_cost = cost_words(&record(&s, "lv", "b").unwrap());
    let row = br
        .js("var r = document.querySelector('tr[data-task=\"b\"]'); return [r.querySelector('td.status').textContent, r.querySelector('td.cost').textContent];")
        .await;
    assert_eq!(row, json!(["succeeded", b_cost]));
    br.close().await;
}
