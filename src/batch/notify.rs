//! Notifications (`engine.notify`): a small JSON payload to a webhook and/or a command's
//! stdin when a task blocks, finishes or fails, and when a batch ends. Each target is
//! tried up to `attempts` times with back-off; one that still fails is logged and never
//! fails the task. The deprecated `engine.notify_hook` still runs on `blocked`.

use std::path::PathBuf;
use std::time::Duration;

use aicli_providers::{CommandSpec, NotifyConfig, NotifyEvent, SessionResult, SessionStatus};
use serde_json::{Value, json};

use crate::engine::Engine;
use crate::record::{BatchResult, BatchSpec};

/// Notifies of a task's settled result: `blocked`, `finished` or `failed`.
pub(super) async fn task_settled(engine: &Engine, spec: &BatchSpec, result: &SessionResult) {
    let event = match result.status {
        SessionStatus::Blocked => NotifyEvent::Blocked,
        SessionStatus::Succeeded => NotifyEvent::Finished,
        SessionStatus::Failed => NotifyEvent::Failed,
        // Only found on a restart, which runs the task again.
        SessionStatus::Interrupted => return,
    };
    let payload = task_payload(&engine.config.engine.notify, spec, event, result);
    if event == NotifyEvent::Blocked && !engine.config.engine.notify_hook.is_empty() {
        tracing::warn!(
            "engine.notify_hook is deprecated: it still runs when a task blocks; move it to engine.notify.command (engine.notify.on chooses the events)"
        );
        let hook = &engine.config.engine.notify_hook;
        run_command(hook, &payload, &spec.repo, 1, Duration::from_secs(30)).await;
    }
    deliver(engine, spec, event, &payload).await;
}

/// Notifies that this invocation of a batch ended.
pub(super) async fn batch_ended(engine: &Engine, spec: &BatchSpec, result: &BatchResult) {
    let cfg = &engine.config.engine.notify;
    let mut payload = json!({
        "event": NotifyEvent::BatchFinished.as_str(),
        "batch_id": result.batch_id,
        "n_tasks": result.n_tasks,
        "n_succeeded": result.n_succeeded,
        "n_failed": result.n_failed,
        "n_interrupted": result.n_interrupted,
        "n_blocked": result.n_blocked,
        "total_cost_usd": result.total_cost_usd,
        "wall_clock_ms": result.wall_clock_ms,
        "at": crate::util::now_rfc3339(),
    });
    if let Some(base) = &cfg.page_url {
        payload["link"] = json!(format!("{}/batches/{}", base.trim_end_matches('/'), spec.batch_id));
    }
    deliver(engine, spec, NotifyEvent::BatchFinished, &payload).await;
}

/// The payload of a task's notification.
fn task_payload(
    cfg: &NotifyConfig,
    spec: &BatchSpec,
    event: NotifyEvent,
    r: &SessionResult,
) -> Value {
    let mut p = json!({
        "event": event.as_str(),
        "batch_id": spec.batch_id,
        "task_id": r.task_id,
        "provider": r.provider,
        "status": r.status,
        "error_kind": r.error_kind,
        "error": r.error.as_deref().map(|e| aicli_providers::shared::text::truncate_chars(e, 500)),
        "cost_usd": r.cost_usd,
        "duration_ms": r.duration_ms,
        "branch": r.branch,
        "at": crate::util::now_rfc3339(),
    });
    if let Some(q) = &r.question {
        p["session_id"] = json!(r.session_id);
        p["question"] = json!(q.question);
        p["options"] = json!(q.options);
        p["asked_at"] = json!(q.asked_at);
        p["answer_with"] = json!(format!("aicli answer {}/{} \"<your answer>\"", spec.batch_id, r.task_id));
    }
    if let Some(base) = &cfg.page_url {
        p["link"] = json!(format!(
            "{}/batches/{}/tasks/{}",
            base.trim_end_matches('/'),
            spec.batch_id,
            r.task_id
        ));
    }
    p
}

/// Sends `payload` to every target the config names for `event`, side by side.
async fn deliver(engine: &Engine, spec: &BatchSpec, event: NotifyEvent, payload: &Value) {
    let cfg = &engine.config.engine.notify;
    if !cfg.wants(event) {
        return;
    }
    let timeout = Duration::from_secs(cfg.timeout_secs);
    let command = async {
        if !cfg.command.is_empty() {
            run_command(&cfg.command, payload, &spec.repo, cfg.attempts, timeout).await;
        }
    };
    let webhook = async {
        if let Some(url) = &cfg.webhook {
            let token = match &cfg.webhook_token_env {
                None => None,
                Some(name) => match engine.own_env.get(name) {
                    Some(t) => Some(t.as_str()),
                    None => {
                        tracing::warn!(variable = %name, "engine.notify.webhook_token_env names a variable that is not set: the webhook is not called");
                        return;
                    }
                },
            };
            post(url, token, payload, cfg.attempts, timeout).await;
        }
    };
    tokio::join!(command, webhook);
}

/// The delay before try `n` (1-based; the first has none): 0.5 s, 1 s, 2 s, ….
fn backoff(n: u32) -> Duration {
    Duration::from_millis(500u64 << (n.saturating_sub(2)).min(6))
}

/// Runs `argv` with `payload` on stdin until it exits 0, `attempts` times at most.
async fn run_command(
    argv: &[String],
    payload: &Value,
    dir: &std::path::Path,
    attempts: u32,
    timeout: Duration,
) {
    let Some((program, args)) = argv.split_first() else {
        return;
    };
    let mut cmd = CommandSpec::new(
        &aicli_providers::BinaryLocation::Path(PathBuf::from(program)),
        dir,
    );
    cmd.args(args.iter().cloned());
    cmd.stdin = Some(payload.to_string());
    for n in 1..=attempts {
        if n > 1 {
            tokio::time::sleep(backoff(n)).await;
        }
        match crate::proc::capture::run_capture(&cmd, timeout).await {
            Ok(c) if c.exit_code == Some(0) => return,
            Ok(c) => tracing::warn!(
                command = %program,
                try_ = n,
                exit = ?c.exit_code,
                timed_out = c.timed_out,
                stderr = %c.stderr.trim(),
                "a notify command failed"
            ),
            Err(e) => tracing::warn!(command = %program, try_ = n, error = %e, "cannot run a notify command"),
        }
    }
}

/// POSTs `payload` to `url` until it answers 2xx, `attempts` times at most; a 4xx other
/// than 429 is not tried again (the request itself is wrong).
async fn post(url: &str, token: Option<&str>, payload: &Value, attempts: u32, timeout: Duration) {
    let client = match reqwest::Client::builder()
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "cannot make the webhook's HTTP client");
            return;
        }
    };
    for n in 1..=attempts {
        if n > 1 {
            tokio::time::sleep(backoff(n)).await;
        }
        let mut req = client.post(url).json(payload);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        match req.send().await {
            Ok(r) if r.status().is_success() => return,
            Ok(r) => {
                let status = r.status();
                tracing::warn!(%url, try_ = n, %status, "the notify webhook refused a notification");
                if status.is_client_error() && status != reqwest::StatusCode::TOO_MANY_REQUESTS {
                    return;
                }
            }
            Err(e) => tracing::warn!(%url, try_ = n, error = %e, "cannot reach the notify webhook"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::backoff;
    use std::time::Duration;

    #[test]
    fn the_back_off_doubles_from_half_a_second() {
        let d: Vec<Duration> = (2..=5).map(backoff).collect();
        assert_eq!(
            d,
            [500, 1000, 2000, 4000].map(Duration::from_millis).to_vec()
        );
    }
}
