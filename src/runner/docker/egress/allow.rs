//! Which hosts a run's proxy lets through: its provider's `egress_hosts`, the config's
//! `engine.docker.egress.allow`, and the URLs of the CLI's command and configuration (a
//! fake API's, a configured base URL's, a model provider in the CLI's own config file),
//! each at its exact port.

use aicli_providers::{CommandSpec, HostPattern};
use globset::{GlobBuilder, GlobMatcher};

/// One allowed host pattern and port.
#[derive(Debug, Clone)]
struct Rule {
    host: GlobMatcher,
    port: Option<u16>,
    text: String,
}

/// A run's allowlist.
#[derive(Debug, Clone, Default)]
pub struct Allowlist {
    rules: Vec<Rule>,
}

impl Allowlist {
    /// The allowlist of `patterns` (checked when the config was loaded; one that does
    /// not parse is skipped with a warning) and of the URLs in `cmd`'s arguments,
    /// environment and files, and in `config_texts` (the CLI's own config files).
    pub fn new<'a>(
        patterns: impl IntoIterator<Item = &'a String>,
        cmd: &CommandSpec,
        config_texts: &[String],
    ) -> Allowlist {
        let mut list = Allowlist::default();
        for p in patterns {
            match HostPattern::parse(p) {
                Ok(pat) => list.push(pat),
                Err(e) => tracing::warn!(pattern = %p, error = %e, "egress pattern skipped"),
            }
        }
        let texts = cmd
            .args
            .iter()
            .chain(
                cmd.env
                    .iter()
                    .filter(|(k, _)| !cmd.env_remove.contains(k))
                    .map(|(_, v)| v),
            )
            .chain(cmd.files.iter().map(|f| &f.contents))
            .chain(config_texts);
        for t in texts {
            // A loopback URL (a local MCP server in the CLI's config, say) means the
            // container's own loopback there: never this machine's through the proxy.
            for (host, port) in urls_in(t).into_iter().filter(|(h, _)| !is_loopback(h)) {
                list.push(HostPattern {
                    host,
                    port: Some(port),
                });
            }
        }
        list
    }

    fn push(&mut self, p: HostPattern) {
        if self.rules.iter().any(|r| r.text == p.host && r.port == p.port) {
            return;
        }
        // `*` within a label, `**` across labels: `.` is the separator.
        let glob = GlobBuilder::new(&p.host.replace('.', "/"))
            .literal_separator(true)
            .build();
        match glob {
            Ok(g) => self.rules.push(Rule {
                host: g.compile_matcher(),
                port: p.port,
                text: p.host,
            }),
            Err(e) => tracing::warn!(pattern = %p.host, error = %e, "egress pattern skipped"),
        }
    }

    /// Whether `host:port` may be reached.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        let host = host.to_ascii_lowercase();
        let path = host.trim_end_matches('.').replace('.', "/");
        self.rules
            .iter()
            .any(|r| r.port.is_none_or(|p| p == port) && r.host.is_match(&path))
    }
}

/// Whether `host` names loopback (`localhost`, `127.0.0.0/8`, `::1`) or no address
/// (`0.0.0.0`).
fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host.ends_with(".localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback() || ip.is_unspecified())
}

/// The hosts and ports of the `http://` and `https://` URLs in `text` (the port the
/// scheme implies when none is written).
pub fn urls_in(text: &str) -> Vec<(String, u16)> {
    let mut out = Vec::new();
    let lower = text.to_ascii_lowercase();
    let mut from = 0;
    while let Some(i) = lower[from..].find("http") {
        let at = from + i;
        from = at + 4;
        let rest = &lower[at..];
        let (tls, after) = if let Some(r) = rest.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = rest.strip_prefix("http://") {
            (false, r)
        } else {
            continue;
        };
        let end = after
            .find(|c: char| {
                c.is_whitespace() || matches!(c, '/' | '?' | '#' | '"' | '\'' | ',' | ';' | ')' | '}' | '>' | '`')
            })
            .unwrap_or(after.len());
        let authority = &after[..end];
        let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
        let Ok(a) = authority.parse::<hyper::http::uri::Authority>() else {
            continue;
        };
        let port = a.port_u16().unwrap_or(if tls { 443 } else { 80 });
        if !a.host().is_empty() {
            out.push((a.host().to_owned(), port));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(args: &[&str], env: &[(&str, &str)]) -> CommandSpec {
        let mut c = CommandSpec::new(
            &aicli_providers::BinaryLocation::Path("cli".into()),
            std::path::Path::new("/w"),
        );
        c.args = args.iter().map(|s| (*s).to_owned()).collect();
        c.env = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        c
    }

    #[test]
    fn urls_are_found_in_arguments_and_values() {
        assert_eq!(
            urls_in(r#"model_providers.fake.base_url="http://host.docker.internal:41234/v1""#),
            vec![("host.docker.internal".to_owned(), 41234)]
        );
        assert_eq!(
            urls_in("see https://API.example.com and http://u:p@10.0.0.1/x, http://[::1]:81"),
            vec![
                ("api.example.com".to_owned(), 443),
                ("10.0.0.1".to_owned(), 80),
                ("[::1]".to_owned(), 81)
            ]
        );
        assert!(urls_in("httpx http:/nope https://").is_empty());
    }

    #[test]
    fn hosts_match_by_label_and_port() {
        let patterns: Vec<String> = ["api.anthropic.com", "*.npmjs.org", "**.corp.test:*", "mirror.test:8080"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let c = cmd(
            &["-c", "base_url=\"http://host.docker.internal:5000/v1\""],
            &[("ANTHROPIC_BASE_URL", "https://gw.example:8443"), ("SECRET", "x")],
        );
        let a = Allowlist::new(
            &patterns,
            &c,
            &[
                "[model_providers.corp]\nbase_url = \"https://llm.corp.example/v1\"".to_owned(),
                r#"{"mcpServers":{"dev":{"url":"http://localhost:3000/mcp"},"b":{"url":"http://127.0.0.2:9/"},"c":{"url":"http://[::1]:7/"}}}"#.to_owned(),
            ],
        );
        assert!(a.allows("llm.corp.example", 443));
        assert!(!a.allows("localhost", 3000));
        assert!(!a.allows("127.0.0.2", 9));
        assert!(!a.allows("[::1]", 7));
        assert!(a.allows("api.anthropic.com", 443));
        assert!(a.allows("API.Anthropic.com.", 443));
        assert!(!a.allows("api.anthropic.com", 80));
        assert!(!a.allows("evil-api.anthropic.com", 443));
        assert!(a.allows("registry.npmjs.org", 443));
        assert!(!a.allows("a.b.npmjs.org", 443), "* stays within a label");
        assert!(a.allows("a.b.corp.test", 22));
        assert!(a.allows("mirror.test", 8080));
        assert!(!a.allows("mirror.test", 443));
        assert!(a.allows("host.docker.internal", 5000));
        assert!(!a.allows("host.docker.internal", 5001));
        assert!(a.allows("gw.example", 8443));
        assert!(!a.allows("127.0.0.1", 5000));
    }
}
