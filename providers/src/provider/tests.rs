//! Finding a CLI's binary: what a missing or misconfigured one says.

use super::*;

#[test]
fn a_missing_cli_says_which_npm_package_installs_it() {
    let empty = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut config = ProviderConfig::new("@acme/cli", "acme");
    config.version = Some("1.2.3".into());
    let search = empty.path().display().to_string();
    // Not on the search path.
    let err = default_binary_path("acme", &config, Some(&search))
        .err()
        .map(|e| (e.kind(), e.to_string()));
    assert_eq!(
        err,
        Some((
            crate::ErrorKind::NotInstalled,
            "acme is not installed (looked in PATH and aicli's cache); install it with `aicli install`, or: npm install -g @acme/cli@1.2.3".to_owned()
        ))
    );
    // A configured binary_path that is not there.
    config.binary_path = Some(empty.path().join("acme"));
    let err = default_binary_path("acme", &config, Some(&search))
        .err()
        .map(|e| (e.kind(), e.to_string()));
    assert_eq!(
        err,
        Some((
            crate::ErrorKind::NotInstalled,
            format!(
                "binary_path {}/acme for provider acme does not exist or is not executable; fix binary_path, or remove it and install the CLI with `aicli install acme` (or: npm install -g @acme/cli@1.2.3)",
                empty.path().display()
            )
        ))
    );
}
