//! [`EngineError`]: what stops a batch (or an answer, a resume) before any task runs.

use std::path::PathBuf;

use crate::worktree::WorktreeError;

/// Errors that stop a batch before any task runs.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A config or provider problem.
    #[error(transparent)]
    Config(#[from] aicli_providers::ConfigError),
    /// A repository problem.
    #[error(transparent)]
    Worktree(#[from] WorktreeError),
    /// A task spec is invalid.
    #[error("task {index} ({id}): {message}")]
    InvalidTask {
        /// Its position in the batch (1-based).
        index: usize,
        /// Its id.
        id: String,
        /// What is wrong.
        message: String,
    },
    /// A batch option is invalid ([`crate::BatchOptions::validate`]).
    #[error("{option}: {message}")]
    InvalidOption {
        /// The option's field in [`crate::BatchOptions`] (`budget_usd`, `timeout`, ...).
        option: &'static str,
        /// What is wrong.
        message: String,
    },
    /// Nothing to run.
    #[error("the batch has no tasks")]
    NoTasks,
    /// The run records could not be written.
    #[error("cannot write the run record in {path}: {source}")]
    Record {
        /// Where.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A record could not be read (resume, answer).
    #[error("{0}")]
    NotFound(String),
    /// The operation does not apply (e.g. answering a task that is not blocked).
    #[error("{0}")]
    Refused(String),
}

impl EngineError {
    /// Whether the error is in what the caller gave (a task, an option, a reference to
    /// a task or batch, a repository that is not one), as opposed to aicli failing to
    /// read or write what it needs.
    pub fn is_usage(&self) -> bool {
        match self {
            EngineError::Config(_)
            | EngineError::InvalidTask { .. }
            | EngineError::InvalidOption { .. }
            | EngineError::NoTasks
            | EngineError::NotFound(_)
            | EngineError::Refused(_)
            | EngineError::Worktree(WorktreeError::NotARepo { .. }) => true,
            EngineError::Record { .. }
            | EngineError::Worktree(WorktreeError::Git { .. } | WorktreeError::NoGit(_)) => false,
        }
    }
}

/// `Err(io)` at `path` as [`EngineError::Record`]: `.map_err(record_error(&dir))`.
pub(crate) fn record_error(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> EngineError {
    let path = path.to_path_buf();
    move |source| EngineError::Record { path, source }
}
