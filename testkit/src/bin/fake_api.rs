//! `aicli-fake-api`: run one fake model API by hand and watch the requests.
//!
//! ```text
//! aicli-fake-api <anthropic|openai|gemini> [--port N] [--text TEXT | --shell CMD | --mcp SERVER/TOOL | --error STATUS [--error-message TEXT] | --limit SECS | --drop | --hang] [--log FILE]
//! ```
//!
//! Prints the base URL and the env/args that point the vendor's CLI at it, then one line
//! per request until Ctrl-C (with `--log FILE`, each request as a JSON line there too).

use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use aicli_testkit::{ErrorReply, FakeApi, Script, Vendor};

const USAGE: &str = "usage: aicli-fake-api <anthropic|openai|gemini> [--port N] [--text TEXT | --shell CMD | --mcp SERVER/TOOL | --error STATUS [--error-message TEXT] | --limit SECS | --drop | --hang] [--log FILE]";

fn parse(args: &[String]) -> Result<(Vendor, u16, Script, Option<String>), String> {
    let vendor = args
        .first()
        .and_then(|v| Vendor::parse(v))
        .ok_or_else(|| USAGE.to_owned())?;
    let mut port = 0u16;
    let mut script = Script::new();
    let mut log = None;
    // `--error STATUS` and `--error-message TEXT`, in either order.
    let mut error: Option<u16> = None;
    let mut error_message: Option<String> = None;
    let mut rest = args[1..].iter();
    while let Some(flag) = rest.next() {
        match flag.as_str() {
            "--drop" => {
                script = Script::drop_mid_stream();
                continue;
            }
            "--hang" => {
                script = Script::hang();
                continue;
            }
            _ => {}
        }
        let value = rest
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        match flag.as_str() {
            "--port" => port = value.parse().map_err(|e| format!("--port: {e}"))?,
            "--text" => script = Script::text(value.clone()),
            "--shell" => script = Script::shell(value.clone()).then_quote_tool_result(),
            "--mcp" => {
                let (server, tool) = value
                    .split_once('/')
                    .ok_or_else(|| format!("--mcp wants SERVER/TOOL\n{USAGE}"))?;
                script = Script::mcp_tool_call(
                    server,
                    tool,
                    serde_json::json!({"text": "ping from fake model"}),
                )
                .then_quote_tool_result();
            }
            "--log" => log = Some(value.clone()),
            "--limit" => {
                let secs: u64 = value.parse().map_err(|e| format!("--limit: {e}"))?;
                script = Script::usage_limit(Duration::from_secs(secs));
            }
            "--error" => error = Some(value.parse().map_err(|e| format!("--error: {e}"))?),
            "--error-message" => error_message = Some(value.clone()),
            _ => return Err(format!("unknown flag {flag}\n{USAGE}")),
        }
    }
    match (error, error_message) {
        (Some(status), message) => {
            let mut reply = ErrorReply::status(status);
            if let Some(m) = message {
                reply = reply.with_message(m);
            }
            script = Script::error_reply(reply);
        }
        (None, Some(_)) => return Err(format!("--error-message needs --error\n{USAGE}")),
        (None, None) => {}
    }
    Ok((vendor, port, script, log))
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (vendor, port, script, log_path) = match parse(&args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let fake = match FakeApi::start_at(
        vendor,
        script,
        SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
    )
    .await
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!("aicli-fake-api: {e}");
            return ExitCode::FAILURE;
        }
    };
    let wiring = fake.wiring();
    println!("fake {vendor} API at {}", fake.base_url());
    println!("point {} at it with:", vendor.cli_name());
    for (k, v) in &wiring.env {
        println!("  {k}={v}");
    }
    if !wiring.args.is_empty() {
        println!("  args: {}", wiring.args.join(" "));
    }
    for f in &wiring.home_files {
        println!("  ~/{}: {}", f.path.display(), f.json);
    }
    let mut seen = 0usize;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = tokio::time::sleep(Duration::from_millis(200)) => {
                let log = fake.requests();
                for r in &log[seen..] {
                    println!("{}", r.summary());
                    if let Some(path) = &log_path {
                        append_json_line(path, r);
                    }
                }
                seen = log.len();
            }
        }
    }
    fake.shutdown().await;
    ExitCode::SUCCESS
}

fn append_json_line(path: &str, request: &aicli_testkit::RecordedRequest) {
    use std::io::Write;
    let line = serde_json::to_string(request).unwrap_or_default();
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| writeln!(f, "{line}"));
    if let Err(e) = written {
        eprintln!("aicli-fake-api: writing {path}: {e}");
    }
}
