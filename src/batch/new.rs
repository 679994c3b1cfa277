//! A new batch: every task checked (ids, fields, providers, MCP grants, the runner its
//! provider can use), the spec and the queued records written, then run.

use std::collections::BTreeSet;

use aicli_providers::TaskSpec;
use tokio_util::sync::CancellationToken;

use super::TaskRun;
use super::continuation::Next;
use crate::engine::{BatchOptions, Engine, EngineError, record_error};
use crate::live::LiveSender;
use crate::record::{BatchResult, BatchSpec, RunStore, TaskRecord};
use crate::util::now_rfc3339;
use crate::worktree::Repo;

/// Runs `tasks` as a new batch (the options were checked by the engine).
pub(crate) async fn new_batch(
    engine: &Engine,
    mut tasks: Vec<TaskSpec>,
    opts: BatchOptions,
    live: LiveSender,
    cancel: CancellationToken,
) -> Result<BatchResult, EngineError> {
    let default_provider = checked(engine, &mut tasks, &opts)?;
    let (root, base) = workdir_root(&opts).await?;
    let runs_dir = engine.runs_dir(&root, opts.runs_dir.as_deref());
    let spec = BatchSpec {
        batch_id: opts
            .batch_id
            .clone()
            .unwrap_or_else(crate::util::new_batch_id),
        created_at: now_rfc3339(),
        repo: root,
        provider: default_provider.clone(),
        base_ref: base,
        tasks: tasks.clone(),
        max_parallel: opts
            .max_parallel
            .unwrap_or(engine.config.engine.max_parallel)
            .max(1),
        budget_usd: opts.budget_usd,
        timeout_secs: opts.timeout.map(|d| d.as_secs()),
        idle_timeout_secs: opts.idle_timeout.map(|d| d.as_secs()),
        worktrees: opts.worktrees,
        fake_api: opts.fake_api.clone(),
        aicli_version: env!("CARGO_PKG_VERSION").to_owned(),
    };
    if opts.batch_id.is_some() && runs_dir.join(&spec.batch_id).exists() {
        return Err(EngineError::Refused(format!(
            "batch id {}: {} holds a batch of that id already",
            spec.batch_id,
            runs_dir.display()
        )));
    }
    let store = RunStore::new(&runs_dir);
    let record = store
        .create_batch(&spec)
        .map_err(record_error(&runs_dir.join(&spec.batch_id)))?;
    let recs: Vec<TaskRecord> = tasks
        .into_iter()
        .map(|t| {
            let provider = t
                .provider
                .clone()
                .unwrap_or_else(|| default_provider.clone());
            TaskRecord::queued(t, &provider)
        })
        .collect();
    record
        .write_queued(&recs)
        .map_err(record_error(record.dir()))?;
    let mut runs = Vec::with_capacity(recs.len());
    for rec in recs {
        let lock = record
            .lock_task(&rec.task.id)
            .map_err(EngineError::Refused)?;
        let (next, origin) = Next::first(&store, &rec);
        let mut run = TaskRun::new(rec, next, lock);
        run.origin = origin;
        runs.push(run);
    }
    super::execute(engine, spec, record, runs, opts, live, cancel)
        .await
        .map(|e| e.result)
}

/// `tasks` checked (see [`check_tasks`]), or no task; returns the default provider.
fn checked(
    engine: &Engine,
    tasks: &mut [TaskSpec],
    opts: &BatchOptions,
) -> Result<String, EngineError> {
    if tasks.is_empty() {
        return Err(EngineError::NoTasks);
    }
    let default_provider = opts
        .provider
        .clone()
        .unwrap_or_else(|| engine.config.default_provider.clone());
    check_tasks(engine, tasks, opts, &default_provider)?;
    Ok(default_provider)
}

/// The names of the providers whose tasks of `tasks` run in containers, once `opts`
/// and every task are checked as a new batch checks them (nothing is written).
pub(crate) fn container_providers(
    engine: &Engine,
    tasks: &[TaskSpec],
    opts: &BatchOptions,
) -> Result<BTreeSet<String>, EngineError> {
    opts.validate()?;
    let mut tasks = tasks.to_vec();
    let default_provider = checked(engine, &mut tasks, opts)?;
    let mut out = BTreeSet::new();
    for t in &tasks {
        let p = engine
            .registry
            .get(t.provider.as_deref().unwrap_or(&default_provider))?;
        if engine.runner_kind(t, &p).is_container() {
            out.insert(p.name().to_owned());
        }
    }
    Ok(out)
}

/// Each task checked once, before anything is written: an id (assigned when missing,
/// unique), its fields, its MCP grants, its provider, and a runner its provider can run
/// on. The batch's runner goes into each task that names none: answers and resumes run
/// where the task ran.
fn check_tasks(
    engine: &Engine,
    tasks: &mut [TaskSpec],
    opts: &BatchOptions,
    default_provider: &str,
) -> Result<(), EngineError> {
    let mut seen = BTreeSet::new();
    for (i, t) in tasks.iter_mut().enumerate() {
        let invalid = |t: &TaskSpec, message: String| EngineError::InvalidTask {
            index: i + 1,
            id: t.id.clone(),
            message,
        };
        if t.id.is_empty() {
            t.id = format!("task-{}", i + 1);
        }
        t.validate().map_err(|m| invalid(t, m))?;
        check_prompt_size(engine, t.prompt.len())
            .map_err(|m| invalid(t, format!("prompt: {m}")))?;
        if !seen.insert(t.id.clone()) {
            return Err(invalid(t, "id: another task has the same id".to_owned()));
        }
        t.runner = t.runner.or(opts.runner);
        if let Some((j, message)) = engine.config.unknown_mcp_grant(&t.mcp_tools) {
            return Err(invalid(t, format!("mcp_tools[{j}]: {message}")));
        }
        let provider = match &t.provider {
            Some(p) => engine
                .registry
                .get(p)
                .map_err(|e| invalid(t, format!("provider: {e}")))?,
            None => engine.registry.get(default_provider)?,
        };
        check_prompt_chars(provider.name(), provider.config().max_prompt_chars, &t.prompt)
            .map_err(|m| invalid(t, format!("prompt: {m}")))?;
    }
    Ok(())
}

/// A prompt (a task's, an answer's) is at most `engine.max_prompt_bytes`: it goes to the
/// CLI whole, and into the record once.
pub(crate) fn check_prompt_size(engine: &Engine, len: usize) -> Result<(), String> {
    let cap = engine.config.engine.max_prompt_bytes;
    if len > cap {
        return Err(format!(
            "{len} bytes is over the limit of {cap} bytes (engine.max_prompt_bytes in the config)"
        ));
    }
    Ok(())
}

/// A prompt is at most what its CLI takes (`max_prompt_chars` of its provider), when the
/// CLI has a limit: refused here rather than by the CLI after it started.
pub(crate) fn check_prompt_chars(provider: &str, limit: Option<u64>, prompt: &str) -> Result<(), String> {
    let Some(limit) = limit else {
        return Ok(());
    };
    // A prompt of no more bytes than the limit has no more characters.
    if prompt.len() as u64 <= limit {
        return Ok(());
    }
    let chars = prompt.chars().count() as u64;
    if chars > limit {
        return Err(format!(
            "{chars} characters is over the {limit} that {provider}'s CLI takes \
             (max_prompt_chars of provider {provider})"
        ));
    }
    Ok(())
}

/// The directory tasks run against and the base commit of their worktrees: the
/// repository's root and `base_ref` resolved, its state directory made; without
/// worktrees, the directory itself.
async fn workdir_root(opts: &BatchOptions) -> Result<(std::path::PathBuf, String), EngineError> {
    if opts.worktrees {
        let repo = Repo::open(&opts.repo).await?;
        let base = repo.resolve(&opts.base_ref).await?;
        repo.ensure_state_dir()
            .map_err(record_error(&repo.state_dir()))?;
        return Ok((repo.root().to_path_buf(), base));
    }
    if !opts.repo.is_dir() {
        return Err(EngineError::NotFound(format!(
            "{} is not a directory",
            opts.repo.display()
        )));
    }
    Ok((opts.repo.clone(), String::new()))
}
