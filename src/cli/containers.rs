//! `aicli containers [prune]`: aicli's containers on the Docker engines, and removing
//! those an aicli that was killed left (a remote run's work is brought back first).

use std::process::ExitCode;

use crate::providers::AiCliConfig;
use crate::runner::DockerRunner;
use crate::runner::docker::{egress, labels, leftovers, swarm};
use anyhow::Context;
use clap::Subcommand;

/// `aicli containers ...`.
#[derive(Debug, Subcommand)]
pub enum ContainersAction {
    /// Remove the containers and swarm jobs whose aicli is gone (with --all: every
    /// aicli container and job), bringing a remote run's work back into its worktree
    /// first.
    Prune {
        /// Also the containers of aicli processes still running.
        #[arg(long)]
        all: bool,
    },
}

/// Runs `aicli containers …`.
pub async fn run(
    config: &AiCliConfig,
    json_out: bool,
    action: Option<ContainersAction>,
) -> anyhow::Result<ExitCode> {
    let env = std::env::vars().collect();
    let runner = DockerRunner::connect(&config.engine.docker, &env)
        .await
        .context("cannot reach a Docker engine")?;
    match action {
        None => {
            let mut found = Vec::new();
            for (host, mut c) in leftovers::list(runner.hosts(), None).await {
                if c.state == "running" {
                    c.warm = leftovers::waiting(&host.docker, &c.id).await;
                }
                found.push(c);
            }
            let proxies = egress::list();
            let mut jobs = Vec::new();
            for h in runner.hosts() {
                jobs.extend(swarm::list_jobs(h).await);
            }
            if json_out {
                let v = serde_json::json!({"containers": found, "swarm_jobs": jobs, "egress_proxies": proxies});
                println!("{}", serde_json::to_string_pretty(&v)?);
                return Ok(ExitCode::SUCCESS);
            }
            if found.is_empty() && jobs.is_empty() {
                println!("no aicli containers");
            }
            for c in &found {
                println!(
                    "{} on {}: {} · task {}/{} (attempt {}, {}) · {} old · {}",
                    c.name,
                    c.host,
                    if c.warm {
                        "warm, waiting for its task's turn"
                    } else {
                        &c.state
                    },
                    c.labels.batch_id,
                    c.labels.task_id,
                    c.labels.attempt,
                    c.labels.provider,
                    age(c.created),
                    owner_words(Some(&c.labels.owner), c.owner_alive)
                );
            }
            for j in &jobs {
                println!(
                    "swarm job {} on {}: {} · task {}/{} (attempt {}, {}) · {} old · {}",
                    j.name,
                    j.host,
                    if j.state.is_empty() {
                        "pending"
                    } else {
                        &j.state
                    },
                    j.labels.batch_id,
                    j.labels.task_id,
                    j.labels.attempt,
                    j.labels.provider,
                    age(j.created),
                    owner_words(Some(&j.labels.owner), j.owner_alive)
                );
            }
            for p in &proxies {
                println!(
                    "egress proxy {} · {} old · {}",
                    p.dir.display(),
                    age(p.created),
                    owner_words(p.owner.as_deref(), p.owner_alive)
                );
            }
        }
        Some(ContainersAction::Prune { all }) => {
            let mut lines = leftovers::remove(runner.hosts(), None, all).await;
            // Swarm jobs (their services, secrets and configs), on engines that are
            // swarm managers.
            let engines: Vec<_> = runner.hosts().iter().map(|h| h.docker.clone()).collect();
            for h in runner.hosts() {
                lines.extend(swarm::remove_leftovers(h, &engines, None, all).await);
            }
            if json_out {
                println!("{}", serde_json::to_string_pretty(&lines)?);
            } else if lines.is_empty() {
                println!("nothing to remove");
            } else {
                for l in &lines {
                    println!("{l}");
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Where the fake model APIs listen for containers of runner `kind`: what
/// `host.docker.internal` names in them. For Docker, the first local engine's bridge
/// gateway; for the swarm, the address its jobs reach aicli at on every node.
pub async fn bridge_address(
    config: &AiCliConfig,
    kind: crate::providers::RunnerKind,
) -> anyhow::Result<std::net::IpAddr> {
    let env = std::env::vars().collect();
    let runner = if kind == crate::providers::RunnerKind::Swarm {
        DockerRunner::connect_swarm(&config.engine.docker, &env).await
    } else {
        DockerRunner::connect(&config.engine.docker, &env).await
    }
    .context("cannot reach a Docker engine")?;
    runner
        .hosts()
        .iter()
        .find(|h| !h.remote)
        .or_else(|| runner.hosts().first())
        .map(|h| h.reach.bind)
        .context("no Docker engine is connected")
}

/// How long ago `unix` (seconds) was, to the second.
fn age(unix: i64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix.max(0) as u64);
    crate::util::ago(at).unwrap_or_else(|| "0s".to_owned())
}

/// Whose it is (`host:pid:start` as `aicli pid 123 on host`) and whether that aicli runs.
fn owner_words(owner: Option<&str>, alive: bool) -> String {
    let who = owner
        .and_then(labels::owner_parts)
        .map(|(host, pid, _)| format!("aicli pid {pid} on {host}"))
        .unwrap_or_else(|| "an unknown aicli".to_owned());
    if alive {
        format!("{who}, running")
    } else {
        format!("{who}, gone: `aicli containers prune` removes it")
    }
}
