//! Which hosts a run's proxy lets through: its provider's `egress_hosts`, the config's
//! `engine.docker.egress.allow`, and the URLs of the CLI's command and configuration (a
//! fake API's, a configured base URL's, a model provider in the CLI's own config file),
//! each at its exact port.

use aicli_providers::{CommandSpec, HostPattern};
use globset::{GlobBuilder, GlobMatcher};

/// How a rule matches a host.
#[derive(Debug, Clone)]
enum Host {
    /// A configured pattern (`*`, `**`).
    Glob(GlobMatcher),
    /// Exactly this (normalised) host: a URL's, a bracketed IPv6 literal.
    Exact(String),
}

/// One allowed host and port.
#[derive(Debug, Clone)]
struct Rule {
    host: Host,
    port: Option<u16>,
    text: String,
}

/// A run's allowlist.
#[derive(Debug, Clone, Default)]
pub struct Allowlist {
    rules: Vec<Rule>,
}

/// A host as the proxy compares and connects to it: lowercase, without a final `.`.
pub fn normalise(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// Whether an environment variable names a proxy (this machine's, which must never be
/// reachable from a container: it would tunnel anywhere).
fn is_proxy_variable(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.ends_with("_proxy") || n == "proxy"
}

impl Allowlist {
    /// The allowlist of `patterns` (checked when the config was loaded; one that does
    /// not parse is skipped with a warning), of the URLs in `cmd`'s arguments,
    /// environment (proxy variables aside) and files, and in `config_texts` (the
    /// user's own config files of the CLI). A URL allows its exact host and port only.
    pub fn new<'a>(
        patterns: impl IntoIterator<Item = &'a String>,
        cmd: &CommandSpec,
        config_texts: &[String],
    ) -> Allowlist {
        let mut list = Allowlist::default();
        for p in patterns {
            match HostPattern::parse(p) {
                Ok(pat) => list.push_pattern(pat),
                Err(e) => tracing::warn!(pattern = %p, error = %e, "egress pattern skipped"),
            }
        }
        let texts = cmd
            .args
            .iter()
            .chain(
                cmd.env
                    .iter()
                    .filter(|(k, _)| !cmd.env_remove.contains(k) && !is_proxy_variable(k))
                    .map(|(_, v)| v),
            )
            .chain(cmd.files.iter().map(|f| &f.contents))
            .chain(config_texts);
        for t in texts {
            // A loopback URL (a local MCP server in the CLI's config, say) means the
            // container's own loopback there: never this machine's through the proxy.
            for (host, port) in urls_in(t).into_iter().filter(|(h, _)| !is_loopback(h)) {
                list.push_exact(host, Some(port));
            }
        }
        list
    }

    fn push_exact(&mut self, host: String, port: Option<u16>) {
        let host = normalise(&host);
        if self.rules.iter().any(|r| r.text == host && r.port == port) {
            return;
        }
        self.rules.push(Rule {
            host: Host::Exact(host.clone()),
            port,
            text: host,
        });
    }

    fn push_pattern(&mut self, p: HostPattern) {
        // An IPv6 literal is itself, never a glob (`[` would start a class).
        if p.host.starts_with('[') || !p.host.contains('*') {
            self.push_exact(p.host, p.port);
            return;
        }
        if self.rules.iter().any(|r| r.text == p.host && r.port == p.port) {
            return;
        }
        // `*` within a label, `**` across labels: `.` is the separator.
        let glob = GlobBuilder::new(&p.host.replace('.', "/"))
            .literal_separator(true)
            .build();
        match glob {
            Ok(g) => self.rules.push(Rule {
                host: Host::Glob(g.compile_matcher()),
                port: p.port,
                text: p.host,
            }),
            Err(e) => tracing::warn!(pattern = %p.host, error = %e, "egress pattern skipped"),
        }
    }

    /// Whether `host:port` may be reached (`host` as [`normalise`] gives it).
    pub fn allows(&self, host: &str, port: u16) -> bool {
        let host = normalise(host);
        let path = host.replace('.', "/");
        self.rules.iter().any(|r| {
            r.port.is_none_or(|p| p == port)
                && match &r.host {
                    Host::Exact(h) => *h == host,
                    Host::Glob(g) => g.is_match(&path),
                }
        })
    }
}

/// Whether `host` names loopback (`localhost`, `127.0.0.0/8`, `::1`) or no address
/// (`0.0.0.0`).
fn is_loopback(host: &str) -> bool {
    let host = normalise(host);
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host.ends_with(".localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(crate::runner::docker::egress::proxy::is_local)
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
        let host = a.host();
        // A host name or an IP literal, nothing pattern-like (`*`, `[x]` that is no
        // IPv6 address).
        let plain = !host.is_empty()
            && if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
                v6.parse::<std::net::Ipv6Addr>().is_ok()
            } else {
                host.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
            };
        if plain {
            out.push((host.to_owned(), port));
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

    #[test]
    fn urls_never_widen_the_list_beyond_their_own_host() {
        let c = cmd(
            &["--append-system-prompt", "see https://** and http://*:22/ and http://[fd00::1]:81/"],
            &[
                ("HTTPS_PROXY", "http://corp-proxy.example:3128"),
                ("all_proxy", "http://other-proxy.example:1080"),
                ("OPENAI_BASE_URL", "http://[2001:db8::1]:8080/v1"),
            ],
        );
        let a = Allowlist::new(&Vec::new(), &c, &[]);
        for (h, p) in [
            ("api.example.com", 443),
            ("0", 22),
            ("x", 22),
            ("corp-proxy.example", 3128),
            ("other-proxy.example", 1080),
            ("0", 81),
        ] {
            assert!(!a.allows(h, p), "{h}:{p} was allowed");
        }
        assert!(a.allows("[fd00::1]", 81));
        assert!(a.allows("[2001:db8::1]", 8080));
        // A configured IPv6 literal is itself, not a character class.
        let a = Allowlist::new(&vec!["[fd00::2]:*".to_owned()], &c, &[]);
        assert!(a.allows("[fd00::2]", 9));
        assert!(!a.allows("0", 9) && !a.allows("f", 9));
    }
}
