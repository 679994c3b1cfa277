//! The Host/Origin allowlist against DNS rebinding: loopback names, the bind host and
//! the configured extra hosts.

use axum::http::{HeaderMap, header};

/// Hosts a request may name (Host, and Origin's host), compiled from the options.
#[derive(Debug, Clone)]
pub(crate) struct AllowedHosts {
    /// (lower-case host without brackets, port if the entry pins one).
    entries: Vec<(String, Option<u16>)>,
}

impl AllowedHosts {
    /// Loopback names, plus `extra` (the bind host and the configured hosts).
    pub(crate) fn new<'a>(extra: impl IntoIterator<Item = &'a str>) -> AllowedHosts {
        let mut entries: Vec<(String, Option<u16>)> = ["localhost", "127.0.0.1", "::1"]
            .iter()
            .map(|h| ((*h).to_owned(), None))
            .collect();
        for e in extra {
            if let Some(parsed) = parse_authority(e) {
                entries.push(parsed);
            }
        }
        entries.sort();
        entries.dedup();
        AllowedHosts { entries }
    }

    /// The entries as rmcp's `allowed_hosts` wants them.
    pub(crate) fn for_rmcp(&self) -> Vec<String> {
        self.entries
            .iter()
            .map(|(h, p)| {
                let h = if h.contains(':') {
                    format!("[{h}]")
                } else {
                    h.clone()
                };
                match p {
                    Some(p) => format!("{h}:{p}"),
                    None => h,
                }
            })
            .collect()
    }

    fn allows(&self, host: &str, port: Option<u16>) -> bool {
        self.entries
            .iter()
            .any(|(h, p)| h == host && p.is_none_or(|p| Some(p) == port))
    }

    /// Checks `Host` and, when present, `Origin`.
    pub(crate) fn check(&self, headers: &HeaderMap) -> Result<(), &'static str> {
        let host = headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .ok_or("missing or unreadable Host header")?;
        let (h, p) = parse_authority(host).ok_or("malformed Host header")?;
        if !self.allows(&h, p) {
            return Err("Host header is not allowed");
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().map_err(|_| "unreadable Origin header")?;
            let rest = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                .ok_or("Origin is not allowed")?;
            let (h, p) = parse_authority(rest.trim_end_matches('/')).ok_or("malformed Origin")?;
            if !self.allows(&h, p) {
                return Err("Origin is not allowed");
            }
        }
        Ok(())
    }
}

/// `host[:port]` or `[v6][:port]` -> (lower-case host without brackets, port).
fn parse_authority(s: &str) -> Option<(String, Option<u16>)> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p.parse().ok()?),
            None if after.is_empty() => None,
            None => return None,
        };
        return Some((h.to_ascii_lowercase(), port));
    }
    match s.matches(':').count() {
        0 => Some((s.to_ascii_lowercase(), None)),
        1 => {
            let (h, p) = s.split_once(':')?;
            Some((h.to_ascii_lowercase(), Some(p.parse().ok()?)))
        }
        // A bare IPv6 address (only in configuration).
        _ => Some((s.to_ascii_lowercase(), None)),
    }
}
