//! `aicli web` over real HTTP on loopback, next to a batch that another `aicli batch`
//! process runs: the one-time login, the cookie, the bearer token, the Host check, the
//! security headers, the live transcript over SSE with `Last-Event-ID`, and a cancel
//! that needs its CSRF token.

use std::io::BufRead;
use std::path::Path;
use std::time::Duration;

use super::support::*;

/// A running `aicli web --json`: its login URL, address and API token.
pub(crate) struct Web {
    child: std::process::Child,
    pub(crate) url: String,
    pub(crate) base: String,
    pub(crate) token: String,
}

impl Drop for Web {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Web {
    /// Starts `cmd` (an `aicli web --json` command) and reads its first line.
    pub(crate) fn spawn(mut cmd: std::process::Command) -> Web {
        let mut child = cmd
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
        let port = base.rsplit_once(':').unwrap().1;
        // The page's own host name (the session cookie's), on the server's port.
        let own = url
            .strip_prefix("http://aicli-")
            .unwrap_or_else(|| panic!("{url}"));
        assert!(
            own.split_once(".localhost:")
                .is_some_and(|(name, rest)| name.len() == 16
                    && rest.starts_with(&format!("{port}/login?token="))),
            "{url}"
        );
        Web {
            child,
            url,
            base,
            token: v["api_token"].as_str().unwrap().to_owned(),
        }
    }

    /// The server's pid.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `GET PATH` with the API token: its JSON.
    pub(crate) async fn get(&self, path: &str) -> serde_json::Value {
        let r = reqwest::Client::new()
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
        r.json().await.unwrap()
    }

    /// Task `task` of `batch`'s transcript from its start until `done` holds for it.
    pub(crate) async fn transcript_until(
        &self,
        batch: &str,
        task: &str,
        done: impl Fn(&[(String, serde_json::Value)]) -> bool,
    ) -> Vec<(String, serde_json::Value)> {
        let r = reqwest::Client::new()
            .get(format!(
                "{}/api/batches/{batch}/tasks/{task}/events",
                self.base
            ))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap();
        read_events_until(r, done).await
    }
}

fn start_web(cfg: &Path, repo: &Path, runs: &Path) -> Web {
    let mut cmd = aicli_with(cfg, &["web", "--json"]);
    cmd.arg("--repo").arg(repo).arg("--runs-dir").arg(runs);
    Web::spawn(cmd)
}

/// The stream's events (id, data) from its start until `done` holds for them.
async fn read_events_until(
    resp: reqwest::Response,
    done: impl Fn(&[(String, serde_json::Value)]) -> bool,
) -> Vec<(String, serde_json::Value)> {
    let mut resp = resp;
    let mut buf = String::new();
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !done(&out) {
        let chunk = tokio::time::timeout_at(deadline, resp.chunk())
            .await
            .unwrap_or_else(|_| panic!("the stream in time; so far {out:?}"))
            .unwrap()
            .expect("the stream stays open");
        buf.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(i) = buf.find("\n\n") {
            let frame: String = buf.drain(..i + 2).collect();
            out.extend(sse_frame(&frame));
        }
    }
    out
}

/// The id and data of one SSE frame, when it has both.
fn sse_frame(frame: &str) -> Option<(String, serde_json::Value)> {
    let (mut id, mut data) = (None, None);
    for l in frame.lines() {
        if let Some(v) = l.strip_prefix("id: ").or_else(|| l.strip_prefix("id:")) {
            id = Some(v.to_owned());
        }
        if let Some(v) = l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")) {
            data = Some(serde_json::from_str(v).unwrap());
        }
    }
    Some((id?, data?))
}

/// The stream's first `want` events (id, data).
async fn read_events(resp: reqwest::Response, want: usize) -> Vec<(String, serde_json::Value)> {
    let mut out = read_events_until(resp, |evs| evs.len() >= want).await;
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
    let http = crate::support::browser::http_for(&web.url);

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
    // What the page polls: a small row a task, in the page's own words.
    let rows = web.get(&format!("/api/batches/{id}/rows")).await;
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 3, "{rows:?}");
    for r in rows {
        let runner = r["runner"].as_str().unwrap();
        assert!(runner == "local", "{r}");
        assert!(
            batch_page.contains(&format!(r#"<td class="runner">{runner}</td>"#)),
            "{batch_page}"
        );
        assert!(
            r["status"]
                .as_str()
                .unwrap()
                .ends_with(r["state"].as_str().unwrap()),
            "{r}"
        );
    }
    let slow = web.get(&format!("/api/batches/{id}/tasks/slow/row")).await;
    assert_eq!(slow["id"], "slow");

    // The API with the bearer token.
    let list: serde_json::Value = web.get("/api/batches").await;
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
    assert!(
        task_page.contains(r#"id="state" data-state="succeeded""#),
        "{task_page}"
    );
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
    let http = crate::support::browser::http_for(&url);
    let r = http.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 303);
    let cookie = r.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let base = crate::support::browser::loopback_base(&url);
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

/// `--tls-cert/--tls-key` serve HTTPS (plain HTTP gets nothing); a non-loopback bind
/// without `--allow-remote` is refused before anything listens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_view_serves_https_and_stays_on_loopback_unless_told() {
    let repo = git_repo();
    let dir = tempfile::tempdir().unwrap();
    let cfg = fake_cli_config(dir.path(), &[]);
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "1",
        ])
        .args([
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl runs");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let mut child = KilledOnDrop(
        aicli_with(&cfg, &["web", "--json", "--tls-cert"])
            .arg(&cert)
            .arg("--tls-key")
            .arg(&key)
            .arg("--repo")
            .arg(repo.path())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    std::io::BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    let url = v["url"].as_str().unwrap().to_owned();
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let https = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .add_root_certificate(
            reqwest::Certificate::from_pem(&std::fs::read(&cert).unwrap()).unwrap(),
        )
        .build()
        .unwrap();
    let r = https.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 303, "the login over HTTPS");
    let plain = reqwest::Client::new()
        .get(url.replace("https://", "http://"))
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    assert!(
        plain.is_err() || !plain.unwrap().status().is_success(),
        "plain HTTP gets nothing"
    );
    drop(child);

    let out = aicli_with(&cfg, &["web", "--bind", "0.0.0.0:0"])
        .arg("--repo")
        .arg(repo.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs --allow-remote"));
}

/// A child process killed (and reaped) when the test ends, passed or panicked.
struct KilledOnDrop(std::process::Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `GET /api/actions/ID` until the action has ended.
async fn action_end(web: &Web, id: u64) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    loop {
        let v: serde_json::Value = web.get(&format!("/api/actions/{id}")).await;
        if v["state"] != "running" {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "action {id} still runs: {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_view_starts_a_task_refuses_bad_input_and_serves_its_diff_and_files() {
    let repo = git_repo();
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    // The stand-in CLI writes a file in its worktree: the diff must show it.
    let cfg = fake_cli_config(
        dir.path(),
        &["--record-env", "AICLI_WEB_PROBE", "notes.env"],
    );
    let web = start_web(&cfg, repo.path(), &runs);
    let http = reqwest::Client::new();
    let post = |path: &str, body: serde_json::Value| {
        http.post(format!("{}{path}", web.base))
            .bearer_auth(&web.token)
            .json(&body)
            .send()
    };
    let refused = |r: reqwest::Response, status: u16, says: &'static str| async move {
        assert_eq!(r.status(), status, "wanted {status} ({says})");
        let text = r.text().await.unwrap();
        assert!(text.contains(says), "the refusal says why: {text}");
    };

    // Bad input: each refused with a reason, nothing started.
    refused(
        post("/api/tasks", serde_json::json!({"prompt": "  "}))
            .await
            .unwrap(),
        400,
        "prompt is empty",
    )
    .await;
    refused(
        post(
            "/api/tasks",
            serde_json::json!({"prompt": "x", "provider": "nope"}),
        )
        .await
        .unwrap(),
        400,
        "nope",
    )
    .await;
    let r = post("/api/tasks", serde_json::json!({"prompt": "x", "bogus": 1}))
        .await
        .unwrap();
    assert!(
        r.status().is_client_error(),
        "an unknown field: {}",
        r.status()
    );
    let r = http
        .post(format!("{}/api/batches", web.base))
        .bearer_auth(&web.token)
        .body(r#"{"tasks": []}"#)
        .send()
        .await
        .unwrap();
    refused(r, 400, "no tasks").await;
    let r = http
        .post(format!("{}/api/batches", web.base))
        .bearer_auth(&web.token)
        .body(r#"{"tasks": [{"id": "a", "prompt": "p"}], "repo": "/"}"#)
        .send()
        .await
        .unwrap();
    refused(r, 400, "at repo").await;
    assert!(
        !runs.exists() || std::fs::read_dir(&runs).unwrap().next().is_none(),
        "nothing was started"
    );

    // A task from the API, as the page's form sends it.
    let r = post(
        "/api/tasks",
        serde_json::json!({"prompt": "write notes", "id": "notes"}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 202);
    let started: serde_json::Value = r.json().await.unwrap();
    let b = started["action"]["batch_id"].as_str().unwrap().to_owned();
    assert_eq!(started["batch_url"], format!("/batches/{b}"));
    let end = action_end(&web, started["action"]["id"].as_u64().unwrap()).await;
    assert_eq!(end["state"], "succeeded", "{end}");
    assert_eq!(end["exit_code"], 0);
    let batch: serde_json::Value = web.get(&format!("/api/batches/{b}")).await;
    assert_eq!(batch["tasks"][0]["state"], "succeeded", "{batch}");
    assert_eq!(batch["tasks"][0]["task"]["id"], "notes");
    assert!(
        batch["last_lines"]["notes"]
            .as_str()
            .is_some_and(|l| !l.is_empty()),
        "the row's last line: {batch}"
    );
    assert!(
        !std::fs::read_dir(&runs)
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(".web-")),
        "the tasks file the page wrote is gone"
    );

    // The answer API: an empty answer and a task that asks nothing are refused.
    let answer = format!("/api/batches/{b}/tasks/notes/answer");
    refused(
        post(&answer, serde_json::json!({"text": " "}))
            .await
            .unwrap(),
        400,
        "empty",
    )
    .await;
    refused(
        post(&answer, serde_json::json!({"text": "yes"}))
            .await
            .unwrap(),
        409,
        "not blocked",
    )
    .await;

    // The diff shows the file the CLI wrote in its worktree.
    let get = |path: String| {
        http.get(format!("{}{path}", web.base))
            .bearer_auth(&web.token)
            .send()
    };
    let diff: serde_json::Value = get(format!("/api/batches/{b}/tasks/notes/diff"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let text = diff["diff"].as_str().unwrap();
    assert!(
        text.contains("+++ b/notes.env") && text.contains("+AICLI_WEB_PROBE unset"),
        "{diff}"
    );
    let page = http
        .get(format!("{}/batches/{b}/tasks/notes", web.base))
        .bearer_auth(&web.token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains(r#"<span class="file">notes.env</span>"#),
        "{page}"
    );

    // The record's files: listed, downloadable byte for byte; nothing private.
    let files: Vec<serde_json::Value> = get(format!("/api/batches/{b}/tasks/notes/files"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let names: Vec<&str> = files.iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert!(
        names.contains(&"events.ndjson") && names.contains(&"task.json"),
        "{names:?}"
    );
    assert!(
        !names
            .iter()
            .any(|n| *n == "private" || *n == "lock" || n.starts_with("pid")),
        "{names:?}"
    );
    let r = get(format!("/batches/{b}/tasks/notes/files/events.ndjson"))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("attachment"),
        "a download, never rendered"
    );
    let on_disk = std::fs::read(runs.join(&b).join("tasks/notes/events.ndjson")).unwrap();
    assert_eq!(r.bytes().await.unwrap().as_ref(), on_disk.as_slice());
    assert_eq!(
        get(format!("/batches/{b}/tasks/notes/files/lock"))
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(
        get(format!("/batches/{b}/tasks/notes/files/..%2Fbatch.json"))
            .await
            .unwrap()
            .status(),
        400
    );
    let actions: Vec<serde_json::Value> = get("/api/actions".to_owned())
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(actions.len(), 1, "{actions:?}");
    drop(web);

    // --read-only: the same requests are refused.
    let mut child = aicli_with(&cfg, &["web", "--json", "--read-only"])
        .arg("--repo")
        .arg(repo.path())
        .arg("--runs-dir")
        .arg(&runs)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let ro = Web {
        child,
        url: String::new(),
        base: format!(
            "http://{}",
            serde_json::from_str::<serde_json::Value>(&line).unwrap()["addr"]
                .as_str()
                .unwrap()
        ),
        token: serde_json::from_str::<serde_json::Value>(&line).unwrap()["api_token"]
            .as_str()
            .unwrap()
            .to_owned(),
    };
    let r = http
        .post(format!("{}/api/tasks", ro.base))
        .bearer_auth(&ro.token)
        .json(&serde_json::json!({"prompt": "x"}))
        .send()
        .await
        .unwrap();
    refused(r, 403, "read-only").await;
    let r = http
        .post(format!("{}/api/batches/{b}/resume", ro.base))
        .bearer_auth(&ro.token)
        .send()
        .await
        .unwrap();
    refused(r, 403, "read-only").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_answered_through_the_api_resumes_the_real_cli_s_session() {
    use super::cli::{Cli, assert_code, only_batch};
    let cli = Cli::new();
    let out = cli.run(&[
        "run",
        "Paint the shed",
        "--provider",
        "gemini",
        "--fake-api=ask:Which colour?|red|blue",
    ]);
    assert_code(&out, 3, "a blocked gemini run");
    let b = only_batch(cli.repo.path());
    let web = Web::spawn(cli.command(&["web", "--json"]));
    let http = reqwest::Client::new();
    let blocked = web.get("/api/blocked").await;
    let blocked = blocked.as_array().unwrap();
    assert_eq!(blocked.len(), 1, "{blocked:?}");
    assert_eq!(blocked[0]["question"]["question"], "Which colour?");
    assert_eq!(
        blocked[0]["question"]["options"],
        serde_json::json!(["red", "blue"])
    );
    let t = blocked[0]["task_id"].as_str().unwrap().to_owned();
    let answer = format!("{}/api/batches/{b}/tasks/{t}/answer", web.base);
    let r = http
        .post(&answer)
        .bearer_auth(&web.token)
        .json(&serde_json::json!({"text": "red"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let started: serde_json::Value = r.json().await.unwrap();
    let again = http
        .post(&answer)
        .bearer_auth(&web.token)
        .json(&serde_json::json!({"text": "blue"}))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 409, "one answer at a time");
    let end = action_end(&web, started["action"]["id"].as_u64().unwrap()).await;
    assert_eq!(end["state"], "succeeded", "{end}");
    let task: serde_json::Value = web.get(&format!("/api/batches/{b}/tasks/{t}")).await;
    assert_eq!(task["state"], "succeeded", "{task}");
    assert_eq!(task["answers"][0]["answer"], "red");
    assert_eq!(task["answers"][0]["question"], "Which colour?");
    let attempts = task["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "the answer continued the task: {task}");
    let first = attempts[0]["result"]["session_id"].as_str().unwrap();
    assert_eq!(
        attempts[1]["result"]["session_id"].as_str(),
        Some(first),
        "the same CLI session"
    );

    // The transcript: the question (from aicli's MCP server), then the answer, then the
    // answer's run, whose final event ends it; a reconnect after either of the two
    // loses nothing and repeats nothing.
    let events = format!("{}/api/batches/{b}/tasks/{t}/events", web.base);
    let open = |after: Option<String>| {
        let mut r = http.get(&events).bearer_auth(&web.token);
        if let Some(id) = after {
            r = r.header("last-event-id", id);
        }
        r.send()
    };
    let finals = |evs: &[(String, serde_json::Value)]| {
        evs.iter().filter(|(_, v)| v["type"] == "final").count()
    };
    let all = read_events_until(open(None).await.unwrap(), |evs| finals(evs) == 2).await;
    let at = |pred: &dyn Fn(&serde_json::Value) -> bool| {
        all.iter()
            .position(|(_, v)| pred(v))
            .unwrap_or_else(|| panic!("not in the transcript: {all:?}"))
    };
    let question = at(&|v| {
        v["type"] == "question" && v["question"] == "Which colour?" && v.get("raw").is_none()
    });
    let answer = at(&|v| v["answer"] == "red" && v["question"] == "Which colour?");
    let first_final = at(&|v| v["type"] == "final");
    assert!(
        first_final < question && question < answer && answer < all.len() - 1,
        "the question after the first run's events, the answer before the second's: {all:?}"
    );
    assert_eq!(all.last().unwrap().1["type"], "final", "{all:?}");
    for i in [question, answer] {
        let rest = read_events(
            open(Some(all[i].0.clone())).await.unwrap(),
            all.len() - i - 1,
        )
        .await;
        assert_eq!(rest, all[i + 1..], "resumed after event {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_web_view_stops_the_runs_it_started_and_leaves_no_process() {
    let repo = git_repo();
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let pids = dir.path().join("pids");
    let pid_arg = pids.to_str().unwrap();
    let cfg = fake_cli_config(
        dir.path(),
        &[
            "--spawn-grandchildren",
            "2",
            "--pid-file",
            pid_arg,
            "--line-delay-ms",
            "3000",
        ],
    );
    let mut web = start_web(&cfg, repo.path(), &runs);
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{}/api/tasks", web.base))
        .bearer_auth(&web.token)
        .json(&serde_json::json!({"prompt": "take your time", "id": "slow"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let started: serde_json::Value = r.json().await.unwrap();
    let b = started["action"]["batch_id"].as_str().unwrap().to_owned();
    // The CLI and its grandchildren run.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while std::fs::read_to_string(&pids).map_or(true, |t| t.lines().count() < 3) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the CLI did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // SIGTERM to `aicli web`, as a service manager stops it.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(web.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = web.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "aicli web did not stop"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    assert_all_gone(&pids, Duration::from_secs(10)).await;
    // The run stopped as on Ctrl-C: its record is whole and says so; it can be resumed.
    let rec: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(runs.join(&b).join("tasks/slow/task.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(rec["state"], "interrupted", "{rec}");
    let last = rec["attempts"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["result"]["error_kind"], "cancelled", "{rec}");
}

/// A real ACP agent (claude-agent-acp) under permission mode `default` asks permission
/// to run a command: the task is listed blocked with the agent's options, the option
/// answered through the API lets the same session run it (the file is in the task's
/// diff), and the transcript holds the request and the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_permission_request_answered_through_the_api_runs_the_command() {
    use super::cli::{Cli, assert_code, only_batch};
    let cli = Cli::new();
    let tasks = cli.file(
        "perm.tasks.json",
        r#"{"tasks": [{"id": "p", "prompt": "Write f.txt", "provider": "claude-acp", "permission_mode": "default"}]}"#,
    );
    let out = cli.run(&[
        "batch",
        tasks.to_str().unwrap(),
        "--fake-api=shell:echo allowed > f.txt",
    ]);
    assert_code(&out, 3, "a task blocked on a permission request");
    let b = only_batch(cli.repo.path());
    let web = Web::spawn(cli.command(&["web", "--json"]));
    let blocked = web.get("/api/blocked").await;
    let q = &blocked[0]["question"];
    let question = q["question"].as_str().unwrap().to_owned();
    assert!(
        question.contains("asks permission to run: echo allowed > f.txt"),
        "{blocked}"
    );
    assert_eq!(q["options"][0], "Yes", "{q}");
    // claude-agent-acp's options: "Yes", "Yes, and allow …", "No"; the first allows once.
    let allow = q["options"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o.as_str())
        .next()
        .unwrap_or_else(|| panic!("no option in {q}"))
        .to_owned();
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{}/api/batches/{b}/tasks/p/answer", web.base))
        .bearer_auth(&web.token)
        .json(&serde_json::json!({"text": allow}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let started: serde_json::Value = r.json().await.unwrap();
    let end = action_end(&web, started["action"]["id"].as_u64().unwrap()).await;
    assert_eq!(end["state"], "succeeded", "{end}");
    let row = web.get(&format!("/api/batches/{b}/tasks/p/row")).await;
    assert_eq!(row["state"], "succeeded", "{row}");
    let diff = web.get(&format!("/api/batches/{b}/tasks/p/diff")).await;
    assert!(
        diff["diff"].as_str().unwrap().contains("+allowed"),
        "the allowed command ran in the worktree: {diff}"
    );
    let finals = |evs: &[(String, serde_json::Value)]| {
        evs.iter().filter(|(_, v)| v["type"] == "final").count()
    };
    let events = web.transcript_until(&b, "p", |e| finals(e) == 2).await;
    let asked = events
        .iter()
        .position(|(_, v)| v["type"] == "question" && v["question"] == question.as_str());
    let answered = events
        .iter()
        .position(|(_, v)| v["answer"] == allow.as_str());
    assert!(
        asked.is_some() && answered > asked,
        "the request, then the answer: {events:?}"
    );
}
