//! What the benches share beyond the harness: their command lines, this process's CPU,
//! a batch timed per task from its live events, and the runner's steps of its records.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aicli::BatchEvent;
use tokio_util::sync::CancellationToken;

/// A bench's positional arguments `[TASKS [PARALLEL...]]` (flags such as cargo's
/// `--bench` left out), with these defaults.
pub fn tasks_and_parallels(
    default_tasks: usize,
    default_parallels: &[usize],
) -> (usize, Vec<usize>) {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let n = args
        .first()
        .and_then(|a| a.parse().ok())
        .unwrap_or(default_tasks);
    let mut parallels: Vec<usize> = args.iter().skip(1).filter_map(|a| a.parse().ok()).collect();
    if parallels.is_empty() {
        parallels = default_parallels.to_vec();
    }
    (n, parallels)
}

/// A bench's positional arguments `[RUNS [TASKS [PARALLEL]]]`, with these defaults.
pub fn runs_tasks_parallel(defaults: (usize, usize, usize)) -> (usize, usize, usize) {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    (
        args.first().copied().unwrap_or(defaults.0),
        args.get(1).copied().unwrap_or(defaults.1),
        args.get(2).copied().unwrap_or(defaults.2),
    )
}

/// The local Docker engine, its API version negotiated; a bench without one fails here.
pub async fn local_docker() -> bollard::Docker {
    bollard::Docker::connect_with_local_defaults()
        .unwrap()
        .negotiate_version()
        .await
        .expect("a Docker engine (../shared/tools/setup-docker-engine.sh)")
}

/// This process's own CPU (user + system) so far.
pub fn self_cpu() -> std::time::Duration {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    let ru = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr());
        ru.assume_init()
    };
    let tv = |t: libc::timeval| std::time::Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// (TaskStarted -> first CLI event, TaskStarted -> TaskFinished) per task, in ms.
pub async fn timed(
    engine: &aicli::Engine,
    tasks: Vec<aicli::providers::TaskSpec>,
    opts: aicli::BatchOptions,
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
                // The CLI's own first line: not what aicli says itself (a swarm job's
                // placement, say), which has no raw line.
                Ok(BatchEvent::Agent { task_id, event }) if !event.raw.is_empty() => {
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
pub fn step_table(runs_dir: &Path) -> Vec<String> {
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

pub fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// One set-up of a first-event measurement: a label, the runner, the host the CLI
/// reaches the fake API under, the egress allowlist, and whether the measured task's
/// container is made ahead (the second of a batch at parallel 1).
#[derive(Debug, Clone)]
pub struct FirstEventSetup {
    /// The row's label.
    pub label: String,
    /// The runner.
    pub runner: aicli::providers::RunnerKind,
    /// The fake API's host as the CLI reaches it.
    pub host: String,
    /// `engine.docker.egress.enabled`.
    pub egress: bool,
    /// The measured task's container made ahead.
    pub warm: bool,
}

impl FirstEventSetup {
    /// A set-up with the egress allowlist on (the default) and no container ahead.
    pub fn new(label: &str, runner: aicli::providers::RunnerKind, host: &str) -> FirstEventSetup {
        FirstEventSetup {
            label: label.to_owned(),
            runner,
            host: host.to_owned(),
            egress: true,
            warm: false,
        }
    }
}

/// `runs` plain answers of `vendor`'s real CLI (after one warm-up) against the fake API
/// on `gateway`, through the whole engine, under each of `setups` (the engines `hosts`):
/// the mean ms from `TaskStarted` to the first CLI event and to `TaskFinished`, per
/// set-up.
pub async fn first_event_means(
    vendor: aicli_testkit::Vendor,
    runs: usize,
    gateway: std::net::IpAddr,
    docker: &bollard::Docker,
    hosts: Vec<aicli::providers::DockerHostConfig>,
    setups: &[FirstEventSetup],
) -> Vec<(f64, f64)> {
    use aicli::mcp::{McpServer, McpServerOptions};
    use aicli::providers::{AiCliConfig, ProviderRegistry, RunnerKind, TaskSpec};
    use aicli::{BatchOptions, Engine};
    use aicli_testkit::{CliWiring, FakeApi, RunDirs, Script, WiringOptions};
    let provider = vendor.cli_name();
    let fake = FakeApi::start_at(
        vendor,
        Script::text("Timed."),
        std::net::SocketAddr::new(gateway, 0),
    )
    .await
    .unwrap();
    let model = super::wiring::fake_model(vendor);
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
    let mut means = Vec::new();
    for setup in setups {
        let wiring = wiring_for(&setup.host);
        let mut config = AiCliConfig::builtin().unwrap();
        config.engine.runner = setup.runner;
        config.engine.docker.hosts = hosts.clone();
        config.engine.docker.egress.enabled = setup.egress;
        {
            let p = config.providers.get_mut(provider).unwrap();
            p.binary_path = Some(aicli_testkit::installed_cli(vendor).unwrap());
            p.default_model = model.map(str::to_owned);
            p.extra_args = super::wiring::wiring_extra_args(&wiring);
            p.env.extend(wiring.env.clone());
        }
        if setup.runner != RunnerKind::Local {
            super::docker::provider_image(docker, &config, provider).await;
        }
        let repo = super::git::git_repo();
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
            if setup.warm {
                tasks.push(task(format!("t{i}-warm")));
            }
            let n = tasks.len();
            let (times, _, ok, _) = timed(&engine, tasks, opts).await;
            assert_eq!(ok, n, "{provider} {} run {i} failed", setup.label);
            if i > 0 {
                firsts.push(times[n - 1].0);
                totals.push(times[n - 1].1);
            }
        }
        means.push((mean(&firsts), mean(&totals)));
    }
    fake.shutdown().await;
    means
}
