//! `aicli install`: the pinned CLIs into aicli's own npm cache.

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::cli::npm::{self, Pin};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use super::load_config;

/// `aicli install`.
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// The providers whose CLIs to install (default: every provider with a pinned
    /// version: claude, codex, gemini and the ACP agents claude-acp, codex-acp,
    /// gemini-acp).
    pub providers: Vec<String>,
    /// Print what is installed where as JSON.
    #[arg(long)]
    pub json: bool,
}

pub(super) async fn install(
    config_path: Option<&Path>,
    a: InstallArgs,
) -> anyhow::Result<ExitCode> {
    let config = load_config(config_path)?;
    let pins = npm::pins(&config, &a.providers)?;
    let prefix = crate::cache::cli_cache_dir();
    let missing: Vec<Pin> = pins
        .iter()
        .filter(|p| !npm::is_installed(&prefix, p))
        .cloned()
        .collect();
    for p in &pins {
        let state = match npm::installed_version(&p.prefix(&prefix), &p.package) {
            Some(v) if v == p.version && !missing.contains(p) => "already installed".to_owned(),
            Some(v) => format!("{v} installed, replacing it"),
            None => "not installed".to_owned(),
        };
        eprintln!(
            "aicli install: {} {} ({}): {state}",
            p.provider, p.version, p.package
        );
    }
    if missing.is_empty() {
        eprintln!(
            "aicli install: nothing to do, the pinned versions are in {}",
            prefix.display()
        );
    } else {
        install_missing(&missing, &prefix).await?;
    }
    let rows: Vec<_> = pins
        .iter()
        .map(|p| {
            json!({
                "provider": p.provider,
                "package": p.package,
                "version": p.version,
                "binary": p.binary(&prefix),
                "installed_now": missing.contains(p),
            })
        })
        .collect();
    if a.json {
        outln!("{}", serde_json::to_string(&rows)?);
    } else {
        for p in &pins {
            outln!("{}={}", p.provider, p.binary(&prefix).display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Installs `missing` into the cache `prefix` with npm: says the commands, checks this
/// machine's Node.js against what the pinned CLIs ask for, then runs npm under a
/// spinner (on a terminal; else each line of npm's as it comes) and prints npm's
/// warnings whole after it.
pub(super) async fn install_missing(missing: &[Pin], prefix: &Path) -> anyhow::Result<()> {
    let path = std::env::var("PATH").unwrap_or_default();
    let npm = npm::find_npm(&path)?;
    let specs: Vec<String> = missing.iter().map(Pin::spec).collect();
    for omit in [false, true] {
        let group: Vec<String> = missing
            .iter()
            .filter(|p| p.omit_optional == omit)
            .map(Pin::spec)
            .collect();
        if group.is_empty() {
            continue;
        }
        let p = if omit {
            crate::cache::slim_prefix(prefix)
        } else {
            prefix.to_path_buf()
        };
        eprintln!(
            "aicli install: npm install --prefix {}{} {}",
            p.display(),
            if omit { " --omit=optional" } else { "" },
            group.join(" ")
        );
    }
    let env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    check_node(&npm, missing, &env, &path).await;
    eprintln!(
        "aicli install: the three CLIs take about 1 GB and under a minute on a first install; the ACP wrappers 83 MB"
    );
    let started = Instant::now();
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = ProgressBar::new_spinner();
        b.set_style(
            ProgressStyle::with_template("  {spinner} npm {elapsed:>4} {wide_msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        b.enable_steady_tick(Duration::from_millis(120));
        b
    });
    // Under the spinner npm's lines go by one at a time, cut to the terminal's width:
    // its warnings (EBADENGINE, skipped install scripts) are kept and printed whole.
    let mut warnings: Vec<String> = Vec::new();
    let result = npm::npm_install(&npm, prefix, missing, &env, |line| match &bar {
        Some(b) => {
            if is_warning(line) {
                warnings.push(line.to_owned());
            }
            b.set_message(line.trim().to_owned());
        }
        None => eprintln!("  npm: {line}"),
    })
    .await;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if !warnings.is_empty() {
        eprintln!("aicli install: npm warned:");
        for w in &warnings {
            eprintln!("  {w}");
        }
    }
    result?;
    eprintln!(
        "aicli install: installed {} in {:.1}s",
        specs.join(", "),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Whether npm's `line` is one of its warnings (`npm warn …`, `npm WARN …`).
fn is_warning(line: &str) -> bool {
    line.trim_start()
        .get(..8)
        .is_some_and(|p| p.eq_ignore_ascii_case("npm warn"))
}

/// Says which Node.js this machine has and what the pinned CLIs' packages ask for
/// (`engines.node`, from npm), with a warning for each that this Node.js does not meet.
async fn check_node(
    npm: &Path,
    missing: &[Pin],
    env: &std::collections::BTreeMap<String, String>,
    path: &str,
) {
    let needs = npm::node_needs(npm, missing, env).await;
    let Some((node, version)) = npm::node_on(path, env).await else {
        eprintln!(
            "aicli install: warning: no node on PATH: the pinned CLIs run on Node.js (npm came without it?)"
        );
        return;
    };
    let said: Vec<String> = needs
        .iter()
        .map(|n| match &n.range {
            Ok(Some(r)) => format!("{} {} node {r}", n.pin.provider, n.pin.version),
            Ok(None) => format!("{} {} any node", n.pin.provider, n.pin.version),
            Err(_) => format!("{} {} unknown", n.pin.provider, n.pin.version),
        })
        .collect();
    eprintln!(
        "aicli install: Node.js {version} ({}); the pinned CLIs need: {}",
        node.display(),
        said.join(", ")
    );
    for n in &needs {
        match &n.range {
            Ok(Some(r)) if npm::satisfies(&version, r) == Some(false) => eprintln!(
                "aicli install: warning: {} {} ({}) needs Node.js {r}, and this machine's is {version}: npm warns EBADENGINE and installs it anyway, but it may not run. Install a Node.js that fits (https://nodejs.org) and run `aicli install` again",
                n.pin.provider, n.pin.version, n.pin.package
            ),
            Ok(_) => {}
            Err(e) => eprintln!(
                "aicli install: note: cannot ask npm which Node.js {} needs: {e}",
                n.pin.spec()
            ),
        }
    }
}
