use std::path::{Path, PathBuf};

use aicli_providers::AiCliConfig;

use super::McpServerOptions;
use super::start::bind_host;

#[test]
fn options_from_engine_config() {
    let mut cfg = AiCliConfig::builtin().unwrap();
    let o = McpServerOptions::from_config(&cfg, Path::new("/repo"));
    assert_eq!(o.bind, "127.0.0.1:0");
    assert_eq!(o.skills_dir, PathBuf::from("/repo/.aicli/skills"));
    assert!(o.credentials.file.is_none());
    cfg.engine.mcp.bind = "172.17.0.1:0".into();
    cfg.engine.mcp.allowed_hosts = vec!["host.docker.internal".into()];
    cfg.engine.skills_dir = Some("/skills".into());
    cfg.engine.credentials_file = Some("/creds.json".into());
    let o = McpServerOptions::from_config(&cfg, Path::new("/repo"));
    assert_eq!(o.bind, "172.17.0.1:0");
    assert_eq!(o.allowed_hosts, ["host.docker.internal"]);
    assert_eq!(o.skills_dir, PathBuf::from("/skills"));
    assert_eq!(o.credentials.file, Some(PathBuf::from("/creds.json")));
}

#[test]
fn bind_hosts() {
    assert_eq!(bind_host("127.0.0.1:0"), Some("127.0.0.1"));
    assert_eq!(bind_host("[::1]:0"), Some("::1"));
    assert_eq!(bind_host("172.17.0.1:8080"), Some("172.17.0.1"));
    assert_eq!(bind_host("nope"), None);
}
