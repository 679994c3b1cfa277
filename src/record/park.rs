//! A task parked at its provider's usage limit: until when, and how the views say so.

use aicli_providers::SessionResult;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A task parked at its provider's usage limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ParkRecord {
    /// When the limit resets and the task's session resumes (RFC 3339).
    pub until: String,
    /// The same, Unix seconds.
    pub until_unix: i64,
    /// The window the provider named (`five_hour`, `seven_day`, `daily`), when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    /// The provider's words about the limit.
    pub message: String,
    /// When the task's timeout ends (Unix seconds): it counts while the task waits, from
    /// the start of the run that met the limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_unix: Option<i64>,
}

impl ParkRecord {
    /// The park of a run that met a usage limit (`None` for any other result): until its
    /// reset, or `unknown_reset` from now when the CLI did not say.
    pub fn of(result: &SessionResult, unknown_reset: std::time::Duration) -> Option<ParkRecord> {
        if result.error_kind != Some(aicli_providers::ErrorKind::UsageLimit) {
            return None;
        }
        let now = jiff::Timestamp::now().as_second();
        let limit = result.usage_limit.clone().unwrap_or_default();
        let until = limit
            .resets_at
            .unwrap_or(now.saturating_add(unknown_reset.as_secs() as i64))
            .max(now);
        Some(ParkRecord {
            until: jiff::Timestamp::from_second(until)
                .map(|t| t.to_string())
                .unwrap_or_default(),
            until_unix: until,
            window: limit.window,
            message: result.error.clone().unwrap_or_default(),
            deadline_unix: None,
        })
    }

    /// When the limit resets, as a [`std::time::SystemTime`].
    pub fn until(&self) -> std::time::SystemTime {
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(self.until_unix.max(0) as u64)
    }

    /// "parked until 14:00 (claude five_hour limit)": the reset in the viewer's local
    /// time (with the date when it is not today).
    pub fn describe(&self, provider: &str) -> String {
        let what = match &self.window {
            Some(w) => format!("{provider} {w} limit"),
            None => format!("{provider} usage limit"),
        };
        format!("parked until {} ({what})", local_clock(self.until_unix))
    }
}

/// `14:00`, or `Dec 8 14:00` when not today, in the local time zone.
pub fn local_clock(unix: i64) -> String {
    let Ok(t) = jiff::Timestamp::from_second(unix) else {
        return unix.to_string();
    };
    let zone = jiff::tz::TimeZone::system();
    let at = t.to_zoned(zone.clone());
    let today = jiff::Timestamp::now().to_zoned(zone).date();
    if at.date() == today {
        at.strftime("%H:%M").to_string()
    } else {
        at.strftime("%b %-d %H:%M").to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aicli_providers::{ErrorKind, ResetSource, UsageLimit};
    use std::time::Duration;

    fn limited(resets_at: Option<i64>, window: Option<&str>) -> SessionResult {
        let mut r = SessionResult::default();
        r.fail(ErrorKind::UsageLimit, "You've hit your 5-hour limit");
        r.usage_limit = Some(UsageLimit {
            resets_at,
            window: window.map(str::to_owned),
            source: ResetSource::Field,
        });
        r
    }

    #[test]
    fn a_usage_limit_parks_until_its_reset_and_says_so() {
        let now = jiff::Timestamp::now().as_second();
        let p = ParkRecord::of(&limited(Some(now + 3600), Some("five_hour")), Duration::from_secs(60))
            .unwrap_or_else(|| panic!("a park"));
        assert_eq!(p.until_unix, now + 3600);
        assert_eq!(p.until, jiff::Timestamp::from_second(now + 3600).map(|t| t.to_string()).unwrap_or_default());
        let clock = local_clock(now + 3600);
        assert_eq!(p.describe("claude"), format!("parked until {clock} (claude five_hour limit)"));
        // No reset said: the configured wait; a reset in the past: now.
        let p = ParkRecord::of(&limited(None, None), Duration::from_secs(60)).unwrap_or_else(|| panic!("a park"));
        assert!((now + 59..=now + 61).contains(&p.until_unix), "{p:?}");
        assert!(p.describe("codex").ends_with("(codex usage limit)"), "{}", p.describe("codex"));
        let p = ParkRecord::of(&limited(Some(now - 100), None), Duration::from_secs(60)).unwrap_or_else(|| panic!("a park"));
        assert!(p.until_unix >= now, "{p:?}");
        // Any other failure does not park.
        let mut r = SessionResult::default();
        r.fail(ErrorKind::RateLimit, "slow down");
        assert_eq!(ParkRecord::of(&r, Duration::from_secs(60)), None);
        // Another day's reset names its date.
        assert!(local_clock(now + 3 * 86_400).contains(' '), "{}", local_clock(now + 3 * 86_400));
    }
}
