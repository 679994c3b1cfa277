//! Replays every recorded transcript in `fixtures/<provider>/` through its provider and
//! compares the whole normalized result with the committed `<scenario>.result.json`.
//!
//! A fixture is `<scenario>.ndjson` (stdout as the CLI printed it), `.stderr`, `.exit`
//! (the exit code, or `signal`), `.meta.json` (CLI version, origin, command, and the
//! [`ParseContext`] of the run) and `.result.json` (the expected result).
//!
//! After a deliberate change of the expected results, regenerate them with
//! `AICLI_BLESS=1 cargo test -p aicli-providers --test fixtures` and review the diff.

use std::path::{Path, PathBuf};

use aicli_providers::{AiCliConfig, ExitStatus, ParseContext, ProviderRegistry, SessionResult, replay};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Meta {
    /// The CLI version that printed the transcript.
    cli_version: String,
    /// Where the transcript came from.
    #[allow(dead_code)]
    source: String,
    /// The command line (env + argv) that produced it.
    #[allow(dead_code)]
    #[serde(default)]
    cmd: String,
    /// What the parser is told besides the lines.
    #[serde(default)]
    context: ParseContext,
}

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn exit_status(path: &Path) -> ExitStatus {
    let text = String::from_utf8(read(path)).unwrap_or_default();
    let t = text.trim();
    if t == "signal" {
        return ExitStatus::Signal;
    }
    ExitStatus::Code(
        t.parse()
            .unwrap_or_else(|e| panic!("{}: bad exit code '{t}': {e}", path.display())),
    )
}

/// Every fixture replays to its committed result.
#[test]
fn every_fixture_replays_to_its_committed_result() {
    let registry =
        ProviderRegistry::from_config(&AiCliConfig::builtin().unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{e}"));
    let bless = std::env::var_os("AICLI_BLESS").is_some();
    let mut checked = 0;
    let mut failures = Vec::new();
    let mut dirs: Vec<_> = std::fs::read_dir(fixtures_dir())
        .unwrap_or_else(|e| panic!("fixtures dir: {e}"))
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .collect();
    dirs.sort_by_key(|e| e.path());
    for dir in dirs {
        let provider_name = dir.file_name().to_string_lossy().into_owned();
        let Ok(provider) = registry.get(&provider_name) else {
            continue; // fixtures of a vendor registered elsewhere (e.g. the engine's tests)
        };
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir.path())
            .unwrap_or_else(|e| panic!("{e}"))
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "ndjson"))
            .collect();
        files.sort();
        for ndjson in files {
            let stem = ndjson.with_extension("");
            let with = |ext: &str| PathBuf::from(format!("{}.{ext}", stem.display()));
            let meta: Meta = serde_json::from_slice(&read(&with("meta.json")))
                .unwrap_or_else(|e| panic!("{}: {e}", with("meta.json").display()));
            assert!(
                !meta.cli_version.is_empty(),
                "{}: cli_version",
                stem.display()
            );
            let stderr = String::from_utf8_lossy(&read(&with("stderr"))).into_owned();
            let exit = exit_status(&with("exit"));
            let result = replay::replay(
                provider.as_ref(),
                &read(&ndjson),
                &stderr,
                exit,
                &meta.context,
            );
            let actual = serde_json::to_string_pretty(&result).unwrap_or_default() + "\n";
            let expected_path = with("result.json");
            if bless {
                std::fs::write(&expected_path, &actual).unwrap_or_else(|e| panic!("{e}"));
            } else {
                let expected = String::from_utf8(read(&expected_path)).unwrap_or_default();
                // Compare parsed values so a reformatted file is not a failure.
                let exp: SessionResult = serde_json::from_str(&expected)
                    .unwrap_or_else(|e| panic!("{}: {e}", expected_path.display()));
                if exp != result {
                    failures.push(format!(
                        "{}:\n{}",
                        stem.display(),
                        pretty_assertions::StrComparison::new(&expected, &actual)
                    ));
                }
            }
            checked += 1;
        }
    }
    assert!(
        checked > 0,
        "no fixtures found under {}",
        fixtures_dir().display()
    );
    assert!(
        failures.is_empty(),
        "{} of {checked} fixtures differ from their .result.json:\n{}\n\nIf the change is intended, regenerate with:\n  AICLI_BLESS=1 cargo test -p aicli-providers --test fixtures",
        failures.len(),
        failures.join("\n")
    );
}

/// Drift guard: every fixture was recorded with the CLI version the config pins (the
/// one `.ci/install-clis.sh` installs). Bumping a pin without re-recording fails here.
#[test]
fn every_fixture_names_the_pinned_cli_version() {
    let config = AiCliConfig::builtin().unwrap_or_else(|e| panic!("{e}"));
    let mut checked = 0;
    for (name, p) in &config.providers {
        let Some(pin) = &p.version else { continue };
        let Ok(dir) = std::fs::read_dir(fixtures_dir().join(name)) else {
            continue;
        };
        for e in dir.filter_map(Result::ok) {
            let path = e.path();
            if !path.to_string_lossy().ends_with(".meta.json") {
                continue;
            }
            let meta: Meta = serde_json::from_slice(&read(&path))
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(
                &meta.cli_version,
                pin,
                "{} was recorded with {name} {} but the config pins {pin}; re-record it (bash fixtures/record.sh) or fix the pin",
                path.display(),
                meta.cli_version
            );
            checked += 1;
        }
    }
    assert!(checked > 90, "only {checked} fixtures checked");
}
