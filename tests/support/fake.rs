//! `aicli-fake-cli` and the recorded transcripts it replays.

use std::path::{Path, PathBuf};

use aicli::providers::{ProviderConfig, TaskSpec};

/// The fake CLI binary built with this crate.
pub fn fake_cli() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_aicli-fake-cli"))
}

/// The repository's `fixtures/` directory.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// `fixtures/<provider>/<scenario>` (without extension).
pub fn fixture(provider: &str, scenario: &str) -> PathBuf {
    fixtures().join(provider).join(scenario)
}

/// Every line of the recorded transcripts of `vendor` that is JSON, in order of file
/// (`fixtures/<vendor>/*.ndjson`, then `fixtures/<vendor>/hand/*.ndjson`, each sorted).
pub fn fixture_json_lines(vendor: &str) -> Vec<String> {
    let root = fixtures().join(vendor);
    let mut files = Vec::new();
    for dir in [root.clone(), root.join("hand")] {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if e.path().extension().is_some_and(|x| x == "ndjson") {
                files.push(e.path());
            }
        }
    }
    files.sort();
    let mut lines = Vec::new();
    for f in files {
        let text = String::from_utf8_lossy(&std::fs::read(&f).expect("fixture")).into_owned();
        for l in text.lines() {
            if serde_json::from_str::<serde::de::IgnoredAny>(l).is_ok() {
                lines.push(l.to_owned());
            }
        }
    }
    lines
}

/// The fake CLI's arguments that replay `fixture` (a transcript's path without
/// extension, on this machine or in an image): its stdout, stderr and exit code.
pub fn replay_args(fixture: &Path) -> Vec<String> {
    let fx = fixture.display();
    vec![
        "--replay".into(),
        format!("{fx}.ndjson"),
        "--stderr-file".into(),
        format!("{fx}.stderr"),
        "--exit-file".into(),
        format!("{fx}.exit"),
    ]
}

/// A provider entry run by the built-in `adapter` (its argv, the prompt on the CLI's
/// stdin) whose binary is `aicli-fake-cli` (found on PATH, or in an image) replaying
/// `fixture`, with `args` after.
pub fn fake_provider_config(adapter: &str, fixture: &Path, args: &[&str]) -> ProviderConfig {
    let mut extra = replay_args(fixture);
    extra.extend(args.iter().map(|a| (*a).to_owned()));
    serde_json::from_value(serde_json::json!({
        "adapter": adapter,
        "package": "aicli-fake-cli",
        "binary_name": "aicli-fake-cli",
        "extra_args": extra,
    }))
    .expect("provider config")
}

/// `n` tasks `t0`, `t1`, … with `prompt`, each telling the fake CLI to wait
/// `line_delay_ms` before each line.
pub fn fake_tasks(n: usize, prompt: &str, line_delay_ms: u64) -> Vec<TaskSpec> {
    (0..n)
        .map(|i| TaskSpec {
            id: format!("t{i}"),
            prompt: prompt.to_owned(),
            extra_args: vec!["--line-delay-ms".into(), line_delay_ms.to_string()],
            ..TaskSpec::default()
        })
        .collect()
}
