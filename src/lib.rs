//! # aicli: the engine
//!
//! Runs AI coding CLIs headlessly and in parallel, each task in its own git worktree,
//! and turns their streams into normalized results. Everything vendor-specific lives in
//! the `aicli-providers` crate behind `AiCliProvider`; nothing in this crate names a
//! vendor.
#![deny(missing_docs)]

pub mod budget;
pub mod cgroup;
pub mod conversation;
pub mod env;
pub mod events;
pub mod fake_api;
pub mod install;
pub mod live;
pub mod mcp;
pub mod pool;
pub mod process;
pub mod proctree;
pub mod runner;
pub mod schema;
pub mod service;
pub mod session;
pub mod stdin;
pub mod store;
pub mod tasks_file;
pub mod testing;
pub mod util;
pub mod worktree;

pub use events::BatchEvent;
pub use live::{LiveReceiver, LiveSender};
pub use service::{BatchOptions, Engine, EngineError, run_batch};
pub use store::BatchResult;

pub use aicli_providers as providers;
