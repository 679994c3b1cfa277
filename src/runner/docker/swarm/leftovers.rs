//! aicli's swarm jobs as an operator sees them: `aicli containers` lists them, prune and
//! resume remove those of a task or of an aicli that is gone.

use std::collections::HashMap;

use super::super::hosts::Host;
use super::super::labels::{self, Labelled};
use super::job::{Job, remove_job_containers};

/// One of aicli's swarm jobs, as `aicli containers` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct JobInfo {
    /// The engine's name.
    pub host: String,
    /// The service's name.
    pub name: String,
    /// Its task's state (`running`, `complete`, …; empty before it has one).
    pub state: String,
    /// When the service was made (Unix seconds).
    pub created: i64,
    /// What its labels say.
    pub labels: Labelled,
    /// Whether the aicli that made it is alive.
    pub owner_alive: bool,
}

/// aicli's swarm jobs on `host` (none when it is not a swarm manager).
pub async fn list_jobs(host: &Host) -> Vec<JobInfo> {
    let filter = HashMap::from([("label", vec![labels::MANAGED])]);
    let services = host
        .docker
        .list_services(Some(
            bollard::query_parameters::ListServicesOptionsBuilder::default()
                .filters(&filter)
                .build(),
        ))
        .await
        .unwrap_or_default();
    let mut out = Vec::new();
    for s in services {
        let spec = s.spec.unwrap_or_default();
        let Some(l) = spec.labels.as_ref().and_then(Labelled::read) else {
            continue;
        };
        let name = spec.name.unwrap_or_default();
        let opts = bollard::query_parameters::ListTasksOptionsBuilder::default()
            .filters(&HashMap::from([("service", vec![name.as_str()])]))
            .build();
        let state = host
            .docker
            .list_tasks(Some(opts))
            .await
            .ok()
            .and_then(|t| t.into_iter().next())
            .and_then(|t| t.status)
            .and_then(|s| s.state)
            .map(|s| s.to_string())
            .unwrap_or_default();
        let created = s
            .created_at
            .and_then(|c| c.parse::<jiff::Timestamp>().ok())
            .map(|t| t.as_second())
            .unwrap_or(0);
        out.push(JobInfo {
            host: host.name.clone(),
            name,
            state,
            created,
            owner_alive: labels::owner_alive(&l.owner),
            labels: l,
        });
    }
    out
}

/// Removes the swarm objects (services, secrets, configs) aicli made on manager `host`
/// for `only` (a batch's task), or, without it, those whose aicli is gone (every one
/// with `all`), and the containers of gone jobs on it and on `nodes` (the other nodes'
/// engines). Nothing on an engine that is no manager. Returns a line per removal.
pub async fn remove_leftovers(
    host: &Host,
    nodes: &[bollard::Docker],
    only: Option<(&str, &str)>,
    all: bool,
) -> Vec<String> {
    let docker = &host.docker;
    if docker.inspect_swarm().await.is_err() {
        return Vec::new();
    }
    let mut filters = vec![format!("{}=1", labels::MANAGED)];
    if let Some((b, t)) = only {
        filters.push(format!("{}={b}", labels::BATCH));
        filters.push(format!("{}={t}", labels::TASK));
    }
    let filter = HashMap::from([("label", filters.iter().map(String::as_str).collect::<Vec<_>>())]);
    let wanted = |l: &Option<HashMap<String, String>>| {
        let owner = l.as_ref().and_then(|l| l.get(labels::OWNER)).cloned().unwrap_or_default();
        only.is_some() || all || !labels::owner_alive(&owner)
    };
    let mut lines = Vec::new();
    let services = docker
        .list_services(Some(
            bollard::query_parameters::ListServicesOptionsBuilder::default()
                .filters(&filter)
                .build(),
        ))
        .await
        .unwrap_or_default();
    for s in services {
        let spec = s.spec.unwrap_or_default();
        if !wanted(&spec.labels) {
            continue;
        }
        let name = spec.name.unwrap_or_default();
        let Some(id) = s.id else { continue };
        match docker.delete_service(&id).await {
            Ok(()) => lines.push(format!("removed swarm service {name} on {}", host.name)),
            Err(e) => lines.push(format!("could not remove swarm service {name} on {}: {e}", host.name)),
        }
    }
    let engines: Vec<bollard::Docker> = std::iter::once(docker.clone())
        .chain(nodes.iter().cloned())
        .collect();
    let swept = remove_job_containers(&engines, docker, None).await;
    if swept > 0 {
        lines.push(format!(
            "removed {swept} container(s) of swarm jobs whose service is gone on {}'s nodes",
            host.name
        ));
    }
    // The secrets and configs, each removed as a job of that one object.
    let secret_filter = bollard::query_parameters::ListSecretsOptionsBuilder::default()
        .filters(&filter)
        .build();
    let config_filter = bollard::query_parameters::ListConfigsOptionsBuilder::default()
        .filters(&filter)
        .build();
    let mut objects = Vec::new();
    for s in docker.list_secrets(Some(secret_filter)).await.unwrap_or_default() {
        let spec = s.spec.unwrap_or_default();
        let mut job = Job::new(docker, &host.name, spec.name.unwrap_or_default());
        job.nodes = nodes.to_vec();
        job.secret = s.id;
        objects.push((job, spec.labels));
    }
    for c in docker.list_configs(Some(config_filter)).await.unwrap_or_default() {
        let spec = c.spec.unwrap_or_default();
        let mut job = Job::new(docker, &host.name, spec.name.unwrap_or_default());
        job.nodes = nodes.to_vec();
        job.config = c.id;
        objects.push((job, spec.labels));
    }
    for (mut job, l) in objects {
        if wanted(&l)
            && let Err(e) = job.remove().await
        {
            lines.push(e.to_string());
        }
    }
    lines
}

