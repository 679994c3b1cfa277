//! The notify hook (`engine.notify_hook`): a command run with a JSON payload on stdin
//! when a task blocks on a question. A hook that fails is logged; it never fails the
//! task.

use std::path::PathBuf;
use std::time::Duration;

use aicli_providers::{PendingQuestion, SessionResult};

use crate::engine::Engine;
use crate::record::BatchSpec;

/// Runs the config's notify hook with the question as JSON on stdin.
pub(super) async fn blocked(
    engine: &Engine,
    spec: &BatchSpec,
    result: &SessionResult,
    q: &PendingQuestion,
) {
    let hook = &engine.config.engine.notify_hook;
    let Some((program, args)) = hook.split_first() else {
        return;
    };
    let payload = serde_json::json!({
        "event": "blocked",
        "batch_id": spec.batch_id,
        "task_id": result.task_id,
        "provider": result.provider,
        "session_id": result.session_id,
        "question": q.question,
        "options": q.options,
        "asked_at": q.asked_at,
        "answer_with": format!("aicli answer {}/{} \"...\"", spec.batch_id, result.task_id),
    });
    let mut cmd = aicli_providers::CommandSpec::new(
        &aicli_providers::BinaryLocation::Path(PathBuf::from(program)),
        &spec.repo,
    );
    cmd.args(args.iter().cloned());
    cmd.stdin = Some(payload.to_string());
    match crate::proc::capture::run_capture(&cmd, Duration::from_secs(30)).await {
        Ok(c) if c.exit_code == Some(0) => {}
        Ok(c) => tracing::warn!(
            hook = %program,
            exit = ?c.exit_code,
            timed_out = c.timed_out,
            stderr = %c.stderr.trim(),
            "the notify hook failed"
        ),
        Err(e) => tracing::warn!(hook = %program, error = %e, "cannot run the notify hook"),
    }
}
