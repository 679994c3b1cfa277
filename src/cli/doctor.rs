//! `aicli doctor`: installed vs pinned vs fixture versions.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::json;

use super::probe::{auth_words, probe_all};
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
            && let Ok(v) = aicli::util::read_json::<serde_json::Value>(&p)
            && let Some(ver) = v["cli_version"].as_str()
        {
            out.insert(ver.to_owned());
        }
    }
    out
}

pub(super) async fn doctor(
    config_path: Option<&Path>,
    fixtures: Option<PathBuf>,
    strict: bool,
    json_out: bool,
) -> anyhow::Result<ExitCode> {
    let config = load_config(config_path)?;
    let reg = registry(&config)?;
    let fixtures = fixtures.or_else(|| {
        let d = PathBuf::from("fixtures");
        d.is_dir().then_some(d)
    });
    let mut rows = Vec::new();
    let mut problems = 0;
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
    let uses_docker = aicli::runner::docker::config_uses_docker(&config);
    for pr in &probes {
        let p = &pr.provider;
        let bin = &pr.binary;
        let installed = pr.version.clone();
        let pinned = p.config().version.clone();
        let recorded: Vec<String> = fixtures
            .as_deref()
            .map(|d| fixture_versions(d, p.name()).into_iter().collect())
            .unwrap_or_default();
        let mut warnings = Vec::new();
        if let Err(e) = bin {
            warnings.push(e.clone());
        }
        let login = pr.auth.as_ref().map(auth_words);
        for s in &pr.slow {
            warnings.push(format!("slow probe: {s}"));
        }
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
        let mine: Vec<_> = images
            .iter()
            .filter(|(n, _)| n == p.name())
            .map(|(_, r)| r)
            .collect();
        let image_warnings: Vec<String> = mine
            .iter()
            .filter_map(|r| super::image::version_warning(r, pinned.as_deref()))
            .collect();
        problems += warnings.len();
        if uses_docker {
            problems += image_warnings.len();
            warnings.extend(image_warnings.iter().cloned());
        }
        rows.push(json!({
            "images": mine,
            "image_notes": if uses_docker { Vec::new() } else { image_warnings },
            "provider": p.name(),
            "binary": bin.as_ref().map(|b| b.describe()).ok(),
            "found_in": pr.source.map(|s| s.as_str()),
            "login": login,
            "auth": pr.auth,
            "installed_version": installed,
            "pinned_version": pinned,
            "fixtures_version": recorded,
            "warnings": warnings,
        }));
    }
    if json_out {
        outln!("{}", serde_json::to_string(&rows)?);
    } else {
        if let Some(note) = &docker_note {
            outln!("({note}; images not checked)");
        }
        for r in &rows {
            outln!(
                "{}: installed {} · pinned {} · fixtures {}",
                r["provider"].as_str().unwrap_or_default(),
                r["installed_version"].as_str().unwrap_or("-"),
                r["pinned_version"].as_str().unwrap_or("-"),
                r["fixtures_version"]
                    .as_array()
                    .map(|a| a
                        .iter()
                        .filter_map(|v| v.as_str())
                        .collect::<Vec<_>>()
                        .join(", "))
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "-".to_owned())
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
            for w in r["warnings"].as_array().into_iter().flatten() {
                outln!("  warning: {}", w.as_str().unwrap_or_default());
            }
        }
    }
    Ok(if strict && problems > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
