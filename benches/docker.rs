//! The Docker runner against the local runner, side by side in one run.
//!
//! `cargo bench --bench docker [-- RUNS TASKS PARALLEL]` (default 3 runs per CLI, 50
//! tasks at parallel 10). Needs the Docker engine (`../shared/tools/setup-docker-engine.sh`)
//! and the pinned CLIs (`.ci/install-clis.sh`); builds missing images from aicli's npm
//! cache.
//!
//! 1. **Start to first event, per CLI**: a plain answer of the real `claude`, `codex` and
//!    `gemini` against the fake model API (listening on the bridge gateway, reached
//!    directly by the local CLI and as `host.docker.internal` from the container), each
//!    through the whole engine (worktree, MCP server, run record), from `TaskStarted` to
//!    the CLI's first line and to `TaskFinished`: local process, then container (with the
//!    egress allowlist, the default), then a warm container (the second task of a batch
//!    at parallel 1, its container made while the first ran), then container with
//!    `egress.enabled` off.
//! 2. **Throughput**: TASKS tiny tasks at PARALLEL at once, `aicli-fake-cli` replaying
//!    Claude's `text` transcript with 20 ms per line, started by the Claude adapter (its
//!    argv, the prompt on stdin), as local processes and in containers (the fake CLI
//!    baked into a small image on the runtime layer), tasks/s and the ratio; then where a
//!    container run's set-up time goes: each runner step (the attempt records' `setup`:
//!    engine wait, image inspect, create, attach, start, go, remove; a warm run's wait
//!    for its container), p50 and mean.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;

use aicli::providers::{AiCliConfig, DockerHostConfig, ProviderRegistry, RunnerKind};
use aicli::{BatchOptions, Engine};
use aicli_testkit::Vendor;

#[path = "../tests/support/mod.rs"]
mod support;
use support::bench::{
    FirstEventSetup, first_event_means, local_docker, runs_tasks_parallel, step_table, timed,
};
use support::docker::{FIXTURES_IN_IMAGE, bridge_gateway, fake_cli_image};
use support::fake::{fake_cli, fake_provider_config, fake_tasks, fixture};

const LINE_DELAY_MS: u64 = 20;

/// The local engine, up to 16 containers at once.
fn local_host() -> DockerHostConfig {
    DockerHostConfig {
        max_containers: Some(16),
        ..support::docker::local_host()
    }
}

/// Part 1 for one CLI: `runs` plain answers locally, then in containers.
async fn first_event(
    vendor: Vendor,
    runs: usize,
    gateway: std::net::IpAddr,
    docker: &bollard::Docker,
) -> Vec<String> {
    let provider = vendor.cli_name();
    let container = "host.docker.internal";
    let setups = [
        FirstEventSetup::new("local", RunnerKind::Local, &gateway.to_string()),
        FirstEventSetup::new("container", RunnerKind::Docker, container),
        FirstEventSetup {
            warm: true,
            ..FirstEventSetup::new("container, warm", RunnerKind::Docker, container)
        },
        FirstEventSetup {
            egress: false,
            ..FirstEventSetup::new("container, egress off", RunnerKind::Docker, container)
        },
    ];
    let means = first_event_means(vendor, runs, gateway, docker, vec![local_host()], &setups).await;
    let mut rows: Vec<String> = setups
        .iter()
        .zip(&means)
        .map(|(s, (f, t))| format!("| {provider} | {} | {f:.0} | {t:.0} |", s.label))
        .collect();
    let (lf, lt) = means[0];
    let (df, dt) = means[1];
    let (wf, wt) = means[2];
    let (of, ot) = means[3];
    rows.push(format!(
        "| {provider} | container − local | {:+.0} | {:+.0} |",
        df - lf,
        dt - lt
    ));
    rows.push(format!(
        "| {provider} | warm container − local | {:+.0} | {:+.0} |",
        wf - lf,
        wt - lt
    ));
    rows.push(format!(
        "| {provider} | egress on − off | {:+.0} | {:+.0} |",
        df - of,
        dt - ot
    ));
    rows
}

/// Part 2: `n` fake-CLI tasks at `parallel`, local and in containers; tasks/s each.
async fn throughput(
    n: usize,
    parallel: usize,
    docker: &bollard::Docker,
) -> (Vec<String>, Vec<String>) {
    let image = fake_cli_image(docker).await;
    let mut rows = Vec::new();
    let mut steps = Vec::new();
    let mut rates = Vec::new();
    for runner in [RunnerKind::Local, RunnerKind::Docker] {
        let mut config = AiCliConfig::builtin().unwrap();
        config.engine.max_parallel = parallel;
        config.engine.runner = runner;
        config.engine.docker.hosts = vec![local_host()];
        config
            .engine
            .docker
            .images
            .insert("fake".into(), image.clone());
        // The Claude adapter's command (the prompt on the CLI's stdin, as for the real
        // CLIs) running the fake CLI: on this machine, or the one in the image.
        let (binary, fixture) = match runner {
            RunnerKind::Local => (Some(fake_cli()), fixture("claude", "text")),
            RunnerKind::Docker | RunnerKind::Swarm => {
                (None, Path::new(FIXTURES_IN_IMAGE).join("claude/text"))
            }
        };
        let mut fake = fake_provider_config("claude", &fixture, &[]);
        fake.binary_path = binary;
        config.providers.insert("fake".into(), fake);
        let reg = ProviderRegistry::from_config(&config).unwrap();
        let engine = Engine::new(config, reg).with_env(BTreeMap::from([(
            "PATH".to_owned(),
            std::env::var("PATH").unwrap_or_default(),
        )]));
        let dir = tempfile::tempdir().unwrap();
        let tasks = fake_tasks(n, "bench", LINE_DELAY_MS);
        let mut opts = BatchOptions::new(dir.path());
        opts.provider = Some("fake".into());
        opts.worktrees = false;
        let (times, wall, ok, runs_dir) = timed(&engine, tasks, opts).await;
        assert_eq!(ok, n, "{runner}: {ok} of {n} succeeded");
        if runner == RunnerKind::Docker {
            steps = step_table(&runs_dir);
        }
        let rate = n as f64 / wall.as_secs_f64();
        rates.push(rate);
        let mut firsts: Vec<f64> = times.iter().map(|t| t.0).collect();
        firsts.sort_by(|a, b| a.partial_cmp(b).unwrap());
        rows.push(format!(
            "| {runner} | {n} | {parallel} | {:.1} | {rate:.1} | {:.0} |",
            wall.as_secs_f64(),
            firsts[firsts.len() / 2]
        ));
    }
    rows.push(format!(
        "| container / local | | | | {:.2}x | |",
        rates[1] / rates[0]
    ));
    (rows, steps)
}

fn main() {
    let (runs, n, parallel) = runs_tasks_parallel((3, 50, 10));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let docker = local_docker().await;
        let gateway = bridge_gateway().await;
        println!("\nStart to first event, plain answer, mean of {runs} (after one warm-up), ms:\n");
        println!("| CLI | runner | start → first event | start → finished |");
        println!("|---|---|---|---|");
        for v in [Vendor::Anthropic, Vendor::OpenAi, Vendor::Gemini] {
            for row in first_event(v, runs, gateway, &docker).await {
                println!("{row}");
            }
        }
        println!("\nThroughput, aicli-fake-cli ({LINE_DELAY_MS} ms per line of Claude's text transcript):\n");
        println!("| runner | tasks | parallel | wall s | tasks/s | first event p50 ms |");
        println!("|---|---|---|---|---|---|");
        let (rows, steps) = throughput(n, parallel, &docker).await;
        for row in rows {
            println!("{row}");
        }
        println!("\nWhere a container run's set-up goes (the run records' `setup`), {n} tasks at parallel {parallel}:\n");
        println!("| step | p50 ms | mean ms | n |");
        println!("|---|---|---|---|");
        for row in steps {
            println!("{row}");
        }
    });
}
