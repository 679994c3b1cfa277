//! `aicli containers [prune]`: aicli's containers on the Docker engines, and removing
//! those an aicli that was killed left (a remote run's work is brought back first).

use std::process::ExitCode;

use crate::providers::AiCliConfig;
use crate::runner::DockerRunner;
use crate::runner::docker::leftovers;
use anyhow::Context;
use clap::Subcommand;

/// `aicli containers ...`.
#[derive(Debug, Subcommand)]
pub enum ContainersAction {
    /// Remove the containers whose aicli is gone (with --all: every aicli container),
    /// bringing a remote run's work back into its worktree first.
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
            let found: Vec<_> = leftovers::list(runner.hosts(), None)
                .await
                .into_iter()
                .map(|(_, c)| c)
                .collect();
            if json_out {
                println!("{}", serde_json::to_string_pretty(&found)?);
            } else if found.is_empty() {
                println!("no aicli containers");
            } else {
                for c in &found {
                    println!(
                        "{} on {}: {} · task {}/{} (attempt {}, {}) · {}",
                        c.name,
                        c.host,
                        c.state,
                        c.labels.batch_id,
                        c.labels.task_id,
                        c.labels.attempt,
                        c.labels.provider,
                        if c.owner_alive {
                            "its aicli is running"
                        } else {
                            "its aicli is gone: `aicli containers prune` removes it"
                        }
                    );
                }
            }
        }
        Some(ContainersAction::Prune { all }) => {
            let lines = leftovers::remove(runner.hosts(), None, all).await;
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

/// Where the fake model APIs listen for containers: the first local engine's bridge
/// gateway (what `host.docker.internal` names in its containers).
pub async fn bridge_address(config: &AiCliConfig) -> anyhow::Result<std::net::IpAddr> {
    let env = std::env::vars().collect();
    let runner = DockerRunner::connect(&config.engine.docker, &env)
        .await
        .context("cannot reach a Docker engine")?;
    runner
        .hosts()
        .iter()
        .find(|h| !h.remote)
        .or_else(|| runner.hosts().first())
        .map(|h| h.reach.bind)
        .context("no Docker engine is connected")
}
