//! A real browser for the web view's tests and its benchmark: Debian's `chromedriver`
//! on a free loopback port, driving headless `chromium` over WebDriver (fantoccini), and
//! `aicli web` as a child process. Every process started here is killed when its guard
//! drops, passed or panicked: chromedriver with its whole process group and every
//! descendant it had (the browsers), `aicli web` with SIGTERM (it stops the commands it
//! started, as Ctrl-C would), then SIGKILL.
//!
//! Without `chromium` and `chromedriver` on PATH, [`Driver::start_or_skip`] says so loudly
//! and the caller skips, unless `AICLI_REQUIRE_BROWSER` is set (CI sets it), when it
//! panics instead: CI never skips silently.

use std::io::BufRead;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

/// How long a condition in the page or the record may take: generous, for a busy
/// 2-core CI machine running real CLIs.
pub const DEADLINE: Duration = Duration::from_secs(120);
/// How often a condition is looked at.
pub const POLL: Duration = Duration::from_millis(100);

/// A desktop window.
pub const DESKTOP: (u32, u32) = (1280, 900);
/// A phone's (390 × 844 CSS pixels).
pub const PHONE: (u32, u32) = (390, 844);

/// The environment variable that turns "no browser: skipped" into a failure.
pub const REQUIRE: &str = "AICLI_REQUIRE_BROWSER";

/// The browser and its driver found on PATH.
fn binaries() -> Result<(PathBuf, PathBuf), String> {
    let chromium = ["chromium", "chromium-browser"]
        .iter()
        .find_map(|b| which::which(b).ok())
        .ok_or("chromium is not installed (apt-get install chromium chromium-driver)")?;
    let driver = which::which("chromedriver")
        .map_err(|_| "chromedriver is not installed (apt-get install chromium-driver)")?;
    Ok((chromium, driver))
}

/// A running chromedriver (its own process group), and where its browsers keep their
/// profiles.
pub struct Driver {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    chromium: PathBuf,
    /// Profiles and the driver's log.
    pub dir: tempfile::TempDir,
    /// Browser sessions started so far (each gets its own profile).
    sessions: std::sync::atomic::AtomicUsize,
}

impl Driver {
    /// Starts chromedriver, or says loudly why not and returns `None` (the test skips)
    /// when no browser is installed and `AICLI_REQUIRE_BROWSER` is not set.
    pub async fn start_or_skip(test: &str) -> Option<Driver> {
        match binaries() {
            Ok((chromium, driver)) => Some(Driver::start(&chromium, &driver).await),
            Err(why) if std::env::var_os(REQUIRE).is_some() => {
                panic!("{test}: {why}, and {REQUIRE} is set: run .ci/install-browser.sh")
            }
            Err(why) => {
                eprintln!(
                    "\n\n########## SKIPPED {test}: {why} ##########\n\
                     ########## (set {REQUIRE}=1 to make this a failure; CI does) ##########\n"
                );
                None
            }
        }
    }

    async fn start(chromium: &Path, driver: &Path) -> Driver {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let log = dir.path().join("chromedriver.log");
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .arg(format!("--log-path={}", log.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group: the browsers it starts are in it, and all of them
            // go with one signal.
            .process_group(0)
            .spawn()
            .expect("chromedriver starts");
        let d = Driver {
            child,
            url: format!("http://127.0.0.1:{port}"),
            chromium: chromium.to_owned(),
            dir,
            sessions: Default::default(),
        };
        // Ready once /status says so.
        let http = reqwest::Client::new();
        let start = Instant::now();
        loop {
            let ready = match http
                .get(format!("{}/status", d.url))
                .timeout(Duration::from_secs(5))
                .send()
                .await
            {
                Ok(r) => r
                    .json::<Value>()
                    .await
                    .is_ok_and(|v| v["value"]["ready"] == true),
                Err(_) => false,
            };
            if ready {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "chromedriver did not answer on {} within 60 s; its log:\n{}",
                d.url,
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            tokio::time::sleep(POLL).await;
        }
        d
    }

    /// A new browser session (its own profile, so no cookie of another session) with
    /// its window `size` wide and high.
    pub async fn session(&self, size: (u32, u32)) -> Browser {
        let n = self
            .sessions
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let profile = self.dir.path().join(format!("profile-{n}"));
        std::fs::create_dir_all(&profile).expect("profile dir");
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".to_owned(),
            json!({
                "binary": self.chromium,
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--no-first-run",
                    "--no-default-browser-check",
                    "--disable-extensions",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--metrics-recording-only",
                    "--hide-scrollbars",
                    format!("--window-size={},{}", size.0, size.1),
                    format!("--user-data-dir={}", profile.display()),
                ],
            }),
        );
        caps.insert("pageLoadStrategy".to_owned(), json!("normal"));
        let start = Instant::now();
        let client = loop {
            match ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                .capabilities(caps.clone())
                .connect(&self.url)
                .await
            {
                Ok(c) => break c,
                Err(e) => {
                    // A busy machine can make chromium's start time out once.
                    assert!(
                        start.elapsed() < Duration::from_secs(90),
                        "no browser session: {e}; chromedriver's log:\n{}",
                        self.log_tail()
                    );
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        };
        let b = Browser { client };
        b.resize(size).await;
        b
    }

    /// chromedriver's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The end of chromedriver's log.
    pub fn log_tail(&self) -> String {
        let log =
            std::fs::read_to_string(self.dir.path().join("chromedriver.log")).unwrap_or_default();
        let mut start = log.len().saturating_sub(4000);
        while !log.is_char_boundary(start) {
            start += 1;
        }
        log[start..].to_owned()
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The descendants first (a browser may have moved to a group of its own), then
        // the group, then each one left.
        let pid = self.child.id();
        let below = descendants(pid);
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        for p in below {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(p as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every process below `pid` (children, their children, …), from `/proc`.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut parent_of = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // pid (comm) state ppid …: comm may hold spaces and parentheses.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        if let Some(ppid) = rest
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<u32>().ok())
        {
            parent_of.push((p, ppid));
        }
    }
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        for &(c, pp) in &parent_of {
            if pp == p && !out.contains(&c) {
                out.push(c);
                todo.push(c);
            }
        }
    }
    out
}

/// A free TCP port on 127.0.0.1 (bound once and let go).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// One browser session.
pub struct Browser {
    /// The WebDriver client.
    pub client: Client,
}

impl Browser {
    /// Sets the window so that the page's viewport is `size` (the window's outer size,
    /// corrected by what the browser takes for itself).
    pub async fn resize(&self, size: (u32, u32)) {
        self.client
            .set_window_size(size.0, size.1)
            .await
            .expect("set the window size");
        let inner = self
            .js("return [window.innerWidth, window.innerHeight]")
            .await;
        let (w, h) = (
            inner[0].as_u64().unwrap_or(0) as u32,
            inner[1].as_u64().unwrap_or(0) as u32,
        );
        if (w, h) != size && w > 0 && h > 0 {
            let _ = self
                .client
                .set_window_size(
                    size.0 + (size.0.saturating_sub(w)),
                    size.1 + (size.1.saturating_sub(h)),
                )
                .await;
        }
    }

    /// Opens `url`.
    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.expect("navigate");
    }

    /// Runs `script` (a function body: `return …`) in the page.
    pub async fn js(&self, script: &str) -> Value {
        self.client
            .execute(script, Vec::new())
            .await
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// Runs `script` with `args` in the page.
    pub async fn js_with(&self, script: &str, args: Vec<Value>) -> Value {
        self.client
            .execute(script, args)
            .await
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// Runs async `script` (it calls `arguments[arguments.length - 1]` with its result).
    pub async fn js_async(&self, script: &str) -> Value {
        self.client
            .execute_async(script, Vec::new())
            .await
            .unwrap_or_else(|e| panic!("async script failed: {e}\n{script}"))
    }

    /// The page's visible text.
    pub async fn body_text(&self) -> String {
        self.js("return document.body ? document.body.innerText : ''")
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Polls `script` (a function body returning a value) until it returns something
    /// truthy (not null, false, 0, "" or []), and returns that; panics after
    /// [`DEADLINE`] saying `what` did not happen, with the page's URL and text.
    pub async fn wait_js(&self, what: &str, script: &str) -> Value {
        self.wait_js_within(what, script, DEADLINE).await
    }

    /// [`Browser::wait_js`] with its own deadline.
    pub async fn wait_js_within(&self, what: &str, script: &str, within: Duration) -> Value {
        let start = Instant::now();
        loop {
            // A navigation in progress makes a script fail once: look again.
            if let Ok(v) = self.client.execute(script, Vec::new()).await
                && truthy(&v)
            {
                return v;
            }
            if start.elapsed() > within {
                let url = self
                    .client
                    .current_url()
                    .await
                    .map(|u| u.to_string())
                    .unwrap_or_default();
                let text = self.body_text().await;
                panic!(
                    "in the browser, {what}: not within {within:?}\nat {url}; the page shows:\n{text}"
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The element `css` once it exists.
    pub async fn wait_for(&self, what: &str, css: &str) -> fantoccini::elements::Element {
        let q = serde_json::to_string(css).expect("a string");
        self.wait_js(
            what,
            &format!("return document.querySelector({q}) !== null"),
        )
        .await;
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{what}: {css}: {e}"))
    }

    /// Clicks the element `css` once it exists (scrolled into view).
    pub async fn click(&self, what: &str, css: &str) {
        let e = self.wait_for(what, css).await;
        self.js_with(
            "arguments[0].scrollIntoView({block: 'center'})",
            vec![serde_json::to_value(&e).expect("an element")],
        )
        .await;
        e.click()
            .await
            .unwrap_or_else(|err| panic!("{what}: click {css}: {err}"));
    }

    /// Saves a screenshot of the viewport as `name`.png in [`screenshot_dir`].
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.expect("a screenshot");
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).expect("the screenshot dir");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write the screenshot");
        path
    }

    /// Ends the session (its browser quits).
    pub async fn close(self) {
        let _ = self.client.close().await;
    }
}

/// Waits until `cond` (of the record, of a process) holds, looked at every `poll`;
/// panics saying `what` after [`DEADLINE`].
pub async fn until(what: &str, poll: Duration, mut cond: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < DEADLINE,
            "{what}: not within {DEADLINE:?}"
        );
        tokio::time::sleep(poll).await;
    }
}

/// Whether a script's value counts as "yes".
pub fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(_) => true,
    }
}

/// Where screenshots go: `$CARGO_TARGET_DIR/web-screenshots`, else
/// `target/web-screenshots` in the package.
pub fn screenshot_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("web-screenshots")
}

/// `aicli web --json` as a child: its URLs and API token. SIGTERM then SIGKILL on drop.
pub struct Web {
    child: Child,
    /// The one-time login URL.
    pub url: String,
    /// The page's origin, as the login URL names it (`http://aicli-….localhost:PORT`:
    /// the host name the session cookie belongs to): where the browser goes.
    pub page: String,
    /// `http://127.0.0.1:PORT`: for API calls with the bearer token (a `*.localhost`
    /// name resolves in browsers, not in every HTTP client).
    pub base: String,
    /// The API token.
    pub token: String,
}

impl Web {
    /// `aicli --config CFG web --json --repo REPO --runs-dir RUNS ARGS`.
    pub fn start(aicli: &Path, cfg: &Path, repo: &Path, runs: &Path, args: &[&str]) -> Web {
        let mut child = Command::new(aicli)
            .arg("--config")
            .arg(cfg)
            .args(["web", "--json"])
            .arg("--repo")
            .arg(repo)
            .arg("--runs-dir")
            .arg(runs)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("aicli web starts");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read its first line");
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("aicli web's first line is not JSON ({e}): {line:?}"));
        let url = v["url"].as_str().expect("url").to_owned();
        let base = format!("http://{}", v["addr"].as_str().expect("addr"));
        let token = v["api_token"].as_str().expect("api_token").to_owned();
        let page = url
            .split_once("/login?")
            .map(|(o, _)| o.to_owned())
            .expect("the login URL");
        Web {
            child,
            url,
            page,
            base,
            token,
        }
    }

    /// The server's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Web {
    fn drop(&mut self) {
        stop(&mut self.child, Duration::from_secs(30));
    }
}

/// SIGTERM to `child` (aicli takes it as Ctrl-C), SIGKILL after `grace`, reaped.
pub fn stop(child: &mut Child, grace: Duration) {
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let start = Instant::now();
    while start.elapsed() < grace {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A child stopped (SIGTERM, then SIGKILL) when the test ends, passed or panicked.
pub struct Stopped(pub Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        stop(&mut self.0, Duration::from_secs(30));
    }
}

/// An HTTP client for the web view's login URL `url` (no redirects followed): its
/// `aicli-….localhost` host name resolves to loopback, as in a browser (the system
/// resolver does not know `*.localhost` names).
pub fn http_for(url: &str) -> reqwest::Client {
    let authority = url
        .split_once("://")
        .map(|(_, r)| r.split('/').next().unwrap_or(r))
        .expect("a URL");
    let (host, port) = authority.rsplit_once(':').expect("host:port");
    let port: u16 = port.parse().expect("a port");
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .resolve(host, std::net::SocketAddr::from(([127, 0, 0, 1], port)))
        .build()
        .expect("an HTTP client")
}

/// `http://127.0.0.1:PORT` of the web view whose login URL is `url`: the same server
/// for an HTTP client that sends its cookie or token by hand.
pub fn loopback_base(url: &str) -> String {
    let authority = url
        .split_once("://")
        .map(|(_, r)| r.split('/').next().unwrap_or(r))
        .expect("a URL");
    let port = authority.rsplit_once(':').expect("host:port").1;
    format!("http://127.0.0.1:{port}")
}
