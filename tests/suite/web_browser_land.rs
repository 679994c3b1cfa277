//! The web view's Land and Discard buttons in headless Chromium (issue 36): a task's Land
//! puts its work on the checked-out branch, the batch's Land does so for its succeeded
//! tasks, Discard asks first (naming what is lost: nothing happens when the browser's
//! confirmation is dismissed), then removes the worktree and branch. Each is a CSRF-
//! checked POST, as every action is; the API refuses a discard without its
//! confirmation. Skips (loudly) without Chromium unless `AICLI_REQUIRE_BROWSER` is set.

use serde_json::json;

use super::commits::Setup;
use crate::support::browser::{DESKTOP, Driver};

/// The action box, once the action it follows has ended: its text.
async fn action_done(b: &crate::support::browser::Browser, what: &str) -> String {
    b.wait_js(
        what,
        "var a = document.getElementById('action'); return a && /(done|failed)/.test(a.textContent) ? a.textContent : null;",
    )
    .await
    .as_str()
    .unwrap_or_default()
    .to_owned()
}

fn branch_exists(s: &Setup, b: &str) -> bool {
    !s.git(&["branch", "--list", b]).is_empty()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn land_and_discard_from_the_page() {
    let driver = driver_or_skip!("land_and_discard_from_the_page");
    let s = Setup::new(json!({}));
    let write = |id: &str| json!({"id": id, "prompt": format!("write {id}"), "extra_args": ["--write", format!("{id}.txt"), format!("{id}\n")]});
    let (code, b) = s.batch("wl", json!([write("a"), write("b"), write("c")]));
    assert_eq!(code, Some(0), "{b}");
    let (code, b) = s.batch("wb", json!([write("d"), write("e")]));
    assert_eq!(code, Some(0), "{b}");
    let web = s.web();
    let br = driver.session(DESKTOP).await;
    br.goto(&web.url).await;
    br.wait_for("the index", "h1").await;

    // A task's Land.
    br.goto(&format!("{}/batches/wl/tasks/a", web.page)).await;
    br.wait_for("the Land button", "#land-task").await;
    let label = br
        .js("return document.getElementById('land-task').textContent")
        .await;
    assert_eq!(label, "Land into main");
    br.click("Land", "#land-task").await;
    let said = action_done(&br, "the land ends").await;
    assert!(
        said.contains("land (action") && said.contains("): done"),
        "{said}"
    );
    assert_eq!(s.git(&["show", "main:a.txt"]), "a");
    assert_eq!(
        std::fs::read_to_string(s.repo.path().join("a.txt")).unwrap(),
        "a\n"
    );

    // Discard, dismissed: nothing happens. Accepted: the worktree and branch go.
    br.goto(&format!("{}/batches/wl/tasks/b", web.page)).await;
    let ask = br
        .wait_js("the Discard button", "var d = document.getElementById('discard-task'); return d && d.getAttribute('data-confirm');")
        .await;
    assert_eq!(
        ask,
        "Discard wl/b? Its worktree and branch are removed, and with them 1 commit not landed (+1 −0 in 1 file)."
    );
    br.click("Discard", "#discard-task").await;
    br.client
        .dismiss_alert()
        .await
        .expect("the confirmation is asked");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(
        branch_exists(&s, "aicli/wl/b"),
        "dismissed: nothing discarded"
    );
    br.click("Discard", "#discard-task").await;
    br.client
        .accept_alert()
        .await
        .expect("the confirmation is asked");
    let said = action_done(&br, "the discard ends").await;
    assert!(
        said.contains("discard (action") && said.contains("): done"),
        "{said}"
    );
    assert!(!branch_exists(&s, "aicli/wl/b"));
    assert!(!s.repo.path().join(".aicli/worktrees/wl/b").exists());
    assert!(
        !s.repo.path().join("b.txt").exists(),
        "discarded work never reached main"
    );

    // The API: a discard without its confirmation is refused, saying what it loses.
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{}/api/batches/wl/tasks/c/discard", web.base))
        .bearer_auth(&web.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let why = r.text().await.unwrap();
    assert!(
        why.contains("discarding wl/c loses 1 commit not landed"),
        "{why}"
    );
    assert!(branch_exists(&s, "aicli/wl/c"));

    // The batch's Land: its succeeded tasks, in order.
    br.goto(&format!("{}/batches/wb", web.page)).await;
    br.click("Land the batch", "#land-batch").await;
    let said = action_done(&br, "the batch's land ends").await;
    assert!(said.contains("): done"), "{said}");
    assert_eq!(s.git(&["show", "main:d.txt"]), "d");
    assert_eq!(s.git(&["show", "main:e.txt"]), "e");
    assert_eq!(s.git(&["status", "--porcelain"]), "");
    br.close().await;
}
