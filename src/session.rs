//! One task = one CLI run -> [`SessionResult`].
//!
//! The session resolves the binary, asks the provider for the command, creates the
//! links and writes the files it needs (MCP config, IDE lockfile), starts it through a
//! [`Placement`](crate::runner::Placement), and then reads lines until the final event, EOF, the wall-clock timeout,
//! the idle watchdog or cancellation — whichever comes first. However it ends, the run's
//! whole process tree is shut down before the result is built. Every stdout byte is teed
//! into the run record as it arrives (by the process reader), so a crash loses nothing
//! printed.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aicli_providers::{
    AgentEvent, Cost, CostSource, ErrorKind, EventKind, ExitStatus, LaunchContext, Line, LinkSpec,
    LiveSpend, McpEndpoint, ParseContext, PendingQuestion, SessionResult, SharedProvider, TaskSpec,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::budget::Reservation;
use crate::conversation::{Conversation, sleep_until};
use crate::events::BatchEvent;
use crate::live::LiveSender;
use crate::process::{OutputOptions, StdoutLine};
use crate::runner::{Placement, RunHandle};
use crate::util::create_private_dirs;

/// Time and size limits of one run.
#[derive(Debug, Clone)]
pub struct SessionLimits {
    /// Wall-clock limit.
    pub timeout: Duration,
    /// No output for this long ends the run.
    pub idle_timeout: Duration,
    /// Between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    /// How long a CLI may linger after its final event before it is shut down.
    pub final_grace: Duration,
    /// Longest stdout line.
    pub line_cap: usize,
    /// Bytes of stderr kept in memory.
    pub stderr_tail: usize,
}

impl Default for SessionLimits {
    fn default() -> SessionLimits {
        SessionLimits {
            timeout: Duration::from_secs(1800),
            idle_timeout: Duration::from_secs(600),
            kill_grace: Duration::from_secs(3),
            final_grace: Duration::from_secs(2),
            line_cap: aicli_providers::replay::DEFAULT_LINE_CAP,
            stderr_tail: 64 * 1024,
        }
    }
}

/// Everything one run needs.
#[derive(Debug, Clone)]
pub struct SessionSpec {
    /// The task (its `id` set).
    pub task: TaskSpec,
    /// The provider.
    pub provider: SharedProvider,
    /// The directory the CLI runs in.
    pub workdir: PathBuf,
    /// A private directory for this run's files (outside the worktree).
    pub private_dir: PathBuf,
    /// The task's record directory (`events.ndjson`, `stderr.log`, `aicli-events.ndjson`
    /// are appended there), if recording.
    pub record_dir: Option<PathBuf>,
    /// aicli's MCP server for this run (token included) and its port.
    pub mcp: Option<(McpEndpoint, u16)>,
    /// What this run may spend of the batch budget (its reservation), when the batch
    /// has one: a CLI with a per-run cap gets it as its cap.
    pub budget_remaining_usd: Option<f64>,
    /// What the parser needs besides the lines (model, prior session totals).
    pub parse_ctx: ParseContext,
    /// Limits.
    pub limits: SessionLimits,
    /// PATH to find the CLI on (the process PATH when `None`).
    pub search_path: Option<String>,
    /// The environment the CLI starts from, built by [`crate::env::cli_env`] (the base
    /// set, the provider's variables, the config's and the task's `env`); the
    /// provider's command adds its own variables for the run.
    pub base_env: BTreeMap<String, String>,
    /// Run the provider's quick credentials check before spawning.
    pub auth_precheck: bool,
    /// Restricts the run's MCP token to the address its requests come from, once the
    /// run has started (for a container on a local bridge: no other container can use
    /// the token).
    pub restrict_token: Option<TokenRestriction>,
}

/// Called with the address a started run's requests come from.
#[derive(Clone)]
pub struct TokenRestriction(pub Arc<dyn Fn(std::net::IpAddr) + Send + Sync>);

impl std::fmt::Debug for TokenRestriction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenRestriction")
    }
}

/// Channels a session talks through.
#[derive(Debug)]
pub struct SessionIo {
    /// Live events go here.
    pub live: LiveSender,
    /// Events aicli's MCP server made for this task (logs, questions).
    pub injected: Option<mpsc::UnboundedReceiver<AgentEvent>>,
    /// Cancels the run.
    pub cancel: CancellationToken,
    /// The run's reservation of the batch budget, when the batch has one: told what the
    /// run's stream spends as it passes, and stops the run when the budget says so.
    pub budget: Option<Arc<Reservation>>,
}

/// What a run produced. The events went to the live stream and the record as they
/// passed; none is kept here.
#[derive(Debug, Clone)]
pub struct SessionOutcome {
    /// The normalized result.
    pub result: SessionResult,
    /// The latest reset time (Unix seconds) a rate-limit event of the run announced.
    pub reset_at: Option<i64>,
    /// The command that ran (program and arguments; secrets live in files and env,
    /// never here), empty when nothing was started.
    pub argv: Vec<String>,
    /// What the run's stream said it spent (its usage increments at the config's
    /// prices).
    pub streamed: LiveSpend,
    /// Where it ran (the placement's description), when it was placed.
    pub place: Option<String>,
}

/// How long the last lines may take after the CLI exited while its stdout stays open.
const PIPE_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EndReason {
    Eof,
    /// The CLI exited; its stdout stayed open past [`PIPE_GRACE`].
    Exited,
    Final,
    /// The batch budget stopped the run.
    Budget,
    WallTimeout,
    IdleTimeout,
    Cancelled,
}

/// Runs one task to its result in `placement` (see [`crate::runner`]). Never panics and
/// never leaves a process behind.
pub async fn run_session(
    spec: SessionSpec,
    io: SessionIo,
    placement: &mut dyn Placement,
) -> SessionOutcome {
    let started = Instant::now();
    let task_id: Arc<str> = Arc::from(spec.task.id.as_str());
    let provider = spec.provider.clone();
    let mut outcome = match prepare_and_run(&spec, io, placement, task_id.clone()).await {
        Ok(o) => o,
        Err(result) => SessionOutcome {
            result: *result,
            reset_at: None,
            argv: Vec::new(),
            streamed: LiveSpend::default(),
            place: None,
        },
    };
    let r = &mut outcome.result;
    r.task_id = spec.task.id.clone();
    r.prompt = spec.task.prompt.clone();
    r.provider = provider.name().to_owned();
    if r.model.is_none() {
        r.model = spec.parse_ctx.model.clone();
    }
    r.duration_ms = started.elapsed().as_millis() as u64;
    outcome
}

fn not_started(spec: &SessionSpec, kind: ErrorKind, message: String) -> Box<SessionResult> {
    tracing::info!(task = %spec.task.id, kind = %kind, %message, "run not started");
    Box::new(SessionResult::not_started(
        spec.provider.name(),
        kind,
        message,
    ))
}

async fn prepare_and_run(
    spec: &SessionSpec,
    io: SessionIo,
    placement: &mut dyn Placement,
    task_id: Arc<str>,
) -> Result<SessionOutcome, Box<SessionResult>> {
    let provider = &spec.provider;
    if let Err(msg) = spec.task.validate() {
        return Err(not_started(
            spec,
            ErrorKind::BadRequest,
            format!("invalid task: {msg}"),
        ));
    }
    // Where the run happens decides the environment it starts from and where its
    // binary is (a container image's; else the one on the PATH it will run with, then
    // in aicli's cache (`aicli install`); an engine's explicit search path is taken as
    // it is).
    let base_env = placement.env(&spec.base_env);
    let mut search_path = None;
    let binary = match placement.binary() {
        Some(b) => b,
        None => {
            let path = match &spec.search_path {
                Some(p) => p.clone(),
                None => crate::install::search_path_with_cache(
                    &base_env
                        .get("PATH")
                        .cloned()
                        .or_else(|| std::env::var("PATH").ok())
                        .unwrap_or_default(),
                ),
            };
            let b = provider
                .binary_path(Some(&path))
                .map_err(|e| not_started(spec, e.kind(), e.to_string()))?;
            search_path = Some(path);
            b
        }
    };

    let is_root = placement.runs_as_root();
    let ctx = LaunchContext {
        env: &base_env,
        task: &spec.task,
        binary: &binary,
        workdir: &spec.workdir,
        private_dir: &spec.private_dir,
        mcp: spec.mcp.as_ref().map(|(e, _)| e),
        budget_remaining_usd: spec.budget_remaining_usd,
        is_root,
        search_path: search_path.as_deref(),
        in_container: placement.agent_reach().is_some(),
    };
    let mut cmd = provider
        .command(&ctx)
        .map_err(|e| not_started(spec, e.kind(), e.to_string()))?;
    // A clean, explicit environment: the placement's (for a local run the base one,
    // picked from aicli's, see `crate::env`; in a container what of it may go in) minus
    // what the provider removes, then the provider's and the task's variables (which
    // `command` put in `cmd.env`). Nothing else of aicli's process.
    let mut full_env = base_env.clone();
    for k in &cmd.env_remove {
        full_env.remove(k);
    }
    full_env.append(&mut cmd.env);
    cmd.env = full_env;
    cmd.env_clear = true;
    let home = cmd
        .env
        .get("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"));
    if spec.auth_precheck {
        // A few file reads: off the async threads.
        let (p, env, dir, args) = (
            provider.clone(),
            cmd.env.clone(),
            home.clone(),
            cmd.args.clone(),
        );
        let found = tokio::task::spawn_blocking(move || p.auth_precheck(&env, &dir, &args))
            .await
            .ok()
            .flatten();
        if let Some(msg) = found {
            return Err(not_started(spec, ErrorKind::Auth, msg));
        }
    }
    // The private directory exists only when the run needs files or links there.
    if !cmd.files.is_empty() || !cmd.links.is_empty() {
        create_private_dirs(&spec.private_dir).map_err(|e| {
            not_started(
                spec,
                ErrorKind::Unknown,
                format!("cannot create {}: {e}", spec.private_dir.display()),
            )
        })?;
        set_mode(&spec.private_dir, 0o700);
    }
    // Links first: they make the directories (0700) that files may go into.
    for (i, l) in cmd.links.iter().enumerate() {
        // The link points where the CLI will find its target (inside a container, the
        // target's path there).
        if let Err(e) = create_link(l, &placement.visible_path(&l.target)) {
            remove_links(&cmd.links[..i]);
            return Err(not_started(
                spec,
                ErrorKind::Unknown,
                format!(
                    "cannot link {} -> {}: {e}",
                    l.link.display(),
                    l.target.display()
                ),
            ));
        }
    }
    for f in &cmd.files {
        let written = match f.path.parent() {
            Some(dir) => create_private_dirs(dir),
            None => Ok(()),
        }
        .and_then(|()| write_private_file(&f.path, &f.contents, f.mode));
        if let Err(e) = written {
            remove_links(&cmd.links);
            return Err(not_started(
                spec,
                ErrorKind::Unknown,
                format!("cannot write {}: {e}", f.path.display()),
            ));
        }
    }
    // The IDE lockfile, for CLIs that look for one (a CLI on this machine: the file
    // names a loopback port).
    let mut lockfile: Option<PathBuf> = None;
    if let (Some((endpoint, port)), Some(dir), None) = (
        &spec.mcp,
        provider.ide_lockfile_dir(),
        placement.agent_reach(),
    ) && let Some((name, contents)) =
        provider.ide_lockfile(endpoint, *port, &spec.workdir, std::process::id())
    {
        let path = home.join(dir).join(name);
        if lockfiles::acquire(&path, &contents).is_ok() {
            lockfile = Some(path);
            if let Some(var) = provider.ide_lock_env_var() {
                cmd.env.insert(var.to_owned(), port.to_string());
            }
        }
    }

    let mut out = OutputOptions {
        line_cap: spec.limits.line_cap,
        stderr_tail: spec.limits.stderr_tail,
        // While the run lives, its record lists its processes, so that if aicli dies a
        // later `aicli resume` can kill what is left of it.
        pid_file: spec.record_dir.as_ref().map(|d| d.join("pid")),
        ..OutputOptions::default()
    };
    let aicli_log = AicliLog {
        path: spec
            .record_dir
            .as_ref()
            .map(|d| d.join("aicli-events.ndjson")),
        file: None,
    };
    if let Some(dir) = &spec.record_dir {
        // 0600: a CLI's stream can hold what its tools returned (a credential, say).
        let open = |name: &str| {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(dir.join(name))
        };
        match (open("events.ndjson"), open("stderr.log")) {
            (Ok(a), Ok(b)) => {
                out.stdout_tee = Some(a);
                out.stderr_tee = Some(b);
            }
            (a, b) => {
                let err = [a.err(), b.err()]
                    .into_iter()
                    .flatten()
                    .map(|e| e.to_string())
                    .next()
                    .unwrap_or_default();
                return Err(not_started(
                    spec,
                    ErrorKind::Unknown,
                    format!("cannot open the run record in {}: {err}", dir.display()),
                ));
            }
        }
    }

    tracing::info!(task = %task_id, provider = provider.name(), program = %cmd.program.display(), place = %placement.describe(), "starting run");
    // Names only: values can be credentials.
    tracing::info!(task = %task_id, variables = %crate::env::names(&cmd.env), "environment passed to the CLI");
    let handle = match placement.start(&cmd, out).await {
        Ok(h) => {
            match (h.peer(), &spec.restrict_token) {
                (Some(ip), Some(restrict)) => (restrict.0)(ip),
                (None, Some(_)) => {
                    tracing::warn!(task = %task_id, "the run's address is unknown: its MCP token stays unusable")
                }
                (_, None) => {}
            }
            h
        }
        Err(e) => {
            if let Some(l) = &lockfile {
                lockfiles::release(l);
            }
            remove_links(&cmd.links);
            return Err(not_started(spec, e.kind(), e.to_string()));
        }
    };
    let mut outcome = supervise(spec, &ctx, cmd.stdin_open, io, handle, task_id, aicli_log).await;
    outcome.argv = std::iter::once(cmd.program.display().to_string())
        .chain(cmd.args.iter().cloned())
        .collect();
    if let Some(l) = &lockfile {
        lockfiles::release(l);
    }
    for f in &cmd.files {
        remove_quietly(Some(&f.path));
    }
    remove_links(&cmd.links);
    Ok(outcome)
}

async fn supervise(
    spec: &SessionSpec,
    launch: &LaunchContext<'_>,
    two_way: bool,
    mut io: SessionIo,
    mut handle: Box<dyn RunHandle>,
    task_id: Arc<str>,
    mut aicli_log: AicliLog,
) -> SessionOutcome {
    let provider = spec.provider.clone();
    let limits = &spec.limits;
    let start = tokio::time::Instant::now();
    let wall_deadline = start + limits.timeout;
    let mut idle_deadline = start + limits.idle_timeout;
    let mut final_deadline: Option<tokio::time::Instant> = None;
    let mut questions: Vec<PendingQuestion> = Vec::new();
    let mut injected = io.injected.take();
    let line_cap = limits.line_cap;
    // One decoder for the run: each line is decoded once as it arrives; the live stream
    // gets the events, the record already has the bytes, the decoder keeps what the
    // result needs. Nothing here keeps the events.
    let mut decoder = provider.decoder(&spec.parse_ctx);
    let mut saw_final = false;
    let mut reset_at: Option<i64> = None;
    // What the stream says the run spent: each usage increment priced at its model's
    // price, for the budget and the live display.
    let prices = &provider.config().prices;
    let mut spend = LiveSpend::default();
    let mut run_model = spec.parse_ctx.model.clone();
    let budget = io.budget.clone();

    // Questions the decoder itself asked a human (an ACP permission request).
    let mut asked: Vec<PendingQuestion> = Vec::new();
    let mut publish = |evs: &mut Vec<AgentEvent>| {
        let mut spent = false;
        for ev in evs.drain(..) {
            if let EventKind::Final { .. } = &ev.kind {
                saw_final = true;
            }
            if let EventKind::SessionStarted { model: Some(m), .. } = &ev.kind {
                run_model = Some(m.clone());
            }
            if let EventKind::Usage { usage, model } = &ev.kind {
                spend.add(prices, model.as_deref(), run_model.as_deref(), usage);
                spent = true;
            }
            if let EventKind::RateLimit {
                resets_at: Some(t), ..
            } = &ev.kind
            {
                reset_at = Some(reset_at.map_or(*t, |r| r.max(*t)));
            }
            if let EventKind::Question { question, options } = &ev.kind {
                asked.push(PendingQuestion {
                    question: question.clone(),
                    options: options.clone(),
                    asked_at: crate::util::now_rfc3339(),
                });
            }
            io.live.send(BatchEvent::Agent {
                task_id: task_id.clone(),
                event: ev,
            });
        }
        if spent {
            if let Some(b) = &budget {
                b.streamed(spend.priced_usd());
            }
            let cost = spend.cost();
            io.live.send(BatchEvent::TaskSpend {
                task_id: task_id.clone(),
                usage: spend.usage(),
                cost_usd: cost.cost_usd,
                cost_source: cost.cost_source,
            });
        }
    };
    // The events of the line at hand (one buffer for the run).
    let mut evs = Vec::new();
    let decode = |line: StdoutLine,
                  decoder: &mut Box<dyn aicli_providers::Decoder>,
                  evs: &mut Vec<AgentEvent>| match &line {
        StdoutLine::Line(bytes) => decoder.decode(Line::Bytes(bytes), evs),
        StdoutLine::Overlong { len, prefix } => decoder.decode(
            Line::Overlong {
                len: *len,
                prefix,
                cap: line_cap,
            },
            evs,
        ),
    };

    // A two-way CLI is spoken to: its stdin stays open for what the decoder says.
    let mut conversation = None;
    if two_way {
        match handle.take_stdin() {
            Some(writer) => {
                let mut c = Conversation::new(writer);
                publish(&mut decoder.connect(launch));
                c.pump(decoder.as_mut());
                conversation = Some(c);
            }
            None => {
                let _ = handle.shutdown(limits.kill_grace).await;
                let mut result = SessionResult::not_started(
                    provider.name(),
                    ErrorKind::BadRequest,
                    format!(
                        "provider {} speaks to its CLI on stdin (an ACP agent), which this runner cannot keep open: run it with the local runner (`--runner local`, or the provider's `runner`)",
                        provider.name()
                    ),
                );
                result.exit_code = None;
                return SessionOutcome {
                    result,
                    reset_at: None,
                    argv: Vec::new(),
                    streamed: LiveSpend::default(),
                    place: None,
                };
            }
        }
    }

    let mut lines = handle.take_lines();
    // The CLI exited while something of its tree still holds its stdout open: a short
    // grace for the last lines, then the run is over (not a wait for the idle watchdog).
    let mut child_exit: Option<Option<i32>> = None;
    let mut pipe_deadline: Option<tokio::time::Instant> = None;
    // Why a two-way CLI was asked to end its turn (a cancel, the budget): the run ends
    // for that reason once it has, or once the kill grace is over.
    let mut stop_why: Option<EndReason> = None;
    let reason = loop {
        let pipe_sleep = sleep_until(pipe_deadline);
        let final_sleep = sleep_until(final_deadline);
        let wait_sleep = sleep_until(conversation.as_ref().and_then(Conversation::deadline));
        let stop_sleep = sleep_until(conversation.as_ref().and_then(Conversation::stop_deadline));
        let injected_recv = async {
            match injected.as_mut() {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = io.cancel.cancelled(), if stop_why.is_none() => {
                // A two-way CLI is asked to stop first (ACP `session/cancel`); it has the
                // kill grace to end its turn, then the process group is killed as for any.
                if !ask_to_stop(&mut conversation, &mut decoder, limits.kill_grace) {
                    break EndReason::Cancelled;
                }
                stop_why = Some(EndReason::Cancelled);
            }
            _ = budget_stop(&io.budget), if stop_why.is_none() => {
                // The budget stops a run as a cancel does, and says `budget`.
                if !ask_to_stop(&mut conversation, &mut decoder, limits.kill_grace) {
                    break EndReason::Budget;
                }
                stop_why = Some(EndReason::Budget);
            }
            _ = stop_sleep => break stop_why.unwrap_or(EndReason::Cancelled),
            line = lines.recv() => match line {
                Some(line) => {
                    idle_deadline = tokio::time::Instant::now() + limits.idle_timeout;
                    decode(line, &mut decoder, &mut evs);
                    publish(&mut evs);
                    if let Some(c) = conversation.as_mut() {
                        c.pump(decoder.as_mut());
                    }
                    if let Some(why) = stop_why
                        && decoder.finished()
                    {
                        break why;
                    }
                    // The CLI said its last word: a short grace to exit. It may take it
                    // back (a background agent of Claude's goes on): then wait again.
                    if !decoder.finished() {
                        final_deadline = None;
                    } else if final_deadline.is_none() {
                        final_deadline = Some(tokio::time::Instant::now() + limits.final_grace);
                    }
                }
                None => break EndReason::Eof,
            },
            _ = wait_sleep => {
                if let Some(c) = conversation.as_mut() {
                    publish(&mut c.overdue(decoder.as_mut()));
                }
                if decoder.finished() && final_deadline.is_none() {
                    final_deadline = Some(tokio::time::Instant::now() + limits.final_grace);
                }
            }
            code = handle.wait(), if child_exit.is_none() => {
                child_exit = Some(code);
                pipe_deadline = Some(tokio::time::Instant::now() + PIPE_GRACE);
            }
            _ = pipe_sleep => break EndReason::Exited,
            ev = injected_recv => match ev {
                Some(ev) => take_injected(ev, &mut aicli_log, &mut questions, &io.live, &task_id),
                None => injected = None,
            },
            _ = final_sleep => break EndReason::Final,
            _ = tokio::time::sleep_until(wall_deadline) => break EndReason::WallTimeout,
            _ = tokio::time::sleep_until(idle_deadline) => break EndReason::IdleTimeout,
        }
    };

    // After EOF the CLI normally exits at once; give it until the deadlines (after a
    // final event, the final grace).
    let mut exit_code = child_exit.flatten();
    let mut reason = reason;
    if reason == EndReason::Eof && child_exit.is_none() {
        let after_final = async {
            match final_deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = io.cancel.cancelled() => reason = EndReason::Cancelled,
            _ = budget_stop(&io.budget) => reason = EndReason::Budget,
            code = handle.wait() => exit_code = code,
            _ = after_final => reason = EndReason::Final,
            _ = tokio::time::sleep_until(wall_deadline) => reason = EndReason::WallTimeout,
            _ = tokio::time::sleep_until(idle_deadline) => reason = EndReason::IdleTimeout,
        }
    }
    // However it ended: no process of the run may be left.
    let code = handle.shutdown(limits.kill_grace).await;
    if exit_code.is_none() {
        exit_code = code;
    }
    // Lines still in flight: keep taking them until the reader is done (it may be
    // waiting for room in the channel), so the record is complete when the attempt's
    // end offsets are taken.
    if let Some(c) = conversation.as_mut() {
        c.close();
    }
    drop(conversation);
    let rest = async {
        while let Some(line) = lines.recv().await {
            decode(line, &mut decoder, &mut evs);
            publish(&mut evs);
        }
    };
    if tokio::time::timeout(Duration::from_secs(5), rest)
        .await
        .is_err()
    {
        tracing::warn!(task = %task_id, "output pipes still open after shutdown; giving up on them");
    }
    drop(lines);
    let _ = tokio::time::timeout(Duration::from_secs(2), handle.drain()).await;
    if let Some(rx) = injected.as_mut() {
        while let Ok(ev) = rx.try_recv() {
            take_injected(ev, &mut aicli_log, &mut questions, &io.live, &task_id);
        }
    }
    crate::process::sync_off_thread(aicli_log.file.take()).await;
    questions.append(&mut asked);

    let stderr = handle.stderr().text();
    let mut result = decoder.finish(&stderr, ExitStatus::of_wait(exit_code));
    match reason {
        EndReason::Cancelled if !saw_final => {
            result.fail(ErrorKind::Cancelled, "the run was cancelled")
        }
        EndReason::WallTimeout if !saw_final => result.fail(
            ErrorKind::Timeout,
            format!(
                "wall-clock timeout: the run took longer than {}s{}",
                limits.timeout.as_secs(),
                last_words(&result, exit_code)
            ),
        ),
        EndReason::IdleTimeout if !saw_final => result.fail(
            ErrorKind::Timeout,
            format!(
                "idle watchdog: no output for {}s{}",
                limits.idle_timeout.as_secs(),
                last_words(&result, exit_code)
            ),
        ),
        // (A two-way CLI asked to stop for the budget ends its turn as cancelled.)
        EndReason::Budget
            if !saw_final
                || (stop_why == Some(EndReason::Budget)
                    && result.error_kind == Some(ErrorKind::Cancelled)) =>
        {
            result.fail(
                ErrorKind::Budget,
                format!(
                    "stopped by the batch budget: {}",
                    io.budget
                        .as_ref()
                        .and_then(|b| b.stop_reason())
                        .unwrap_or_else(|| "the budget was reached".to_owned())
                ),
            )
        }
        EndReason::Cancelled
        | EndReason::Budget
        | EndReason::WallTimeout
        | EndReason::IdleTimeout
        | EndReason::Eof
        | EndReason::Exited
        | EndReason::Final => {}
    }
    if let Some(q) = questions.pop()
        && reason != EndReason::Cancelled
    {
        result.block(q);
    }
    result.exit_code = exit_code;
    if !saw_final {
        take_streamed_cost(&mut result, &spend);
    }
    SessionOutcome {
        result,
        reset_at,
        argv: Vec::new(),
        streamed: spend,
        place: None,
    }
}

/// Asks a two-way CLI to end its turn (see [`Conversation::stop`]): `false` when there
/// is no conversation or nothing to stop, and the run is to be killed at once.
fn ask_to_stop(
    conversation: &mut Option<Conversation>,
    decoder: &mut Box<dyn aicli_providers::Decoder>,
    grace: Duration,
) -> bool {
    conversation
        .as_mut()
        .is_some_and(|c| c.stop(decoder.as_mut(), grace))
}

/// Resolves when the run's reservation says stop; never without a budget.
async fn budget_stop(budget: &Option<Arc<Reservation>>) {
    match budget {
        Some(b) => b.stopped().await,
        None => std::future::pending().await,
    }
}

/// A run cut off before its last line (cancelled, timed out, stopped by the budget,
/// crashed) costs at least what its stream showed: when the result has no figure the
/// CLI reported and its own is lower (or none), it gets the streamed estimate. Never
/// zero for a run whose stream reported usage.
fn take_streamed_cost(result: &mut SessionResult, spend: &LiveSpend) {
    if spend.usage().is_zero() || spend.has_unpriced() {
        return;
    }
    let streamed = spend.priced_usd();
    let lower = match (result.cost_source, result.cost_usd) {
        (CostSource::Reported, Some(_)) => false,
        (CostSource::Estimated | CostSource::Unknown, Some(c)) => c < streamed,
        (CostSource::Reported | CostSource::Estimated | CostSource::Unknown, None) => true,
    };
    if lower {
        result.set_cost(Cost::estimated(Some(streamed)));
    }
}

/// What followed the limit, in order: what the CLI had reported before it (when the
/// provider classified something other than the exit aicli's own kill caused), then
/// that aicli stopped it (with the exit code the kill produced).
fn last_words(r: &SessionResult, exit_code: Option<i32>) -> String {
    let stopped = match exit_code {
        Some(c) => format!("; aicli then stopped the CLI (it exited with code {c})"),
        None => "; aicli then stopped the CLI".to_owned(),
    };
    match (&r.error_kind, &r.error) {
        (Some(ErrorKind::Crashed), _) | (None, _) => stopped,
        (Some(k), Some(m)) if !m.is_empty() => {
            format!(", after the CLI had reported {k}: {m}{stopped}")
        }
        (Some(_), _) => stopped,
    }
}

/// An event aicli's MCP server made for this run: recorded, a question noted,
/// published.
fn take_injected(
    ev: AgentEvent,
    log: &mut AicliLog,
    questions: &mut Vec<PendingQuestion>,
    live: &LiveSender,
    task_id: &Arc<str>,
) {
    log.append(&ev);
    if let EventKind::Question { question, options } = &ev.kind {
        questions.push(PendingQuestion {
            question: question.clone(),
            options: options.clone(),
            asked_at: crate::util::now_rfc3339(),
        });
    }
    live.send(BatchEvent::Agent {
        task_id: task_id.clone(),
        event: ev,
    });
}

/// `aicli-events.ndjson` of a run, opened (created) with the first event aicli makes.
#[derive(Debug)]
struct AicliLog {
    path: Option<PathBuf>,
    file: Option<File>,
}

impl AicliLog {
    fn append(&mut self, ev: &AgentEvent) {
        if self.file.is_none()
            && let Some(p) = &self.path
        {
            use std::os::unix::fs::OpenOptionsExt;
            self.file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(p)
                .map_err(|e| tracing::warn!(file = %p.display(), error = %e, "cannot open the aicli event log"))
                .ok();
        }
        if let Some(f) = self.file.as_mut()
            && let Ok(mut line) = serde_json::to_vec(ev)
        {
            line.push(b'\n');
            let _ = f.write_all(&line);
        }
    }
}

/// IDE lockfiles are named after the MCP server's port, which every run of a batch
/// shares, and carry a token scoped to one task's worktree: only one run at a time may
/// have the file (and the env var that points at it). Others of the same port run
/// without one rather than with another task's token.
mod lockfiles {
    use std::collections::HashMap;
    use std::path::{Path, PathBuf};
    use std::sync::{Mutex, OnceLock};

    fn users() -> &'static Mutex<HashMap<PathBuf, usize>> {
        static USERS: OnceLock<Mutex<HashMap<PathBuf, usize>>> = OnceLock::new();
        USERS.get_or_init(|| Mutex::new(HashMap::new()))
    }

    /// Writes the lockfile at `path` for one run, unless another run has it.
    pub(super) fn acquire(path: &Path, contents: &str) -> std::io::Result<()> {
        let mut u = users()
            .lock()
            .map_err(|_| std::io::Error::other("lockfile registry poisoned"))?;
        if u.contains_key(path) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "another run has this IDE lockfile",
            ));
        }
        super::write_private_file(path, contents, 0o600)?;
        u.insert(path.to_path_buf(), 1);
        Ok(())
    }

    /// Removes the run's lockfile.
    pub(super) fn release(path: &Path) {
        let Ok(mut u) = users().lock() else { return };
        if u.remove(path).is_some() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Writes `contents` to `path` with `mode`, creating parent directories.
pub fn write_private_file(path: &Path, contents: &str, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(parent) = path.parent() {
        create_private_dirs(parent)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(mode)
        .open(path)?;
    set_mode(path, mode);
    f.write_all(contents.as_bytes())?;
    f.sync_all()
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
}

/// Creates the link `l` describes (see [`LinkSpec`]), pointing at `target` (`l.target`
/// as the CLI sees it): its target directory first when asked, then its missing parents
/// (0700). A link or file already at its place (left in a private directory that was
/// not cleaned up) is replaced, as files are overwritten; a directory there is an error.
fn create_link(l: &LinkSpec, target: &Path) -> std::io::Result<()> {
    if l.create_target_dir {
        create_private_dirs(&l.target)?;
    }
    if let Some(dir) = l.link.parent() {
        create_private_dirs(dir)?;
    }
    match std::fs::symlink_metadata(&l.link) {
        Ok(m) if m.is_dir() => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "a directory is in its place",
            ));
        }
        Ok(_) => std::fs::remove_file(&l.link)?,
        Err(_) => {}
    }
    std::os::unix::fs::symlink(target, &l.link)
}

/// Removes the links (never what they point to). What the CLI put in a link's place
/// (a file renamed over it) goes too; a directory stays for the private dir's removal.
fn remove_links(links: &[LinkSpec]) {
    for l in links {
        remove_quietly(Some(&l.link));
    }
}

fn remove_quietly(path: Option<&Path>) {
    if let Some(p) = path {
        let _ = std::fs::remove_file(p);
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn links_are_made_with_private_dirs_and_removed_without_their_targets() {
        let tmp = tempfile::tempdir().unwrap();
        let user = tmp.path().join("home/.gemini");
        let run = tmp.path().join("private/gemini-home/.gemini");
        std::fs::create_dir_all(&user).unwrap();
        std::fs::write(user.join("oauth_creds.json"), "{}").unwrap();
        let links = [
            LinkSpec {
                link: run.join("oauth_creds.json"),
                target: user.join("oauth_creds.json"),
                create_target_dir: false,
            },
            // State that must outlive the run: its target is made first.
            LinkSpec {
                link: run.join("tmp"),
                target: user.join("tmp"),
                create_target_dir: true,
            },
        ];
        for l in &links {
            create_link(l, &l.target).unwrap();
        }
        assert_eq!(mode(&run), 0o700);
        assert_eq!(mode(&user.join("tmp")), 0o700);
        assert_eq!(
            std::fs::read_link(run.join("tmp")).unwrap(),
            user.join("tmp")
        );
        // Written through the link, kept in the user's directory.
        std::fs::write(run.join("tmp/chat.json"), "[]").unwrap();
        assert!(user.join("tmp/chat.json").exists());
        // A leftover link or file is replaced (the CLI may rename a file over a link);
        // a directory in the way is an error.
        create_link(&links[0], &links[0].target).unwrap();
        std::fs::write(run.join("projects.json"), "{}").unwrap();
        let leftover = LinkSpec {
            link: run.join("projects.json"),
            target: user.join("projects.json"),
            create_target_dir: false,
        };
        create_link(&leftover, &leftover.target).unwrap();
        assert_eq!(
            std::fs::read_link(run.join("projects.json")).unwrap(),
            user.join("projects.json")
        );
        std::fs::create_dir(run.join("extensions")).unwrap();
        let in_the_way = LinkSpec {
            link: run.join("extensions"),
            target: user.join("extensions"),
            create_target_dir: false,
        };
        assert_eq!(
            create_link(&in_the_way, &in_the_way.target)
                .unwrap_err()
                .kind(),
            std::io::ErrorKind::AlreadyExists
        );
        remove_links(&links);
        assert!(run.join("tmp").symlink_metadata().is_err());
        assert!(run.join("oauth_creds.json").symlink_metadata().is_err());
        assert!(user.join("tmp/chat.json").exists());
        assert!(user.join("oauth_creds.json").exists());
    }
}
