//! `aicli-fake-cli`: a stand-in for a real AI coding CLI in tests and benches.
//!
//! It replays a recorded transcript (stdout lines, stderr, exit code) with a delay
//! between lines, and can misbehave on purpose. It is a real process, so everything the
//! engine does to processes (groups, signals, pipes) is exercised for real.
//!
//! ```text
//! aicli-fake-cli [--replay FILE.ndjson] [--stderr-file F] [--exit-file F] [options]
//!   --line-delay-ms N        sleep N ms before each line (default 0)
//!   --start-delay-ms N       sleep N ms before the first line
//!   --wait-for-file PATH     before the first line (after --start-delay-ms), wait until
//!                            PATH exists (at most 60 s, then exit 3)
//!   --session-id ID          replace the recorded session id with ID in every line
//!   --resume ID              the same (so Claude's and Gemini's resume flag works)
//!   --exit CODE              exit with CODE (overrides --exit-file)
//!   --stderr TEXT            write TEXT to stderr first
//!   --hang                   after the transcript, sleep forever
//!   --hang-after N           sleep forever after N lines
//!   --crash-mid-line         after the transcript, print half a JSON line and abort
//!   --garbage N              print N lines of garbage before the transcript
//!   --overlong BYTES         print one line of BYTES bytes before the transcript
//!   --invalid-utf8           print one line with invalid UTF-8 before the transcript
//!   --spawn-grandchildren N  start N grandchildren (sleepers), one of them in its own
//!                            session (setsid), before the transcript
//!   --ignore-sigterm         this process and its grandchildren ignore SIGTERM
//!   --pid-file F             write this process's pid and the grandchildren's to F
//!   --linger-ms N            after the transcript, keep running N ms before exiting
//!   --require-env K=V        exit 3 with a message when the env var K is not V
//!   --require-file PATH      exit 3 when PATH does not exist (after --start-delay-ms)
//!   --require-env-unset K    exit 3 with a message when the env var K is set
//!   --record-env K FILE      append `K=value` or `K unset` to FILE
//!   --dump-env FILE          write the whole environment to FILE (`K=V` lines)
//!   --mcp-call TOOL ARGS F   call TOOL with ARGS (JSON) on aicli's MCP server (found in
//!                            `--mcp-config FILE`, the Claude wiring, or
//!                            AICLI_MCP_URL/AICLI_MCP_TOKEN), before the transcript;
//!                            write the tool result's JSON to F (a JSON-RPC error as
//!                            `{"rpc_error": {...}}`)
//!   --mcp-list F             write the `tools` of aicli's MCP server's tools/list to F
//!                            (before the calls)
//!   --probe F                write everything this process was handed as JSON to F:
//!                            its argv, its environment, and the contents of every file
//!                            (and of the files under every directory, not following
//!                            symlinks) that an argument or a variable's value names
//!   --daemon-exit            start one `setsid` daemon grandchild (a sleeper) and exit
//!                            at once, before the transcript: the parent is gone
//!                            before anyone can see the grandchild's ancestry
//!   --once FILE              misbehave (daemons, grandchildren, linger, hang) only when
//!                            FILE does not exist yet (it is created): a resumed run
//!                            of the same task behaves
//!   --double-fork-daemon F   start a child that runs `--daemon-exit --pid-file F` (so F
//!                            lists that child and its daemon) and wait for it; then go
//!                            on: the daemon's parent died at once, the CLI lives on
//!   --touch FILE             create FILE (relative to the cwd) — "the tool ran"
//!   --record-argv FILE       append this process's argv as one JSON line to FILE
//!   --record-stdin FILE      read stdin to its end and write it to FILE (first of all)
//!   --timeline FILE          append "<unix ns> start" at start and "<unix ns> end" at exit
//!   --repeat-to BYTES        print the transcript's lines but its last over and over
//!                            until BYTES bytes are out, then its last line (a stream of
//!                            any length from a short transcript)
//!   --acp MODE               be a minimal ACP agent on stdio instead (see the `acp`
//!                            module: ok, garbage, unknown-id, early-notification,
//!                            silent, hang); with `--prompted FILE` it creates FILE when
//!                            it gets `session/prompt`
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::Command;
use std::time::Duration;

#[path = "fake_cli/acp.rs"]
mod acp;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--acp") {
        let prompted = args
            .iter()
            .position(|a| a == "--prompted")
            .and_then(|j| args.get(j + 1));
        acp::run(
            args.get(i + 1).map(String::as_str).unwrap_or("ok"),
            prompted.map(String::as_str),
        );
        return;
    }
    if args.first().map(String::as_str) == Some("--sleeper") {
        sleeper(args.get(1).map(String::as_str) == Some("--ignore-sigterm"));
    }
    let mut o = Opts::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().unwrap_or_default();
        match a.as_str() {
            "--replay" => o.replay = Some(val()),
            "--stderr-file" => o.stderr_file = Some(val()),
            "--exit-file" => o.exit_file = Some(val()),
            "--line-delay-ms" => o.line_delay = val().parse().unwrap_or(0),
            "--start-delay-ms" => o.start_delay = val().parse().unwrap_or(0),
            "--wait-for-file" => o.wait_for_file = Some(val()),
            // `--resume ID` is Claude's and Gemini's resume flag: the fake continues "the
            // same session" by printing that id.
            "--session-id" | "--resume" => o.session_id = Some(val()),
            "--exit" => o.exit = Some(val().parse().unwrap_or(1)),
            "--stderr" => o.stderr = Some(val()),
            "--hang" => o.hang = true,
            "--hang-after" => o.hang_after = Some(val().parse().unwrap_or(0)),
            "--crash-mid-line" => o.crash_mid_line = true,
            "--garbage" => o.garbage = val().parse().unwrap_or(0),
            "--overlong" => o.overlong = val().parse().unwrap_or(0),
            "--invalid-utf8" => o.invalid_utf8 = true,
            "--spawn-grandchildren" => o.grandchildren = val().parse().unwrap_or(0),
            "--ignore-sigterm" => o.ignore_sigterm = true,
            "--pid-file" => o.pid_file = Some(val()),
            "--linger-ms" => o.linger = val().parse().unwrap_or(0),
            "--require-env" => o.require_env.push(val()),
            "--require-file" => o.require_file.push(val()),
            "--require-env-unset" => o.require_unset.push(val()),
            "--record-env" => {
                let var = val();
                o.record_env.push((var, val()));
            }
            "--touch" => o.touch.push(val()),
            "--dump-env" => o.dump_env = Some(val()),
            "--mcp-call" => {
                let tool = val();
                let args = val();
                o.mcp_calls.push((tool, args, val()));
            }
            "--mcp-config" => o.mcp_config = Some(val()),
            "--mcp-list" => o.mcp_list = Some(val()),
            "--probe" => o.probe = Some(val()),
            "--daemon-exit" => o.daemon_exit = true,
            "--double-fork-daemon" => o.double_fork = Some(val()),
            "--once" => o.once = Some(val()),
            "--record-argv" => o.record_argv = Some(val()),
            "--record-stdin" => o.record_stdin = Some(val()),
            "--timeline" => o.timeline = Some(val()),
            "--repeat-to" => o.repeat_to = val().parse().ok(),
            // Anything else (the provider's own flags, the prompt) is accepted and ignored.
            _ => {}
        }
    }
    run(o, &args);
}

#[derive(Default)]
struct Opts {
    replay: Option<String>,
    stderr_file: Option<String>,
    exit_file: Option<String>,
    line_delay: u64,
    start_delay: u64,
    wait_for_file: Option<String>,
    session_id: Option<String>,
    exit: Option<i32>,
    stderr: Option<String>,
    hang: bool,
    hang_after: Option<usize>,
    crash_mid_line: bool,
    garbage: usize,
    overlong: usize,
    invalid_utf8: bool,
    grandchildren: usize,
    ignore_sigterm: bool,
    pid_file: Option<String>,
    linger: u64,
    require_env: Vec<String>,
    require_file: Vec<String>,
    require_unset: Vec<String>,
    record_env: Vec<(String, String)>,
    touch: Vec<String>,
    record_argv: Option<String>,
    record_stdin: Option<String>,
    timeline: Option<String>,
    repeat_to: Option<u64>,
    dump_env: Option<String>,
    mcp_calls: Vec<(String, String, String)>,
    mcp_config: Option<String>,
    mcp_list: Option<String>,
    probe: Option<String>,
    daemon_exit: bool,
    double_fork: Option<String>,
    once: Option<String>,
}

fn timeline(file: &Option<String>, what: &str) {
    if let Some(f) = file {
        let ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(f)
            .unwrap();
        writeln!(file, "{ns} {what}").unwrap();
    }
}

fn ignore_sigterm() {
    // SAFETY: installing SIG_IGN has no preconditions.
    unsafe {
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
    }
}

fn sleeper(ignore: bool) -> ! {
    if ignore {
        ignore_sigterm();
    }
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn hang() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn run(mut o: Opts, args: &[String]) {
    if let Some(f) = &o.record_stdin {
        let mut text = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut text).unwrap();
        std::fs::write(f, text).unwrap();
    }
    timeline(&o.timeline, "start");
    if let Some(f) = &o.once {
        if std::path::Path::new(f).exists() {
            o.daemon_exit = false;
            o.double_fork = None;
            o.grandchildren = 0;
            o.linger = 0;
            o.hang = false;
        } else {
            std::fs::write(f, b"").unwrap();
        }
    }
    if let Some(f) = &o.record_argv {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(f)
            .unwrap();
        writeln!(file, "{}", serde_json::to_string(args).unwrap()).unwrap();
    }
    for (var, file) in &o.record_env {
        let line = match std::env::var(var) {
            Ok(v) => format!("{var}={v}"),
            Err(_) => format!("{var} unset"),
        };
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(file)
            .unwrap();
        writeln!(f, "{line}").unwrap();
    }
    if let Some(f) = &o.dump_env {
        let text: String = std::env::vars()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect();
        std::fs::write(f, text).unwrap();
    }
    if let Some(f) = &o.probe {
        std::fs::write(f, probe(args)).unwrap();
    }
    if let Some(f) = &o.mcp_list {
        std::fs::write(f, mcp::list_tools(o.mcp_config.as_deref())).unwrap();
    }
    for (tool, args, file) in &o.mcp_calls {
        let answer = mcp::call_tool(o.mcp_config.as_deref(), tool, args);
        std::fs::write(file, answer).unwrap();
    }
    for k in &o.require_unset {
        if std::env::var_os(k).is_some() {
            eprintln!("fake-cli: environment variable {k} is set");
            std::process::exit(3);
        }
    }
    for kv in &o.require_env {
        let (k, v) = kv.split_once('=').unwrap_or((kv.as_str(), ""));
        if std::env::var(k).ok().as_deref() != Some(v) {
            eprintln!("fake-cli: environment variable {k} is not '{v}'");
            std::process::exit(3);
        }
    }
    if o.ignore_sigterm {
        ignore_sigterm();
    }
    let me = std::env::current_exe().unwrap();
    let mut pids = vec![std::process::id()];
    for i in 0..o.grandchildren {
        let mut c = Command::new(&me);
        c.arg("--sleeper");
        if o.ignore_sigterm {
            c.arg("--ignore-sigterm");
        }
        c.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        if i == 0 {
            use std::os::unix::process::CommandExt;
            // One grandchild leaves the session and process group, like a daemon.
            // SAFETY: setsid() is async-signal-safe.
            unsafe {
                c.pre_exec(|| {
                    libc::setsid();
                    Ok(())
                });
            }
        }
        pids.push(c.spawn().unwrap().id());
    }
    if o.daemon_exit {
        // A daemon the way tools make one: a child that leaves the session and process
        // group, then the parent exits before printing anything.
        let mut c = Command::new(&me);
        c.arg("--sleeper")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        use std::os::unix::process::CommandExt;
        // SAFETY: setsid() is async-signal-safe.
        unsafe {
            c.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        pids.push(c.spawn().unwrap().id());
    }
    if let Some(f) = &o.pid_file {
        let text: Vec<String> = pids.iter().map(u32::to_string).collect();
        std::fs::write(f, text.join("\n")).unwrap();
    }
    if o.daemon_exit {
        std::process::exit(0);
    }
    if let Some(f) = &o.double_fork {
        Command::new(&me)
            .args(["--daemon-exit", "--pid-file", f])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
    }
    for t in &o.touch {
        std::fs::write(t, b"touched by aicli-fake-cli\n").unwrap();
    }
    if let Some(s) = &o.stderr {
        eprintln!("{s}");
    }
    if o.start_delay > 0 {
        std::thread::sleep(Duration::from_millis(o.start_delay));
    }
    if let Some(f) = &o.wait_for_file {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !std::path::Path::new(f).exists() {
            if std::time::Instant::now() >= deadline {
                eprintln!("fake-cli: waited 60 s for {f}");
                std::process::exit(3);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // Checked after the start delay: "the file is still there when I get going".
    for f in &o.require_file {
        if !std::path::Path::new(f).exists() {
            eprintln!("fake-cli: required file {f} does not exist");
            std::process::exit(3);
        }
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for i in 0..o.garbage {
        writeln!(out, "this is not json #{i} {{{{").unwrap();
    }
    if o.overlong > 0 {
        let mut line = vec![b'x'; o.overlong];
        line.push(b'\n');
        out.write_all(&line).unwrap();
    }
    if o.invalid_utf8 {
        out.write_all(b"{\"type\":\"\xff\xfe\"}\n").unwrap();
    }
    out.flush().unwrap();
    let transcript = o
        .replay
        .as_ref()
        .map(|p| std::fs::read(p).unwrap_or_else(|e| panic!("{p}: {e}")))
        .unwrap_or_default();
    let mut replayed = &transcript[..];
    if let Some(total) = o.repeat_to {
        repeat_to(&mut out, &transcript, total);
        replayed = &[];
    }
    let recorded_sid = find_session_id(replayed);
    let mut lines = replayed.split(|b| *b == b'\n').peekable();
    let mut n = 0;
    while let Some(line) = lines.next() {
        if lines.peek().is_none() && line.is_empty() {
            break;
        }
        if o.hang_after == Some(n) {
            out.flush().unwrap();
            hang();
        }
        if o.line_delay > 0 {
            std::thread::sleep(Duration::from_millis(o.line_delay));
        }
        let mut line = line.to_vec();
        if let (Some(new), Some(old)) = (&o.session_id, &recorded_sid) {
            line = replace_all(&line, old.as_bytes(), new.as_bytes());
        }
        line.push(b'\n');
        out.write_all(&line).unwrap();
        out.flush().unwrap();
        n += 1;
    }
    if let Some(f) = &o.stderr_file {
        let bytes = std::fs::read(f).unwrap_or_default();
        std::io::stderr().write_all(&bytes).unwrap();
    }
    if o.crash_mid_line {
        out.write_all(b"{\"type\":\"result\",\"subtype\":\"succ")
            .unwrap();
        out.flush().unwrap();
        std::process::abort();
    }
    if o.hang {
        hang();
    }
    if o.linger > 0 {
        std::thread::sleep(Duration::from_millis(o.linger));
    }
    timeline(&o.timeline, "end");
    let code = o.exit.unwrap_or_else(|| {
        o.exit_file
            .as_ref()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    });
    std::process::exit(code);
}

/// `--repeat-to`: the transcript's lines but the last, over and over, until `total` bytes
/// are out; then its last line (in place of the normal replay).
fn repeat_to(out: &mut impl Write, transcript: &[u8], total: u64) {
    let text = transcript.strip_suffix(b"\n").unwrap_or(transcript);
    let (body, last) = match text.iter().rposition(|b| *b == b'\n') {
        Some(i) => (&text[..=i], &text[i + 1..]),
        None => (&text[..0], text),
    };
    let mut written = 0u64;
    while !body.is_empty() && written + last.len() as u64 + 1 < total {
        for line in body.split_inclusive(|b| *b == b'\n') {
            out.write_all(line).unwrap();
            written += line.len() as u64;
        }
    }
    out.write_all(last).unwrap();
    out.write_all(b"\n").unwrap();
    out.flush().unwrap();
}

/// The first `session_id` / `thread_id` value in the transcript.
fn find_session_id(transcript: &[u8]) -> Option<String> {
    for line in transcript.split(|b| *b == b'\n') {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) else {
            continue;
        };
        for k in ["session_id", "thread_id"] {
            if let Some(s) = v.get(k).and_then(|x| x.as_str()) {
                return Some(s.to_owned());
            }
        }
    }
    None
}

fn replace_all(hay: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    if from.is_empty() {
        return hay.to_vec();
    }
    let mut out = Vec::with_capacity(hay.len());
    let mut i = 0;
    while i < hay.len() {
        if hay[i..].starts_with(from) {
            out.extend_from_slice(to);
            i += from.len();
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    out
}

/// A minimal MCP client over streamable HTTP (initialize, initialized, one tools/call):
/// what a real CLI does to read a credential granted to its task.
/// `--probe`: argv, environment, and the files they name, as one JSON document.
fn probe(args: &[String]) -> String {
    let env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    let mut files = serde_json::Map::new();
    let mut paths: Vec<std::path::PathBuf> = Vec::new();
    // (Not the directories on PATH: programs, not what the run was handed.)
    let values = env.iter().filter(|(k, _)| *k != "PATH").map(|(_, v)| v);
    for v in args.iter().chain(values) {
        // `-c key={url="..."}` and `A=B` forms hide paths too: every piece that looks like one.
        for piece in
            v.split(|c: char| c == '=' || c == '"' || c == ',' || c == ':' || c.is_whitespace())
        {
            if piece.starts_with('/') {
                paths.push(piece.into());
            }
        }
    }
    let mut budget = 2000usize;
    while let Some(p) = paths.pop() {
        if budget == 0 {
            break;
        }
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.is_dir()
            && !p.starts_with("/proc")
            && !p.starts_with("/sys")
            && !p.starts_with("/usr")
        {
            // Only the files a run was handed: its own (private) directories, not the system's.
            if p.components().count() <= 2 {
                continue;
            }
            if let Ok(rd) = std::fs::read_dir(&p) {
                for e in rd.flatten() {
                    paths.push(e.path());
                }
            }
        } else if meta.is_file() && meta.len() <= 1024 * 1024 {
            budget -= 1;
            if let Ok(bytes) = std::fs::read(&p) {
                files.insert(
                    p.display().to_string(),
                    String::from_utf8_lossy(&bytes).into_owned().into(),
                );
            }
        }
    }
    serde_json::json!({"argv": args, "env": env, "files": files}).to_string()
}

mod mcp {
    use http_body_util::{BodyExt, Full};
    use hyper::body::Bytes;
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    use serde_json::{Value, json};

    /// The server's URL and bearer token: from Claude's `--mcp-config` file, else from
    /// AICLI_MCP_URL / AICLI_MCP_TOKEN.
    fn endpoint(mcp_config: Option<&str>) -> Result<(String, String), String> {
        if let Some(f) = mcp_config {
            let v: Value =
                serde_json::from_str(&std::fs::read_to_string(f).map_err(|e| e.to_string())?)
                    .map_err(|e| e.to_string())?;
            let s = &v["mcpServers"]["aicli"];
            let url = s["url"].as_str().ok_or("no url in the MCP config")?;
            let auth = s["headers"]["Authorization"]
                .as_str()
                .ok_or("no Authorization header")?;
            let token = auth.strip_prefix("Bearer ").ok_or("not a bearer token")?;
            return Ok((url.to_owned(), token.to_owned()));
        }
        match (
            std::env::var("AICLI_MCP_URL"),
            std::env::var("AICLI_MCP_TOKEN"),
        ) {
            (Ok(u), Ok(t)) => Ok((u, t)),
            _ => Err("no MCP server: neither --mcp-config nor AICLI_MCP_URL".into()),
        }
    }

    /// The `tools` of `tools/list` as JSON text, or `{"error": ...}`.
    pub fn list_tools(mcp_config: Option<&str>) -> String {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        match rt.block_on(request(mcp_config, "tools/list", json!({}))) {
            Ok(v) => v["result"]["tools"].to_string(),
            Err(e) => json!({ "error": e }).to_string(),
        }
    }

    /// `tool(args)`'s result as JSON text, `{"rpc_error": ...}` for a JSON-RPC error,
    /// or `{"error": ...}`.
    pub fn call_tool(mcp_config: Option<&str>, tool: &str, args: &str) -> String {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let args: Value = match serde_json::from_str(args) {
            Ok(v) => v,
            Err(e) => return json!({ "error": format!("bad tool arguments: {e}") }).to_string(),
        };
        let params = json!({"name": tool, "arguments": args});
        match rt.block_on(request(mcp_config, "tools/call", params)) {
            Ok(v) if v.get("error").is_some() => json!({"rpc_error": v["error"]}).to_string(),
            Ok(v) => v["result"].to_string(),
            Err(e) => json!({ "error": e }).to_string(),
        }
    }

    /// One request on a new session: the whole JSON-RPC response.
    async fn request(
        mcp_config: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, String> {
        let (url, token) = endpoint(mcp_config)?;
        let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let post = |sid: Option<String>, body: Value| {
            let mut b = hyper::Request::post(url.as_str())
                .header("authorization", format!("Bearer {token}"))
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream");
            if let Some(s) = sid {
                b = b
                    .header("mcp-session-id", s)
                    .header("mcp-protocol-version", "2025-06-18");
            }
            let req = b.body(Full::new(Bytes::from(body.to_string()))).unwrap();
            let client = client.clone();
            async move {
                let resp = client.request(req).await.map_err(|e| e.to_string())?;
                let status = resp.status();
                let sid = resp
                    .headers()
                    .get("mcp-session-id")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                let body = resp
                    .into_body()
                    .collect()
                    .await
                    .map_err(|e| e.to_string())?;
                let text = String::from_utf8_lossy(&body.to_bytes()).into_owned();
                if !status.is_success() {
                    return Err(format!("HTTP {status}: {text}"));
                }
                // SSE (`data: {...}` lines) or plain JSON.
                let msg = text
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .find_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
                    .or_else(|| serde_json::from_str(&text).ok())
                    .unwrap_or(Value::Null);
                Ok::<_, String>((sid, msg))
            }
        };
        let (sid, _) = post(
            None,
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "aicli-fake-cli", "version": "0"}}}),
        )
        .await?;
        let sid = sid.ok_or("initialize: no session id")?;
        post(
            Some(sid.clone()),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        )
        .await?;
        let (_, msg) = post(
            Some(sid),
            json!({"jsonrpc": "2.0", "id": 2, "method": method, "params": params}),
        )
        .await?;
        Ok(msg)
    }
}
