use super::npm::{bin_entry, closure, read_package};
use super::*;

#[test]
fn the_version_line_is_found_among_warnings() {
    let out = "codex-cli 0.171.0\nWARNING: failed to clean up stale arg0 temp dirs: Cross-device link (os error 18)\n";
    assert_eq!(version_line(out), "codex-cli 0.171.0");
    assert_eq!(
        version_line("2.1.332 (Claude Code)\n"),
        "2.1.332 (Claude Code)"
    );
    assert_eq!(version_line("no version here\n"), "no version here");
    assert_eq!(version_line(""), "");
}

#[test]
fn the_closure_takes_dependencies_and_present_optional_ones() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path();
    let pkg = |name: &str, json: &str| {
        std::fs::create_dir_all(m.join(name)).unwrap();
        std::fs::write(m.join(name).join("package.json"), json).unwrap();
    };
    pkg(
        "@acme/cli",
        r#"{"version":"1.0.0","bin":{"acme":"bin/acme.js"},"dependencies":{"dep":"1"},"optionalDependencies":{"@acme/cli-linux-x64":"1","@acme/cli-darwin-arm64":"1"}}"#,
    );
    pkg("dep", r#"{"dependencies":{"leaf":"1"}}"#);
    pkg("leaf", "{}");
    pkg("@acme/cli-linux-x64", "{}");
    assert_eq!(
        closure(m, "@acme/cli").unwrap(),
        ["@acme/cli", "@acme/cli-linux-x64", "dep", "leaf"]
    );
    let p = read_package(&m.join("@acme/cli")).unwrap();
    assert_eq!(bin_entry(&p, "acme").as_deref(), Some("bin/acme.js"));
    assert_eq!(bin_entry(&p, "other"), None);
    pkg("broken", r#"{"dependencies":{"missing":"1"}}"#);
    assert!(
        closure(m, "broken")
            .unwrap_err()
            .to_string()
            .contains("broken needs missing")
    );
    assert_eq!(host::node_major("v20.20.2"), 20);
    assert_eq!(host::node_major("garbage"), 0);
}
