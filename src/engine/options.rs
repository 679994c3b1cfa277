//! [`BatchOptions`]: how a batch runs, checked once at the engine's entry.

use std::path::PathBuf;
use std::time::Duration;

use aicli_providers::RunnerKind;

use super::EngineError;

/// How a batch runs. `None` fields take the config's engine defaults.
#[derive(Debug, Clone)]
pub struct BatchOptions {
    /// The repository (or, without worktrees, the directory) tasks run against.
    pub repo: PathBuf,
    /// The provider for tasks that name none (the config's default when `None`).
    pub provider: Option<String>,
    /// Sessions at once.
    pub max_parallel: Option<usize>,
    /// Batch budget in USD.
    pub budget_usd: Option<f64>,
    /// Wall-clock limit per run.
    pub timeout: Option<Duration>,
    /// Idle limit per run.
    pub idle_timeout: Option<Duration>,
    /// Where run records go.
    pub runs_dir: Option<PathBuf>,
    /// Base of the worktrees.
    pub base_ref: String,
    /// Run each task in its own worktree (else in `repo` itself).
    pub worktrees: bool,
    /// Use this batch id instead of a new one.
    pub batch_id: Option<String>,
    /// Where tasks that name no runner run (before the provider's and the config's).
    pub runner: Option<RunnerKind>,
    /// The fake model API script the CLIs are pointed at (`--fake-api=SCRIPT`), kept in
    /// the batch's record so that an answer or a resume of its tasks talks to the same
    /// fakes without being told.
    pub fake_api: Option<String>,
}

impl BatchOptions {
    /// Defaults for `repo`.
    pub fn new(repo: impl Into<PathBuf>) -> BatchOptions {
        BatchOptions {
            repo: repo.into(),
            provider: None,
            max_parallel: None,
            budget_usd: None,
            timeout: None,
            idle_timeout: None,
            runs_dir: None,
            base_ref: "HEAD".to_owned(),
            worktrees: true,
            batch_id: None,
            runner: None,
            fake_api: None,
        }
    }

    /// Checks the options before anything is written or run: a budget must be a finite
    /// number above 0, time limits at least a second, parallelism at least 1.
    pub fn validate(&self) -> Result<(), EngineError> {
        let invalid = |option, message: String| EngineError::InvalidOption { option, message };
        if let Some(b) = self.budget_usd {
            aicli_providers::check_budget(b).map_err(|m| invalid("budget_usd", m))?;
        }
        for (option, limit) in [
            ("timeout", self.timeout),
            ("idle_timeout", self.idle_timeout),
        ] {
            if limit.is_some_and(|d| d < Duration::from_secs(1)) {
                return Err(invalid(
                    option,
                    "must be at least 1 second (less would stop every run at once)".to_owned(),
                ));
            }
        }
        if self.max_parallel == Some(0) {
            return Err(invalid(
                "max_parallel",
                "must be at least 1 (0 would run nothing)".to_owned(),
            ));
        }
        if let Some(id) = &self.batch_id {
            let ok = !id.is_empty()
                && id.len() <= 100
                && !id.starts_with(['.', '-'])
                && id.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
            if !ok {
                return Err(invalid(
                    "batch_id",
                    format!("{id:?}: a batch id is 1 to 100 letters, digits, '.', '_' and '-', not starting with '.' or '-'"),
                ));
            }
        }
        Ok(())
    }
}
