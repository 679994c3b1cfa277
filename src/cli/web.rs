//! `aicli web`: serve the repository's run records as a web view until Ctrl-C.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;

use clap::Args;

use super::RepoArgs;
use super::common::{engine, repo_dir, usage};

/// `aicli web` flags.
#[derive(Debug, Clone, Args)]
pub struct WebArgs {
    /// The address to listen on (default: loopback, a free port).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    bind: SocketAddr,
    /// Allow a non-loopback --bind: anyone who reaches it and holds the token can run
    /// agents on this machine.
    #[arg(long)]
    allow_remote: bool,
    /// A host name (or host:port) requests may name besides loopback and the bind
    /// address (a reverse proxy's); repeatable.
    #[arg(long, value_name = "HOST")]
    allowed_host: Vec<String>,
    /// Serve HTTPS with this PEM certificate chain (with --tls-key).
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// Open the page in the desktop's browser (xdg-open).
    #[arg(long)]
    open: bool,
    /// Print the URL and the API token as one JSON object.
    #[arg(long)]
    json: bool,
    /// Print a fresh one-time login link of the web view already running for this
    /// repository (another browser or device; good for ten minutes), and exit.
    #[arg(long, conflicts_with_all = ["open", "read_only", "allow_remote"])]
    link: bool,
    /// Watch only: the page and the API answer, resume, start and cancel nothing.
    #[arg(long)]
    read_only: bool,
    /// The batches the page starts run against the fake model APIs (as `aicli batch
    /// --fake-api[=SCRIPT]`).
    #[command(flatten)]
    fake: super::fake::FakeApiArgs,
}

pub(super) async fn web(
    config_path: Option<&Path>,
    a: WebArgs,
    r: RepoArgs,
) -> anyhow::Result<ExitCode> {
    let engine = engine(config_path)?;
    let repo = repo_dir(&r)?;
    let store = engine.store(&repo, r.runs_dir.as_deref());
    if a.link {
        return fresh_link(store.root(), a.json).await;
    }
    let launcher = if a.read_only {
        None
    } else {
        Some(
            crate::web::Launcher::current(config_path, &repo, r.runs_dir.as_deref(), a.fake.script)
                .map_err(|e| usage(format!("cannot find this aicli's executable: {e}")))?,
        )
    };
    let opts = crate::WebOptions {
        bind: a.bind,
        allow_remote: a.allow_remote,
        allowed_hosts: a.allowed_host,
        tls: a.tls_cert.zip(a.tls_key),
        launcher,
        read_only: a.read_only,
    };
    let server = crate::WebServer::start(engine, store, opts)
        .await
        .map_err(usage)?;
    if a.json {
        outln!(
            "{}",
            serde_json::json!({
                "url": server.url(),
                "addr": server.addr().to_string(),
                "api_token": server.api_token(),
            })
        );
    } else {
        outln!("{}", server.url());
        eprintln!(
            "aicli web: open the URL above (it logs one browser in, once; `aicli web --link` prints a fresh one); Ctrl-C stops it"
        );
        eprintln!("           {}", token_line(&server));
    }
    if !server.addr().ip().is_loopback() {
        let plain = if server.url().starts_with("https:") {
            ""
        } else {
            ", over plain HTTP (--tls-cert/--tls-key serve HTTPS)"
        };
        eprintln!(
            "aicli web: WARNING: listening on {}, not loopback: whoever reaches it with the token sees every run record of {} and can start, answer and cancel its tasks{plain}",
            server.addr(),
            repo.display()
        );
    }
    if a.open {
        // Never the URL: its token would be in xdg-open's argv, which every user of
        // the machine can read. A file of this user's alone that posts it instead.
        match server.login_page() {
            Ok(page) => {
                let opened = tokio::process::Command::new("xdg-open")
                    .arg(format!("file://{}", page.display()))
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .process_group(0)
                    .spawn();
                match opened {
                    // Reaped when it ends (xdg-open hands the file to the browser and exits).
                    Ok(mut child) => drop(tokio::spawn(async move { child.wait().await })),
                    Err(e) => eprintln!(
                        "aicli web: cannot run xdg-open ({e}): open the URL above instead"
                    ),
                }
            }
            Err(e) => eprintln!(
                "aicli web: --open: cannot write the login page ({e}): open the URL above instead"
            ),
        }
    }
    let stop = tokio_util::sync::CancellationToken::new();
    super::common::ctrl_c_cancels(stop.clone(), false);
    stop.cancelled().await;
    // The commands the page started stop as on Ctrl-C, their records kept.
    server.stop().await;
    Ok(ExitCode::SUCCESS)
}

/// Where a script finds the API token: the server file (0600), else `--json`.
pub(super) fn token_line(server: &crate::WebServer) -> String {
    match server.server_file() {
        Some(f) => format!(
            "scripts: Authorization: Bearer <the API token: \"api_token\" in {}, 0600, removed when the server stops>",
            f.display()
        ),
        None => "scripts: Authorization: Bearer <the API token: --json prints it>".to_owned(),
    }
}

/// `aicli web --link`: asks the web view serving `runs_dir` (found by its server file)
/// for a fresh one-time login link, over loopback with its API token.
async fn fresh_link(runs_dir: &Path, json_out: bool) -> anyhow::Result<ExitCode> {
    let runs_dir = std::fs::canonicalize(runs_dir).unwrap_or_else(|_| runs_dir.to_path_buf());
    let dir = crate::web::server_files_dir();
    let mut servers: Vec<(std::time::SystemTime, crate::web::ServerFile)> = Vec::new();
    if crate::web::check_private_dir(&dir).is_ok() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let Ok(f) = crate::util::read_json::<crate::web::ServerFile>(&e.path()) else {
                continue;
            };
            let alive =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(f.pid as i32), None).is_ok();
            if f.runs_dir == runs_dir && alive {
                let at = e
                    .metadata()
                    .and_then(|m| m.modified())
                    .unwrap_or(std::time::UNIX_EPOCH);
                servers.push((at, f));
            }
        }
    }
    servers.sort_by_key(|(at, _)| *at);
    let Some((_, f)) = servers.pop() else {
        return Err(usage(format!(
            "no web view is running for {}: start one with `aicli web`",
            runs_dir.display()
        )));
    };
    let scheme = if f.tls { "https" } else { "http" };
    let ip = match f.addr.ip() {
        ip if ip.is_unspecified() => "127.0.0.1".to_owned(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        ip => ip.to_string(),
    };
    let url = format!("{scheme}://{ip}:{}/api/login-links", f.addr.port());
    // Its own server, found by a file of this user's alone: a self-signed certificate is
    // expected there.
    let client = reqwest::Client::builder()
        .danger_accept_invalid_certs(f.tls)
        .timeout(std::time::Duration::from_secs(10))
        .build()?;
    let answer = client
        .post(&url)
        .bearer_auth(&f.api_token)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| anyhow::anyhow!("the web view at {} did not give a link: {e}", f.origin))?;
    let v: serde_json::Value = answer.json().await?;
    let link = v["url"].as_str().unwrap_or_default();
    if json_out {
        outln!("{v}");
    } else {
        outln!("{link}");
        eprintln!(
            "aicli web: a new one-time login link of the web view at {} (pid {}); it works once, for ten minutes",
            f.origin, f.pid
        );
    }
    Ok(ExitCode::SUCCESS)
}
