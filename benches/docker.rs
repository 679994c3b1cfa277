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

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aicli::mcp::{McpServer, McpServerOptions};
use aicli::providers::{AiCliConfig, DockerHostConfig, ProviderRegistry, RunnerKind, TaskSpec};
use aicli::{BatchEvent, BatchOptions, Engine};
use aicli_testkit::{CliWiring, FakeApi, RunDirs, Script, Vendor, WiringOptions};
use tokio_util::sync::CancellationToken;

#[path = "../tests/support/mod.rs"]
mod support;
use support::docker::{FIXTURES_IN_IMAGE, bridge_gateway, fake_cli_image, provider_image};
use support::fake::{fake_cli, fake_provider_config, fake_tasks, fixture};
use support::git::git_repo;
use support::wiring::{fake_model, wiring_extra_args};

const LINE_DELAY_MS: u64 = 20;

/// The local engine, up to 16 containers at once.
fn local_host() -> DockerHostConfig {
    DockerHostConfig {
        max_containers: Some(16),
        ..support::docker::local_host()
    }
}

/// (TaskStarted -> first CLI event, TaskStarted -> TaskFinished) per task, in ms.
async fn timed(
    engine: &Engine,
    tasks: Vec<TaskSpec>,
    opts: BatchOptions,
) -> (Vec<(f64, f64)>, Duration, usize, PathBuf) {
    let (tx, mut rx) = aicli::live::channel(64 << 20);
    let collector = tokio::spawn(async move {
        let mut started: HashMap<Arc<str>, Instant> = HashMap::new();
        let mut first: HashMap<Arc<str>, f64> = HashMap::new();
        let mut out = Vec::new();
        loop {
            match rx.recv().await {
                Ok(BatchEvent::TaskStarted { task_id, .. }) => {
                    started.insert(task_id, Instant::now());
                }
                Ok(BatchEvent::Agent { task_id, .. }) => {
                    if let Some(s) = started.get(&task_id) {
                        first
                            .entry(task_id)
                            .or_insert_with(|| s.elapsed().as_secs_f64() * 1000.0);
                    }
                }
                Ok(BatchEvent::TaskFinished { task_id, .. }) => {
                    if let (Some(s), Some(f)) = (started.get(&task_id), first.get(&task_id)) {
                        out.push((*f, s.elapsed().as_secs_f64() * 1000.0));
                    }
                }
                Ok(_) | Err(aicli::live::RecvError::Lagged(_)) => {}
                Err(aicli::live::RecvError::Closed) => break,
            }
        }
        out
    });
    let t0 = Instant::now();
    let b = engine
        .run_batch(tasks, opts, tx, CancellationToken::new())
        .await
        .unwrap();
    let wall = t0.elapsed();
    (collector.await.unwrap(), wall, b.n_succeeded, b.runs_dir)
}

/// The Docker runner's steps over every task of the batch recorded in `runs_dir`
/// (`setup` of each attempt): per step, its p50 and mean ms, in the order they run.
fn step_table(runs_dir: &Path) -> Vec<String> {
    let mut by_step: Vec<(String, Vec<f64>)> = Vec::new();
    for e in std::fs::read_dir(runs_dir.join("tasks")).unwrap().flatten() {
        let Ok(bytes) = std::fs::read(e.path().join("task.json")) else {
            continue;
        };
        let rec: aicli::TaskRecord = serde_json::from_slice(&bytes).unwrap();
        for a in &rec.attempts {
            for st in &a.setup {
                match by_step.iter_mut().find(|(n, _)| *n == st.step) {
                    Some((_, v)) => v.push(st.ms),
                    None => by_step.push((st.step.clone(), vec![st.ms])),
                }
            }
        }
    }
    by_step
        .into_iter()
        .map(|(step, mut v)| {
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            format!(
                "| {step} | {:.1} | {:.1} | {} |",
                v[v.len() / 2],
                mean(&v),
                v.len()
            )
        })
        .collect()
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// Part 1 for one CLI: `runs` plain answers locally, then in containers.
async fn first_event(
    vendor: Vendor,
    runs: usize,
    gateway: std::net::IpAddr,
    docker: &bollard::Docker,
) -> Vec<String> {
    let provider = vendor.cli_name();
    let fake = FakeApi::start_at(vendor, Script::text("Timed."), SocketAddr::new(gateway, 0))
        .await
        .unwrap();
    let model = fake_model(vendor);
    let mut options = WiringOptions::default().with_max_retries(0);
    if let Some(m) = model {
        options = options.with_model(m);
    }
    let port = fake.addr().port();
    let wiring_for =
        |host: &str| CliWiring::for_fake(vendor, &format!("http://{host}:{port}"), &options);
    let dirs =
        RunDirs::new_in(&PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-docker")).unwrap();
    wiring_for("x").write_files(&dirs.home).unwrap();
    let mut rows = Vec::new();
    let mut means = Vec::new();
    let container = "host.docker.internal".to_owned();
    for (label, runner, host, egress, warm) in [
        ("local", RunnerKind::Local, gateway.to_string(), true, false),
        (
            "container",
            RunnerKind::Docker,
            container.clone(),
            true,
            false,
        ),
        (
            "container, warm",
            RunnerKind::Docker,
            container.clone(),
            true,
            true,
        ),
        (
            "container, egress off",
            RunnerKind::Docker,
            container,
            false,
            false,
        ),
    ] {
        let wiring = wiring_for(&host);
        let mut config = AiCliConfig::builtin().unwrap();
        config.engine.runner = runner;
        config.engine.docker.hosts = vec![local_host()];
        config.engine.docker.egress.enabled = egress;
        {
            let p = config.providers.get_mut(provider).unwrap();
            p.binary_path = Some(aicli_testkit::installed_cli(vendor).unwrap());
            p.default_model = model.map(str::to_owned);
            p.extra_args = wiring_extra_args(&wiring);
            p.env.extend(wiring.env.clone());
        }
        if runner == RunnerKind::Docker {
            provider_image(docker, &config, provider).await;
        }
        let repo = git_repo();
        let cancel = CancellationToken::new();
        let _stop = cancel.clone().drop_guard();
        let mut mo = McpServerOptions::from_config(&config, repo.path());
        mo.allowed_hosts
            .extend(aicli::runner::docker::container_hosts(
                &config.engine.docker,
            ));
        let server = Arc::new(McpServer::start(mo, cancel).await.unwrap());
        let reg = ProviderRegistry::from_config(&config).unwrap();
        let engine = Engine::new(config, reg)
            .with_env(dirs.base_env())
            .with_agent_server(server);
        let mut firsts = Vec::new();
        let mut totals = Vec::new();
        // One warm-up run (page cache, image layers), then the measured ones, one at a time.
        // Warm: each a batch of two at parallel 1, the second measured, its container made
        // while the first ran.
        for i in 0..=runs {
            let mut opts = BatchOptions::new(repo.path());
            opts.provider = Some(provider.to_owned());
            opts.max_parallel = Some(1);
            let task = |id: String| TaskSpec {
                id,
                prompt: "Say hello".into(),
                ..TaskSpec::default()
            };
            let mut tasks = vec![task(format!("t{i}"))];
            if warm {
                tasks.push(task(format!("t{i}-warm")));
            }
            let n = tasks.len();
            let (times, _, ok, _) = timed(&engine, tasks, opts).await;
            assert_eq!(ok, n, "{provider} {label} run {i} failed");
            if i > 0 {
                firsts.push(times[n - 1].0);
                totals.push(times[n - 1].1);
            }
        }
        means.push((mean(&firsts), mean(&totals)));
        rows.push(format!(
            "| {provider} | {label} | {:.0} | {:.0} |",
            mean(&firsts),
            mean(&totals)
        ));
    }
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
    fake.shutdown().await;
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
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let runs = args.first().copied().unwrap_or(3);
    let n = args.get(1).copied().unwrap_or(50);
    let parallel = args.get(2).copied().unwrap_or(10);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let docker = bollard::Docker::connect_with_local_defaults()
            .unwrap()
            .negotiate_version()
            .await
            .expect("a Docker engine (../shared/tools/setup-docker-engine.sh)");
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
