//! Replays every recorded transcript in `fixtures/<provider>/` through its provider and
//! compares the whole normalized result with the committed `<scenario>.result.json`.
//!
//! A fixture is `<scenario>.ndjson` (stdout as the CLI printed it), `.stderr`, `.exit`
//! (the exit code, or `signal`), `.meta.json` (CLI version, origin, command, and the
//! [`ParseContext`] of the run) and `.result.json` (the expected result).
//!
//! After a deliberate change of the expected results, regenerate them with
//! `AICLI_BLESS=1 cargo test -p aicli-providers --test fixtures` and review the diff.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use aicli_providers::{
    AiCliConfig, CanonicalUsage, CostSource, EventKind, ExitStatus, ModelPrice, ParseContext,
    PriceTable, ProviderRegistry, SessionResult, replay,
};
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

/// A fixture: its provider, the path without extension, and its parts.
struct Fixture {
    provider: String,
    stem: PathBuf,
    meta: Meta,
    stdout: Vec<u8>,
    stderr: String,
    exit: ExitStatus,
}

impl Fixture {
    fn with(&self, ext: &str) -> PathBuf {
        PathBuf::from(format!("{}.{ext}", self.stem.display()))
    }
}

/// Every fixture: the recorded ones in `fixtures/<provider>/` and the hand-written ones
/// (older CLI versions, scenarios the fake APIs cannot make) in `fixtures/<provider>/hand/`.
fn fixtures() -> Vec<Fixture> {
    let mut dirs: Vec<(String, PathBuf)> = Vec::new();
    for e in std::fs::read_dir(fixtures_dir())
        .unwrap_or_else(|e| panic!("fixtures dir: {e}"))
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
    {
        let provider = e.file_name().to_string_lossy().into_owned();
        dirs.push((provider.clone(), e.path()));
        dirs.push((provider, e.path().join("hand")));
    }
    dirs.sort();
    let mut out = Vec::new();
    for (provider, dir) in dirs {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries
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
            out.push(Fixture {
                provider: provider.clone(),
                stdout: read(&ndjson),
                stderr: String::from_utf8_lossy(&read(&with("stderr"))).into_owned(),
                exit: exit_status(&with("exit")),
                stem,
                meta,
            });
        }
    }
    out
}

fn registry() -> ProviderRegistry {
    ProviderRegistry::from_config(&AiCliConfig::builtin().unwrap_or_else(|e| panic!("{e}")))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Every fixture replays to its committed result.
#[test]
fn every_fixture_replays_to_its_committed_result() {
    let registry = registry();
    let bless = std::env::var_os("AICLI_BLESS").is_some();
    let mut checked = 0;
    let mut failures = Vec::new();
    for f in fixtures() {
        let Ok(provider) = registry.get(&f.provider) else {
            continue; // fixtures of a vendor registered elsewhere (e.g. the engine's tests)
        };
        let result = replay::replay(
            provider.as_ref(),
            &f.stdout,
            &f.stderr,
            f.exit,
            &f.meta.context,
        );
        let actual = serde_json::to_string_pretty(&result).unwrap_or_default() + "\n";
        let expected_path = f.with("result.json");
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
                    f.stem.display(),
                    pretty_assertions::StrComparison::new(&expected, &actual)
                ));
            }
        }
        checked += 1;
    }
    assert!(
        checked > 100,
        "only {checked} fixtures under {}",
        fixtures_dir().display()
    );
    assert!(
        failures.is_empty(),
        "{} of {checked} fixtures differ from their .result.json:\n{}\n\nIf the change is intended, regenerate with:\n  AICLI_BLESS=1 cargo test -p aicli-providers --test fixtures",
        failures.len(),
        failures.join("\n")
    );
}

/// The live usage adds up: on every fixture, the sum of the Usage events (increments)
/// is the result's canonical usage, and per model its `usage_by_model` (tokens).
#[test]
fn usage_events_add_up_to_the_result_on_every_fixture() {
    let registry = registry();
    for f in fixtures() {
        let Ok(provider) = registry.get(&f.provider) else {
            continue;
        };
        let (events, r) = replay::replay_events(
            provider.as_ref(),
            &f.stdout,
            &f.stderr,
            f.exit,
            &f.meta.context,
        );
        let mut total = CanonicalUsage::default();
        let mut by_model: BTreeMap<String, CanonicalUsage> = BTreeMap::new();
        for e in &events {
            if let EventKind::Usage { usage, model } = &e.kind {
                total += *usage;
                if let Some(m) = model {
                    *by_model.entry(m.clone()).or_default() += *usage;
                }
            }
        }
        assert_eq!(total, r.canonical_usage, "{}", f.stem.display());
        for (m, u) in &r.usage_by_model {
            let got = by_model.get(m).copied().unwrap_or_default();
            let tokens = |u: &CanonicalUsage| CanonicalUsage {
                request_count: 0,
                ..*u
            };
            assert_eq!(tokens(&got), tokens(u), "{} model {m}", f.stem.display());
        }
    }
}

/// Claude's own per-model prices (USD per million tokens): the config's, plus the
/// models the hand-written fixtures use, and the CLI's fallback for a model it does not
/// know (`fake-model-x`: priced as its default model).
fn claude_prices() -> PriceTable {
    let mut t = AiCliConfig::builtin()
        .unwrap_or_else(|e| panic!("{e}"))
        .providers["claude"]
        .prices
        .clone();
    let p = |input, cached, write, output| ModelPrice {
        input,
        cached_input: Some(cached),
        cache_write: Some(write),
        output,
    };
    t.0.insert("claude-sonnet-4-5".into(), p(3.0, 0.3, 3.75, 15.0));
    t.0.insert("fake-model-x".into(), p(4.0, 0.2, 5.0, 20.0));
    t
}

/// Claude's usage is everything the run was billed for: on every fixture with a
/// reported cost, the per-run usage priced at the CLI's own per-model prices is the
/// per-run reported cost.
#[test]
fn claude_usage_priced_at_the_cli_prices_is_the_reported_cost() {
    let registry = registry();
    let prices = claude_prices();
    let mut checked = 0;
    for f in fixtures().into_iter().filter(|f| f.provider == "claude") {
        let p = registry.get("claude").unwrap_or_else(|e| panic!("{e}"));
        let r = replay::replay(p.as_ref(), &f.stdout, &f.stderr, f.exit, &f.meta.context);
        if r.cost_source != CostSource::Reported {
            continue;
        }
        let cost = r.cost_usd.unwrap_or_else(|| panic!("{}", f.stem.display()));
        let priced = prices
            .estimate(r.usage_by_model.iter().map(|(m, u)| (m.as_str(), u)))
            .unwrap_or_else(|| panic!("{}: a model without a price", f.stem.display()));
        let by_model: CanonicalUsage = r
            .usage_by_model
            .values()
            .fold(CanonicalUsage::default(), |a, u| a + *u);
        assert_eq!(by_model, r.canonical_usage, "{}", f.stem.display());
        assert!(
            (priced - cost).abs() < 1e-9,
            "{}: usage priced at {priced}, reported cost {cost}",
            f.stem.display()
        );
        checked += 1;
    }
    assert!(checked > 25, "only {checked} fixtures with a reported cost");
}

/// The line types the CLIs document are typed: no fixture line of them is `Unknown`.
#[test]
fn documented_line_types_are_typed() {
    let registry = registry();
    let documented = [
        "turn.started",
        "item.started/todo_list",
        "item.updated/todo_list",
        "item.completed/todo_list",
        "system/status",
        "system/hook_started",
        "system/hook_response",
        "system/task_started",
        "system/task_progress",
        "system/task_updated",
        "system/task_notification",
        "stream_event/message_start",
        "stream_event/content_block_start",
        "stream_event/content_block_delta",
        "stream_event/content_block_stop",
        "stream_event/message_delta",
        "stream_event/message_stop",
    ];
    let mut seen = std::collections::BTreeSet::new();
    for f in fixtures() {
        let Ok(provider) = registry.get(&f.provider) else {
            continue;
        };
        let (events, _) = replay::replay_events(
            provider.as_ref(),
            &f.stdout,
            &f.stderr,
            f.exit,
            &f.meta.context,
        );
        for e in &events {
            if let EventKind::Unknown { vendor_type } = &e.kind {
                let t = vendor_type.clone().unwrap_or_default();
                assert!(
                    !documented.contains(&t.as_str()),
                    "{}: {t} is Unknown",
                    f.stem.display()
                );
            }
            seen.insert(e.type_name());
        }
    }
    for t in ["status", "plan", "subtask", "hook", "usage"] {
        assert!(seen.contains(t), "no fixture gives a `{t}` event");
    }
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
