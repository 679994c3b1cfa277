//! The egress allowlist from inside each real CLI's container: the CLI reaches its (fake)
//! model API through aicli's proxy, a second HTTP server on this machine that is not on
//! the list is refused through the proxy and recorded, and connections that bypass the
//! proxy go nowhere. With `egress.enabled` off, the same container reaches that server
//! directly (so the refusals are the allowlist's doing).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aicli::providers::{PermissionMode, SessionStatus};
use aicli_testkit::Script;

use super::support;
use crate::suite::e2e::{Cli, E2e, Setup, describe};
use crate::suite::support::git;

/// What the agent's shell runs in the container: the probes of [`PROBE_JS`], written
/// to `egress.json` in the worktree.
const PROBE_JS: &str = r#"
const http = require('http'), net = require('net'), fs = require('fs');
const [port, gateway] = process.argv.slice(2);
function viaProxy(host) {
  return new Promise((done) => {
    const req = http.request({ host: '127.0.0.1', port: 3128, method: 'GET',
      path: `http://${host}:${port}/`, headers: { Host: `${host}:${port}` } }, (r) => {
      let b = ''; r.on('data', (d) => (b += d)); r.on('end', () => done(`${r.statusCode} ${b.trim()}`));
    });
    req.setTimeout(5000, () => req.destroy(new Error('timeout')));
    req.on('error', (e) => done(`error ${e.code || e.message}`));
    req.end();
  });
}
function direct(host) {
  return new Promise((done) => {
    const s = net.connect({ host, port: Number(port) });
    s.setTimeout(3000);
    s.on('connect', () => { done('connected'); s.destroy(); });
    s.on('error', (e) => done(`error ${e.code}`));
    s.on('timeout', () => { done('timeout'); s.destroy(); });
  });
}
(async () => {
  const out = {
    proxied_loopback: await viaProxy('127.0.0.1'),
    proxied_alias: await viaProxy('host.docker.internal'),
    direct_gateway: await direct(gateway),
    proxy_env: process.env.HTTPS_PROXY || null,
  };
  fs.writeFileSync('egress.json', JSON.stringify(out));
})();
"#;

/// A server on every address of this machine (loopback and the bridge gateway), not on
/// any allowlist; counts the connections it gets.
async fn other_server() -> (u16, Arc<AtomicUsize>) {
    let l = tokio::net::TcpListener::bind(SocketAddr::new(IpAddr::from([0, 0, 0, 0]), 0))
        .await
        .unwrap();
    let port = l.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            h.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                let _ = s
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nOTHER",
                    )
                    .await;
            });
        }
    });
    (port, hits)
}

/// Runs the probes as `cli`'s shell tool; returns what they found and the run's record.
async fn probe(
    cli: Cli,
    egress: bool,
) -> Option<(
    serde_json::Value,
    aicli::record::TaskRecord,
    String,
    usize,
    E2e,
)> {
    let docker = support::local_engine(&format!("egress_{cli:?}_{egress}")).await?;
    let setup = Setup::in_docker(support::DockerSetup::local(docker).await);
    let gateway = setup.docker.as_ref().unwrap().gateway;
    let (port, hits) = other_server().await;
    let script = Script::shell(format!("node probe.js {port} {gateway}")).then_quote_tool_result();
    let t = E2e::start_with(cli, script, setup, |c| {
        c.engine.docker.egress.enabled = egress;
    })
    .await;
    std::fs::write(t.repo.path().join("probe.js"), PROBE_JS).unwrap();
    git(t.repo.path(), &["add", "probe.js"]);
    git(t.repo.path(), &["commit", "-qm", "probe"]);
    let mut task = t.shell_task("egress", "Probe the network");
    // The CLI's own sandbox (codex's) would cut the shell tool off the network itself.
    task.permission_mode = Some(PermissionMode::Bypass);
    task.allowed_tools = Vec::new();
    let ran = t.run_one(task).await;
    let r = ran.only().clone();
    assert_eq!(
        r.status,
        SessionStatus::Succeeded,
        "{cli:?}: {}",
        describe(&r)
    );
    let wt = r
        .worktree
        .clone()
        .expect("the worktree holds the probe's output");
    let text = std::fs::read_to_string(wt.join("egress.json"))
        .unwrap_or_else(|e| panic!("{cli:?}: no egress.json ({e}): {}", describe(&r)));
    let found: serde_json::Value = serde_json::from_str(&text).unwrap();
    let rec = t.record(&ran.batch.batch_id, "egress");
    let batch = ran.batch.batch_id.clone();
    Some((found, rec, batch, hits.load(Ordering::SeqCst), t))
}

async fn allowlist_holds(cli: Cli) {
    let Some((found, rec, batch, hits, t)) = probe(cli, true).await else {
        return;
    };
    // The model API was reached: through the proxy, the container's only way out.
    assert_eq!(
        found["proxy_env"], "http://127.0.0.1:3128",
        "{cli:?}: {found}"
    );
    for k in ["proxied_loopback", "proxied_alias"] {
        let v = found[k].as_str().unwrap();
        assert!(
            v.starts_with("403 ") && v.contains("not on this task's allowlist"),
            "{cli:?} {k}: {found}"
        );
    }
    let direct = found["direct_gateway"].as_str().unwrap();
    assert!(
        direct.starts_with("error ") || direct == "timeout",
        "{cli:?}: a connection around the proxy got through: {found}"
    );
    assert_eq!(hits, 0, "{cli:?}: the server not on the list was reached");
    let denied = &rec.attempts.last().unwrap().egress_denied;
    let mut hosts: Vec<(String, u16, u64)> = denied
        .iter()
        .map(|d| (d.host.clone(), d.port, d.count))
        .collect();
    hosts.sort();
    let other = denied.first().map(|d| d.port).unwrap_or_default();
    assert_eq!(
        hosts,
        vec![
            ("127.0.0.1".to_owned(), other, 1),
            ("host.docker.internal".to_owned(), other, 1)
        ],
        "{cli:?}: {denied:?}"
    );
    assert!(
        denied
            .iter()
            .all(|d| d.method == "GET" && !d.first_at.is_empty())
    );
    // `runs show` says so.
    let out = std::process::Command::new(crate::suite::cli::aicli_bin())
        .args(["runs", "show", &batch])
        .current_dir(t.repo.path())
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains(&format!("egress 127.0.0.1:{other} refused (GET at ")),
        "{cli:?}: {shown}"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_container_reaches_its_api_and_nothing_else() {
    allowlist_holds(Cli::Claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_container_reaches_its_api_and_nothing_else() {
    allowlist_holds(Cli::Codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_container_reaches_its_api_and_nothing_else() {
    allowlist_holds(Cli::Gemini).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_egress_off_the_container_reaches_the_bridge() {
    let Some((found, rec, _, hits, t)) = probe(Cli::Claude, false).await else {
        return;
    };
    assert_eq!(found["direct_gateway"], "connected", "{found}");
    assert_eq!(found["proxy_env"], serde_json::Value::Null, "{found}");
    assert!(hits >= 1);
    assert!(rec.attempts.last().unwrap().egress_denied.is_empty());
    t.finish().await;
}
