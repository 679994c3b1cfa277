//! The web view at a phone's width, and its icons, in headless Chromium (issue 37, item
//! 6): at 390 px no page scrolls sideways, the index's title and Spent column show
//! whole; every character the pages show is one that DejaVu Sans has (the font Debian's
//! Chromium falls back to: it has no emoji font, so ⏸ and ⏹ were empty boxes), the
//! states and buttons drawing their icons as the server's own SVG masks; and the batch
//! list says what each batch is about (its tasks' ids and prompts). Skips (loudly)
//! without Chromium unless `AICLI_REQUIRE_BROWSER` is set.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::json;

use super::commits::Setup;
use crate::support::browser::{Browser, Driver, PHONE, POLL, Stopped, Web, stop, until};

/// Whether DejaVu Sans has `c` (fontconfig's `fc-list`, which Chromium's fonts come
/// through).
fn dejavu_sans_has(c: char) -> bool {
    let out = std::process::Command::new("fc-list")
        .arg(format!(":charset={:x}", c as u32))
        .arg("family")
        .output()
        .expect("fc-list (fontconfig, which chromium needs) runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.split(',').any(|f| f == "DejaVu Sans"))
}

/// What a page at phone width must hold to: no sideways scroll, the title whole, and
/// every character it shows in DejaVu Sans. Returns the page's text.
async fn check_page(b: &Browser, what: &str) -> String {
    let width = b
        .js("return [document.documentElement.scrollWidth, window.innerWidth]")
        .await;
    assert!(
        width[0].as_u64() <= width[1].as_u64(),
        "{what}: the page is {} px wide in a {} px window",
        width[0],
        width[1]
    );
    let h1 = b
        .js("var h = document.querySelector('h1'); var r = h.getBoundingClientRect(); return [h.scrollWidth <= h.clientWidth, r.right <= window.innerWidth];")
        .await;
    assert_eq!(h1, json!([true, true]), "{what}: the title is cut off");
    let text = b.body_text().await;
    let odd: BTreeSet<char> = text
        .chars()
        .filter(|c| !c.is_ascii() && !c.is_whitespace())
        .filter(|c| !dejavu_sans_has(*c))
        .collect();
    assert!(
        odd.is_empty(),
        "{what}: characters DejaVu Sans lacks (empty boxes without an emoji font): {odd:?} in\n{text}"
    );
    text
}

/// Each `.st` element's state icon: `[state, its mask's URL, its width]`.
const STATE_ICONS: &str = r#"
return Array.prototype.map.call(document.querySelectorAll(".st"), function (e) {
  var b = getComputedStyle(e, "::before");
  return [e.getAttribute("data-state"), b.maskImage || b.webkitMaskImage, b.width];
});"#;

/// The icons of the states on the page: each drawn (a mask of the server's SVG, with a
/// width) and the one of its state.
async fn check_state_icons(b: &Browser, what: &str) -> Vec<String> {
    let icons = b.js(STATE_ICONS).await;
    let want = |s: &str| match s {
        "queued" => "wait",
        "running" => "play",
        "succeeded" => "check",
        "failed" => "cross",
        "blocked" => "pause",
        "interrupted" => "stop",
        other => panic!("{what}: state {other}"),
    };
    let mut states = Vec::new();
    for i in icons.as_array().unwrap() {
        let state = i[0].as_str().unwrap_or_default();
        let mask = i[1].as_str().unwrap_or_default();
        assert!(
            mask.contains(&format!("/static/icons/{}.svg", want(state))),
            "{what}: {state}'s icon is {mask:?}"
        );
        assert_ne!(i[2], "0px", "{what}: {state}'s icon has no width");
        states.push(state.to_owned());
    }
    states
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_phone_width_nothing_scrolls_sideways_and_every_icon_renders() {
    let driver = driver_or_skip!("at_phone_width_nothing_scrolls_sideways_and_every_icon_renders");
    let s = Setup::new(json!({}));
    let asked = s.dir.path().join("asked.json");
    let question = json!({"question": "Which name should the entry point have?",
        "options": ["parse_args", "read_args"]})
    .to_string();
    let long_prompt = format!(
        "Add a unit test for the parser's handling of {}\nand more",
        "deeply nested quoted arguments ".repeat(4)
    );
    let tasks = json!({"max_parallel": 3, "tasks": [
        {"id": "add-tests", "prompt": long_prompt,
         "extra_args": ["--write", "t.txt", "t\n"]},
        {"id": "document-api", "prompt": "Document the public API",
         "extra_args": crate::support::fake::replay_args(&crate::support::fake::fixture("claude", "badkey"))},
        {"id": "rename-parser", "prompt": "Rename the parser's entry point",
         "extra_args": ["--mcp-call", "ask_user", question, asked]},
    ]});
    let file = s.dir.path().join("mixed.json");
    std::fs::write(&file, tasks.to_string()).unwrap();
    let out = s
        .cmd(&[
            "batch",
            file.to_str().unwrap(),
            "--batch-id",
            "mixed-states-of-a-long-batch-name",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let b1 = "mixed-states-of-a-long-batch-name";
    assert_eq!(
        [
            s.state(b1, "add-tests"),
            s.state(b1, "document-api"),
            s.state(b1, "rename-parser")
        ],
        ["succeeded", "failed", "blocked"],
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A batch cut off by Ctrl-C: one task stopped mid-run, one never started.
    let hang = json!({"max_parallel": 1, "tasks": [
        {"id": "slow", "prompt": "Refactor everything", "extra_args": ["--hang-after", "1"]},
        {"id": "later", "prompt": "Then test it"},
    ]});
    let file = s.dir.path().join("cut.json");
    std::fs::write(&file, hang.to_string()).unwrap();
    let mut cut = Stopped(
        s.cmd(&["batch", file.to_str().unwrap(), "--batch-id", "cut"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    until("slow runs", POLL, || s.state("cut", "slow") == "running").await;
    stop(&mut cut.0, Duration::from_secs(30));
    assert_eq!(
        [s.state("cut", "slow"), s.state("cut", "later")],
        ["interrupted", "interrupted"]
    );

    // The runs under a long path, as a real project's are: the index's title names it.
    let long = s
        .dir
        .path()
        .join("developer/projects/parserrewrite.workspace");
    std::fs::create_dir_all(&long).unwrap();
    std::os::unix::fs::symlink(s.runs(), long.join("runs")).unwrap();
    let web = Web::start(
        Path::new(env!("CARGO_BIN_EXE_aicli")),
        &s.cfg,
        s.repo.path(),
        &long.join("runs"),
        &[],
    );
    let b = driver.session(PHONE).await;
    b.goto(&web.url).await;
    b.wait_for("the index", "table#batches").await;

    // The index: its title and every batch's Spent whole, each batch's tasks named.
    let text = check_page(&b, "the index").await;
    b.screenshot("phone-index").await;
    let spent = b
        .js("return Array.prototype.map.call(document.querySelectorAll('td.spent'), function (t) { var r = t.getBoundingClientRect(); return r.width > 0 && r.right <= window.innerWidth; });")
        .await;
    assert_eq!(spent, json!([true, true]), "the Spent column shows whole");
    let row = b
        .js(&format!(
            "return document.querySelector('tr[data-batch=\"{b1}\"]').innerText"
        ))
        .await;
    let row = row.as_str().unwrap_or_default();
    for want in [
        "add-tests: Add a unit test for the parser's handling of deeply",
        "document-api: Document the public API",
        "rename-parser: Rename the parser's entry point",
    ] {
        assert!(row.contains(want), "{want:?} in the index's row:\n{row}");
    }
    assert!(row.contains('…'), "the long prompt is cut: {row}");
    assert!(text.contains("Waiting for an answer (1)"), "{text}");
    let counts = b
        .js("return Array.prototype.map.call(document.querySelectorAll('span.count .i'), function (i) { var s = getComputedStyle(i); return [i.className, s.maskImage || s.webkitMaskImage, s.width]; });")
        .await;
    let counts = counts.as_array().unwrap();
    for want in ["check", "cross", "pause", "stop"] {
        assert!(
            counts.iter().any(|c| c[0] == format!("i i-{want}")
                && c[1]
                    .as_str()
                    .unwrap_or_default()
                    .contains(&format!("icons/{want}.svg"))
                && c[2] != "0px"),
            "the {want} icon among the index's counts: {counts:?}"
        );
    }

    // The batch pages and the task pages of every state.
    for (batch, tasks) in [
        (b1, vec!["add-tests", "document-api", "rename-parser"]),
        ("cut", vec!["slow", "later"]),
    ] {
        b.goto(&format!("{}/batches/{batch}", web.page)).await;
        b.wait_for("the batch's rows", "tr[data-task] td.status")
            .await;
        check_page(&b, &format!("batch {batch}")).await;
        b.screenshot(&format!("phone-batch-{batch}")).await;
        let states = check_state_icons(&b, &format!("batch {batch}")).await;
        assert_eq!(states.len(), tasks.len(), "{states:?}");
        for t in tasks {
            b.goto(&format!("{}/batches/{batch}/tasks/{t}", web.page))
                .await;
            b.wait_for("the task's state", "#state").await;
            let what = format!("task {batch}/{t}");
            check_page(&b, &what).await;
            let states = check_state_icons(&b, &what).await;
            assert_eq!(states, [s.state(batch, t)], "{what}");
        }
    }
    // The blocked task's page: the question's icon, drawn.
    b.goto(&format!("{}/batches/{b1}/tasks/rename-parser", web.page))
        .await;
    b.screenshot("phone-task-blocked").await;
    let pause = b
        .js("var i = document.querySelector('.blocked .i-pause'); return i ? getComputedStyle(i).width : null;")
        .await;
    assert!(pause.is_string() && pause != "0px", "{pause}");
    // The icons are this server's files, served to the logged-in browser.
    let served = b
        .js_async("var done = arguments[arguments.length - 1]; fetch('/static/icons/pause.svg').then(function (r) { return r.text().then(function (t) { done([r.status, r.headers.get('content-type'), t.indexOf('<svg') === 0]); }); });")
        .await;
    assert_eq!(served, json!([200, "image/svg+xml", true]));
    b.close().await;
}
