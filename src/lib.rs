//! # aicli: the engine
//!
//! Runs AI coding CLIs headlessly and in parallel, each task in its own git worktree,
//! and turns their streams into normalized results. Everything vendor-specific lives in
//! the `aicli-providers` crate behind `AiCliProvider`; nothing in this crate names a
//! vendor.
#![deny(missing_docs)]

pub mod mcp;

pub use aicli_providers as providers;
