//! The Host/Origin allowlist against DNS rebinding: loopback names, the bind host and
//! the configured extra hosts.

use axum::http::{HeaderMap, header};

/// Hosts a request may name (Host, and Origin's host), compiled from the options.
#[derive(Debug, Clone)]
pub(crate) struct AllowedHosts {
    /// (lower-case host without brackets, port if the entry pins one).
    entries: Vec<(String, Option<u16>)>,
    /// The port a Host or Origin without one stands for (the scheme's default), when
    /// entries are pinned to ports.
    bare_port: Option<u16>,
}

/// The loopback names.
const LOOPBACK: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

impl AllowedHosts {
    /// Loopback names, plus `extra` (the bind host and the configured hosts).
    pub(crate) fn new<'a>(extra: impl IntoIterator<Item = &'a str>) -> AllowedHosts {
        let loopback = LOOPBACK.iter().map(|h| ((*h).to_owned(), None));
        AllowedHosts::from_entries(loopback, extra, None)
    }

    /// Loopback names and `names` on `port` only (a server's own origins: a browser
    /// page on another loopback port is another origin), plus `extra` as configured (a
    /// host there without a port matches any port). `bare_port` is the port a Host
    /// without one stands for (80 for HTTP, 443 for HTTPS).
    pub(crate) fn on_port<'a>(
        port: u16,
        names: impl IntoIterator<Item = &'a str>,
        extra: impl IntoIterator<Item = &'a str>,
        bare_port: u16,
    ) -> AllowedHosts {
        let own = LOOPBACK
            .into_iter()
            .chain(names)
            .map(|h| (h.to_ascii_lowercase(), Some(port)));
        AllowedHosts::from_entries(own, extra, Some(bare_port))
    }

    fn from_entries<'a>(
        own: impl IntoIterator<Item = (String, Option<u16>)>,
        extra: impl IntoIterator<Item = &'a str>,
        bare_port: Option<u16>,
    ) -> AllowedHosts {
        let mut entries: Vec<(String, Option<u16>)> = own.into_iter().collect();
        for e in extra {
            if let Some(parsed) = parse_authority(e) {
                entries.push(parsed);
            }
        }
        entries.sort();
        entries.dedup();
        AllowedHosts { entries, bare_port }
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
        let port = port.or(self.bare_port);
        self.entries
            .iter()
            .any(|(h, p)| h == host && p.is_none_or(|p| Some(p) == port))
    }

    /// Checks `Host` and, when present, `Origin`.
    pub(crate) fn check(&self, headers: &HeaderMap) -> Result<(), &'static str> {
        self.check_host(headers)?;
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

    /// Checks `Host` alone.
    pub(crate) fn check_host(&self, headers: &HeaderMap) -> Result<(), &'static str> {
        let host = headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .ok_or("missing or unreadable Host header")?;
        let (h, p) = parse_authority(host).ok_or("malformed Host header")?;
        if !self.allows(&h, p) {
            return Err("Host header is not allowed");
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

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(host: &str, origin: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, host.parse().unwrap());
        if let Some(o) = origin {
            h.insert(header::ORIGIN, o.parse().unwrap());
        }
        h
    }

    #[test]
    fn a_server_s_own_names_hold_on_its_port_only() {
        let a = AllowedHosts::on_port(8080, ["aicli-ab.localhost"], ["proxy.example"], 80);
        for ok in ["127.0.0.1:8080", "localhost:8080", "[::1]:8080", "aicli-ab.localhost:8080"] {
            assert!(a.check(&headers(ok, None)).is_ok(), "{ok}");
        }
        // A configured host without a port matches any (a reverse proxy's).
        assert!(a.check(&headers("proxy.example", None)).is_ok());
        assert!(a.check(&headers("proxy.example:443", None)).is_ok());
        for bad in ["127.0.0.1:8081", "localhost:1", "aicli-ab.localhost:9", "localhost", "evil:8080"] {
            assert!(a.check(&headers(bad, None)).is_err(), "{bad}");
        }
        let origin = |o: &str| a.check(&headers("127.0.0.1:8080", Some(o)));
        assert!(origin("http://aicli-ab.localhost:8080").is_ok());
        assert!(origin("http://127.0.0.1:18099").is_err(), "another loopback port's page");
        assert!(origin("http://localhost:18099").is_err());
        assert!(origin("null").is_err());
        // Host alone: an Origin is not looked at.
        let h = headers("127.0.0.1:8080", Some("null"));
        assert!(a.check_host(&h).is_ok());
        // Port 80 stands for a Host without one.
        let on80 = AllowedHosts::on_port(80, [], [], 80);
        assert!(on80.check(&headers("localhost", None)).is_ok());
    }

    #[test]
    fn the_mcp_server_s_loopback_names_hold_on_any_port() {
        let a = AllowedHosts::new(["172.17.0.1"]);
        assert!(a.check(&headers("localhost:1", None)).is_ok());
        assert!(a.check(&headers("172.17.0.1:9", None)).is_ok());
    }
}
