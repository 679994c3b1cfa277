//! The swarm's nodes as aicli needs them: the manager's own address (what every node
//! reaches aicli under), how many jobs the nodes can run at once, and a node's name for
//! the run's record.

use std::net::IpAddr;

use aicli_providers::DockerConfig;
use bollard::Docker;
use bollard::models::{Node, NodeState, NodeSpecAvailabilityEnum};

use super::super::DockerError;

/// What the manager says of itself.
#[derive(Debug, Clone, Copy)]
pub struct Manager {
    /// The address it advertises to the other nodes (`docker swarm init
    /// --advertise-addr`), when it is one a container can reach: not loopback.
    pub addr: Option<IpAddr>,
}

/// Checks that `docker` (engine `name` at `url`) is a swarm manager, and reads its
/// address.
pub async fn check_manager(docker: &Docker, name: &str, url: &str) -> Result<Manager, DockerError> {
    let info = docker.info().await.map_err(|e| DockerError::Api {
        what: format!("asking docker host '{name}' about its swarm"),
        message: e.to_string(),
    })?;
    let swarm = info.swarm.unwrap_or_default();
    let state = swarm
        .local_node_state
        .map(|s| s.to_string())
        .unwrap_or_default();
    if state != "active" || swarm.control_available != Some(true) {
        return Err(DockerError::Connect {
            host: name.to_owned(),
            url: url.to_owned(),
            message: format!(
                "the swarm runner needs a swarm manager, and this engine's swarm state is '{}'{}: run `docker swarm init` there (or point engine.docker.hosts at a manager)",
                if state.is_empty() { "unknown" } else { &state },
                if state == "active" { " as a worker" } else { "" }
            ),
        });
    }
    let addr = swarm
        .node_addr
        .and_then(|a| a.parse::<IpAddr>().ok())
        .filter(|a| !a.is_loopback() && !a.is_unspecified());
    Ok(Manager { addr })
}

/// The nodes that take jobs: ready and active.
pub async fn usable(docker: &Docker) -> Result<Vec<Node>, DockerError> {
    let nodes = docker
        .list_nodes(None::<bollard::query_parameters::ListNodesOptions>)
        .await
        .map_err(|e| DockerError::Api {
            what: "listing the swarm's nodes".to_owned(),
            message: e.to_string(),
        })?;
    Ok(nodes
        .into_iter()
        .filter(|n| {
            let ready = n.status.as_ref().and_then(|s| s.state) == Some(NodeState::READY);
            let active = n.spec.as_ref().and_then(|s| s.availability)
                == Some(NodeSpecAvailabilityEnum::ACTIVE);
            ready && active
        })
        .collect())
}

/// How many jobs `nodes` run at once under `limits`: on each node, two per CPU, and no
/// more than its memory holds at the memory reservation (else the limit); at least one.
pub fn capacity(nodes: &[Node], limits: &DockerConfig) -> usize {
    let per_job_mb = if limits.reserve_memory_mb > 0 {
        limits.reserve_memory_mb
    } else {
        limits.memory_mb
    };
    nodes
        .iter()
        .map(|n| {
            let r = n
                .description
                .as_ref()
                .and_then(|d| d.resources.clone())
                .unwrap_or_default();
            let cpus = (r.nano_cpus.unwrap_or(1_000_000_000) / 1_000_000_000).max(1) as usize;
            let by_cpu = cpus * 2;
            match (r.memory_bytes, per_job_mb) {
                (Some(total), mb) if mb > 0 => by_cpu.min((total as u64 / (mb * 1024 * 1024)) as usize),
                _ => by_cpu,
            }
        })
        .sum::<usize>()
        .max(1)
}

/// The words for node `id` in a run's record: `node <short id> (<hostname>, <address>)`.
pub async fn describe(docker: &Docker, id: &str) -> String {
    let short = &id[..id.len().min(12)];
    let Ok(n) = docker.inspect_node(id).await else {
        return format!("node {short}");
    };
    let host = n
        .description
        .and_then(|d| d.hostname)
        .unwrap_or_default();
    let addr = n.status.and_then(|s| s.addr).unwrap_or_default();
    let mut labels: Vec<String> = n
        .spec
        .and_then(|s| s.labels)
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    labels.sort();
    let mut words = vec![host, addr, labels.join(",")];
    words.retain(|w| !w.is_empty());
    format!("node {short} ({})", words.join(", "))
}
