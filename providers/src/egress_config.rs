//! `engine.docker.egress`: what a task's container may reach beyond aicli's MCP server.
//!
//! With egress on (the default), a local engine's container has no network of its own
//! (`--network none`): its only ways out are aicli's MCP server and aicli's HTTP proxy,
//! both reached through sockets aicli binds for that run. The proxy lets through the
//! hosts of the provider's `egress_hosts`, the model API URLs aicli itself gives the CLI
//! (a fake API, a configured base URL) and the patterns of [`EgressConfig::allow`];
//! everything else is refused and recorded in the run's record.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The egress allowlist's settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct EgressConfig {
    /// Whether containers on a local engine get the allowlist (default `true`). `false`
    /// puts them on `network_mode` with whatever it reaches.
    pub enabled: bool,
    /// More hosts every task may reach through the proxy, on top of its provider's
    /// `egress_hosts`: `host` (port 443), `host:port`, or `host:*` (any port); `*` in a
    /// host matches any run of characters within a label (`*.npmjs.org`), `**` any run
    /// of labels.
    pub allow: Vec<String>,
}

impl Default for EgressConfig {
    fn default() -> EgressConfig {
        EgressConfig {
            enabled: true,
            allow: Vec::new(),
        }
    }
}

/// A checked allowlist entry: a host pattern (lowercase) and a port (`None`: any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    /// The host part, lowercase, possibly with `*` / `**`.
    pub host: String,
    /// The port, `None` for `:*`.
    pub port: Option<u16>,
}

impl HostPattern {
    /// Parses `host`, `host:port` or `host:*` (an IPv6 literal in brackets).
    pub fn parse(text: &str) -> Result<HostPattern, String> {
        let t = text.trim();
        let (host, port) = match t.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(':') && (!h.contains(':') || h.ends_with(']')) => {
                let port = if p == "*" {
                    None
                } else {
                    Some(p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| {
                        format!("'{text}': the port '{p}' is not a number from 1 to 65535 or `*`")
                    })?)
                };
                (h, port)
            }
            _ => (t, Some(443)),
        };
        let host = host.to_ascii_lowercase();
        let ok = !host.is_empty()
            && host.chars().all(|c| {
                c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '*' | '[' | ']' | ':')
            });
        if !ok {
            return Err(format!(
                "'{text}' is not a host pattern: letters, digits, '.', '-', '_' and '*', then an optional `:port` or `:*`"
            ));
        }
        Ok(HostPattern { host, port })
    }
}

impl EgressConfig {
    /// Checks the patterns; errors name the JSON path (under `engine.docker.egress`).
    pub fn check(&self) -> Result<(), (String, String)> {
        for (i, a) in self.allow.iter().enumerate() {
            HostPattern::parse(a).map_err(|e| (format!("egress.allow[{i}]"), e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_parse_with_their_port() {
        let p = |t: &str| HostPattern::parse(t);
        assert_eq!(
            p("API.example.com").unwrap(),
            HostPattern {
                host: "api.example.com".into(),
                port: Some(443)
            }
        );
        assert_eq!(p("*.npmjs.org:80").unwrap().port, Some(80));
        assert_eq!(p("registry.local:*").unwrap().port, None);
        assert_eq!(p("[::1]:8080").unwrap().host, "[::1]");
        assert!(p("a.example.com:0").unwrap_err().contains("the port '0'"));
        assert!(p("a b").unwrap_err().contains("is not a host pattern"));
        assert!(p("").is_err());
        let cfg = EgressConfig {
            enabled: true,
            allow: vec!["ok.example".into(), "bad/host".into()],
        };
        assert_eq!(cfg.check().unwrap_err().0, "egress.allow[1]");
    }
}
