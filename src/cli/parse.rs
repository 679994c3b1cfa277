//! `aicli parse`: a recorded transcript (or a run record's task) to its result.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::providers::replay;
use crate::providers::{ExitStatus, ParseContext, SessionResult};
use crate::record::read_range;
use anyhow::Context;
use clap::Args;

use super::common::usage;
use super::{load_config, registry};

/// `aicli parse`.
#[derive(Debug, Args)]
pub struct ParseArgs {
    /// The transcript (NDJSON as the CLI printed it), or a run record's task directory.
    pub file: PathBuf,
    /// The provider whose format it is (read from the record when FILE is one).
    #[arg(long, short)]
    pub provider: Option<String>,
    /// The CLI's stderr.
    #[arg(long, value_name = "FILE")]
    pub stderr: Option<PathBuf>,
    /// The CLI's exit code.
    #[arg(long)]
    pub exit_code: Option<i32>,
    /// The model the run asked for (for cost estimates).
    #[arg(long)]
    pub model: Option<String>,
    /// Print the normalized events as NDJSON instead of the result.
    #[arg(long)]
    pub events: bool,
    /// With a run record: which attempt (default: the last).
    #[arg(long)]
    pub attempt: Option<u32>,
}

pub(super) fn parse(config_path: Option<&Path>, a: ParseArgs) -> anyhow::Result<ExitCode> {
    let config = load_config(config_path)?;
    let reg = registry(&config)?;
    // A file that is not there (or not readable) is bad input (exit 2), not a failure of
    // aicli's; so is a directory that is not a run record's task.
    let meta = std::fs::metadata(&a.file).map_err(|e| cannot_read(&a.file, &e))?;
    // A run record's task directory (or its events.ndjson) carries its own context.
    let record = if meta.is_dir() {
        let Some(rec) = crate::record::task_at(&a.file) else {
            return Err(usage(format!(
                "{} is not a run record's task directory (no record of it in its batch); \
                 give a transcript file or .aicli/runs/<batch>/tasks/<task>",
                a.file.display()
            )));
        };
        Some((a.file.clone(), rec))
    } else if a.file.file_name().is_some_and(|n| n == "events.ndjson") {
        // `events.ndjson` given from inside its directory has the parent "".
        let file = std::path::absolute(&a.file).unwrap_or_else(|_| a.file.clone());
        let dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
        crate::record::task_at(&dir).map(|rec| (dir, rec))
    } else {
        None
    };
    let input = match record {
        Some((dir, rec)) => Input::of_record(&dir, rec.map_err(anyhow::Error::msg)?, &a)?,
        None => Input::of_file(&a, &reg.names())?,
    };
    let Input {
        provider: provider_name,
        stdout,
        stderr,
        exit_code,
        ctx,
        verdict,
    } = input;
    let provider = reg.get(&provider_name)?;
    let ctx = ParseContext {
        model: ctx
            .model
            .or_else(|| provider.config().default_model.clone()),
        ..ctx
    };
    // Streamed: one line in memory at a time, each event written as its line passes.
    let (path, start, end) = stdout;
    let reader = open_range(&path, start, end).map_err(|e| cannot_read(&path, &e))?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut written: std::io::Result<()> = Ok(());
    let mut result = replay::decode_reader(
        provider.as_ref(),
        reader,
        config.engine.line_cap_bytes,
        &ctx,
        &stderr,
        exit_code,
        |e| {
            if a.events && written.is_ok() {
                written = serde_json::to_writer(&mut out, &e)
                    .map_err(std::io::Error::from)
                    .and_then(|()| out.write_all(b"\n"));
            }
        },
    )
    .with_context(|| format!("cannot read {}", path.display()))?;
    written?;
    if let Some(v) = &verdict {
        with_engine_verdict(&mut result, v);
    }
    if !a.events {
        serde_json::to_writer(&mut out, &result)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// What is parsed: the stream (a file, or a byte range of a record's events), how the CLI
/// ended, and, for a record's attempt, the engine's verdict on it.
struct Input {
    provider: String,
    stdout: (PathBuf, u64, Option<u64>),
    stderr: String,
    exit_code: ExitStatus,
    ctx: ParseContext,
    verdict: Option<SessionResult>,
}

impl Input {
    /// An attempt of a run record's task (`--attempt`, else the last one).
    fn of_record(
        dir: &Path,
        rec: crate::record::TaskRecord,
        a: &ParseArgs,
    ) -> anyhow::Result<Input> {
        let attempt = match a.attempt {
            Some(n) => rec
                .attempts
                .iter()
                .find(|x| x.attempt == n)
                .ok_or_else(|| {
                    usage(format!(
                        "--attempt {n}: {} has no attempt {n} (it has {})",
                        dir.display(),
                        rec.attempts.len()
                    ))
                })?,
            None => rec
                .attempts
                .last()
                .with_context(|| format!("{} has no attempts", dir.display()))?,
        };
        let stderr = read_range(
            &dir.join("stderr.log"),
            attempt.stderr_start,
            attempt.stderr_end,
        )
        .unwrap_or_default();
        // A finished attempt's result says how the CLI ended (no code: a signal).
        let exit_code = match (a.exit_code, &attempt.result) {
            (Some(c), _) => ExitStatus::Code(c),
            (None, Some(r)) => ExitStatus::of_wait(r.exit_code),
            (None, None) => ExitStatus::Unknown,
        };
        Ok(Input {
            provider: a.provider.clone().unwrap_or(rec.provider.clone()),
            stdout: (
                dir.join("events.ndjson"),
                attempt.events_start,
                attempt.events_end,
            ),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
            exit_code,
            ctx: ParseContext {
                model: a.model.clone().or(attempt.model.clone()),
                prior: attempt.prior,
                answered: None,
            },
            verdict: attempt.result.clone(),
        })
    }

    /// A transcript file, with `--provider` (required), `--stderr`, `--exit-code`.
    fn of_file(a: &ParseArgs, known: &[String]) -> anyhow::Result<Input> {
        let Some(p) = a.provider.clone() else {
            return Err(usage(format!(
                "--provider is required to parse {} (known: {}); a run record's task directory needs none",
                a.file.display(),
                known.join(", ")
            )));
        };
        let stderr = match &a.stderr {
            Some(f) => std::fs::read_to_string(f).map_err(|e| cannot_read(f, &e))?,
            None => String::new(),
        };
        Ok(Input {
            provider: p,
            stdout: (a.file.clone(), 0, None),
            stderr,
            // Without --exit-code nothing is known about how the CLI ended.
            exit_code: a.exit_code.map_or(ExitStatus::Unknown, ExitStatus::Code),
            ctx: ParseContext {
                model: a.model.clone(),
                prior: None,
                answered: None,
            },
            verdict: None,
        })
    }
}

/// A file the command line names cannot be opened: bad input (exit 2). A failure while
/// reading one that opened stays aicli's (exit 1).
fn cannot_read(path: &Path, e: &std::io::Error) -> anyhow::Error {
    usage(format!("cannot read {}: {e}", path.display()))
}

/// Bytes `start..end` of `path` (to its end when `end` is `None`), buffered.
fn open_range(path: &Path, start: u64, end: Option<u64>) -> std::io::Result<impl std::io::BufRead> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path)?;
    f.seek(SeekFrom::Start(start))?;
    let len = end.map_or(u64::MAX, |e| e.saturating_sub(start));
    Ok(std::io::BufReader::with_capacity(256 * 1024, f.take(len)))
}

/// The engine's own verdict on a recorded attempt, over what the CLI's stream alone
/// says: the stream of a task that blocked on a question (or was interrupted, or ended
/// by a watchdog) reads as a plain success or crash, but the engine knew better and
/// recorded it in `task.json`. The stream's figures (usage, cost, response) stay as
/// parsed.
pub(super) fn with_engine_verdict(parsed: &mut SessionResult, recorded: &SessionResult) {
    parsed.status = recorded.status;
    parsed.success = recorded.success;
    parsed.error_kind = recorded.error_kind;
    parsed.error = recorded.error.clone();
    parsed.question = recorded.question.clone();
    parsed.continuation = recorded.continuation.clone();
    parsed.task_id = recorded.task_id.clone();
    parsed.branch = recorded.branch.clone();
    parsed.worktree = recorded.worktree.clone();
}
