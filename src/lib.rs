//! # aicli: the engine
//!
//! Runs AI coding CLIs headlessly and in parallel, each task in its own git worktree,
//! and turns their streams into normalized results. Everything vendor-specific lives in
//! the `aicli-providers` crate behind `AiCliProvider` (re-exported as [`providers`]);
//! nothing in this crate names a vendor.
//!
//! A task goes down through batch → attempt → run → process, and its result comes back
//! up once:
//!
//! | module | what it holds |
//! |---|---|
//! | `engine` | [`Engine`]: config, provider registry, runners; [`BatchOptions`]; [`EngineError`]; the entry points |
//! | `batch` | a new batch, answer, resume and recovery; the attempts of a task; the pool; totals and the blocked hook |
//! | `run` | a run's spec to its outcome: guards, the pure command build, supervision, the verdict |
//! | `proc` | spawning in a process group and a cgroup, NDJSON lines, the process tree, leftovers |
//! | `record` | [`RunStore`] and the batch record: every file name, the task records, locks |
//! | `worktree` | the repository, each task's worktree and branch, pruning |
//! | `deliver` | the work onto the task's branch: a commit per attempt |
//! | `budget` | the batch budget: reservations and charges |
//! | `live` | [`BatchEvent`]s on a bounded channel ([`live_channel`]) |
//! | `runner` | where a run's process lives: the [`Runner`] and [`Placement`] traits, local and Docker |
//! | `mcp` | [`McpServer`], the server each agent calls back into |
//! | `web` | [`WebServer`]: the run records as pages and a JSON API, tasks live over SSE |
//! | `http` | what the HTTP servers share: connection limits, the Host check |
//! | `env`, `cache`, `util` | a CLI's environment, aicli's cache of CLIs, private files |
//! | `cli` | the `aicli` command line ([`cli_main`]), with the fake APIs, the tasks file, schemas and `aicli install` |
//!
//! The modules are private; what a library user needs is re-exported below. With the
//! `test-helpers` feature the modules are public, for this package's tests and benches.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use aicli::providers::{AiCliConfig, ProviderRegistry, TaskSpec};
//! use aicli::{BatchOptions, CancellationToken, Engine, live_channel};
//!
//! let config = AiCliConfig::load(None, |_| None)?.config;
//! let mut registry = ProviderRegistry::with_builtin_adapters();
//! registry.configure(&config)?;
//! let engine = Engine::new(config, registry);
//! let tasks = vec![TaskSpec { id: "t1".into(), ..TaskSpec::new("Say hello") }];
//! let (tx, _rx) = live_channel(1 << 20);
//! let result = engine
//!     .run_batch(tasks, BatchOptions::new("."), tx, CancellationToken::new())
//!     .await?;
//! println!("{} succeeded", result.n_succeeded);
//! # Ok(()) }
//! ```
//!
//! `examples/batch.rs` runs a batch of two tasks, one on a provider registered in code,
//! with a live event loop.
#![deny(missing_docs)]

/// Declares the engine's modules: private, and public with the `test-helpers` feature
/// (for this package's tests and benches only).
macro_rules! internal_modules {
    ($($name:ident),* $(,)?) => {$(
        #[cfg(feature = "test-helpers")]
        pub mod $name;
        #[cfg(not(feature = "test-helpers"))]
        mod $name;
    )*};
}

internal_modules!(
    batch, budget, cache, deliver, engine, env, http, live, mcp, proc, record, run, runner, util,
    web, worktree,
);

#[cfg(feature = "test-helpers")]
pub mod testing;

mod cli;

pub use batch::{BlockedTask, CancelTarget};
pub use engine::{
    AgentGrant, AgentServer, BatchOptions, Engine, EngineError, TaskScope, run_batch,
};
pub use live::{BatchEvent, LiveReceiver, LiveSender, RecvError, channel as live_channel};
pub use mcp::{McpServer, McpServerOptions};
pub use record::{
    AnswerRecord, AttemptBudget, AttemptKind, AttemptRecord, BatchRecord, BatchResult, BatchSpec,
    BatchSummary, RunStore, SessionRun, TaskGist, TaskRecord, TaskState, Write,
};
pub use runner::{DockerRunner, LocalRunner, Placement, RunHandle, Runner};
pub use tokio_util::sync::CancellationToken;
pub use web::{Launcher as WebLauncher, WebOptions, WebServer};

pub use aicli_providers as providers;

/// Runs the `aicli` command line on this process's arguments; the exit code says how it
/// went. The `aicli` binary is this function.
pub fn cli_main() -> std::process::ExitCode {
    cli::main()
}

/// The Rust snippets of the README, compiled (and run, where not `no_run`) by
/// `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The Rust snippets of `docs/configuration.md`, compiled and run by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../docs/configuration.md")]
pub struct ConfigurationDoctests;
