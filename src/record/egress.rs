//! Connections a container's CLI asked aicli's egress proxy for and was refused.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The refusals of one host and port during one attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EgressDenial {
    /// The host the CLI asked for (as it named it).
    pub host: String,
    /// The port.
    pub port: u16,
    /// How it asked: `CONNECT` (a tunnel, https) or the HTTP method of a plain request.
    pub method: String,
    /// The first refusal (RFC 3339).
    pub first_at: String,
    /// The last refusal (RFC 3339).
    pub last_at: String,
    /// How many times.
    pub count: u64,
}

impl EgressDenial {
    /// `host:port` (IPv6 hosts are already bracketed).
    pub fn target(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// One line for `runs show`: the host, how often and when.
    pub fn line(&self) -> String {
        let when = |t: &str| clock(t).unwrap_or_else(|| t.to_owned());
        if self.count == 1 {
            format!(
                "{} refused ({} at {})",
                self.target(),
                self.method,
                when(&self.first_at)
            )
        } else {
            format!(
                "{} refused {} times ({}, {} to {})",
                self.target(),
                self.count,
                self.method,
                when(&self.first_at),
                when(&self.last_at)
            )
        }
    }
}

/// `HH:MM:SS` in this machine's zone of an RFC 3339 time.
fn clock(t: &str) -> Option<String> {
    let at: jiff::Timestamp = t.parse().ok()?;
    Some(
        at.to_zoned(jiff::tz::TimeZone::system())
            .strftime("%H:%M:%S")
            .to_string(),
    )
}
