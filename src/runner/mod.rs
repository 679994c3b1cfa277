//! Where a CLI process runs. The session layer talks to a [`Runner`] and a [`RunHandle`]
//! only, so a container runner slots in beside the [`local::LocalRunner`] without
//! touching sessions, pool or service.

use std::time::Duration;

use crate::process::{LineReceiver, OutputOptions, SpawnError, StderrTail};
use aicli_providers::CommandSpec;
use async_trait::async_trait;

pub mod local;

pub use local::LocalRunner;

/// Errors starting a run.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// A local process could not start.
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    /// The runner's backend failed (e.g. the container engine).
    #[error("{runner} runner: {message}")]
    Backend {
        /// The runner's name.
        runner: String,
        /// What failed.
        message: String,
    },
}

/// Starts CLI runs somewhere.
#[async_trait]
pub trait Runner: Send + Sync + std::fmt::Debug {
    /// A short name (`local`, `docker`).
    fn name(&self) -> &str;

    /// Starts `cmd`; its stdout arrives as lines, its stderr in a tail.
    async fn start(
        &self,
        cmd: &CommandSpec,
        out: OutputOptions,
    ) -> Result<Box<dyn RunHandle>, RunnerError>;

    /// The host a CLI started by this runner uses to reach a server on this machine
    /// (`127.0.0.1` for local processes).
    fn host_address(&self) -> String {
        "127.0.0.1".to_owned()
    }
}

/// A started run.
#[async_trait]
pub trait RunHandle: Send + std::fmt::Debug {
    /// Stdout lines as they arrive (bounded in bytes: [`crate::process::line_channel`]);
    /// closed at EOF. Taken once (later calls get a closed channel), so a session can
    /// wait for lines and for the exit at the same time.
    fn take_lines(&mut self) -> LineReceiver;
    /// The stderr tail.
    fn stderr(&self) -> StderrTail;
    /// The process id on this machine, when there is one.
    fn pid(&self) -> Option<u32>;
    /// Waits for the run to exit: `Some(code)`, `None` when killed by a signal.
    async fn wait(&mut self) -> Option<i32>;
    /// Stops the run and everything it started: SIGTERM, `grace`, SIGKILL.
    async fn shutdown(&mut self, grace: Duration) -> Option<i32>;
    /// Waits until its output is fully read and recorded.
    async fn drain(&mut self);
}
