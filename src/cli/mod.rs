//! Command-line parsing and dispatch. Output to the user happens here and in the
//! submodules, never in the library.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::providers::{AiCliConfig, ProviderRegistry};
use anyhow::Context;
use clap::{Args, Parser, Subcommand};

/// `println!` that never panics: a closed stdout (`aicli runs | head -3`) marks it
/// closed ([`out::closed`]) and the rest of the output is dropped quietly.
macro_rules! outln {
    () => {
        $crate::cli::out::write_str("\n")
    };
    ($($arg:tt)*) => {
        $crate::cli::out::write_str(&format!("{}\n", format_args!($($arg)*)))
    };
}

mod answer;
mod batch;
mod blocked;
mod cancel;
mod common;
mod containers;
mod countdown;
mod demo;
mod diff;
mod discard;
mod doctor;
mod exit;
mod fake;
mod fake_api;
mod image;
mod install;
mod land;
mod login;
mod npm;
mod out;
mod output;
mod parse;
mod printer;
mod probe;
mod progress;
mod providers;
mod record;
mod resolve;
mod resume;
mod run;
mod runs;
mod schema;
mod serve;
pub(crate) mod tasks_file;
mod web;
mod worktrees;

pub use exit::Failure;

/// Run AI coding CLIs (Claude Code, Codex, Gemini) headlessly and in parallel, each task
/// in its own git worktree, with one normalized result.
#[derive(Debug, Parser)]
#[command(name = "aicli", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// A config file merged over the built-in defaults (also: $AICLI_CONFIG,
    /// ~/.config/aicli/ai_cli_providers.json).
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// More log output on stderr (-v info, -vv debug, -vvv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Where runs happen and are recorded.
    #[command(flatten)]
    pub repo: RepoArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Where runs happen and are recorded.
#[derive(Debug, Clone, Args)]
pub struct RepoArgs {
    /// The git repository tasks run against (default: the current directory).
    #[arg(long, global = true, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// Where run records go (default: <repo>/.aicli/runs).
    #[arg(long, global = true, value_name = "DIR")]
    pub runs_dir: Option<PathBuf>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Install the pinned CLIs (claude, codex, gemini) and ACP agents (claude-acp,
    /// codex-acp, gemini-acp) into aicli's cache with npm.
    Install(install::InstallArgs),
    /// See aicli work, offline: the installed CLIs against built-in fake model APIs, in
    /// parallel, with a question answered.
    Demo(demo::DemoArgs),
    /// Run one task and show its progress.
    Run(run::RunArgs),
    /// Run a JSON file of tasks in parallel, with a live progress display.
    Batch(batch::BatchArgs),
    /// List the providers: binary, version, login state, features.
    Providers {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show each provider's auth status.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run a provider's interactive login.
    Login {
        /// The provider.
        provider: String,
    },
    /// Parse a recorded NDJSON transcript into a session result (or events).
    Parse(parse::ParseArgs),
    /// List run records, or show one batch.
    Runs {
        /// Print JSON.
        #[arg(long, global = true)]
        json: bool,
        #[command(subcommand)]
        action: Option<runs::RunsAction>,
    },
    /// A task's work: the commits on its branch against its base (`--patch` for the
    /// whole diff).
    Diff(diff::DiffArgs),
    /// Land a task's work (or a batch's succeeded tasks) into the checked-out branch or
    /// `--into BRANCH`: merge (default), `--squash` or `--rebase`; never over your
    /// uncommitted changes.
    Land(land::LandArgs),
    /// Remove a task's worktree and branch, its work with them (says what is lost;
    /// `--yes` when anything is).
    Discard(discard::DiscardArgs),
    /// List aicli's worktrees, or prune those that hold no work.
    Worktrees {
        /// Print JSON.
        #[arg(long, global = true)]
        json: bool,
        #[command(subcommand)]
        action: Option<worktrees::WorktreesAction>,
    },
    /// Answer a blocked task's question and continue its CLI session.
    Answer {
        /// The task: `TASK` or `BATCH/TASK`.
        task: String,
        /// The answer; `-` reads it from stdin (then it is not in the process list).
        answer: String,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
        /// Do not start aicli's MCP server for the run.
        #[arg(long)]
        no_mcp: bool,
        #[command(flatten)]
        fake: fake::FakeApiArgs,
    },
    /// Cancel a batch (as Ctrl-C would), or one task of it, that another aicli process
    /// is running; waits until it has stopped.
    Cancel {
        /// `BATCH`, `BATCH/TASK`, or a `TASK` id found in one batch.
        target: String,
        /// How long to wait for the runs to stop, seconds.
        #[arg(long, default_value_t = 30, value_name = "SECS", value_parser = common::positive_secs)]
        wait: u64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Serve the run records as a web view (batches, tasks live, cancel) and a JSON API.
    Web(web::WebArgs),
    /// List every blocked task of this repository's batches, with its question.
    Blocked {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Finish a batch whose aicli process was interrupted (also: `aicli batch --resume ID`).
    Resume {
        /// The batch id.
        batch_id: String,
        /// Print the batch result as JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Do not start aicli's MCP server.
        #[arg(long)]
        no_mcp: bool,
        #[command(flatten)]
        fake: fake::FakeApiArgs,
    },
    /// Check each provider: binary, installed vs pinned vs fixture version, login.
    Doctor {
        /// The fixtures directory whose recorded versions to compare (default:
        /// ./fixtures when it exists).
        #[arg(long, value_name = "DIR")]
        fixtures: Option<PathBuf>,
        /// Exit non-zero when anything is wrong (missing CLI, version drift).
        #[arg(long)]
        strict: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run a task against a real CLI (real API, or a fake one on loopback) and write the
    /// transcript as a fixture: <scenario>.ndjson/.stderr/.exit/.meta.json/.result.json.
    Record(record::RecordArgs),
    /// Run the agent MCP server alone (for a long-lived host or another orchestrator).
    Serve(serve::ServeArgs),
    /// Build the Docker images the `docker` runner runs each provider's CLI in.
    Image {
        #[command(subcommand)]
        action: image::ImageAction,
    },
    /// List aicli's containers on the Docker engines, or prune those left by a killed
    /// aicli.
    Containers {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(subcommand)]
        action: Option<containers::ContainersAction>,
    },
    /// Write the JSON Schemas of aicli's files into a directory.
    Schema {
        /// The directory (e.g. `schemas`).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

/// Loads the config: built-in defaults with the user's file merged over them.
pub fn load_config(explicit: Option<&std::path::Path>) -> anyhow::Result<AiCliConfig> {
    let loaded = AiCliConfig::load(explicit, |k| std::env::var(k).ok())?;
    if let Some(f) = &loaded.user_file {
        tracing::debug!(file = %f.display(), "config merged over the defaults");
    }
    Ok(loaded.config)
}

/// The registry of a config.
pub fn registry(config: &AiCliConfig) -> anyhow::Result<ProviderRegistry> {
    Ok(ProviderRegistry::from_config(config)?)
}

fn init_tracing(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    // rmcp logs whole JSON-RPC responses (credential values included) at debug: cap it.
    // At most info (LOG_FILTER_DIRECTIVES), and no louder than aicli's own level.
    // By default only rmcp's errors: its warnings are about the MCP clients' own
    // habits (Gemini CLI re-opens its SSE stream after a run's session closed, and rmcp
    // warns "Resume failed (Session error: Channel closed…)" for every slow stream),
    // which are benign and would tear the live display. `-v` shows them, the known-benign
    // ones as notes saying why (`BenignAsNote`), not as warnings.
    let rmcp_cap = if verbose == 0 {
        "rmcp=error"
    } else {
        crate::mcp::LOG_FILTER_DIRECTIVES
    };
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("AICLI_LOG")
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default))
            .add_directive(rmcp_cap.parse().unwrap_or_else(|_| {
                tracing_subscriber::filter::Directive::from(tracing::Level::WARN)
            }));
    // Colours only for a terminal: a log file or a pipe gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(progress::LogWriter)
        .event_format(BenignAsNote(
            tracing_subscriber::fmt::format().with_target(false),
        ))
        .try_init();
}

/// The log format, except for lines known to be benign ([`crate::mcp::benign_log`]):
/// those are a note saying why, never a warning.
struct BenignAsNote<F>(F);

impl<S, N, F> tracing_subscriber::fmt::FormatEvent<S, N> for BenignAsNote<F>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
    F: tracing_subscriber::fmt::FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let mut message = Message(String::new());
        event.record(&mut message);
        match crate::mcp::benign_log(event.metadata().target(), &message.0) {
            Some(why) => writeln!(writer, "aicli: note (benign): {} — {why}", message.0),
            None => self.0.format_event(ctx, writer, event),
        }
    }
}

/// The `message` field of an event.
struct Message(String);

impl tracing::field::Visit for Message {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.0 = value.to_owned();
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

/// 2 for what the user can fix in the command or its inputs (config, tasks file,
/// unknown provider, task or batch, a refused answer), 1 for aicli's own failures.
fn usage_or_failure(e: &anyhow::Error) -> u8 {
    use crate::EngineError;
    use crate::cli::npm::InstallError;
    use crate::worktree::WorktreeError;
    if e.downcast_ref::<crate::providers::ConfigError>().is_some() {
        return 2;
    }
    match e.downcast_ref::<WorktreeError>() {
        Some(WorktreeError::NotARepo { .. }) => return 2,
        Some(WorktreeError::Git { .. } | WorktreeError::NoGit(_)) | None => {}
    }
    match e.downcast_ref::<InstallError>() {
        Some(InstallError::UnknownProvider { .. } | InstallError::NoVersion { .. }) => return 2,
        Some(
            InstallError::NoNpm
            | InstallError::Npm { .. }
            | InstallError::Mismatch { .. }
            | InstallError::Io { .. },
        )
        | None => {}
    }
    match e.downcast_ref::<EngineError>() {
        Some(
            EngineError::Config(_)
            | EngineError::InvalidTask { .. }
            | EngineError::InvalidOption { .. }
            | EngineError::NoTasks
            | EngineError::NotFound(_)
            | EngineError::Refused(_)
            | EngineError::Worktree(WorktreeError::NotARepo { .. }),
        ) => 2,
        Some(
            EngineError::Record { .. }
            | EngineError::Worktree(WorktreeError::Git { .. } | WorktreeError::NoGit(_)),
        )
        | None => 1,
    }
}

/// Runs the subcommand.
async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let config_path = cli.config.clone();
    let config = config_path.as_deref();
    let repo = cli.repo.clone();
    match cli.command {
        Command::Install(a) => install::install(config, a).await,
        Command::Demo(a) => demo::demo(config, a).await,
        Command::Run(a) => run::run(config, repo, a).await,
        Command::Batch(a) => batch::batch(config, repo, a).await,
        Command::Providers { json } => providers::providers(config, json, true).await,
        Command::Status { json } => providers::providers(config, json, false).await,
        Command::Login { provider } => login::login(config, &provider).await,
        // Run before the runtime starts (see `main`); here for completeness.
        Command::Parse(a) => parse::parse(config, a),
        Command::Runs { json, action } => runs::runs(config, repo, json, action),
        Command::Diff(a) => diff::diff(config, a, repo).await,
        Command::Land(a) => land::land(config, a, repo).await,
        Command::Discard(a) => discard::discard(config, a, repo).await,
        Command::Worktrees { json, action } => {
            worktrees::worktrees(config, repo, json, action).await
        }
        Command::Serve(a) => serve::serve(config, repo, a).await,
        Command::Doctor {
            fixtures,
            strict,
            json,
        } => doctor::doctor(config, fixtures, strict, json).await,
        Command::Record(a) => record::record(config, a).await,
        Command::Answer {
            task,
            answer: text,
            json,
            no_mcp,
            fake,
        } => answer::answer(config, &task, &text, json, no_mcp, fake, repo).await,
        Command::Blocked { json } => blocked::blocked(config, repo, json),
        Command::Web(a) => web::web(config, a, repo).await,
        Command::Cancel { target, wait, json } => {
            cancel::cancel(config, &target, wait, json, repo).await
        }
        Command::Resume {
            batch_id,
            json,
            no_mcp,
            fake,
        } => resume::resume(config, &batch_id, json, no_mcp, fake, repo).await,
        Command::Schema { out } => schema::schema(&out),
        Command::Image { action } => image::run(&load_config(config)?, action).await,
        Command::Containers { json, action } => {
            containers::run(&load_config(config)?, json, action).await
        }
    }
}

/// Runs the command line; the exit code says how it went.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.verbose);
    // `aicli parse` does no async work: it runs without the runtime (whose worker
    // threads would only cost its start and shutdown).
    let cli = match cli.command {
        Command::Parse(a) => return exit_code(parse::parse(cli.config.as_deref(), a)),
        command => Cli { command, ..cli },
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("aicli: {e:#}");
            return ExitCode::from(1);
        }
    };
    let code = exit_code(rt.block_on(dispatch(cli)));
    // Background tasks (a printer blocked on a closed pipe) do not hold the exit up.
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    code
}

/// The exit code of a command's outcome; an error is said on stderr.
fn exit_code(outcome: anyhow::Result<ExitCode>) -> ExitCode {
    match outcome {
        Ok(code) => code,
        // The reader of stdout went away (`aicli runs | head -3`): end quietly.
        Err(e) if out::is_broken_pipe(&e) || out::closed() => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(f) = e.downcast_ref::<Failure>() {
                eprintln!("aicli: {f}");
                return f.exit_code();
            }
            eprintln!("aicli: {}", describe(&e));
            ExitCode::from(usage_or_failure(&e))
        }
    }
}

/// An error and its causes, each said once: a cause whose text the message already
/// holds (a config error that quotes its parse error) is not repeated.
fn describe(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}
