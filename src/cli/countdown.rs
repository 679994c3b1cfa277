//! A wait the engine announces before it continues a session (an ACP agent that must
//! not load a session in the wall-clock minute it began: the engine's `Status` event
//! "waiting 42s before continuing the session: …"), shown while it lasts: a live
//! countdown on a terminal, one line otherwise. Without it `aicli answer` sat silent
//! for up to a minute.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// What the engine's status says before it waits.
const PREFIX: &str = "waiting ";
/// What follows the seconds.
const BEFORE: &str = "s before continuing the session: ";

/// A wait being shown.
#[derive(Debug)]
pub struct Countdown {
    /// When it ends.
    until: Instant,
    /// How long it was announced for, in whole seconds.
    secs: u64,
    /// Why it waits (the status after the seconds).
    why: String,
    /// The countdown line, on a terminal.
    bar: Option<ProgressBar>,
}

/// The seconds and the reason of a "waiting Ns before continuing the session: WHY"
/// status, or `None` for any other status.
pub fn parse(status: &str) -> Option<(f64, &str)> {
    let rest = status.strip_prefix(PREFIX)?;
    let (secs, why) = rest.split_once(BEFORE)?;
    let secs: f64 = secs.trim().parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then_some((secs, why))
}

impl Countdown {
    /// Starts showing the wait a status announces (on stderr), or `None` when the
    /// status announces none.
    pub fn start(status: &str) -> Option<Countdown> {
        let (secs, why) = parse(status)?;
        let mut c = Countdown {
            until: Instant::now() + Duration::from_secs_f64(secs),
            secs: secs.round() as u64,
            why: why.to_owned(),
            bar: None,
        };
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("{spinner} {wide_msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(200));
            c.bar = Some(bar);
            c.tick();
        } else {
            eprintln!("aicli: {status}");
        }
        Some(c)
    }

    /// `aicli: continuing the session in 37s: WHY`.
    fn line(&self, left: u64) -> String {
        format!("aicli: continuing the session in {left}s: {}", self.why)
    }

    /// The whole seconds left (rounded up).
    fn left(&self) -> u64 {
        let d = self.until.saturating_duration_since(Instant::now());
        d.as_secs() + u64::from(d.subsec_nanos() > 0)
    }

    /// Redraws the countdown; how long until it should be redrawn.
    pub fn tick(&self) -> Duration {
        if let Some(bar) = &self.bar {
            bar.set_message(self.line(self.left()));
        }
        Duration::from_millis(250)
    }

    /// Ends the display: on a terminal the countdown gives way to one line that says
    /// what was waited for.
    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
            eprintln!(
                "aicli: waited {}s before continuing the session: {}",
                self.secs, self.why
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engine_s_wait_is_read_and_other_statuses_are_not() {
        let s = "waiting 42s before continuing the session: gemini-acp must not load a session in the wall-clock minute it began (providers.gemini-acp.acp.load_in_a_new_minute)";
        let (secs, why) = parse(s).expect("a wait");
        assert_eq!(secs, 42.0);
        assert!(why.starts_with("gemini-acp must not load"), "{why}");
        assert_eq!(parse("turn_started"), None);
        assert_eq!(parse("waiting NaNs before continuing the session: x"), None);
    }
}
