//! `aicli web` over real HTTP on loopback, next to a batch that another `aicli batch`
//! process runs: the one-time login, the cookie, the bearer token, the Host check, the
//! security headers, the live transcript over SSE with `Last-Event-ID`, and a cancel
//! that needs its CSRF token.

use std::io::BufRead;
use std::path::Path;
use std::time::Duration;

use super::support::*;

struct Web {
    child: std::process::Child,
    url: String,
    base: String,
    token: String,
}

impl Drop for Web {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_web(cfg: &Path, repo: &Path, runs: &Path) -> Web {
    let mut child = aicli_with(cfg, &["web", "--json"])
        .arg("--repo")
        .arg(repo)
        .arg("--runs-dir")
        .arg(runs)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("aicli web starts");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON first line");
    let url = v["url"].as_str().unwrap().to_owned();
    let base = format!("http://{}", v["addr"].as_str().unwrap());
    assert!(url.starts_with(&format!("{base}/login?token=")), "{url}");
    Web {
        child,
        url,
        base,
        token: v["api_token"].as_str().unwrap().to_owned(),
    }
}

/// The SSE events (id, data) of `body` as they come, until `want` are read.
async fn read_events(resp: reqwest::Response, want: usize) -> Vec<(String, serde_json::Value)> {
    let mut resp = resp;
    let mut buf = String::new();
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while out.len() < want {
        let chunk = tokio::time::timeout_at(deadline, resp.chunk())
            .await
            .expect("events in time")
            .unwrap()
            .expect("the stream stays open");
        buf.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(i) = buf.find("\n\n") {
            let frame: String = buf.drain(..i + 2).collect();
            let mut id = None;
            let mut data = None;
            for l in frame.lines() {
                if let Some(v) = l.strip_prefix("id: ").or_else(|| l.strip_prefix("id:")) {
                    id = Some(v.to_owned());
                }
                if let Some(v) = l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")) {
                    data = Some(serde_json::from_str(v).unwrap());
                }
            }
            if let (Some(id), Some(data)) = (id, data) {
                out.push((id, data));
            }
        }
    }
    out.truncate(want);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_view_serves_another_process_s_batch_live_and_safely() {
    let repo = git_repo();
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let cfg = fake_cli_config(dir.path(), &["--line-delay-ms", "400"]);
    // A transcript whose text is markup: the pages must show it as text.
    let evil = r#"<script>alert(1)</script><img src=x onerror=alert(2)>"#;
    let fx = fixture("claude", "text");
    let xss = dir.path().join("xss.ndjson");
    let text = std::fs::read_to_string(fx.with_extension("ndjson"))
        .unwrap()
        .replace(
            "Hello from the fake Anthropic API.",
            &evil.replace('"', "\\\""),
        );
    std::fs::write(&xss, text).unwrap();
    let tasks = serde_json::json!({"tasks": [
        {"id": "a", "prompt": "a"},
        {"id": "xss", "prompt": "x", "extra_args": ["--replay", xss]},
        {"id": "slow", "prompt": "s", "extra_args": ["--line-delay-ms", "5000"]}
    ]});
    let mut batch = spawn_batch(
        &cfg,
        &tasks,
        &[
            "--repo",
            repo.path().to_str().unwrap(),
            "--runs-dir",
            runs.to_str().unwrap(),
        ],
    );
    let b = wait_for_batch(
        &runs,
        Duration::from_secs(60),
        Duration::from_millis(50),
        "a starts",
        |b| task_printed(b, "a"),
    );
    let id = batch_id(&b);
    let web = start_web(&cfg, repo.path(), &runs);
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();

    // Nothing without a credential; a wrong Host is refused before that.
    let r = http.get(format!("{}/", web.base)).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(
        r.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("script-src 'self'")
    );
    let r = http
        .get(format!("{}/api/batches", web.base))
        .header("host", "evil.example:80")
        .bearer_auth(&web.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "a rebinding Host");
    assert!(r.headers().get("access-control-allow-origin").is_none());

    // The one-time URL: a cookie, once.
    let r = http.get(&web.url).send().await.unwrap();
    assert_eq!(r.status(), 303);
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let cookie = cookie.split(';').next().unwrap().to_owned();
    assert_eq!(
        http.get(&web.url).send().await.unwrap().status(),
        401,
        "the login link is spent"
    );
    let page = http
        .get(format!("{}/", web.base))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains(&id), "the page lists the running batch");
    assert!(
        html.contains(r#"<script src="/static/app.js" defer></script>"#)
            && html.matches("<script").count() == 1,
        "one script, the server's own file: no inline script"
    );
    let js = http
        .get(format!("{}/static/app.js", web.base))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert!(
        js.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
    let js = js.text().await.unwrap();
    assert!(
        js.contains("textContent") && !js.contains("innerHTML"),
        "agent text goes in as text"
    );
    let get_page = |path: String| {
        let http = http.clone();
        let cookie = cookie.clone();
        let base = web.base.clone();
        async move {
            let r = http
                .get(format!("{base}{path}"))
                .header("cookie", cookie)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{path}");
            r.text().await.unwrap()
        }
    };
    let batch_page = get_page(format!("/batches/{id}")).await;
    assert!(
        batch_page.contains(&format!("/batches/{id}/tasks/slow")),
        "{batch_page}"
    );

    // The API with the bearer token.
    let list: serde_json::Value = http
        .get(format!("{}/api/batches", web.base))
        .bearer_auth(&web.token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list[0]["batch_id"], id.as_str());
    let bad = http
        .get(format!("{}/api/batches/..%2F..%2Fetc/tasks/a", web.base))
        .bearer_auth(&web.token)
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400, "an id that is a path");

    // The live transcript of `a`: three events, a reconnect with Last-Event-ID, the rest.
    let events = format!("{}/api/batches/{id}/tasks/a/events", web.base);
    let first = read_events(
        http.get(&events)
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap(),
        3,
    )
    .await;
    let want = {
        // Every event of the finished task, as `aicli parse --events` gives them.
        wait_for_batch(
            &runs,
            Duration::from_secs(60),
            Duration::from_millis(50),
            "a ends",
            |b| task_state(b, "a").as_deref() == Some("succeeded"),
        );
        let out = succeeds(aicli_with(&cfg, &["parse", "--events"]).arg(b.join("tasks").join("a")));
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .collect::<Vec<_>>()
    };
    assert!(want.len() > 3, "{want:?}");
    wait_for_batch(
        &runs,
        Duration::from_secs(60),
        Duration::from_millis(50),
        "xss ends",
        |b| task_state(b, "xss").as_deref() == Some("succeeded"),
    );
    let xss_page = get_page(format!("/batches/{id}/tasks/xss")).await;
    assert!(
        xss_page.contains("&lt;script&gt;alert(1)&lt;/script&gt;&lt;img"),
        "{xss_page}"
    );
    assert!(!xss_page.contains("<img") && !xss_page.contains("<script>alert"));
    let task_page = get_page(format!("/batches/{id}/tasks/a")).await;
    assert!(task_page.contains("✔ succeeded"), "{task_page}");
    assert!(
        task_page.contains("Hello from the fake Anthropic API."),
        "the response"
    );
    assert!(task_page.contains(&format!(r#"data-src="/api/batches/{id}/tasks/a/events""#)));
    let rest = read_events(
        http.get(&events)
            .header("cookie", &cookie)
            .header("last-event-id", &first[2].0)
            .send()
            .await
            .unwrap(),
        want.len() - 3,
    )
    .await;
    let got: Vec<serde_json::Value> = first.iter().chain(&rest).map(|(_, v)| v.clone()).collect();
    assert_eq!(got, want, "a reconnect loses nothing and repeats nothing");

    // A cancel needs the CSRF token with the cookie.
    let cancel = format!("{}/api/batches/{id}/tasks/slow/cancel", web.base);
    let r = http
        .post(&cancel)
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "a forged POST");
    let csrf: serde_json::Value = http
        .get(format!("{}/api/session", web.base))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let r = http
        .post(&cancel)
        .header("cookie", &cookie)
        .header("x-csrf-token", csrf["csrf"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "{}", r.text().await.unwrap());
    let status = batch.wait().unwrap();
    assert!(!status.success());
    let rec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(b.join("tasks/slow/task.json")).unwrap()).unwrap();
    assert_eq!(rec["state"], "failed", "{rec}");
    let control = std::fs::read_to_string(b.join("control.ndjson")).unwrap();
    assert!(control.contains("\"by\":\"web\""), "{control}");
}

/// `aicli batch --web`: the same view from inside the running batch, its URL on stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_serves_its_own_web_view_while_it_runs() {
    let repo = git_repo();
    let dir = tempfile::tempdir().unwrap();
    let cfg = fake_cli_config(dir.path(), &["--line-delay-ms", "300"]);
    let tasks_file = dir.path().join("tasks.json");
    std::fs::write(&tasks_file, r#"[{"id": "a", "prompt": "a"}]"#).unwrap();
    let mut child = aicli_with(
        &cfg,
        &["batch", tasks_file.to_str().unwrap(), "--web", "--json"],
    )
    .arg("--repo")
    .arg(repo.path())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let url = loop {
        let mut line = String::new();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "stderr ended without a URL"
        );
        if let Some(u) = line.trim().strip_prefix("http://") {
            break format!("http://{u}");
        }
    };
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = http.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 303);
    let cookie = r.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let base = url.split("/login").next().unwrap().to_owned();
    let list: serde_json::Value = http
        .get(format!("{base}/api/batches"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list[0]["batch_id"], result["batch_id"], "{list}");
    assert!(
        http.get(format!("{base}/api/batches"))
            .send()
            .await
            .is_err(),
        "the view stops with the batch"
    );
}
