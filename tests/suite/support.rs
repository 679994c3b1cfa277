//! Shared test helpers: real git repos in temp dirs, an engine over the fake CLI, and
//! process checks.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use aicli::providers::{AiCliConfig, ProviderRegistry, SharedProvider};
use aicli::testing::ReplayProvider;
use aicli::{BatchEvent, Engine};

use crate::support::fake::replay_args;

pub use crate::support::fake::{fake_cli, fixture};
pub use crate::support::git::{git, git_repo, git_repo_in};

/// The built-in config with engine knobs turned for quick tests.
pub fn test_config() -> AiCliConfig {
    let mut c = AiCliConfig::builtin().expect("builtin config");
    c.engine.kill_grace_ms = 300;
    c.engine.retry.base_delay_ms = 50;
    c.engine.retry.max_delay_ms = 200;
    c
}

/// A replay provider called `name` parsing with the built-in adapter `adapter`.
pub fn replay_provider(name: &str, adapter: &str, fixture: Option<&Path>) -> ReplayProvider {
    let reg =
        ProviderRegistry::from_config(&AiCliConfig::builtin().expect("config")).expect("registry");
    ReplayProvider::new(
        name,
        reg.get(adapter).expect("adapter"),
        &fake_cli(),
        fixture,
    )
}

/// An engine whose registry holds the built-in providers plus `extra`.
pub fn engine_with(config: AiCliConfig, extra: Vec<SharedProvider>) -> Engine {
    let mut reg = ProviderRegistry::from_config(&config).expect("registry");
    for p in extra {
        reg.register(p);
    }
    let env: BTreeMap<String, String> = std::env::vars().collect();
    Engine::new(config, reg).with_env(env)
}

/// A live channel and a task collecting everything it carries.
pub fn collect_events() -> (aicli::LiveSender, tokio::task::JoinHandle<Vec<BatchEvent>>) {
    let (tx, mut rx) = aicli::live::channel(256 << 20);
    let h = tokio::spawn(async move {
        let mut out = Vec::new();
        loop {
            match rx.recv().await {
                Ok(e) => out.push(e),
                Err(aicli::live::RecvError::Lagged(_)) => continue,
                Err(aicli::live::RecvError::Closed) => break,
            }
        }
        out
    });
    (tx, h)
}

/// Whether a process is alive (not a zombie).
pub fn alive(pid: u32) -> bool {
    aicli::proc::procfs::proc_stat(pid).is_some_and(|s| s.state != 'Z' && s.state != 'X')
}

/// Reads a pid file the fake CLI wrote and asserts that none of the pids is alive
/// (allowing the kernel `within` to finish the kills).
pub async fn assert_all_gone(pid_file: &Path, within: Duration) {
    let text = std::fs::read_to_string(pid_file).expect("pid file");
    let pids: Vec<u32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
    assert!(!pids.is_empty(), "no pids in {}", pid_file.display());
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|p| alive(*p)).collect();
        if left.is_empty() {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("processes left behind: {left:?} (of {pids:?})");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An engine with a `fake` provider: the fake CLI replaying Claude's `text` transcript
/// (tasks change its behaviour through `extra_args`).
pub fn fake_engine() -> Engine {
    engine_with(
        test_config(),
        vec![shared(replay_provider(
            "fake",
            "claude",
            Some(&fixture("claude", "text")),
        ))],
    )
}

/// Shared handle for a provider.
pub fn shared(p: ReplayProvider) -> SharedProvider {
    Arc::new(p)
}

/// Writes a config file in `dir` whose default provider `fake` runs the fake CLI through
/// the real Claude adapter, replaying Claude's `text` transcript (plus `extra_args`).
/// Returns its path, for `aicli --config`.
pub fn fake_cli_config(dir: &Path, extra_args: &[&str]) -> PathBuf {
    fake_cli_config_with(dir, extra_args, serde_json::json!({}))
}

/// [`fake_cli_config`] with `engine` as the config's engine settings.
pub fn fake_cli_config_with(dir: &Path, extra_args: &[&str], engine: serde_json::Value) -> PathBuf {
    let mut args = replay_args(&fixture("claude", "text"));
    args.extend(extra_args.iter().map(|a| (*a).to_owned()));
    let cfg = dir.join("aicli.json");
    std::fs::write(
        &cfg,
        serde_json::json!({
            "default_provider": "fake",
            "providers": {"fake": {
                "adapter": "claude",
                "binary_path": fake_cli(),
                "extra_args": args,
            }},
            "engine": engine,
        })
        .to_string(),
    )
    .expect("write the config");
    cfg
}

/// Every file under `dir` (not the directories), in no particular order.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// Sends SIGKILL to `child` and reaps it.
pub fn kill_9(child: &mut std::process::Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill -9");
    child.wait().expect("wait");
}

/// The first batch directory under `runs` once `ready` holds for it, looked at every
/// `every`; fails saying `what` did not happen after `within`.
pub fn wait_for_batch(
    runs: &Path,
    within: Duration,
    every: Duration,
    what: &str,
    ready: impl Fn(&Path) -> bool,
) -> PathBuf {
    let deadline = std::time::Instant::now() + within;
    loop {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(every);
        let Some(b) = std::fs::read_dir(runs)
            .ok()
            .and_then(|d| d.flatten().next())
        else {
            continue;
        };
        if ready(&b.path()) {
            return b.path();
        }
    }
}

/// The record of task `id` of the batch in directory `batch`, once written, as aicli
/// reads it (its last line in the batch's journal; its prompt put back).
pub fn task_record(batch: &Path, id: &str) -> Option<serde_json::Value> {
    let rec = aicli::record::task_at(&batch.join("tasks").join(id))?.ok()?;
    serde_json::to_value(rec).ok()
}

/// The processes of task `id`'s running attempt in the batch in directory `batch`, as
/// its journal records them (`PID START\nmarker M\ncgroup C`), unless the run ended.
pub fn recorded_pids(batch: &Path, id: &str) -> Option<String> {
    let store = aicli::record::RunStore::new(batch.parent()?);
    store
        .open_batch(batch.file_name()?.to_str()?)
        .ok()?
        .recorded_pids(id)
}

/// The recorded state of task `id` of the batch in directory `batch`, once written.
pub fn task_state(batch: &Path, id: &str) -> Option<String> {
    task_record(batch, id)?["state"].as_str().map(str::to_owned)
}

/// Whether the CLI of task `id` of the batch in directory `batch` has printed.
pub fn task_printed(batch: &Path, id: &str) -> bool {
    std::fs::metadata(batch.join("tasks").join(id).join("events.ndjson")).is_ok_and(|m| m.len() > 0)
}

/// The id of the batch in directory `batch`.
pub fn batch_id(batch: &Path) -> String {
    batch
        .file_name()
        .expect("a batch directory")
        .to_string_lossy()
        .into_owned()
}

/// `aicli --config <cfg> ARGS`, to be run.
pub fn aicli_with(cfg: &Path, args: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_aicli"));
    c.arg("--config").arg(cfg).args(args);
    c
}

/// Writes `tasks` to `tasks.json` beside `cfg` and starts `aicli --config <cfg> batch
/// tasks.json ARGS`, its output dropped.
pub fn spawn_batch(cfg: &Path, tasks: &serde_json::Value, args: &[&str]) -> std::process::Child {
    let tasks_file = cfg
        .parent()
        .expect("the config's directory")
        .join("tasks.json");
    std::fs::write(&tasks_file, tasks.to_string()).expect("write the tasks");
    aicli_with(cfg, &["batch", tasks_file.to_str().expect("a UTF-8 path")])
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("aicli batch starts")
}

/// `aicli --config <cfg> resume <batch_id> --json ARGS`, which must succeed: the
/// batch's result.
pub fn resume_json(cfg: &Path, batch_id: &str, args: &[&str]) -> aicli::BatchResult {
    let out = succeeds(aicli_with(cfg, &["resume", batch_id, "--json"]).args(args));
    serde_json::from_slice(&out.stdout).expect("the batch result")
}

/// Runs `cmd` to its end: its output, which must be a success (else its stderr is the
/// failure).
pub fn succeeds(cmd: &mut std::process::Command) -> std::process::Output {
    let out = cmd.output().expect("the command runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
