//! The web view probed as a local attacker would (issue 35), each finding a test that
//! fails on the web view before its fix: a diff read stops at its cap, whatever the
//! change (F1); a symlink at any level of the runs directory is never followed (F4); a
//! lower-case `bearer` scheme is accepted; loopback names hold on the server's own port
//! only; `batch --web` on a non-loopback address names a flag it has; the read-only
//! pages have no answer form. The cookie's scope (F3) and `--open` (F2) need a browser:
//! `web_browser.rs`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::support::*;
use super::web::Web;

fn start(cfg: &Path, repo: &Path, runs: &Path, extra: &[&str]) -> Web {
    let mut cmd = aicli_with(cfg, &["web", "--json"]);
    cmd.arg("--repo")
        .arg(repo)
        .arg("--runs-dir")
        .arg(runs)
        .args(extra);
    Web::spawn(cmd)
}

/// `cmd` (an `aicli` command) on `repo` with the runs directory `runs`, to its end.
fn run_on(mut cmd: std::process::Command, repo: &Path, runs: &Path) -> std::process::Output {
    cmd.arg("--repo").arg(repo).arg("--runs-dir").arg(runs);
    cmd.output().unwrap()
}

/// `aicli batch` of `tasks` as batch `id` into `runs`, to its end (exit 0, or 3 when
/// `blocked`).
fn batch(cfg: &Path, repo: &Path, runs: &Path, id: &str, tasks: serde_json::Value, blocked: bool) {
    let file = cfg.with_file_name(format!("{id}.tasks.json"));
    std::fs::write(&file, tasks.to_string()).unwrap();
    let cmd = aicli_with(cfg, &["batch", file.to_str().unwrap(), "--batch-id", id]);
    let out = run_on(cmd, repo, runs);
    assert_eq!(
        out.status.code(),
        Some(if blocked { 3 } else { 0 }),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A field of `/proc/PID/status`, KiB.
fn proc_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} of {pid}"))
}

async fn status_of(r: reqwest::RequestBuilder) -> u16 {
    r.send().await.unwrap().status().as_u16()
}

/// F1: a 200 MB generated file and a 7.5 MB text change in a task's worktree, four diff
/// requests at once, twice: the web view's peak memory grows by at most 64 MiB (each
/// read stops at the 2 MiB cap), and each answer says it was cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f1_a_huge_change_costs_the_diff_at_most_its_cap() {
    let repo = git_repo();
    std::fs::write(repo.path().join("big.txt"), "small\n").unwrap();
    std::fs::write(repo.path().join("lines.txt"), "old\n").unwrap();
    git(repo.path(), &["add", "."]);
    git(
        repo.path(),
        &["commit", "-q", "-m", "files the agent changes"],
    );
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    // The stand-in CLI writes a file, so the worktree is kept as holding work.
    let cfg = fake_cli_config(
        dir.path(),
        &["--record-env", "AICLI_WEB_PROBE", "notes.env"],
    );
    let tasks = serde_json::json!([{"id": "t", "prompt": "generate"}]);
    batch(&cfg, repo.path(), &runs, "big", tasks, false);
    let rec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(runs.join("big/tasks/t/task.json")).unwrap())
            .unwrap();
    let wt = PathBuf::from(rec["worktree"].as_str().expect("a kept worktree"));
    // What a code generator might leave, committed on the task's branch: one 200 MB
    // line, and 10,000 lines of 750 bytes.
    std::fs::write(wt.join("big.txt"), vec![b'y'; 200_000_000]).unwrap();
    let line = format!("{}\n", "z".repeat(749));
    std::fs::write(wt.join("lines.txt"), line.repeat(10_000)).unwrap();
    git(&wt, &["commit", "-qam", "generated"]);

    let web = start(&cfg, repo.path(), &runs, &[]);
    let http = reqwest::Client::new();
    let url = format!("{}/api/batches/big/tasks/t/diff", web.base);
    let _ = web.get("/api/batches/big/tasks/t").await;
    let before = proc_kib(web.pid(), "VmHWM:");
    let mut answers = Vec::new();
    for _round in 0..2 {
        let reqs = (0..4).map(|_| {
            let r = http
                .get(&url)
                .bearer_auth(&web.token)
                .timeout(Duration::from_secs(120));
            async move {
                r.send()
                    .await
                    .unwrap()
                    .json::<serde_json::Value>()
                    .await
                    .unwrap()
            }
        });
        answers.extend(futures_util::future::join_all(reqs).await);
    }
    let grew_mib = (proc_kib(web.pid(), "VmHWM:") - before) / 1024;
    eprintln!(
        "aicli web: peak RSS {before} KiB before, +{grew_mib} MiB with 8 diffs of a 207 MB change"
    );
    assert!(grew_mib <= 64, "the peak grew by {grew_mib} MiB");
    for d in answers {
        let text = d["diff"].as_str().unwrap();
        assert!(text.len() <= 2 << 20, "{} bytes", text.len());
        // The generated file is binary to the diff; the text change is cut.
        assert!(
            text.contains("Binary files a/big.txt and b/big.txt differ")
                && text.contains("+++ b/lines.txt"),
            "{}",
            &text[..400.min(text.len())]
        );
        assert!(
            d["note"]
                .as_str()
                .is_some_and(|n| n.contains("cut at 2 MiB")),
            "{}",
            d["note"]
        );
    }
}

/// F4: a batch directory, a `tasks/` directory, a task directory and a record file that
/// are symlinks to another runs directory: the web view lists, shows, streams, offers
/// and answers none of it (the same requests on the real batch work).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f4_a_symlink_at_any_level_of_the_runs_directory_is_never_followed() {
    let repo = git_repo();
    let dir = tempfile::tempdir().unwrap();
    let (runs, other) = (dir.path().join("runs"), dir.path().join("other"));
    let cfg = fake_cli_config(dir.path(), &[]);
    let one = || serde_json::json!([{"id": "t", "prompt": "p"}]);
    batch(&cfg, repo.path(), &runs, "mine", one(), false);
    batch(&cfg, repo.path(), &other, "theirs", one(), false);
    let theirs = other.join("theirs");
    let link = |to: PathBuf, at: PathBuf| std::os::unix::fs::symlink(to, at).unwrap();
    // A batch of its own whose spec is theirs (renamed).
    let spec_copy = |b: &str| {
        std::fs::create_dir_all(runs.join(b).join("tasks")).unwrap();
        let mut spec: serde_json::Value =
            serde_json::from_slice(&std::fs::read(theirs.join("batch.json")).unwrap()).unwrap();
        spec["batch_id"] = b.into();
        std::fs::write(runs.join(b).join("batch.json"), spec.to_string()).unwrap();
    };
    link(theirs.clone(), runs.join("l-batch"));
    spec_copy("l-tasks");
    std::fs::remove_dir(runs.join("l-tasks/tasks")).unwrap();
    link(theirs.join("tasks"), runs.join("l-tasks/tasks"));
    spec_copy("l-task");
    link(theirs.join("tasks/t"), runs.join("l-task/tasks/t"));
    // A real task directory and task.json, its transcript a link.
    spec_copy("l-file");
    std::fs::create_dir_all(runs.join("l-file/tasks/t")).unwrap();
    std::fs::copy(
        theirs.join("tasks/t/task.json"),
        runs.join("l-file/tasks/t/task.json"),
    )
    .unwrap();
    link(
        theirs.join("tasks/t/events.ndjson"),
        runs.join("l-file/tasks/t/events.ndjson"),
    );

    let web = start(&cfg, repo.path(), &runs, &[]);
    let http = reqwest::Client::new();
    let get = |p: String| http.get(format!("{}{p}", web.base)).bearer_auth(&web.token);
    let mut listed: Vec<String> = web
        .get("/api/batches")
        .await
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["batch_id"].as_str().unwrap().to_owned())
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        ["l-file", "l-task", "l-tasks", "mine"],
        "a linked batch is listed"
    );
    assert_eq!(status_of(get("/api/batches/l-batch".into())).await, 404);
    for b in ["mine", "l-batch", "l-tasks", "l-task"] {
        let want = if b == "mine" { 200 } else { 404 };
        for p in [
            "",
            "/events",
            "/files",
            "/files/task.json",
            "/diff",
            "/row",
            "/mcp-calls",
        ] {
            let r = get(format!("/api/batches/{b}/tasks/t{p}"));
            let r = if p == "/events" {
                r.timeout(Duration::from_secs(5))
            } else {
                r
            };
            assert_eq!(status_of(r).await, want, "{b}/t{p}");
        }
        assert_eq!(
            status_of(get(format!("/batches/{b}/tasks/t"))).await,
            want,
            "the page of {b}/t"
        );
        let answer = http
            .post(format!("{}/api/batches/{b}/tasks/t/answer", web.base))
            .bearer_auth(&web.token)
            .json(&serde_json::json!({"text": "yes"}));
        // 409 on the real one: it is not blocked. Never read through a link.
        assert_eq!(
            status_of(answer).await,
            if b == "mine" { 409 } else { 404 },
            "answer {b}/t"
        );
    }
    // The linked transcript: neither offered, nor downloaded, nor streamed.
    let files = web.get("/api/batches/l-file/tasks/t/files").await;
    let names: Vec<&str> = files
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["task.json"], "{files}");
    assert_eq!(
        status_of(get("/api/batches/l-file/tasks/t/files/events.ndjson".into())).await,
        404
    );
    let mut sse = get("/api/batches/l-file/tasks/t/events".into())
        .send()
        .await
        .unwrap();
    let mut seen = String::new();
    let until = tokio::time::Instant::now() + Duration::from_secs(2);
    while let Ok(Ok(Some(c))) = tokio::time::timeout_at(until, sse.chunk()).await {
        seen.push_str(&String::from_utf8_lossy(&c));
    }
    assert!(
        !seen.contains("event: agent"),
        "the linked transcript was streamed: {seen}"
    );
    // The real batch's transcript streams (the check above can fail).
    let mine = web.transcript_until("mine", "t", |e| !e.is_empty()).await;
    assert!(!mine.is_empty());
    // The CLI reads the records the same way.
    let out = run_on(
        aicli_with(&cfg, &["answer", "l-batch/t", "yes"]),
        repo.path(),
        &runs,
    );
    assert!(!out.status.success(), "aicli answer through a linked batch");
}

/// A blocked task (the stand-in CLI asks aicli's `ask_user` and ends) in batch `ask`.
fn blocked_batch(dir: &Path, repo: &Path, runs: &Path) -> PathBuf {
    let asked = dir.join("asked.json");
    let question = r#"{"question": "Ship it on Friday?", "options": ["yes", "no"]}"#;
    let cfg = fake_cli_config(
        dir,
        &["--mcp-call", "ask_user", question, asked.to_str().unwrap()],
    );
    batch(
        &cfg,
        repo,
        runs,
        "ask",
        serde_json::json!([{"id": "q", "prompt": "ship"}]),
        true,
    );
    cfg
}

/// `--read-only`: the question is shown, with the command that answers it, and no form,
/// button or text box (nothing on the page can act).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_only_pages_show_the_question_without_a_form() {
    let repo = git_repo();
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let cfg = blocked_batch(dir.path(), repo.path(), &runs);
    let http = reqwest::Client::new();
    let page = |web: &Web, p: &str| {
        let r = http
            .get(format!("{}{p}", web.base))
            .bearer_auth(&web.token)
            .send();
        async move { r.await.unwrap().text().await.unwrap() }
    };
    let ro = start(&cfg, repo.path(), &runs, &["--read-only"]);
    for p in ["/", "/batches/ask/tasks/q"] {
        let html = page(&ro, p).await;
        assert!(html.contains("Ship it on Friday?"), "{p}: {html}");
        assert!(
            html.contains("aicli answer ask/q"),
            "{p}: the command that answers"
        );
        for tag in ["<form", "<textarea", "<button"] {
            assert!(!html.contains(tag), "{p} has {tag} read-only:\n{html}");
        }
    }
    drop(ro);
    // Not read-only: the form is there (so the check above can fail).
    let rw = start(&cfg, repo.path(), &runs, &[]);
    let html = page(&rw, "/").await;
    assert!(
        html.contains("<form") && html.contains(r#"data-answer="yes""#),
        "{html}"
    );
}

/// `Authorization: bearer …` (the scheme is case-insensitive), and loopback names only
/// on the server's own port: a Host or an Origin of another loopback port is another
/// server's page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lower_case_bearer_is_accepted_and_loopback_holds_on_its_own_port_only() {
    let repo = git_repo();
    let dir = tempfile::tempdir().unwrap();
    let cfg = fake_cli_config(dir.path(), &[]);
    let web = start(&cfg, repo.path(), &dir.path().join("runs"), &[]);
    let port: u16 = web.base.rsplit_once(':').unwrap().1.parse().unwrap();
    let other = if port == 65535 { port - 1 } else { port + 1 };
    let http = reqwest::Client::new();
    let api = || http.get(format!("{}/api/batches", web.base));
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let r = api().header("authorization", format!("{scheme} {}", web.token));
        assert_eq!(status_of(r).await, 200, "{scheme}");
    }
    assert_eq!(
        status_of(api().header("authorization", format!("Basic {}", web.token))).await,
        401
    );
    for (host, want) in [
        (format!("127.0.0.1:{port}"), 200),
        (format!("localhost:{port}"), 200),
        (format!("127.0.0.1:{other}"), 403),
        (format!("localhost:{other}"), 403),
        ("localhost".to_owned(), 403),
    ] {
        let r = api().bearer_auth(&web.token).header("host", &host);
        assert_eq!(status_of(r).await, want, "Host: {host}");
    }
    for (origin, want) in [
        (format!("http://127.0.0.1:{port}"), 200),
        (format!("http://127.0.0.1:{other}"), 403),
        (format!("http://localhost:{other}"), 403),
    ] {
        let r = api().bearer_auth(&web.token).header("origin", &origin);
        assert_eq!(status_of(r).await, want, "Origin: {origin}");
    }
}

/// `aicli batch --web ADDR` with a non-loopback ADDR: refused before anything runs, with
/// what to do instead (a flag of `aicli web`, which `batch` does not have).
#[test]
fn batch_web_on_a_non_loopback_address_says_what_serves_it() {
    let repo = git_repo();
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let cfg = fake_cli_config(dir.path(), &[]);
    let file = dir.path().join("tasks.json");
    std::fs::write(&file, r#"[{"id": "a", "prompt": "a"}]"#).unwrap();
    let web = ["batch", file.to_str().unwrap(), "--web", "0.0.0.0:0"];
    let out = run_on(aicli_with(&cfg, &web), repo.path(), &runs);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("serves loopback only")
            && err.contains("aicli web --bind 0.0.0.0:0 --allow-remote"),
        "{err}"
    );
    assert!(!runs.exists(), "nothing ran");
}

/// Issue 37, item 8: a running web view hands out fresh one-time login links
/// (`aicli web --link`: each logs one browser in, once), so a second device needs no
/// restart; the normal output says where the API token is, a 0600 file that goes when
/// the server stops.
#[tokio::test]
async fn web_link_prints_fresh_one_time_links_and_the_token_file_is_named() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("runtime");
    std::fs::create_dir(&runtime).unwrap();
    let cfg = fake_cli_config(dir.path(), &[]);
    let repo = git_repo();
    let runs = dir.path().join("runs");
    std::fs::create_dir(&runs).unwrap();
    let aicli = |args: &[&str]| {
        let mut c = aicli_with(&cfg, args);
        c.arg("--repo")
            .arg(repo.path())
            .arg("--runs-dir")
            .arg(&runs)
            .env("XDG_RUNTIME_DIR", &runtime)
            .stdin(std::process::Stdio::null());
        c
    };
    let mut server = aicli(&["web"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let first = first.trim().to_owned();
    let mut err = std::io::BufReader::new(server.stderr.take().unwrap());
    let mut said = String::new();
    while !said.contains("0600") {
        assert!(err.read_line(&mut said).unwrap() > 0, "{said}");
    }
    let file = said
        .split_once("\"api_token\" in ")
        .and_then(|(_, r)| r.split_once(", 0600"))
        .map(|(p, _)| PathBuf::from(p))
        .unwrap_or_else(|| panic!("no token file named: {said}"));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let f: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let base = format!("http://{}", f["addr"].as_str().unwrap());
    let api = reqwest::Client::new()
        .get(format!("{base}/api/batches"))
        .bearer_auth(f["api_token"].as_str().unwrap());
    assert_eq!(status_of(api).await, 200);
    // The page's own host name resolves to the server, as a browser resolves *.localhost.
    let own = first
        .strip_prefix("http://")
        .and_then(|r| r.split_once(':'))
        .map(|(h, _)| h.to_owned())
        .unwrap();
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .resolve(&own, f["addr"].as_str().unwrap().parse().unwrap())
        .build()
        .unwrap();
    let log_in = |url: String| {
        let browser = browser.clone();
        async move {
            let r = browser.get(url).send().await.unwrap();
            (r.status().as_u16(), r.headers().contains_key("set-cookie"))
        }
    };
    let links: Vec<String> = (0..2)
        .map(|_| {
            let out = aicli(&["web", "--link"]).output().unwrap();
            assert!(out.status.success(), "{out:?}");
            String::from_utf8(out.stdout).unwrap().trim().to_owned()
        })
        .collect();
    assert_ne!(links[0], links[1]);
    for link in &links {
        assert!(link.starts_with(&format!("http://{own}:")), "{link}");
        let (status, cookie) = log_in(link.clone()).await;
        assert!((300..400).contains(&status) && cookie, "{link}: {status}");
        assert_eq!(log_in(link.clone()).await.0, 401, "a link works once");
    }
    // The first link still works, once, as before.
    let (status, cookie) = log_in(first.clone()).await;
    assert!((300..400).contains(&status) && cookie, "{status}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    server.wait().unwrap();
    assert!(!file.exists(), "the token file outlived the server");
    let out = aicli(&["web", "--link"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no web view is running for"),
        "{out:?}"
    );
}
