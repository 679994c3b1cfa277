//! `aicli providers` and `aicli status`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use aicli::providers::{AuthStatus, CommandSpec, Feature};
use serde_json::json;

use super::{load_config, registry};

pub(super) async fn providers(
    config_path: Option<&Path>,
    json_out: bool,
    details: bool,
) -> anyhow::Result<ExitCode> {
    let config = load_config(config_path)?;
    let reg = registry(&config)?;
    let mut rows = Vec::new();
    for p in reg.providers() {
        let bin = p.binary_path(None);
        let mut row = json!({
            "name": p.name(),
            "package": p.package_name(),
            "binary": bin.as_ref().map(|b| b.describe()).ok(),
            "installed": bin.is_ok(),
        });
        if let Err(e) = &bin {
            row["problem"] = json!(e.to_string());
        }
        if let Ok(b) = &bin {
            let cwd = std::env::temp_dir();
            if details {
                let mut c = CommandSpec::new(b, &cwd);
                c.args(p.config().version_argv.iter().cloned());
                let out = aicli::process::run_capture(&c, Duration::from_secs(20)).await;
                row["version"] = json!(out.ok().and_then(|o| p.parse_version(&o.stdout)));
                row["pinned_version"] = json!(p.config().version);
            }
            let status = match p.auth_status_argv() {
                Some(argv) => {
                    let mut c = CommandSpec::new(b, &cwd);
                    c.args(argv);
                    match aicli::process::run_capture(&c, Duration::from_secs(20)).await {
                        Ok(o) if o.timed_out => AuthStatus::Unknown {
                            detail: "the status probe timed out".into(),
                        },
                        Ok(o) => p.parse_auth_status(&o.stdout, &o.stderr, o.exit_code),
                        Err(e) => AuthStatus::Unknown {
                            detail: e.to_string(),
                        },
                    }
                }
                None => {
                    let env: std::collections::BTreeMap<String, String> =
                        std::env::vars().collect();
                    let home = PathBuf::from(env.get("HOME").cloned().unwrap_or_default());
                    match p.auth_precheck(&env, &home, &p.config().extra_args).await {
                        Some(msg) => AuthStatus::LoggedOut { hint: msg },
                        None => AuthStatus::Unknown {
                            detail: "the CLI has no status command; credentials seem present"
                                .into(),
                        },
                    }
                }
            };
            row["auth"] = serde_json::to_value(&status)?;
        }
        if details {
            let features: Vec<&str> = Feature::ALL
                .into_iter()
                .filter(|f| p.supports(*f))
                .map(Feature::as_str)
                .collect();
            row["features"] = json!(features);
            row["default"] = json!(reg.default_provider() == Some(p.name()));
        }
        rows.push(row);
    }
    if json_out {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    for r in &rows {
        let name = r["name"].as_str().unwrap_or_default();
        let auth = match r["auth"]["state"].as_str() {
            Some("logged_in") => "logged in".to_owned(),
            Some("logged_out") => format!(
                "NOT logged in ({})",
                r["auth"]["hint"].as_str().unwrap_or_default()
            ),
            Some(_) => format!(
                "auth unknown ({})",
                r["auth"]["detail"].as_str().unwrap_or_default()
            ),
            None => "-".to_owned(),
        };
        if r["installed"].as_bool() == Some(true) {
            println!("{name}: {}", r["binary"].as_str().unwrap_or_default());
            if details {
                println!(
                    "  version {} (pinned {})",
                    r["version"].as_str().unwrap_or("?"),
                    r["pinned_version"].as_str().unwrap_or("-")
                );
            }
            println!("  {auth}");
        } else {
            println!(
                "{name}: {}",
                r["problem"].as_str().unwrap_or("not installed")
            );
        }
        if details {
            let f: Vec<&str> = r["features"]
                .as_array()
                .map(|a| a.iter().filter_map(|x| x.as_str()).collect())
                .unwrap_or_default();
            println!("  features: {}", f.join(", "));
        }
    }
    Ok(ExitCode::SUCCESS)
}
