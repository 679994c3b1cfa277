//! aicli's MCP server as containers see it: reachable (through the run's socket with the
//! egress allowlist, on the bridge without) with the task's own token; another task's
//! (live) token is refused; the server is not reachable on any other address.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use aicli::BatchOptions;
use aicli::engine::{AgentGrant, AgentServer, TaskScope};
use aicli::mcp::{McpServer, McpServerOptions};
use aicli::providers::TaskSpec;
use aicli::runner::AgentReach;
use tokio_util::sync::CancellationToken;

use super::support::{self, docker_config, local_host};
use crate::suite::support::{collect_events, git_repo, replay_provider};

/// aicli's server, remembering which token went to which task's worktree.
#[derive(Debug)]
struct Recording {
    server: Arc<McpServer>,
    grants: Mutex<Vec<(String, String, std::path::PathBuf)>>,
}

#[async_trait::async_trait]
impl AgentServer for Recording {
    async fn grant(
        &self,
        scope: TaskScope,
        reach: Option<&AgentReach>,
    ) -> Result<AgentGrant, String> {
        let (task, ws) = (scope.task_id.clone(), scope.workspace.clone());
        let g = self.server.grant(scope, reach).await?;
        self.grants
            .lock()
            .unwrap()
            .push((task, g.endpoint.token.clone(), ws));
        Ok(g)
    }
    fn revoke(&self, token: &str) {
        self.server.revoke(token);
    }
    fn restrict(&self, token: &str, peer: IpAddr) {
        AgentServer::restrict(self.server.as_ref(), token, peer);
    }
}

/// An address of this machine that is not loopback and not a Docker bridge.
fn other_address() -> Option<IpAddr> {
    nix::ifaddrs::getifaddrs().ok()?.find_map(|a| {
        let ip = a.address.as_ref()?.as_sockaddr_in()?.ip();
        let name = &a.interface_name;
        (!ip.is_loopback() && !name.starts_with("docker") && !name.starts_with("br-"))
            .then_some(IpAddr::V4(ip))
    })
}

/// `bash` in the container sends an MCP `initialize` to `host:port` with a token and
/// prints `<label> <HTTP status line>` (or `<label> refused`).
const PROBE: &str = r#"
req() {
  if ! exec 3<>"/dev/tcp/$2/$3"; then echo "$1 refused"; return; fi
  body='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"probe","version":"1"}}}'
  printf 'POST /mcp HTTP/1.1\r\nHost: host.docker.internal:%s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %s\r\nConnection: close\r\n\r\n%s' "$3" "$4" "${#body}" "$body" >&3
  read -r status <&3
  echo "$1 $status"
  exec 3>&-
}
port=${AICLI_MCP_URL##*:}; port=${port%%/*}
host=${AICLI_MCP_URL#*://}; host=${host%%:*}
if [ -n "$PROBE_OTHERS" ]; then
  for _ in $(seq 1 200); do [ -s /workspace/.other-token ] && break; sleep 0.1; done
  req own "$host" "$port" "$AICLI_MCP_TOKEN"
  req other-task "$host" "$port" "$(cat /workspace/.other-token)"
  req own-on-$OTHER_ADDRESS "$OTHER_ADDRESS" "$port" "$AICLI_MCP_TOKEN"
  req own-on-elsewhere "$ELSEWHERE" "$port" "$AICLI_MCP_TOKEN"
else
  sleep 5
fi
"#;

/// With the egress allowlist the MCP server is on the container's loopback (through its
/// run's socket), and the bridge gateway is out of reach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_cannot_use_another_tasks_token_nor_another_address() {
    tokens_and_addresses(true).await;
}

/// Without it the MCP server is on the bridge gateway, and the container's loopback is
/// its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_bridge_a_container_cannot_use_another_tasks_token_nor_another_address() {
    tokens_and_addresses(false).await;
}

async fn tokens_and_addresses(egress: bool) {
    let Some(docker) = support::local_engine(&format!(
        "a_container_cannot_use_another_tasks_token_{egress}"
    ))
    .await
    else {
        return;
    };
    let image = support::fake_cli_image(&docker).await;
    let other = other_address().expect("a non-loopback address of this machine");
    let elsewhere = if egress {
        support::bridge_gateway().await.to_string()
    } else {
        "127.0.0.1".to_owned()
    };
    let repo = git_repo();
    let mut config = docker_config(vec![local_host()], &image);
    config.engine.docker.egress.enabled = egress;
    let mut opts = McpServerOptions::from_config(&config, repo.path());
    opts.allowed_hosts
        .extend(aicli::runner::docker::container_hosts(
            &config.engine.docker,
        ));
    let cancel = CancellationToken::new();
    let _stop = cancel.clone().drop_guard();
    let server = Arc::new(McpServer::start(opts, cancel).await.expect("server"));
    let recording = Arc::new(Recording {
        server: server.clone(),
        grants: Mutex::default(),
    });
    // The "CLI" is bash running the probe.
    let probe =
        replay_provider("fake", "claude", None).with_config(|c| c.binary_name = "bash".into());
    let engine = support::engine(config, Arc::new(probe)).with_agent_server(recording.clone());
    let task = |id: &str, others: bool| TaskSpec {
        id: id.into(),
        prompt: "probe".into(),
        extra_args: vec!["-c".into(), PROBE.into(), "probe".into()],
        env: if others {
            BTreeMap::from([
                ("PROBE_OTHERS".into(), "1".into()),
                ("OTHER_ADDRESS".into(), other.to_string()),
                ("ELSEWHERE".into(), elsewhere.clone()),
            ])
        } else {
            BTreeMap::new()
        },
        ..TaskSpec::default()
    };
    // Hand the prober the other task's token once both have one.
    let rec2 = recording.clone();
    let feeder = tokio::spawn(async move {
        for _ in 0..300 {
            let g = rec2.grants.lock().unwrap().clone();
            let a = g.iter().find(|(t, _, _)| t == "a");
            let b = g.iter().find(|(t, _, _)| t == "b");
            if let (Some((_, _, ws)), Some((_, token, _))) = (a, b) {
                std::fs::write(ws.join(".other-token"), token).unwrap();
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        false
    });
    let mut bo = BatchOptions::new(repo.path());
    bo.provider = Some("fake".into());
    bo.max_parallel = Some(2);
    let (tx, events) = collect_events();
    let batch = engine
        .run_batch(
            vec![task("b", false), task("a", true)],
            bo,
            tx,
            CancellationToken::new(),
        )
        .await
        .expect("batch");
    let _ = events.await;
    assert!(feeder.await.unwrap(), "the tasks never got their tokens");
    let store = engine.store(repo.path(), None);
    let dir = store.open_batch(&batch.batch_id).unwrap().task_dir("a");
    let out = std::fs::read_to_string(dir.join("events.ndjson")).unwrap();
    let lines: Vec<&str> = out.lines().map(str::trim).collect();
    assert!(
        lines.iter().any(|l| l.starts_with("own HTTP/1.1 200")),
        "{out}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("other-task HTTP/1.1 403")),
        "another task's live token must be refused: {out}"
    );
    assert!(
        lines.contains(&format!("own-on-{other} refused").as_str()),
        "{out}"
    );
    assert!(lines.contains(&"own-on-elsewhere refused"), "{out}");
    support::assert_no_container(&docker, &batch.batch_id).await;
    assert_eq!(server.live_tokens(), 0);
}
