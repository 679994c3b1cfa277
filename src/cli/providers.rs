//! `aicli providers` and `aicli status`.

use std::path::Path;
use std::process::ExitCode;

use crate::providers::Feature;
use serde_json::json;

use super::probe::{auth_words, probe_all};
use super::{load_config, registry};

pub(super) async fn providers(
    config_path: Option<&Path>,
    json_out: bool,
    details: bool,
) -> anyhow::Result<ExitCode> {
    let config = load_config(config_path)?;
    let reg = registry(&config)?;
    let probes = probe_all(
        reg.providers().cloned().collect(),
        &config.engine.env_passthrough,
        details,
        true,
    )
    .await;
    let mut rows = Vec::new();
    for pr in &probes {
        let p = &pr.provider;
        let mut row = json!({
            "name": p.name(),
            "package": p.package_name(),
            "binary": pr.binary.as_ref().map(|b| b.describe()).ok(),
            "found_in": pr.source.map(|s| s.as_str()),
            "installed": pr.binary.is_ok(),
        });
        if let Err(e) = &pr.binary {
            row["problem"] = json!(e);
        }
        if details {
            row["version"] = json!(pr.version);
            row["pinned_version"] = json!(p.config().version);
            let features: Vec<&str> = Feature::ALL
                .into_iter()
                .filter(|f| p.supports(*f))
                .map(Feature::as_str)
                .collect();
            row["features"] = json!(features);
            row["default"] = json!(reg.default_provider() == Some(p.name()));
        }
        if let Some(a) = &pr.auth {
            row["auth"] = serde_json::to_value(a)?;
        }
        if !pr.slow.is_empty() {
            row["slow"] = json!(pr.slow);
        }
        rows.push(row);
    }
    if json_out {
        outln!("{}", serde_json::to_string(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    for pr in &probes {
        let name = pr.provider.name();
        match &pr.binary {
            Ok(b) => {
                outln!(
                    "{name}: {} (found in {})",
                    b.describe(),
                    pr.source.map(|s| s.as_str()).unwrap_or("?")
                );
                if details {
                    outln!(
                        "  version {} (pinned {})",
                        pr.version.as_deref().unwrap_or("?"),
                        pr.provider.config().version.as_deref().unwrap_or("-")
                    );
                }
                if let Some(a) = &pr.auth {
                    outln!("  {}", auth_words(a));
                }
            }
            Err(e) => {
                outln!("{name}: {e}");
            }
        }
        for s in &pr.slow {
            outln!("  slow: {s}");
        }
        if details {
            let f: Vec<&str> = Feature::ALL
                .into_iter()
                .filter(|f| pr.provider.supports(*f))
                .map(Feature::as_str)
                .collect();
            outln!("  features: {}", f.join(", "));
        }
    }
    Ok(ExitCode::SUCCESS)
}
