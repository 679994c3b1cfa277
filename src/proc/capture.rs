//! Short commands (a version or status probe) run under the same supervision as a CLI
//! run, their output captured whole ([`run_capture`]).

use std::time::Duration;

use aicli_providers::CommandSpec;

use super::lines::StdoutLine;
use super::spawn::{LocalProcess, OutputOptions, SpawnError};

/// What a short command printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    /// Its stdout.
    pub stdout: String,
    /// Its stderr (tail).
    pub stderr: String,
    /// Its exit code (`None`: killed, e.g. by the timeout).
    pub exit_code: Option<i32>,
    /// Whether the timeout ended it.
    pub timed_out: bool,
}

/// Runs a short command (a version or status probe) under the same supervision as a
/// CLI run — own session, tree killed at the end — and captures its output.
pub async fn run_capture(cmd: &CommandSpec, timeout: Duration) -> Result<Captured, SpawnError> {
    let mut p = LocalProcess::spawn(cmd, OutputOptions::default())?;
    let mut stdout = Vec::new();
    let collect = async {
        while let Some(line) = p.lines.recv().await {
            match line {
                StdoutLine::Line(l) => stdout.push(String::from_utf8_lossy(&l).into_owned()),
                StdoutLine::Overlong { prefix, .. } => {
                    stdout.push(String::from_utf8_lossy(&prefix).into_owned())
                }
            }
        }
    };
    let timed_out = tokio::time::timeout(timeout, collect).await.is_err();
    let exit_code = if timed_out {
        p.shutdown(Duration::from_millis(500)).await
    } else {
        let code = tokio::time::timeout(timeout, p.wait()).await.ok().flatten();
        p.shutdown(Duration::from_millis(500)).await;
        code
    };
    p.drain().await;
    Ok(Captured {
        stdout: stdout.join("\n"),
        stderr: p.stderr.text(),
        exit_code,
        timed_out,
    })
}
