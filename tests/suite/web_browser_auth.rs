//! How a browser logs in to the web view, in headless Chromium (issue 35, F2 and F3):
//! the session cookie belongs to the page's own origin, so other servers on this
//! machine's loopback that the same browser visits get nothing of it; and `aicli web
//! --open` hands the browser a private page that posts the one-time token, which no
//! process's arguments ever hold. Skips (loudly) without Chromium unless
//! `AICLI_REQUIRE_BROWSER` is set, as `web_browser.rs` does.

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::support::*;
use crate::support::browser::{DESKTOP, Driver, POLL, Stopped, Web, http_for, until};

/// Another HTTP server on loopback (a dev server, one an agent started): it answers
/// every request with a page and keeps each request's head.
struct Spy {
    port: u16,
    heads: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Spy {
    async fn start() -> Spy {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let kept = heads.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let kept = kept.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 65536 {
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    kept.lock()
                        .unwrap()
                        .push(String::from_utf8_lossy(&buf).into_owned());
                    let body = "<!doctype html><title>spy</title><h1>another server</h1>";
                    let res = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = s.write_all(res.as_bytes()).await;
                });
            }
        });
        Spy { port, heads, task }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

impl Drop for Spy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn js_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// `fetch(url)` from the page, with the browser's credentials: its status, or the error.
async fn fetch_status(b: &crate::support::browser::Browser, url: &str, credentials: &str) -> Value {
    b.js_async(&format!(
        "var done = arguments[arguments.length - 1]; fetch({}, {{credentials: {}}}).then(function (r) {{ done(r.status); }}, function (e) {{ done(String(e)); }});",
        js_str(url),
        js_str(credentials)
    ))
    .await
}

/// F3: logged in, the browser visits servers on other loopback ports, under the names
/// a browser resolves to loopback: none of them receives the session cookie, a page
/// there cannot use the web view with the browser's credentials, and the web view's
/// own loopback address is not logged in either (the cookie belongs to the page's
/// `aicli-….localhost` name alone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f3_the_session_cookie_goes_to_the_page_s_own_origin_only() {
    let driver = driver_or_skip!("f3_the_session_cookie_goes_to_the_page_s_own_origin_only");
    let repo = git_repo();
    let dir = tempfile::tempdir().unwrap();
    let cfg = fake_cli_config(dir.path(), &[]);
    let web = Web::start(
        Path::new(env!("CARGO_BIN_EXE_aicli")),
        &cfg,
        repo.path(),
        &dir.path().join("runs"),
        &[],
    );
    let spy = Spy::start().await;
    let b = driver.session(DESKTOP).await;
    b.goto(&web.url).await;
    b.wait_for("the index, logged in", "h1").await;
    let at = b.js("return location.origin").await;
    assert_eq!(
        at.as_str(),
        Some(web.page.as_str()),
        "the page's own origin"
    );
    assert_eq!(fetch_status(&b, "/api/session", "same-origin").await, 200);
    let cookies = b.client.get_all_cookies().await.unwrap();
    let names: Vec<_> = cookies.iter().map(|c| c.name().to_owned()).collect();
    assert_eq!(names, ["aicli_session"], "{cookies:?}");
    let page_host = web
        .page
        .split("://")
        .nth(1)
        .unwrap()
        .split(':')
        .next()
        .unwrap();
    assert_eq!(
        cookies[0].domain(),
        Some(page_host),
        "a host-only cookie of the page's name"
    );

    for host in ["127.0.0.1", "localhost", "dev.localhost"] {
        let url = format!("http://{host}:{}/", spy.port);
        b.goto(&url).await;
        b.wait_for("the other server's page", "h1").await;
        // What a page of that server can do with the browser's credentials: nothing.
        let r = fetch_status(&b, &format!("{}/api/session", web.page), "include").await;
        assert_ne!(
            r, 200,
            "{host}: a page of another server read the session: {r}"
        );
        let r = fetch_status(&b, &format!("{}/api/session", web.base), "include").await;
        assert_ne!(r, 200, "{host}: {r}");
    }
    let heads = spy.heads();
    assert!(heads.len() >= 3, "{heads:?}");
    for h in &heads {
        assert!(
            !h.to_ascii_lowercase().contains("aicli_session"),
            "another server got the session:\n{h}"
        );
    }
    // The web view's own loopback address: not logged in (the cookie is not for it).
    b.goto(&format!("{}/", web.base)).await;
    let text = b.body_text().await;
    assert!(text.contains("open the URL"), "{}/ shows: {text}", web.base);
    // And still logged in on the page's own name.
    b.goto(&format!("{}/", web.page)).await;
    b.wait_for("the index, still logged in", "h1").await;
    b.close().await;
}

/// F2: `aicli web --open` with a stand-in `xdg-open`: no process's arguments hold the
/// login token (the stand-in gets a `file://` page), the page is the user's alone
/// (0600), it logs the browser in, and it is gone once used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f2_open_hands_the_browser_a_private_page_never_the_token_in_argv() {
    let driver =
        driver_or_skip!("f2_open_hands_the_browser_a_private_page_never_the_token_in_argv");
    let repo = git_repo();
    let dir = tempfile::tempdir().unwrap();
    let cfg = fake_cli_config(dir.path(), &[]);
    let (bin, run) = (dir.path().join("bin"), dir.path().join("run"));
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&run).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).unwrap();
    let args_file = dir.path().join("xdg-open.args");
    let stand_in = bin.join("xdg-open");
    std::fs::write(
        &stand_in,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > {}\n",
            args_file.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_aicli"))
        .arg("--config")
        .arg(&cfg)
        .args(["web", "--json", "--open", "--repo"])
        .arg(repo.path())
        .arg("--runs-dir")
        .arg(dir.path().join("runs"))
        .env("PATH", path)
        .env("XDG_RUNTIME_DIR", &run)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let web = Stopped(child);
    let v: Value = serde_json::from_str(&line).unwrap();
    let url = v["url"].as_str().unwrap().to_owned();
    let token = url.split_once("token=").unwrap().1.to_owned();
    let page_origin = url.split_once("/login?").unwrap().0.to_owned();
    until("the stand-in xdg-open ran", POLL, || args_file.exists()).await;
    let args = std::fs::read_to_string(&args_file).unwrap();
    assert!(
        !args.contains(&token),
        "xdg-open's argv holds the token: {args}"
    );
    // No process on the machine has it in its arguments.
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) {
            assert!(
                !String::from_utf8_lossy(&cmdline).contains(&token),
                "{:?} has the token in its arguments",
                e.path()
            );
        }
    }
    let opened = args
        .trim()
        .strip_prefix("file://")
        .unwrap_or_else(|| panic!("{args}"));
    let page = Path::new(opened);
    assert!(page.starts_with(&run), "in $XDG_RUNTIME_DIR: {opened}");
    let meta = std::fs::metadata(page).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "the user's alone");
    assert!(std::fs::read_to_string(page).unwrap().contains(&token));

    let b = driver.session(DESKTOP).await;
    b.goto(args.trim()).await;
    b.wait_js(
        "the page logged the browser in",
        &format!(
            "return location.origin === {} && location.pathname === '/' && document.querySelector('h1') !== null",
            js_str(&page_origin)
        ),
    )
    .await;
    let text = b.body_text().await;
    assert!(text.contains("aicli —"), "{text}");
    until("the page is removed once used", POLL, || !page.exists()).await;
    // The token is spent.
    let r = http_for(&url).get(&url).send().await.unwrap();
    assert_eq!(r.status(), 401);
    b.close().await;
    drop(web);
}
