//! The swarm runner against the Docker runner, side by side in one run.
//!
//! `cargo bench --bench swarm [-- RUNS TASKS PARALLEL]` (default 3 runs per CLI, 50 tasks
//! at parallel 10). Needs the Docker engine in no swarm (the bench makes one and leaves
//! it), `ip` and `nsenter` for the second node, and the pinned CLIs
//! (`.ci/install-clis.sh`).
//!
//! 1. **Start to first event, per CLI**: a plain answer of the real `claude`, `codex` and
//!    `gemini` against the fake model API on the bridge gateway, through the whole engine:
//!    a local container (egress off, as a swarm job has no allowlist), then a swarm job on
//!    a single-node swarm (`docker swarm init --advertise-addr 127.0.0.1`).
//! 2. **Throughput**: TASKS tiny tasks at PARALLEL, `aicli-fake-cli` replaying Claude's
//!    `text` transcript with 20 ms per line: containers, swarm jobs on one node, swarm
//!    jobs on two (`tests/tools/swarm-two-nodes.sh`: a second dockerd in a network
//!    namespace joined as a worker); tasks/s and where a job's set-up goes.
//! 3. **Workspace transfer**: one fake-CLI task in a repository holding 10 MB and 200 MB
//!    of incompressible committed files: a container (bind mount, nothing travels)
//!    against a swarm job (the start bundle, the files, the work back), with the swarm
//!    job's bundle and bring-back steps.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use aicli::providers::{AiCliConfig, DockerHostConfig, ProviderRegistry, RunnerKind};
use aicli::{BatchOptions, Engine};
use aicli_testkit::Vendor;

#[path = "../tests/support/mod.rs"]
mod support;
use support::bench::{
    FirstEventSetup, first_event_means, local_docker, mean, runs_tasks_parallel, step_table, timed,
};
use support::docker::{FIXTURES_IN_IMAGE, bridge_gateway, fake_cli_image};
use support::fake::{fake_provider_config, fake_tasks};
use support::git::{git, git_repo};

const LINE_DELAY_MS: u64 = 20;
const TWO_NODES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/tools/swarm-two-nodes.sh"
);
const WORKER_SOCK: &str = "unix:///var/tmp/aicli-sw1/docker.sock";

fn host(name: &str, url: &str) -> DockerHostConfig {
    DockerHostConfig {
        name: name.to_owned(),
        url: url.to_owned(),
        max_containers: Some(16),
        ..support::docker::local_host()
    }
}

/// An engine whose provider `fake` runs the fake CLI in `image` (the Claude adapter's
/// command), under `runner`, on `hosts`.
fn fake_engine(
    runner: RunnerKind,
    hosts: Vec<DockerHostConfig>,
    image: &str,
    parallel: usize,
) -> Engine {
    let mut config = AiCliConfig::builtin().unwrap();
    config.engine.max_parallel = parallel;
    config.engine.runner = runner;
    config.engine.docker.hosts = hosts;
    config.engine.docker.egress.enabled = false;
    config
        .engine
        .docker
        .images
        .insert("fake".into(), image.to_owned());
    let fake = fake_provider_config(
        "claude",
        &Path::new(FIXTURES_IN_IMAGE).join("claude/text"),
        &[],
    );
    config.providers.insert("fake".into(), fake);
    let reg = ProviderRegistry::from_config(&config).unwrap();
    Engine::new(config, reg).with_env(BTreeMap::from([(
        "PATH".to_owned(),
        std::env::var("PATH").unwrap_or_default(),
    )]))
}

/// Part 2, one row: `n` fake-CLI tasks at `parallel`; (row, tasks/s, steps).
async fn throughput(
    label: &str,
    engine: &Engine,
    n: usize,
    parallel: usize,
) -> (String, f64, Vec<String>) {
    let dir = git_repo();
    let mut opts = BatchOptions::new(dir.path());
    opts.provider = Some("fake".into());
    opts.worktrees = false;
    let (times, wall, ok, runs_dir) =
        timed(engine, fake_tasks(n, "bench", LINE_DELAY_MS), opts).await;
    if ok < n {
        // Said, not fatal: the figures of the others still stand.
        for e in std::fs::read_dir(runs_dir.join("tasks")).unwrap().flatten() {
            let Ok(bytes) = std::fs::read(e.path().join("task.json")) else {
                continue;
            };
            let rec: aicli::TaskRecord = serde_json::from_slice(&bytes).unwrap();
            if let Some(r) = rec.latest_result().filter(|r| !r.success) {
                eprintln!("{label}: task {} failed: {:?}", rec.task.id, r.error);
            }
        }
    }
    let rate = ok as f64 / wall.as_secs_f64();
    let mut firsts: Vec<f64> = times.iter().map(|t| t.0).collect();
    firsts.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let row = format!(
        "| {label} | {ok} of {n} | {parallel} | {:.1} | {rate:.2} | {:.0} |",
        wall.as_secs_f64(),
        firsts[firsts.len() / 2]
    );
    (row, rate, step_table(&runs_dir))
}

/// Part 3, one row: `runs` single tasks in a repository with `mb` MB committed.
async fn transfer(label: &str, engine: &Engine, mb: usize, runs: usize) -> Vec<String> {
    let repo = git_repo();
    for i in 0..mb.div_ceil(10) {
        let size = (mb - i * 10).min(10) << 20;
        let mut data = vec![0u8; size];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut data);
        std::fs::write(repo.path().join(format!("blob{i}.bin")), data).unwrap();
    }
    git(repo.path(), &["add", "."]);
    git(repo.path(), &["commit", "-q", "-m", "data"]);
    let mut totals = Vec::new();
    let mut rows = Vec::new();
    for i in 0..runs {
        let mut opts = BatchOptions::new(repo.path());
        opts.provider = Some("fake".into());
        let mut tasks = fake_tasks(1, "bench", 0);
        tasks[0].id = format!("x{i}");
        let (times, _, ok, runs_dir) = timed(engine, tasks, opts).await;
        assert_eq!(ok, 1, "{label} {mb} MB");
        totals.push(times[0].1);
        if i + 1 == runs {
            rows = step_table(&runs_dir);
        }
    }
    let mut out = vec![format!("| {label} | {mb} MB | {:.0} | |", mean(&totals))];
    out.extend(
        rows.into_iter()
            .filter(|r| r.contains("bundle") || r.contains("bring back") || r.contains("create"))
            .map(|r| format!("| {label}: {}", r.trim_start_matches("| "))),
    );
    out
}

fn main() {
    let (runs, n, parallel) = runs_tasks_parallel((3, 50, 10));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let docker = local_docker().await;
        assert!(
            docker.inspect_swarm().await.is_err(),
            "the engine is in a swarm already: leave it (docker swarm leave --force) to run this bench"
        );
        let gateway = bridge_gateway().await;
        let local = || vec![host("local", "unix:///var/run/docker.sock")];
        docker
            .init_swarm(bollard::models::SwarmInitRequest {
                listen_addr: Some("127.0.0.1:2377".to_owned()),
                advertise_addr: Some("127.0.0.1".to_owned()),
                ..Default::default()
            })
            .await
            .expect("docker swarm init");

        println!("\nStart to first event, plain answer, mean of {runs} (after one warm-up), ms:\n");
        println!("| CLI | runner | start → first event | start → finished |");
        println!("|---|---|---|---|");
        let hd = "host.docker.internal";
        let setups = [
            FirstEventSetup {
                egress: false,
                ..FirstEventSetup::new("container, egress off", RunnerKind::Docker, hd)
            },
            FirstEventSetup::new("swarm job, one node", RunnerKind::Swarm, hd),
        ];
        for v in [Vendor::Anthropic, Vendor::OpenAi, Vendor::Gemini] {
            let means = first_event_means(v, runs, gateway, &docker, local(), &setups).await;
            let cli = v.cli_name();
            for (s, (f, t)) in setups.iter().zip(&means) {
                println!("| {cli} | {} | {f:.0} | {t:.0} |", s.label);
            }
            println!(
                "| {cli} | swarm − container | {:+.0} | {:+.0} |",
                means[1].0 - means[0].0,
                means[1].1 - means[0].1
            );
        }

        let image = fake_cli_image(&docker).await;
        println!("\nThroughput, aicli-fake-cli ({LINE_DELAY_MS} ms per line of Claude's text transcript):\n");
        println!("| runner | tasks | parallel | wall s | tasks/s | first event p50 ms |");
        println!("|---|---|---|---|---|---|");
        let (row, container_rate, _) =
            throughput("container", &fake_engine(RunnerKind::Docker, local(), &image, parallel), n, parallel).await;
        println!("{row}");
        let (row, one_rate, steps) =
            throughput("swarm, one node", &fake_engine(RunnerKind::Swarm, local(), &image, parallel), n, parallel).await;
        println!("{row}");

        println!("\nWorkspace transfer, one fake-CLI task, mean of {runs} ms (start → finished), and the swarm job's steps (p50 / mean ms):\n");
        println!("| runner | repository | ms | |");
        println!("|---|---|---|---|");
        for mb in [10, 200] {
            for (label, runner) in [("container", RunnerKind::Docker), ("swarm", RunnerKind::Swarm)] {
                for row in transfer(label, &fake_engine(runner, local(), &image, 1), mb, runs).await {
                    println!("{row}");
                }
            }
        }
        docker
            .leave_swarm(Some(bollard::query_parameters::LeaveSwarmOptions { force: true }))
            .await
            .expect("docker swarm leave");

        // Two nodes: the worker gets the image through its engine.
        let up = Command::new("bash").arg(TWO_NODES).arg("up").output().unwrap();
        let two = if up.status.success() {
            let worker = bollard::Docker::connect_with_unix(
                WORKER_SOCK.trim_start_matches("unix://"),
                300,
                bollard::API_DEFAULT_VERSION,
            )
            .unwrap();
            support::docker::load_image(&docker, &worker, &image).await;
            let hosts = vec![host("manager", "unix:///var/run/docker.sock"), host("worker", WORKER_SOCK)];
            let r = throughput("swarm, two nodes", &fake_engine(RunnerKind::Swarm, hosts, &image, parallel), n, parallel).await;
            Some(r)
        } else {
            None
        };
        let _ = Command::new("bash").arg(TWO_NODES).arg("down").output();
        match &two {
            Some((row, _, _)) => println!("{row}"),
            None => println!(
                "| swarm, two nodes | skipped: {} | | | | |",
                String::from_utf8_lossy(&up.stderr).trim()
            ),
        }
        println!("| swarm one node / container | | | | {:.2}x | |", one_rate / container_rate);
        if let Some((_, two_rate, _)) = two {
            println!("| swarm two nodes / one node | | | | {:.2}x | |", two_rate / one_rate);
        }
        println!("\nWhere a swarm job's set-up goes (the run records' `setup`), {n} tasks at parallel {parallel}, one node:\n");
        println!("| step | p50 ms | mean ms | n |");
        println!("|---|---|---|---|");
        for row in steps {
            println!("{row}");
        }
    });
}
