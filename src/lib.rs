//! # aicli: the engine
//!
//! Runs AI coding CLIs headlessly and in parallel, each task in its own git worktree,
//! and turns their streams into normalized results. Everything vendor-specific lives in
//! the `aicli-providers` crate behind `AiCliProvider`; nothing in this crate names a
//! vendor.
#![deny(missing_docs)]

pub mod batch;
pub mod budget;
pub mod engine;
pub mod env;
pub mod fake_api;
pub mod install;
pub mod live;
pub mod mcp;
pub mod proc;
pub mod record;
pub mod run;
pub mod runner;
pub mod schema;
pub mod tasks_file;
pub mod testing;
pub mod util;
pub mod worktree;

pub use engine::{BatchOptions, Engine, EngineError, run_batch};
pub use live::{BatchEvent, LiveReceiver, LiveSender, RecvError, channel as live_channel};
pub use record::BatchResult;
pub use tokio_util::sync::CancellationToken;

pub use aicli_providers as providers;
