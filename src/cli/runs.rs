//! `aicli runs`: list run records, show one batch.

use std::path::Path;
use std::process::ExitCode;

use crate::providers::SessionStatus;
use crate::record::RunStore;
use clap::Subcommand;
use serde_json::json;

use super::common::repo_dir;
use super::{RepoArgs, load_config, output};

/// `aicli runs ...`.
#[derive(Debug, Subcommand)]
pub enum RunsAction {
    /// Show one batch: its tasks, results, questions and answers.
    Show {
        /// The batch id, or its end (its last 4 hex digits are enough when no other
        /// batch ends so).
        id: String,
    },
}

pub(super) fn runs(
    config_path: Option<&Path>,
    r: RepoArgs,
    json_out: bool,
    action: Option<RunsAction>,
) -> anyhow::Result<ExitCode> {
    let config = load_config(config_path)?;
    let repo = repo_dir(&r)?;
    let root = r
        .runs_dir
        .clone()
        .or(config.engine.runs_dir.clone())
        .unwrap_or_else(|| repo.join(".aicli/runs"));
    let store = RunStore::new(&root);
    match action {
        None => list(&store, &root, json_out),
        Some(RunsAction::Show { id }) => show(&store, &id, json_out),
    }
}

/// `aicli runs`: every batch, one line each, the columns as wide as their content.
fn list(store: &RunStore, root: &Path, json_out: bool) -> anyhow::Result<ExitCode> {
    let rows: Vec<_> = store
        .list()
        .iter()
        .filter_map(|b| b.summary().ok())
        .collect();
    if json_out {
        outln!("{}", serde_json::to_string(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        outln!("no runs in {}", root.display());
        return Ok(ExitCode::SUCCESS);
    }
    let mut table = vec![
        [
            "batch", "started", "provider", "tasks", "ok", "fail", "blkd", "intr", "cost",
        ]
        .map(str::to_owned),
    ];
    let to_resume: Vec<String> = rows
        .iter()
        .filter(|s| s.n_interrupted + s.n_parked > 0)
        .map(|s| s.batch_id.clone())
        .collect();
    for s in rows {
        table.push([
            s.batch_id,
            s.created_at,
            s.provider,
            s.n_tasks.to_string(),
            s.n_succeeded.to_string(),
            s.n_failed.to_string(),
            s.n_blocked.to_string(),
            (s.n_interrupted + s.n_parked).to_string(),
            format!("${:.4}", s.cost_usd),
        ]);
    }
    // Text columns to the left, numbers to the right.
    let right = [false, false, false, true, true, true, true, true, true];
    outln!("{}", output::columns(&table, &right).trim_end());
    // What `aicli resume` would finish.
    for b in to_resume {
        outln!("intr: interrupted or parked tasks; finish them with `aicli resume {b}`");
    }
    Ok(ExitCode::SUCCESS)
}

/// `aicli runs show ID`: one batch, its tasks, attempts, questions and answers.
fn show(store: &RunStore, id: &str, json_out: bool) -> anyhow::Result<ExitCode> {
    let b = match store.open_batch(id) {
        Ok(b) => b,
        Err(not_found) => {
            let ending: Vec<_> = store
                .list()
                .into_iter()
                .filter(|b| !id.is_empty() && b.batch_id().ends_with(id))
                .collect();
            match ending.as_slice() {
                [one] => one.clone(),
                [] => return Err(super::common::usage(not_found)),
                several => {
                    let ids: Vec<String> = several.iter().map(|b| b.batch_id()).collect();
                    return Err(super::common::usage(format!(
                        "'{id}' ends several batches: {}; name one",
                        ids.join(", ")
                    )));
                }
            }
        }
    };
    let spec = b.spec().map_err(anyhow::Error::msg)?;
    let tasks = b.tasks().map_err(anyhow::Error::msg)?;
    if json_out {
        let calls: serde_json::Map<String, serde_json::Value> = tasks
            .iter()
            .map(|t| {
                let c = crate::mcp::read_calls(&b, &t.task.id);
                (t.task.id.clone(), json!(c))
            })
            .collect();
        outln!(
            "{}",
            serde_json::to_string(
                &json!({"spec": spec, "tasks": tasks, "result": b.result(), "mcp_calls": calls})
            )?
        );
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "batch {} · {} · {} · repo {}",
        spec.batch_id,
        spec.created_at,
        providers_of(&tasks, &spec.provider),
        spec.repo.display()
    );
    for t in tasks {
        outln!(
            "\n{} [{}] ({})",
            t.task.id,
            serde_json::to_value(t.state)?.as_str().unwrap_or_default(),
            t.provider
        );
        outln!(
            "  prompt: {}",
            crate::providers::shared::text::truncate_chars(&t.task.prompt, 120)
        );
        if let (crate::record::TaskState::Parked, Some(p)) = (t.state, &t.parked) {
            outln!("  {}", p.describe(&t.provider));
        }
        let calls = crate::mcp::read_calls(&b, &t.task.id);
        for at in &t.attempts {
            let r = at.result.as_ref();
            outln!(
                "  attempt {} ({}) {}: {}",
                at.attempt,
                serde_json::to_value(at.kind)?.as_str().unwrap_or_default(),
                at.started_at,
                match r {
                    Some(r) => format!(
                        "{} · {} · {}",
                        match r.status {
                            SessionStatus::Succeeded => "ok".to_owned(),
                            SessionStatus::Blocked => "blocked".to_owned(),
                            SessionStatus::Failed | SessionStatus::Interrupted => format!(
                                "{}: {}",
                                r.error_kind.map(|k| k.as_str()).unwrap_or("failed"),
                                r.error.clone().unwrap_or_default()
                            ),
                        },
                        output::cost(r),
                        output::tokens(r)
                    ),
                    None => "did not finish".to_owned(),
                }
            );
            if let Some(trouble) = r.and_then(|r| r.tool_trouble()) {
                outln!("    ⚠ {trouble}");
            }
            if let Some(q) = r.and_then(|r| r.question.as_ref()) {
                outln!("    asked: {}", q.question);
            }
            if let Some(w) = r.and_then(|r| r.work.as_ref()) {
                if let Some(c) = &w.commit {
                    let s = if w.files == 1 { "" } else { "s" };
                    outln!(
                        "    committed {} ({} file{s})",
                        &c[..c.len().min(10)],
                        w.files
                    );
                }
                if let Some(note) = w.note() {
                    outln!("    {note}");
                }
            }
            for c in calls.iter().filter(|c| c.attempt == at.attempt) {
                outln!("    mcp {}", call_line(c));
            }
            for d in &at.egress_denied {
                outln!("    egress {}", d.line());
            }
        }
        for ans in &t.answers {
            outln!(
                "  answered {}: {} -> {}",
                ans.answered_at,
                ans.question,
                ans.answer
            );
        }
        if let (Some(b), Some(w)) = (&t.branch, &t.worktree) {
            outln!("  branch {b} at {}", w.display());
        }
    }
    let overlaps = b
        .result()
        .map(|r| output::overlaps(&r.overlaps))
        .unwrap_or_default();
    if !overlaps.is_empty() {
        outln!("{overlaps}");
    }
    Ok(ExitCode::SUCCESS)
}

/// One recorded MCP tool call: `run_tests 1.20 s exit 0 ok: <the start of its result>`.
fn call_line(c: &crate::mcp::McpCallRecord) -> String {
    let exit = c
        .exit_code
        .map(|e| format!(" exit {e}"))
        .unwrap_or_default();
    let result: String = c.result.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut shown = crate::providers::shared::text::truncate_chars(&result, 100);
    if c.truncated && !shown.ends_with('…') {
        shown.push('…');
    }
    format!(
        "{} {:.2} s{exit} {}: {shown}",
        c.tool,
        c.duration_ms as f64 / 1000.0,
        if c.ok { "ok" } else { "failed" },
    )
}

/// `provider claude`, or `providers claude, codex` for a mixed batch: who ran its tasks.
fn providers_of(tasks: &[crate::record::TaskRecord], default: &str) -> String {
    let mut names: Vec<&str> = Vec::new();
    for t in tasks {
        if !names.contains(&t.provider.as_str()) {
            names.push(&t.provider);
        }
    }
    match names.as_slice() {
        [] => format!("provider {default}"),
        [one] => format!("provider {one}"),
        many => format!("providers {}", many.join(", ")),
    }
}
