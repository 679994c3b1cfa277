//! One CLI run: a [`RunSpec`] goes in, a [`RunOutcome`] comes out, built in one place.
//!
//! The run places itself with its runner, gets its MCP token, builds its command
//! ([`launch`], pure but for finding the binary), lays out its files and links
//! ([`scaffold`]), starts, and is supervised until the final event, EOF, a limit, the
//! budget or a cancel ([`supervise`]); how it ended becomes its result ([`verdict`]).
//! Everything it holds on the way is a field of its [`RunGuards`], closed in order on
//! the graceful path and dropped in the same order by `Drop` otherwise (a panic, a
//! dropped future): nothing is undone by hand on an error path.
//!
//! | module | owns |
//! |---|---|
//! | `guards` | [`RunGuards`]: process tree, scaffold, MCP token, placement, private directory, budget reservation |
//! | `launch` | the binary, the provider's command, the CLI's environment, the auth pre-check |
//! | `scaffold` | the command's links and files, the IDE lockfile |
//! | `supervise` | the select loop over lines, exit, deadlines, cancel and budget |
//! | `publish` | the run's events to the live stream, its spend, its questions, aicli's event log |
//! | `conversation` | a two-way run's stdin (ACP) |
//! | `verdict` | how the run ended -> its result |

mod conversation;
mod guards;
mod launch;
mod publish;
mod scaffold;
mod supervise;
mod verdict;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aicli_providers::{
    ErrorKind, LiveSpend, ParseContext, SessionResult, SharedProvider, TaskSpec,
};
use tokio_util::sync::CancellationToken;

use crate::budget::Reservation;
use crate::engine::{AgentServer, TaskScope};
use crate::live::LiveSender;
use crate::record::AttemptBudget;
use crate::runner::{PlaceRequest, Runner};

pub(crate) use guards::RunGuards;
pub(crate) use publish::question_of;

/// Time and size limits of one run.
#[derive(Debug, Clone)]
pub struct RunLimits {
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

/// Where a run lives on this machine.
#[derive(Debug, Clone)]
pub(crate) struct RunPlace {
    /// The batch.
    pub batch_id: String,
    /// The attempt's number over the task's whole record (1-based).
    pub attempt: u32,
    /// What the CLI may change: the task's worktree (or the repository itself).
    pub workspace: PathBuf,
    /// Where the CLI starts: the workspace or its `cwd` subdirectory.
    pub workdir: PathBuf,
    /// The run's private directory (config files, links; removed after the run).
    pub private_dir: PathBuf,
    /// A directory of the task kept across its attempts (a container run's home).
    pub task_home: PathBuf,
    /// The home of another task whose session this run continues (its
    /// `resume_session_id`), for a runner that keeps sessions in a task's home.
    pub session_home: Option<PathBuf>,
    /// The task's branch, when it has a worktree.
    pub branch: Option<String>,
    /// The task's record directory (`events.ndjson`, `stderr.log`, `aicli-events.ndjson`
    /// are appended there), if recording.
    pub record_dir: Option<PathBuf>,
    /// Where the run's processes are named while they live (the batch's journal), if
    /// recording.
    pub pids: Option<crate::proc::leftovers::PidRecord>,
}

/// aicli's agent server for one run: who grants the token, and what it may reach.
#[derive(Debug, Clone)]
pub(crate) struct RunAgent {
    /// The server.
    pub server: Arc<dyn AgentServer>,
    /// The run's scope.
    pub scope: TaskScope,
}

/// Everything one run needs.
#[derive(Debug, Clone)]
pub(crate) struct RunSpec {
    /// The task as this run runs it (an answer's prompt, the session it resumes).
    pub task: TaskSpec,
    /// The provider.
    pub provider: SharedProvider,
    /// Where it runs.
    pub runner: Arc<dyn Runner>,
    /// Its directories.
    pub place: RunPlace,
    /// The environment the CLI starts from ([`crate::env::cli_env`]).
    pub base_env: BTreeMap<String, String>,
    /// PATH to find the CLI on (the run's own, then aicli's cache, when `None`).
    pub search_path: Option<String>,
    /// Run the provider's quick credentials check before spawning.
    pub auth_precheck: bool,
    /// What the run may spend of the batch budget (its reservation): a CLI with a
    /// per-run cap gets it as its cap.
    pub budget_cap: Option<f64>,
    /// Limits.
    pub limits: RunLimits,
    /// What the decoder needs besides the lines.
    pub parse_ctx: ParseContext,
    /// aicli's agent server, when one is attached.
    pub agent: Option<RunAgent>,
    /// A fault to inject (the guard tests).
    #[cfg(feature = "test-helpers")]
    pub fault: Option<crate::testing::Fault>,
}

/// Channels a run talks through.
#[derive(Debug)]
pub(crate) struct RunIo {
    /// Live events go here.
    pub live: LiveSender,
    /// Cancels the run.
    pub cancel: CancellationToken,
    /// The run's reservation of the batch budget, when the batch has one: told what the
    /// run's stream spends as it passes, it stops the run when the budget says so, and
    /// it is settled with the run's charge when the run ends.
    pub budget: Option<Arc<Reservation>>,
}

/// What a run produced. Its events went to the live stream and the record as they
/// passed; none is kept here.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The normalized result.
    pub result: SessionResult,
    /// The latest reset time (Unix seconds) a rate-limit event of the run announced.
    pub reset_at: Option<i64>,
    /// The command that ran (program and arguments; secrets live in files and env,
    /// never here), empty when nothing was started.
    pub argv: Vec<String>,
    /// Where it ran (the placement's description), when it was placed.
    pub place: Option<String>,
    /// Whether the CLI was started at all.
    pub started: bool,
    /// What the run's budget reservation was and was charged, when the batch has one.
    pub budget: Option<AttemptBudget>,
    /// The runner's timed steps (a container's Engine API calls).
    pub setup: Vec<crate::record::SetupStep>,
    /// The connections the run's container was refused by the egress proxy.
    pub egress_denied: Vec<crate::record::EgressDenial>,
    /// What the run laid out for its CLI (MCP configs, links, the IDE lockfile),
    /// removed when it ended: never part of the task's work.
    pub scaffold: Vec<PathBuf>,
}

impl RunOutcome {
    /// The outcome of a run that was never tried (its worktree or its runner could not
    /// be had): its reservation, if any, is settled with nothing spent.
    pub(crate) fn not_run(
        rec: &crate::record::TaskRecord,
        kind: ErrorKind,
        message: String,
        reservation: Option<Arc<Reservation>>,
    ) -> RunOutcome {
        let mut result = SessionResult::not_started(&rec.provider, kind, message);
        result.task_id = rec.task.id.clone();
        let mut o = RunOutcome::not_run_result(result);
        o.budget = reservation.map(|r| r.settle_run(Some(0.0), 0.0));
        o
    }

    /// The outcome of a run that was never tried, with its `result`.
    pub(crate) fn not_run_result(result: SessionResult) -> RunOutcome {
        RunOutcome {
            result,
            reset_at: None,
            argv: Vec::new(),
            place: None,
            started: false,
            budget: None,
            setup: Vec::new(),
            egress_denied: Vec::new(),
            scaffold: Vec::new(),
        }
    }
}

/// What supervising a started run gave (before the run's resources are closed).
#[derive(Debug)]
pub(crate) struct Ended {
    pub result: SessionResult,
    pub reset_at: Option<i64>,
    pub streamed: LiveSpend,
}

/// Why a run did not start: its error kind and message.
#[derive(Debug)]
pub(crate) struct NotStarted {
    pub kind: ErrorKind,
    pub message: String,
}

impl NotStarted {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> NotStarted {
        NotStarted {
            kind,
            message: message.into(),
        }
    }
}

/// Runs one CLI run to its outcome. Never leaves a process, a token, a container or a
/// file of the run behind, however it ends.
pub(crate) async fn run(spec: RunSpec, io: RunIo) -> RunOutcome {
    let started_at = Instant::now();
    let mut guards = RunGuards::new(spec.place.private_dir.clone(), io.budget.clone());
    let ended = start_and_supervise(&spec, &io, &mut guards).await;
    let (mut result, reset_at, streamed) = match ended {
        Ok(e) => (e.result, e.reset_at, e.streamed),
        Err(n) => {
            tracing::info!(task = %spec.task.id, kind = %n.kind, message = %n.message, "run not started");
            let r = SessionResult::not_started(spec.provider.name(), n.kind, n.message);
            (r, None, LiveSpend::default())
        }
    };
    verdict::cancelled_is_interrupted(&mut result);
    let closed = guards
        .close(spec.limits.kill_grace, &result, &streamed)
        .await;
    if let Some(e) = &closed.finish_error {
        tracing::warn!(task = %spec.task.id, error = %e, "the run's work was not brought back");
        result.fail(ErrorKind::Crashed, e.clone());
    }
    if let Some(why) = &closed.lost_place
        && !result.success
    {
        // The place went, not the task: `aicli resume` runs it again.
        result.fail(ErrorKind::Crashed, why.clone());
        result.status = aicli_providers::SessionStatus::Interrupted;
    }
    // The outcome, built once: every field set here, where it is known.
    result.task_id = spec.task.id.clone();
    result.provider = spec.provider.name().to_owned();
    if result.model.is_none() {
        result.model = spec.parse_ctx.model.clone();
    }
    result.duration_ms = started_at.elapsed().as_millis() as u64;
    RunOutcome {
        result,
        reset_at,
        argv: closed.argv,
        place: closed.place,
        started: closed.started,
        budget: closed.budget,
        setup: closed.steps,
        egress_denied: closed.egress_denied,
        scaffold: closed.scaffold,
    }
}

/// Places the run, grants its token, launches and supervises it; every resource taken
/// goes into `guards` as it is taken.
async fn start_and_supervise(
    spec: &RunSpec,
    io: &RunIo,
    guards: &mut RunGuards,
) -> Result<Ended, NotStarted> {
    let p = &spec.place;
    let request = PlaceRequest {
        batch_id: &p.batch_id,
        task_id: &spec.task.id,
        attempt: p.attempt,
        provider: &spec.provider,
        workspace: &p.workspace,
        workdir: &p.workdir,
        private_dir: &p.private_dir,
        task_home: &p.task_home,
        session_home: p.session_home.as_deref(),
        branch: p.branch.as_deref(),
        inherited_env: &spec.base_env,
        agent_port: None,
        resources: spec.task.resources.as_ref(),
        constraints: &spec.task.constraints,
    };
    let placed = tokio::select! {
        p = spec.runner.place(&request) => p,
        _ = io.cancel.cancelled() => {
            return Err(NotStarted::new(ErrorKind::Cancelled, "the run was cancelled before it started"));
        }
    };
    let placement = guards.placed(placed.map_err(|e| NotStarted::new(e.kind(), e.to_string()))?);
    let reach = placement.agent_reach().cloned();
    let describe = placement.describe();
    let injected = match &spec.agent {
        Some(agent) => {
            let grant = agent
                .server
                .grant(agent.scope.clone(), reach.as_ref())
                .await
                .map_err(|e| {
                    NotStarted::new(
                        ErrorKind::Crashed,
                        format!("aicli's MCP server cannot be reached from {describe}: {e}"),
                    )
                })?;
            Some(guards.granted(agent.server.clone(), grant))
        }
        None => None,
    };
    let mut launch = launch::build(spec, guards).await?;
    scaffold::lay_out(&mut launch, spec, guards)?;
    let out = launch::output_options(spec)?;
    tracing::info!(task = %spec.task.id, provider = spec.provider.name(), program = %launch.cmd.program.display(), place = %describe, "starting run");
    // Names only: values can be credentials.
    tracing::info!(task = %spec.task.id, variables = %crate::env::names(&launch.cmd.env), "environment passed to the CLI");
    guards
        .start(
            &launch.cmd,
            out,
            reach.as_ref().is_some_and(|r| r.restrict_to_peer),
        )
        .await?;
    let injected = with_notices(injected, guards.process()?.notices());
    supervise::supervise(spec, io, &launch, guards, injected).await
}

/// The events injected into the run's stream: the MCP server's (`injected`) and what
/// the runner says about the run (`notices`, as status events), in one stream.
fn with_notices(
    injected: Option<tokio::sync::mpsc::UnboundedReceiver<aicli_providers::AgentEvent>>,
    notices: Option<tokio::sync::mpsc::UnboundedReceiver<String>>,
) -> Option<tokio::sync::mpsc::UnboundedReceiver<aicli_providers::AgentEvent>> {
    let Some(mut notices) = notices else {
        return injected;
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let said = tx.clone();
    tokio::spawn(async move {
        while let Some(status) = notices.recv().await {
            let ev = aicli_providers::AgentEvent::synthetic(aicli_providers::EventKind::Status {
                status,
            });
            if said.send(ev).is_err() {
                return;
            }
        }
    });
    if let Some(mut injected) = injected {
        tokio::spawn(async move {
            while let Some(ev) = injected.recv().await {
                if tx.send(ev).is_err() {
                    return;
                }
            }
        });
    }
    Some(rx)
}
