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
        eprintln!("aicli web: open the URL above (it logs one browser in, once); Ctrl-C stops it");
        eprintln!("           scripts: Authorization: Bearer <the API token; --json prints it>");
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
