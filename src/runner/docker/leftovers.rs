//! The containers an aicli that was killed left: listing them (`aicli containers`),
//! and removing them (`aicli resume` for its batch's tasks, `aicli containers prune` for
//! those whose owner is gone) — after bringing a remote run's work back, so that nothing
//! is lost.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bollard::query_parameters::{
    KillContainerOptions, ListContainersOptions, WaitContainerOptions,
};
use futures_util::StreamExt;

use super::handle::Container;
use super::hosts::Host;
use super::labels::{self, Labelled};
use super::handle::remove_container;
use super::remote;

/// How long a stopped remote run may take to pack its work.
const PACK_WAIT: Duration = Duration::from_secs(30);

/// One of aicli's containers.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ContainerInfo {
    /// The engine's name.
    pub host: String,
    /// The container's id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// `running`, `exited`, ...
    pub state: String,
    /// When it was created (Unix seconds).
    pub created: i64,
    /// What its labels say.
    pub labels: Labelled,
    /// Whether the aicli that started it is alive.
    pub owner_alive: bool,
    /// Made ahead of its task's turn and still waiting for it (its first process is the
    /// one that waits for the go line: [`waiting`], asked by `aicli containers`).
    pub warm: bool,
}

/// Whether the running container `id` waits for its go: made ahead, its task's CLI not
/// started yet (see [`super::launch`]).
pub async fn waiting(docker: &bollard::Docker, id: &str) -> bool {
    let Ok(top) = docker
        .top_processes(id, None::<bollard::query_parameters::TopOptions>)
        .await
    else {
        return false;
    };
    // The init's command line names the first process's too: only the process itself
    // (before its `exec`) says it still waits.
    top.processes
        .unwrap_or_default()
        .iter()
        .filter_map(|p| p.last())
        .any(|cmd| !cmd.starts_with("/sbin/docker-init") && cmd.contains(super::launch::WAIT_MARK))
}

/// aicli's containers on `hosts`, optionally only those of one batch's task.
pub async fn list(
    hosts: &[Arc<Host>],
    only: Option<(&str, &str)>,
) -> Vec<(Arc<Host>, ContainerInfo)> {
    let mut out = Vec::new();
    for h in hosts {
        let mut label = vec![labels::MANAGED.to_owned()];
        if let Some((batch, task)) = only {
            label.push(format!("{}={batch}", labels::BATCH));
            label.push(format!("{}={task}", labels::TASK));
        }
        let filters = HashMap::from([("label".to_owned(), label)]);
        let found = h
            .docker
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Some(filters),
                ..Default::default()
            }))
            .await;
        let found = match found {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(host = %h.name, error = %e, "cannot list containers");
                continue;
            }
        };
        for c in found {
            let Some(l) = c.labels.as_ref().and_then(Labelled::read) else {
                continue;
            };
            out.push((
                h.clone(),
                ContainerInfo {
                    host: h.name.clone(),
                    id: c.id.clone().unwrap_or_default(),
                    name: c
                        .names
                        .as_ref()
                        .and_then(|n| n.first())
                        .map(|n| n.trim_start_matches('/').to_owned())
                        .unwrap_or_default(),
                    state: c.state.map(|s| s.to_string()).unwrap_or_default(),
                    created: c.created.unwrap_or_default(),
                    owner_alive: labels::owner_alive(&l.owner),
                    labels: l,
                    warm: false,
                },
            ));
        }
    }
    out
}

/// Removes aicli's containers: those of `only` (a batch's task), or, without it, those
/// whose owner is gone (every one with `all`). A remote run is stopped first (so its
/// wrapper packs the work) and its work is brought back into its worktree when that is
/// on this machine. Returns a line per container.
pub async fn remove(hosts: &[Arc<Host>], only: Option<(&str, &str)>, all: bool) -> Vec<String> {
    let mut lines = Vec::new();
    // The uid-mapped mounts of an aicli killed before its container started.
    let swept = super::idmap::sweep();
    if swept > 0 {
        lines.push(format!(
            "removed the uid-mapped mounts of {swept} container start(s) whose aicli is gone"
        ));
    }
    // The egress sockets of runs whose aicli is gone.
    let swept = super::egress::sweep();
    if swept > 0 {
        lines.push(format!(
            "removed the egress socket directories of {swept} run(s) whose aicli is gone"
        ));
    }
    for (host, info) in list(hosts, only).await {
        if only.is_none() && !all && info.owner_alive {
            continue;
        }
        let c = Container {
            docker: host.docker.clone(),
            id: info.id.clone(),
            host: host.name.clone(),
        };
        let mut note = String::new();
        if info.labels.remote {
            note = match recover_remote(&c, &info).await {
                Ok(true) => ", its work brought back".to_owned(),
                Ok(false) => ", it left no work to bring back".to_owned(),
                Err(e) => format!(", its work could not be brought back: {e}"),
            };
        }
        match remove_container(&c).await {
            Ok(()) => lines.push(format!(
                "removed {} on {} (task {}/{}, was {}){note}",
                info.name, info.host, info.labels.batch_id, info.labels.task_id, info.state
            )),
            Err(e) => lines.push(format!(
                "could not remove {} on {}: {e}",
                info.name, info.host
            )),
        }
    }
    lines
}

/// Stops a remote run (SIGTERM: its wrapper packs the work) and brings the work back.
async fn recover_remote(c: &Container, info: &ContainerInfo) -> Result<bool, super::DockerError> {
    if info.state == "running" || info.state == "paused" {
        let _ = c
            .docker
            .kill_container(
                &c.id,
                Some(KillContainerOptions {
                    signal: "SIGTERM".to_owned(),
                }),
            )
            .await;
        let wait = async {
            let mut s = c.docker.wait_container(
                &c.id,
                Some(WaitContainerOptions {
                    condition: "not-running".to_owned(),
                }),
            );
            let _ = s.next().await;
        };
        if tokio::time::timeout(PACK_WAIT, wait).await.is_err() {
            let _ = c
                .docker
                .kill_container(
                    &c.id,
                    Some(KillContainerOptions {
                        signal: "SIGKILL".to_owned(),
                    }),
                )
                .await;
        }
    }
    let scratch = std::env::temp_dir().join(format!(
        "aicli-recover-{}",
        &info.id[..12.min(info.id.len())]
    ));
    let tag = format!(
        "{}-{}-{}",
        info.labels.batch_id, info.labels.task_id, info.labels.attempt
    );
    let home = info
        .labels
        .home
        .as_deref()
        .filter(|h| h.parent().is_some_and(|p| p.is_dir()));
    remote::bring_back(c, info.labels.workspace.as_deref(), home, &scratch, &tag).await
}
