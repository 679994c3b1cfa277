//! `aicli-fake-api`: run one fake model API by hand and watch the requests.
//!
//! ```text
//! aicli-fake-api <anthropic|openai|gemini> [--port N] [--text TEXT | --shell CMD | --error STATUS]
//! ```
//!
//! Prints the base URL and the env/args that point the vendor's CLI at it, then one line
//! per request until Ctrl-C.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use aicli_testkit::{FakeApi, Script, Vendor};

const USAGE: &str = "usage: aicli-fake-api <anthropic|openai|gemini> [--port N] [--text TEXT | --shell CMD | --error STATUS]";

fn parse(args: &[String]) -> Result<(Vendor, u16, Script), String> {
    let vendor = args
        .first()
        .and_then(|v| Vendor::parse(v))
        .ok_or_else(|| USAGE.to_owned())?;
    let mut port = 0u16;
    let mut script = Script::new();
    let mut rest = args[1..].iter();
    while let Some(flag) = rest.next() {
        let value = rest
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        match flag.as_str() {
            "--port" => port = value.parse().map_err(|e| format!("--port: {e}"))?,
            "--text" => script = Script::text(value.clone()),
            "--shell" => script = Script::shell(value.clone()).then_quote_tool_result(),
            "--error" => script = Script::error(value.parse().map_err(|e| format!("--error: {e}"))?),
            _ => return Err(format!("unknown flag {flag}\n{USAGE}")),
        }
    }
    Ok((vendor, port, script))
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (vendor, port, script) = match parse(&args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let fake = match FakeApi::start_at(vendor, script, SocketAddr::from((Ipv4Addr::LOCALHOST, port))).await {
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
                }
                seen = log.len();
            }
        }
    }
    fake.shutdown().await;
    ExitCode::SUCCESS
}
