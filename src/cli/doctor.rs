//! `aicli doctor`: installed vs pinned vs fixture versions.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::runner::docker::image::ImageReport;
use serde_json::{Value, json};

use super::probe::{Probe, auth_words, probe_all};
use super::{load_config, registry};

/// The CLI versions named in `fixtures/<provider>/*.meta.json`.
pub(super) fn fixture_versions(dir: &Path, provider: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let Ok(entries) = std::fs::read_dir(dir.join(provider)) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.to_string_lossy().ends_with(".meta.json")
            && let Ok(v) = crate::util::read_json::<serde_json::Value>(&p)
            && let Some(ver) = v["cli_version"].as_str()
        {
            out.insert(ver.to_owned());
        }
    }
    out
}

/// Where the recorded fixtures are, and how they were found.
#[derive(Debug)]
struct Fixtures {
    /// The directory, when there is one.
    dir: Option<PathBuf>,
    /// Where it came from, or where aicli looked.
    said: String,
}

impl Fixtures {
    /// `--fixtures DIR`, else `./fixtures`, else the `fixtures` of the source tree this
    /// aicli was built from (its repository root), when it is still there.
    fn find(explicit: Option<PathBuf>) -> Fixtures {
        if let Some(d) = explicit {
            let said = if d.is_dir() {
                format!("{} (--fixtures)", d.display())
            } else {
                format!("{}: no such directory (--fixtures)", d.display())
            };
            return Fixtures {
                dir: d.is_dir().then_some(d),
                said,
            };
        }
        let here = PathBuf::from("fixtures");
        if here.is_dir() {
            let shown = std::fs::canonicalize(&here).unwrap_or(here.clone());
            return Fixtures {
                said: format!("{} (the current directory's)", shown.display()),
                dir: Some(here),
            };
        }
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        if source.is_dir() {
            return Fixtures {
                said: format!(
                    "{} (the source tree aicli was built from)",
                    source.display()
                ),
                dir: Some(source),
            };
        }
        Fixtures {
            dir: None,
            said: format!(
                "not found (no ./fixtures, and the source tree aicli was built from, {}, has none): pass --fixtures DIR of an aicli checkout",
                Path::new(env!("CARGO_MANIFEST_DIR")).display()
            ),
        }
    }
}

pub(super) async fn doctor(
    config_path: Option<&Path>,
    fixtures: Option<PathBuf>,
    strict: bool,
    json_out: bool,
) -> anyhow::Result<ExitCode> {
    let config = load_config(config_path)?;
    let reg = registry(&config)?;
    let fixtures = Fixtures::find(fixtures);
    let probes = probe_all(
        reg.providers().cloned().collect(),
        &config.engine.env_passthrough,
        true,
        true,
    )
    .await;
    // The images of the Docker runner, on every engine that answers; missing or stale
    // ones are problems only when the config runs tasks in containers.
    let (images, docker_note) = super::image::doctor_reports(&config, &reg).await;
    let uses_docker = crate::runner::docker::config_uses_docker(&config);
    let env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    let search_path = super::probe::search_path();
    let node = super::npm::node_on(&search_path, &env).await;
    let mut problems = Vec::new();
    let rows: Vec<Value> = probes
        .iter()
        .map(|pr| {
            row(
                pr,
                &fixtures,
                &images,
                uses_docker,
                node.as_ref().map(|(_, v)| v.as_str()),
                &mut problems,
            )
        })
        .collect();
    let sandbox = crate::providers::shared::confine::bubblewrap(Some(&search_path));
    if json_out {
        outln!("{}", serde_json::to_string(&rows)?);
    } else {
        print_rows(&rows, &fixtures, docker_note.as_deref());
        match &node {
            Some((path, v)) => {
                outln!("node: {v} ({})", path.display());
            }
            None => {
                outln!("node: none on PATH (the npm CLIs run on Node.js)");
            }
        }
        match &sandbox {
            Some(b) => {
                outln!(
                    "sandbox: bubblewrap works ({}): permission mode sandbox confines claude and gemini",
                    b.display()
                );
            }
            None => {
                outln!(
                    "sandbox: warning: no working bubblewrap (bwrap): permission mode sandbox, the default, fails claude's runs and refuses gemini's commands; apt install bubblewrap socat (docs/permissions.md)"
                );
            }
        }
    }
    if sandbox.is_none() {
        problems.push("no working bubblewrap (bwrap) for permission mode sandbox".to_owned());
    }
    if strict && !problems.is_empty() {
        eprintln!(
            "aicli doctor --strict: exit 1: {} problem{}:",
            problems.len(),
            if problems.len() == 1 { "" } else { "s" }
        );
        for p in &problems {
            eprintln!("  {p}");
        }
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// One provider's row (its JSON), its problems added to `problems` as
/// `provider: what`.
fn row(
    pr: &Probe,
    fixtures: &Fixtures,
    images: &[(String, ImageReport)],
    uses_docker: bool,
    node: Option<&str>,
    problems: &mut Vec<String>,
) -> Value {
    let p = &pr.provider;
    let installed = pr.version.clone();
    let pinned = p.config().version.clone();
    let recorded: Vec<String> = fixtures
        .dir
        .as_deref()
        .map(|d| fixture_versions(d, p.name()).into_iter().collect())
        .unwrap_or_default();
    let mut warnings = Vec::new();
    if let Err(e) = &pr.binary {
        warnings.push(e.clone());
    }
    // A slow probe says something about the machine, not the installation: a note.
    let notes: Vec<String> = pr.slow.iter().map(|s| format!("slow probe: {s}")).collect();
    if let (Some(i), Some(pin)) = (&installed, &pinned)
        && i != pin
    {
        warnings.push(format!(
            "installed {} {i} differs from the pinned {pin} (adapters and fixtures were checked against {pin}); run `aicli install {}` or re-record the fixtures",
            p.binary_name(),
            p.name()
        ));
    }
    if let Some(i) = &installed
        && !recorded.is_empty()
        && !recorded.contains(i)
    {
        warnings.push(format!(
            "the fixtures were recorded with {} but {i} is installed: re-record them with `aicli record`",
            recorded.join(", ")
        ));
    }
    let engines = pr
        .binary
        .as_ref()
        .ok()
        .and_then(|b| engines_node(b, &p.config().package));
    if let (Some(range), Some(v)) = (&engines, node)
        && super::npm::satisfies(v, range) == Some(false)
    {
        warnings.push(format!(
            "{} {} needs Node.js {range} (its package's engines.node), and the node on PATH is {v}: it may not run; install a Node.js that fits (https://nodejs.org)",
            p.config().package,
            installed.as_deref().unwrap_or("")
        ));
    }
    let mine: Vec<&ImageReport> = images
        .iter()
        .filter(|(n, _)| n == p.name())
        .map(|(_, r)| r)
        .collect();
    let image_warnings: Vec<String> = mine
        .iter()
        .filter_map(|r| super::image::version_warning(r, pinned.as_deref()))
        .collect();
    if uses_docker {
        warnings.extend(image_warnings.iter().cloned());
    }
    problems.extend(warnings.iter().map(|w| format!("{}: {w}", p.name())));
    json!({
        "images": mine,
        "image_notes": if uses_docker { Vec::new() } else { image_warnings },
        "notes": notes,
        "provider": p.name(),
        "binary": pr.binary.as_ref().map(|b| b.describe()).ok(),
        "found_in": pr.source.map(|s| s.as_str()),
        "login": pr.auth.as_ref().map(auth_words),
        "auth": pr.auth,
        "installed_version": installed,
        "pinned_version": pinned,
        "fixtures_dir": fixtures.dir,
        "fixtures_version": recorded,
        "engines_node": engines,
        "warnings": warnings,
    })
}

/// The `engines.node` of npm package `package` that `binary` belongs to: the first
/// `package.json` named `package` above the binary's real path.
fn engines_node(binary: &crate::providers::BinaryLocation, package: &str) -> Option<String> {
    let crate::providers::BinaryLocation::Path(p) = binary else {
        return None;
    };
    let real = std::fs::canonicalize(p).ok()?;
    for dir in real.ancestors().skip(1) {
        let manifest = dir.join("package.json");
        if let Ok(v) = crate::util::read_json::<Value>(&manifest)
            && v["name"] == package
        {
            return v["engines"]["node"].as_str().map(str::to_owned);
        }
        if dir.file_name().is_some_and(|n| n == "node_modules") {
            return None;
        }
    }
    None
}

/// The rows as text, after where the fixtures are and (once) why images were not
/// checked.
fn print_rows(rows: &[Value], fixtures: &Fixtures, docker_note: Option<&str>) {
    outln!("fixtures: {}", fixtures.said);
    if let Some(note) = docker_note {
        outln!("({note}; images not checked)");
    }
    let none = if fixtures.dir.is_some() {
        "none"
    } else {
        "not found"
    };
    for r in rows {
        let recorded = r["fixtures_version"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| none.to_owned());
        outln!(
            "{}: installed {} · pinned {} · fixtures {recorded}",
            r["provider"].as_str().unwrap_or_default(),
            r["installed_version"].as_str().unwrap_or("-"),
            r["pinned_version"].as_str().unwrap_or("-"),
        );
        if let Some(b) = r["binary"].as_str() {
            outln!(
                "  binary: {b} (found in {})",
                r["found_in"].as_str().unwrap_or("?")
            );
        }
        if let Some(l) = r["login"].as_str() {
            outln!("  login: {l}");
        }
        for i in r["images"].as_array().into_iter().flatten() {
            outln!(
                "  image: {} on {}: {}",
                i["image"].as_str().unwrap_or_default(),
                i["host"].as_str().unwrap_or_default(),
                i["version_inside"].as_str().unwrap_or("-")
            );
        }
        for n in r["image_notes"].as_array().into_iter().flatten() {
            outln!("  note: {}", n.as_str().unwrap_or_default());
        }
        for n in r["notes"].as_array().into_iter().flatten() {
            outln!("  note: {}", n.as_str().unwrap_or_default());
        }
        for w in r["warnings"].as_array().into_iter().flatten() {
            outln!("  warning: {}", w.as_str().unwrap_or_default());
        }
    }
}
