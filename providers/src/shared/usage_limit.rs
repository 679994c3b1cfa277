//! A subscription's usage limit told apart from a transient 429, with when it resets:
//! from the structured fields first (Claude's `rate_limit_event` with status `rejected`),
//! then from each CLI's words, and the reset clamped to a sane window.
//!
//! What the CLIs print at a usage limit (measured against the fakes, which send what the
//! real services send; see `testkit`'s `Step::UsageLimit`):
//! - claude (a subscription): `rate_limit_event` `{status: "rejected", resetsAt,
//!   rateLimitType}`, then "You've hit your 5-hour limit · resets 10:40pm (UTC)"; older
//!   versions "Claude AI usage limit reached|<epoch>".
//! - codex: "You’ve hit your usage limit. … or try again at 10:36 PM." (the machine's
//!   local time; a date before it when the reset is on another day).
//! - gemini: "You exceeded your current quota … Please retry in 12.000s. Suggested retry
//!   after 12s."; "You have exhausted your daily quota on this model." with no time (the
//!   Gemini API's daily quotas reset at midnight Pacific time); "Your quota will reset
//!   after 2h3m4s." (Code Assist).

use std::sync::LazyLock;

use jiff::civil::{Date, Time};
use jiff::tz::TimeZone;
use jiff::{Span, Timestamp, Zoned};
use regex::Regex;

use crate::result::{ResetSource, UsageLimit};

/// The latest a reset may be: Claude's weekly window is the longest known.
const LONGEST: i64 = 8 * 24 * 3600;

/// The usage limit a failed run met, if it met one: `rejected` is the rejected
/// rate-limit state the CLI reported (reset, window), `text` its words about the
/// failure, `now` the time of the failure.
pub fn detect(
    rejected: Option<(Option<i64>, Option<&str>)>,
    text: &str,
    now: Timestamp,
    local: &TimeZone,
) -> Option<UsageLimit> {
    let now_s = now.as_second();
    let clamp = |t: i64| t.clamp(now_s, now_s + LONGEST);
    let from_text = in_text(text, now, local);
    if let Some((resets_at, window)) = rejected {
        let (resets_at, source) = match (resets_at, &from_text) {
            (Some(t), _) => (Some(clamp(t)), ResetSource::Field),
            (None, Some(t)) => (t.resets_at.map(clamp), t.source),
            (None, None) => (None, ResetSource::Unknown),
        };
        return Some(UsageLimit {
            resets_at,
            window: window
                .map(str::to_owned)
                .or_else(|| from_text.and_then(|t| t.window)),
            source,
        });
    }
    let mut limit = from_text?;
    limit.resets_at = limit.resets_at.map(clamp);
    Some(limit)
}

/// The usage limit the CLI's words tell of (see the module docs).
fn in_text(text: &str, now: Timestamp, local: &TimeZone) -> Option<UsageLimit> {
    static EPOCH: Pattern = LazyLock::new(|| re(r"(?i)usage limit reached\|(\d{9,11})"));
    static CLAUDE: Pattern = LazyLock::new(|| {
        re(
            r"(?i)hit your (?:(5-hour|five-hour|weekly|opus weekly|sonnet weekly|session)\s+)?limit\b[^\n]*?\bresets\s+(?:(\w{3,9})\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(?:at\s+)?)?(\d{1,2})(?::(\d{2}))?\s*([ap]m)(?:\s*\(([^)]+)\))?",
        )
    });
    static CLAUDE_BARE: Pattern =
        LazyLock::new(|| re(r"(?i)hit your (?:(5-hour|weekly)\s+)?limit"));
    static CODEX: Pattern = LazyLock::new(|| {
        re(
            r"(?i)hit your usage limit[^\n]*?try again at\s+(?:(\w{3,9})\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(?:(\d{4})\s+)?(?:at\s+)?)?(\d{1,2}):(\d{2})\s*([ap]m)?",
        )
    });
    static CODEX_BARE: Pattern = LazyLock::new(|| re(r"(?i)hit your usage limit"));
    static GEMINI_QUOTA: Pattern = LazyLock::new(|| {
        re(r"(?i)exceeded your current quota|exhausted your (?:\w+ )?(?:capacity|quota)")
    });
    static RETRY_IN: Pattern = LazyLock::new(|| {
        re(r"(?i)(?:please retry in|suggested retry after)\s+([0-9.]+)\s*(ms|s)\b")
    });
    static RESET_AFTER: Pattern =
        LazyLock::new(|| re(r"(?i)reset after\s+((?:\d+h)?(?:\d+m)?(?:\d+(?:\.\d+)?s)?)"));
    static DAILY: Pattern = LazyLock::new(|| re(r"(?i)exhausted your daily quota"));

    let at = |t: Option<i64>, window: Option<&str>| UsageLimit {
        resets_at: t,
        window: window.map(str::to_owned),
        source: if t.is_some() {
            ResetSource::Text
        } else {
            ResetSource::Unknown
        },
    };
    if let Some(c) = captures(&EPOCH, text) {
        return Some(at(c[1].parse().ok(), None));
    }
    if let Some(c) = captures(&CLAUDE, text) {
        let zone = c
            .get(7)
            .and_then(|z| TimeZone::get(z.as_str().trim()).ok())
            .unwrap_or_else(|| local.clone());
        let reset = next_clock_time(
            now,
            &zone,
            c.get(2)
                .zip(c.get(3))
                .map(|(m, d)| (m.as_str(), d.as_str(), None)),
            c[4].parse().ok()?,
            c.get(5).map_or(Some(0), |m| m.as_str().parse().ok())?,
            c.get(6).map(|m| m.as_str()),
        );
        return Some(at(reset, claude_window(c.get(1).map(|m| m.as_str()))));
    }
    if let Some(c) = captures(&CLAUDE_BARE, text) {
        return Some(at(None, claude_window(c.get(1).map(|m| m.as_str()))));
    }
    if let Some(c) = captures(&CODEX, text) {
        let reset = next_clock_time(
            now,
            local,
            c.get(1)
                .zip(c.get(2))
                .map(|(m, d)| (m.as_str(), d.as_str(), c.get(3).map(|y| y.as_str()))),
            c[4].parse().ok()?,
            c[5].parse().ok()?,
            c.get(6).map(|m| m.as_str()),
        );
        return Some(at(reset, None));
    }
    if matches(&CODEX_BARE, text) {
        return Some(at(None, None));
    }
    if !matches(&GEMINI_QUOTA, text) {
        return None;
    }
    if matches(&DAILY, text) {
        return Some(at(next_midnight_pacific(now), Some("daily")));
    }
    let after = captures(&RETRY_IN, text)
        .and_then(|c| {
            let n: f64 = c[1].parse().ok()?;
            Some(if c[2].eq_ignore_ascii_case("ms") {
                n / 1000.0
            } else {
                n
            })
        })
        .or_else(|| captures(&RESET_AFTER, text).and_then(|c| hms_seconds(&c[1])))?;
    Some(at(Some(now.as_second() + after.ceil() as i64), None))
}

/// A pattern of this file (each is checked by the tests: `None` would be a typo).
type Pattern = LazyLock<Option<Regex>>;

fn re(pattern: &str) -> Option<Regex> {
    Regex::new(pattern).ok()
}

fn captures<'t>(p: &Pattern, text: &'t str) -> Option<regex::Captures<'t>> {
    p.as_ref()?.captures(text)
}

fn matches(p: &Pattern, text: &str) -> bool {
    p.as_ref().is_some_and(|r| r.is_match(text))
}

/// Claude's words for its windows, as its `rateLimitType` names them.
fn claude_window(words: Option<&str>) -> Option<&'static str> {
    match words.map(str::to_ascii_lowercase).as_deref() {
        Some("5-hour" | "five-hour" | "session") => Some("five_hour"),
        Some("weekly") => Some("seven_day"),
        Some("opus weekly") => Some("seven_day_opus"),
        Some("sonnet weekly") => Some("seven_day_sonnet"),
        _ => None,
    }
}

/// The end of the minute `hour:minute` (12-hour clock when `ampm` is given) in `zone`,
/// on the date given (month name, day, year) or else today or tomorrow, that is not
/// before `now`: the CLIs print the reset rounded down to the minute, so the limit is
/// surely over a minute later.
fn next_clock_time(
    now: Timestamp,
    zone: &TimeZone,
    date: Option<(&str, &str, Option<&str>)>,
    hour: i8,
    minute: i8,
    ampm: Option<&str>,
) -> Option<i64> {
    let hour = match ampm.map(str::to_ascii_lowercase).as_deref() {
        Some("am") if hour == 12 => 0,
        Some("am") => hour,
        Some("pm") if hour == 12 => 12,
        Some("pm") => hour + 12,
        _ => hour,
    };
    let time = Time::new(hour, minute, 0, 0).ok()?;
    let today = now.to_zoned(zone.clone()).date();
    let earliest = now.as_second();
    let at = |d: Date| -> Option<i64> {
        Some(
            d.to_datetime(time)
                .to_zoned(zone.clone())
                .ok()?
                .timestamp()
                .as_second()
                + 60,
        )
    };
    if let Some((month, day, year)) = date {
        let month = month_number(month)?;
        let day: i8 = day.parse().ok()?;
        let year = match year {
            Some(y) => y.parse().ok()?,
            None => today.year(),
        };
        let t = at(Date::new(year, month, day).ok()?)?;
        // A date without a year that has passed is next year's.
        return match (t < earliest, year == today.year()) {
            (true, true) => at(Date::new(year + 1, month, day).ok()?),
            _ => Some(t),
        };
    }
    let t = at(today)?;
    if t >= earliest {
        return Some(t);
    }
    at(today.tomorrow().ok()?)
}

fn month_number(name: &str) -> Option<i8> {
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let lower = name.to_ascii_lowercase();
    let n = MONTHS.iter().position(|m| lower.starts_with(m))?;
    i8::try_from(n + 1).ok()
}

/// `2h3m4s`, `3m`, `12.5s` in seconds.
fn hms_seconds(s: &str) -> Option<f64> {
    if s.is_empty() {
        return None;
    }
    let span: Span = format!("PT{}", s.to_ascii_uppercase()).parse().ok()?;
    span.total(jiff::Unit::Second).ok()
}

/// The next midnight in America/Los_Angeles, when the Gemini API's daily quotas reset.
fn next_midnight_pacific(now: Timestamp) -> Option<i64> {
    let zone = TimeZone::get("America/Los_Angeles").ok()?;
    let today: Zoned = now.to_zoned(zone.clone());
    let next = today.date().tomorrow().ok()?;
    Some(next.to_zoned(zone).ok()?.timestamp().as_second())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        // 2026-12-06 22:36:10 UTC.
        "2026-12-06T22:36:10Z".parse().unwrap_or_default()
    }

    fn utc_at(s: &str) -> i64 {
        s.parse::<Timestamp>().unwrap_or_default().as_second()
    }

    fn limit(rejected: Option<(Option<i64>, Option<&str>)>, text: &str) -> Option<UsageLimit> {
        detect(rejected, text, now(), &TimeZone::UTC)
    }

    #[test]
    fn claude_structured_state_first_then_its_words() {
        let reset = utc_at("2026-12-06T23:40:00Z");
        let l = limit(
            Some((Some(reset), Some("five_hour"))),
            "You've hit your 5-hour limit · resets 11:40pm (UTC)",
        );
        assert_eq!(
            l,
            Some(UsageLimit {
                resets_at: Some(reset),
                window: Some("five_hour".into()),
                source: ResetSource::Field
            })
        );
        // Words only: the time in the zone it names, later today.
        let l =
            limit(None, "You've hit your 5-hour limit · resets 10:40pm (UTC)").unwrap_or_default();
        assert_eq!(l.resets_at, Some(utc_at("2026-12-06T22:41:00Z")));
        assert_eq!(l.window.as_deref(), Some("five_hour"));
        assert_eq!(l.source, ResetSource::Text);
        // In another zone, and an hour that has passed today there is tomorrow's.
        let l = limit(
            None,
            "You've hit your weekly limit · resets 2pm (Europe/Paris)",
        )
        .unwrap_or_default();
        assert_eq!(l.resets_at, Some(utc_at("2026-12-07T13:01:00Z")));
        assert_eq!(l.window.as_deref(), Some("seven_day"));
        let l = limit(
            None,
            "You've hit your weekly limit · resets Dec 9, 5am (UTC)",
        )
        .unwrap_or_default();
        assert_eq!(l.resets_at, Some(utc_at("2026-12-09T05:01:00Z")));
        let l = limit(None, "Claude AI usage limit reached|1796600000").unwrap_or_default();
        assert_eq!(l.resets_at, Some(1_796_600_000));
        // A plain per-minute 429 is not a usage limit.
        assert_eq!(
            limit(
                None,
                "API Error: Request rejected (429) · This request would exceed your account's rate limit. Please try again later."
            ),
            None
        );
    }

    #[test]
    fn codex_words_in_local_time() {
        let text = "You’ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), visit https://chatgpt.com/settings/usage to purchase more credits or try again at 10:36 PM.";
        // 22:36 is this minute (the CLI rounds down): its end, not tomorrow's.
        let l = limit(None, text).unwrap_or_default();
        assert_eq!(l.resets_at, Some(utc_at("2026-12-06T22:37:00Z")));
        let l = limit(None, &text.replace("10:36 PM", "11:05 PM")).unwrap_or_default();
        assert_eq!(l.resets_at, Some(utc_at("2026-12-06T23:06:00Z")));
        let paris = TimeZone::get("Europe/Paris").unwrap_or(TimeZone::UTC);
        let l = detect(None, text, now(), &paris).unwrap_or_default();
        // 22:36 in Paris has passed (it is 23:36 there): tomorrow's.
        assert_eq!(l.resets_at, Some(utc_at("2026-12-07T21:37:00Z")));
        let l = limit(
            None,
            "You’ve hit your usage limit. Try again at Dec 8th, 2026 3:05 PM.",
        )
        .unwrap_or_default();
        assert_eq!(l.resets_at, Some(utc_at("2026-12-08T15:06:00Z")));
        let l = limit(None, "You’ve hit your usage limit. To get more access now, send a request to your admin or try again later.").unwrap_or_default();
        assert_eq!(l.resets_at, None);
        assert_eq!(l.source, ResetSource::Unknown);
    }

    #[test]
    fn gemini_retry_delays_and_daily_quota() {
        let text = "[API Error: You exceeded your current quota, please check your plan and billing details.\n* Quota exceeded for metric: x, limit: 250, model: gemini-2.5-flash\nPlease retry in 12.000s.\nSuggested retry after 12s.]";
        let l = limit(None, text).unwrap_or_default();
        assert_eq!(l.resets_at, Some(now().as_second() + 12));
        let l = limit(
            None,
            "You have exhausted your capacity on this model. Your quota will reset after 2h3m4s.",
        )
        .unwrap_or_default();
        assert_eq!(l.resets_at, Some(now().as_second() + 2 * 3600 + 3 * 60 + 4));
        let l = limit(
            None,
            "[API Error: You have exhausted your daily quota on this model.]",
        )
        .unwrap_or_default();
        // Midnight in Los Angeles, 08:00 UTC in winter.
        assert_eq!(l.resets_at, Some(utc_at("2026-12-07T08:00:00Z")));
        assert_eq!(l.window.as_deref(), Some("daily"));
        // A retry hint without a quota is an ordinary rate limit.
        assert_eq!(limit(None, "Please retry in 3s."), None);
    }

    #[test]
    fn resets_are_clamped_to_now_and_eight_days() {
        let l = limit(Some((Some(1), None)), "").unwrap_or_default();
        assert_eq!(l.resets_at, Some(now().as_second()));
        let l = limit(Some((Some(i64::MAX), None)), "").unwrap_or_default();
        assert_eq!(l.resets_at, Some(now().as_second() + LONGEST));
        let l = limit(Some((None, None)), "").unwrap_or_default();
        assert_eq!((l.resets_at, l.source), (None, ResetSource::Unknown));
    }
}
