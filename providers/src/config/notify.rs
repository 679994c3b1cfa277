//! The config's `engine.notify` section ([`NotifyConfig`]): who hears when a task blocks,
//! finishes or fails, and when a batch ends.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Notifications: a JSON payload to a webhook and/or a command's stdin. A notification
/// that cannot be delivered is retried (with a bound) and logged; it never fails a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct NotifyConfig {
    /// What is notified (default: all four).
    pub on: Vec<NotifyEvent>,
    /// A command (argv) run with each payload as JSON on its stdin; exit 0 is delivered.
    pub command: Vec<String>,
    /// A URL (`http://` or `https://`) each payload is POSTed to as JSON; a 2xx answer is
    /// delivered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook: Option<String>,
    /// An environment variable of aicli's whose value goes to the webhook as
    /// `Authorization: Bearer …` (the token itself never sits in the config).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook_token_env: Option<String>,
    /// The web view's base URL (`aicli web` prints it): each payload's `link` is the
    /// task's (or the batch's) page under it. No `link` without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_url: Option<String>,
    /// Tries per notification and target in all: a command that fails, a webhook that
    /// cannot be reached or answers 429 or 5xx is tried again after 0.5 s, 1 s, 2 s, ….
    pub attempts: u32,
    /// Each try's time limit, seconds.
    pub timeout_secs: u64,
}

impl Default for NotifyConfig {
    fn default() -> NotifyConfig {
        NotifyConfig {
            on: vec![
                NotifyEvent::Blocked,
                NotifyEvent::Finished,
                NotifyEvent::Failed,
                NotifyEvent::BatchFinished,
            ],
            command: Vec::new(),
            webhook: None,
            webhook_token_env: None,
            page_url: None,
            attempts: 3,
            timeout_secs: 10,
        }
    }
}

/// What a notification is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NotifyEvent {
    /// A task asked a human a question and waits for the answer.
    Blocked,
    /// A task succeeded.
    Finished,
    /// A task failed (its `error_kind` says why: a cancel, a timeout, the budget, …).
    Failed,
    /// A batch ended (this invocation's tasks have all settled).
    BatchFinished,
}

impl NotifyEvent {
    /// The name in payloads and in `on`.
    pub fn as_str(self) -> &'static str {
        match self {
            NotifyEvent::Blocked => "blocked",
            NotifyEvent::Finished => "finished",
            NotifyEvent::Failed => "failed",
            NotifyEvent::BatchFinished => "batch_finished",
        }
    }
}

impl NotifyConfig {
    /// Whether anything is notified of `event`.
    pub fn wants(&self, event: NotifyEvent) -> bool {
        (!self.command.is_empty() || self.webhook.is_some()) && self.on.contains(&event)
    }

    /// Checks what types cannot: `(field, message)` of the first problem.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.attempts == 0 || self.attempts > 10 {
            return Err(("attempts", format!("{} is not in 1..=10", self.attempts)));
        }
        if self.timeout_secs == 0 || self.timeout_secs > 300 {
            return Err((
                "timeout_secs",
                format!("{} is not in 1..=300", self.timeout_secs),
            ));
        }
        for (field, url) in [("webhook", &self.webhook), ("page_url", &self.page_url)] {
            if let Some(u) = url {
                check_url(u).map_err(|m| (field, m))?;
            }
        }
        if self.webhook_token_env.is_some() && self.webhook.is_none() {
            return Err((
                "webhook_token_env",
                "names a token for a webhook, but there is no webhook".to_owned(),
            ));
        }
        Ok(())
    }
}

/// An `http://` or `https://` URL with a host.
fn check_url(u: &str) -> Result<(), String> {
    let rest = u
        .strip_prefix("http://")
        .or_else(|| u.strip_prefix("https://"))
        .ok_or_else(|| format!("'{u}' is not an http:// or https:// URL"))?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    if host.is_empty() || host.contains(char::is_whitespace) {
        return Err(format!("'{u}' names no host"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checks_name_the_field_and_the_value() {
        let ok = NotifyConfig {
            webhook: Some("http://127.0.0.1:9/hook".into()),
            ..NotifyConfig::default()
        };
        assert_eq!(ok.check(), Ok(()));
        let bad = |f: fn(&mut NotifyConfig)| {
            let mut c = ok.clone();
            f(&mut c);
            c.check().unwrap_err()
        };
        assert_eq!(bad(|c| c.attempts = 0).0, "attempts");
        assert_eq!(bad(|c| c.timeout_secs = 0).0, "timeout_secs");
        let (f, m) = bad(|c| c.webhook = Some("ftp://x".into()));
        assert_eq!(
            (f, m.as_str()),
            ("webhook", "'ftp://x' is not an http:// or https:// URL")
        );
        assert_eq!(
            bad(|c| c.page_url = Some("https:///a".into())).0,
            "page_url"
        );
        let (f, _) = bad(|c| {
            c.webhook = None;
            c.webhook_token_env = Some("T".into())
        });
        assert_eq!(f, "webhook_token_env");
    }

    #[test]
    fn nothing_is_wanted_without_a_target() {
        let c = NotifyConfig::default();
        assert!(!c.wants(NotifyEvent::Blocked));
        let c = NotifyConfig {
            command: vec!["true".into()],
            on: vec![NotifyEvent::Failed],
            ..NotifyConfig::default()
        };
        assert!(c.wants(NotifyEvent::Failed) && !c.wants(NotifyEvent::Finished));
    }
}
