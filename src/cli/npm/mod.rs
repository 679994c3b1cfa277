//! What is in aicli's cache of pinned CLIs (`crate::cache` says where it is), and
//! installing the versions `ai_cli_providers.json` pins into it with npm (`aicli install`).
//!
//! Before installing, [`node_on`] and [`node_needs`] say which Node.js this machine has
//! and which the pinned CLIs' packages ask for (`node.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use aicli_providers::{AiCliConfig, BinaryLocation, ProviderConfig};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::cache::{cli_bin_dirs, slim_prefix};

mod node;

pub use node::{node_needs, node_on, satisfies};

/// Why an install did not happen.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// npm is not on PATH.
    #[error(
        "npm is not on PATH: `aicli install` runs npm, which comes with Node.js 22 or later \
         (Debian/Ubuntu: `apt-get install nodejs npm`; or https://nodejs.org)"
    )]
    NoNpm,
    /// A name given is not a provider of the config.
    #[error("unknown provider {name} (known: {known})")]
    UnknownProvider {
        /// The name given.
        name: String,
        /// The config's providers.
        known: String,
    },
    /// The provider's config pins no version (so there is nothing to install).
    #[error(
        "provider {provider} pins no version in its config (providers.{provider}.version), so aicli does not know what to install"
    )]
    NoVersion {
        /// The provider.
        provider: String,
    },
    /// npm ran and failed.
    #[error("npm install failed (exit {code}) in {prefix}:\n{tail}")]
    Npm {
        /// npm's exit code (-1 for a signal).
        code: i32,
        /// The prefix it installed into.
        prefix: PathBuf,
        /// The last lines npm printed.
        tail: String,
    },
    /// npm said it installed, but the package is not at its pinned version.
    #[error("after npm install, {package} is {found} in {prefix}, not the pinned {pinned}")]
    Mismatch {
        /// The package.
        package: String,
        /// What is there.
        found: String,
        /// The pin.
        pinned: String,
        /// The prefix.
        prefix: PathBuf,
    },
    /// File system trouble.
    #[error("{path}: {source}")]
    Io {
        /// Where.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Where a provider's binary was found, for `aicli providers` and `aicli doctor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BinarySource {
    /// The config's `binary_path`.
    Config,
    /// On `PATH`.
    Path,
    /// In aicli's cache (`aicli install`).
    Cache,
    /// Run through npx (the config's `npx_fallback`).
    Npx,
}

impl BinarySource {
    /// Where `location` came from, for a provider with config `config`.
    pub fn of(config: &ProviderConfig, location: &BinaryLocation) -> BinarySource {
        match location {
            BinaryLocation::Npx { .. } => BinarySource::Npx,
            BinaryLocation::Path(_) if config.binary_path.is_some() => BinarySource::Config,
            BinaryLocation::Path(p) if cli_bin_dirs().iter().any(|d| p.starts_with(d)) => {
                BinarySource::Cache
            }
            BinaryLocation::Path(_) => BinarySource::Path,
        }
    }

    /// `config`, `PATH`, `cache`, `npx`.
    pub fn as_str(self) -> &'static str {
        match self {
            BinarySource::Config => "config",
            BinarySource::Path => "PATH",
            BinarySource::Cache => "cache",
            BinarySource::Npx => "npx",
        }
    }
}

/// One CLI to install: a provider's npm package at its pinned version.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Pin {
    /// The provider.
    pub provider: String,
    /// The npm package.
    pub package: String,
    /// The pinned version.
    pub version: String,
    /// The executable the package provides.
    pub binary_name: String,
    /// Installed with `npm install --omit=optional`, into the [`slim_prefix`].
    pub omit_optional: bool,
}

impl Pin {
    /// `package@version`.
    pub fn spec(&self) -> String {
        format!("{}@{}", self.package, self.version)
    }

    /// The npm prefix of this pin in the cache `cache` (a [`crate::cache::cli_cache_dir`]).
    pub fn prefix(&self, cache: &Path) -> PathBuf {
        if self.omit_optional {
            slim_prefix(cache)
        } else {
            cache.to_path_buf()
        }
    }

    /// The executable in the cache `cache`.
    pub fn binary(&self, cache: &Path) -> PathBuf {
        self.prefix(cache)
            .join("node_modules/.bin")
            .join(&self.binary_name)
    }
}

/// The pins of `names` (every provider with a package and a pinned version when empty),
/// each package once.
pub fn pins(config: &AiCliConfig, names: &[String]) -> Result<Vec<Pin>, InstallError> {
    let pin = |name: &str, p: &ProviderConfig| -> Result<Pin, InstallError> {
        let version = p.version.clone().ok_or_else(|| InstallError::NoVersion {
            provider: name.to_owned(),
        })?;
        Ok(Pin {
            provider: name.to_owned(),
            package: p.package.clone(),
            version,
            binary_name: p.binary_name.clone(),
            omit_optional: p.npm_omit_optional,
        })
    };
    let mut out: Vec<Pin> = Vec::new();
    if names.is_empty() {
        for (name, p) in &config.providers {
            if p.version.is_some() && !p.package.is_empty() {
                out.push(pin(name, p)?);
            }
        }
    } else {
        for name in names {
            let p = config
                .providers
                .get(name)
                .ok_or_else(|| InstallError::UnknownProvider {
                    name: name.clone(),
                    known: config
                        .providers
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", "),
                })?;
            out.push(pin(name, p)?);
        }
    }
    // An ACP wrapper runs another pinned CLI (claude-agent-acp runs `claude`, codex-acp
    // `codex`): the provider whose binary that is comes along.
    let mut needed = Vec::new();
    for wrapper in &out {
        let executables = config
            .providers
            .get(&wrapper.provider)
            .and_then(|p| p.acp.as_ref())
            .map(|a| a.env_executables.values().cloned().collect::<Vec<_>>())
            .unwrap_or_default();
        for exe in executables {
            if let Some((name, p)) = config
                .providers
                .iter()
                .find(|(_, p)| p.binary_name == exe && p.version.is_some() && !p.package.is_empty())
            {
                needed.push(pin(name, p)?);
            }
        }
    }
    out.extend(needed);
    let mut seen = std::collections::BTreeSet::new();
    out.retain(|p| seen.insert(p.spec()));
    Ok(out)
}

/// The version of `package` installed under the npm prefix `prefix`, if any.
pub fn installed_version(prefix: &Path, package: &str) -> Option<String> {
    let manifest = prefix
        .join("node_modules")
        .join(package)
        .join("package.json");
    let v: serde_json::Value = crate::util::read_json(&manifest).ok()?;
    v.get("version")?.as_str().map(str::to_owned)
}

/// Whether `pin` is installed in the cache `cache` at its version, with its executable.
pub fn is_installed(cache: &Path, pin: &Pin) -> bool {
    installed_version(&pin.prefix(cache), &pin.package).as_deref() == Some(pin.version.as_str())
        && crate::proc::spawn::is_executable(&pin.binary(cache))
}

/// npm on `path` (a `PATH` value), or [`InstallError::NoNpm`].
pub fn find_npm(path: &str) -> Result<PathBuf, InstallError> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    which::which_in("npm", Some(path), cwd).map_err(|_| InstallError::NoNpm)
}

/// Installs `pins` into the cache `cache` with `npm`: one `npm install` per prefix (the
/// cache itself, and [`slim_prefix`] with `--omit=optional` for the pins that ask for
/// it), then checks each package's version. `progress` gets each line npm prints.
/// Install scripts run (Claude's postinstall links its native binary; node-pty builds
/// for Gemini).
pub async fn npm_install(
    npm: &Path,
    cache: &Path,
    pins: &[Pin],
    env: &BTreeMap<String, String>,
    mut progress: impl FnMut(&str),
) -> Result<(), InstallError> {
    for omit in [false, true] {
        let group: Vec<Pin> = pins
            .iter()
            .filter(|p| p.omit_optional == omit)
            .cloned()
            .collect();
        if group.is_empty() {
            continue;
        }
        let prefix = if omit {
            slim_prefix(cache)
        } else {
            cache.to_path_buf()
        };
        npm_install_into(npm, &prefix, &group, omit, env, &mut progress).await?;
        for pin in &group {
            let found = installed_version(&prefix, &pin.package);
            if found.as_deref() != Some(pin.version.as_str()) || !is_installed(cache, pin) {
                return Err(InstallError::Mismatch {
                    package: pin.package.clone(),
                    found: found.unwrap_or_else(|| "missing".to_owned()),
                    pinned: pin.version.clone(),
                    prefix: prefix.clone(),
                });
            }
        }
    }
    Ok(())
}

/// One `npm install` of `pins` into `prefix`.
async fn npm_install_into(
    npm: &Path,
    prefix: &Path,
    pins: &[Pin],
    omit_optional: bool,
    env: &BTreeMap<String, String>,
    progress: &mut impl FnMut(&str),
) -> Result<(), InstallError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| InstallError::Io { path, source }
    };
    std::fs::create_dir_all(prefix).map_err(io(prefix))?;
    // A package.json of our own keeps npm from walking up to some other project.
    let manifest = prefix.join("package.json");
    if !manifest.is_file() {
        std::fs::write(
            &manifest,
            "{\"name\":\"aicli-cli-cache\",\"private\":true}\n",
        )
        .map_err(io(&manifest))?;
    }
    let mut cmd = tokio::process::Command::new(npm);
    cmd.arg("install")
        .arg("--prefix")
        .arg(prefix)
        .args([
            "--save-exact",
            "--no-audit",
            "--no-fund",
            "--progress=false",
        ])
        .args(omit_optional.then_some("--omit=optional"))
        .args(pins.iter().map(Pin::spec))
        .env_clear()
        .envs(env)
        .current_dir(prefix)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(io(npm))?;
    let mut tail: std::collections::VecDeque<String> = std::collections::VecDeque::new();
    let mut out = child.stdout.take().map(|s| BufReader::new(s).lines());
    let mut err = child.stderr.take().map(|s| BufReader::new(s).lines());
    loop {
        let line = tokio::select! {
            l = async { out.as_mut()?.next_line().await.ok().flatten() }, if out.is_some() => {
                if l.is_none() { out = None; }
                l
            }
            l = async { err.as_mut()?.next_line().await.ok().flatten() }, if err.is_some() => {
                if l.is_none() { err = None; }
                l
            }
            else => break,
        };
        if let Some(l) = line {
            progress(&l);
            tail.push_back(l);
            if tail.len() > 20 {
                tail.pop_front();
            }
        }
    }
    let status = child.wait().await.map_err(io(npm))?;
    if !status.success() {
        return Err(InstallError::Npm {
            code: status.code().unwrap_or(-1),
            prefix: prefix.to_owned(),
            tail: Vec::from(tail).join("\n"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_come_from_the_config_once_per_package() {
        let mut c = AiCliConfig::builtin().expect("config");
        let mut alias = c.providers["claude"].clone();
        alias.default_model = Some("sonnet".into());
        c.providers.insert("claude-sonnet".into(), alias);
        let all = pins(&c, &[]).expect("pins");
        let specs: Vec<String> = all.iter().map(Pin::spec).collect();
        // gemini-acp is gemini's package.
        let mut want: Vec<String> = ["claude", "codex", "gemini", "claude-acp", "codex-acp"]
            .iter()
            .map(|n| {
                let p = &c.providers[*n];
                format!("{}@{}", p.package, p.version.clone().unwrap_or_default())
            })
            .collect();
        want.sort();
        let mut sorted = specs.clone();
        sorted.sort();
        assert_eq!(sorted, want, "the alias shares claude's package");
        // An ACP wrapper brings the CLI it runs.
        let acp: Vec<String> = pins(&c, &["claude-acp".into()])
            .expect("pins")
            .iter()
            .map(|p| p.package.clone())
            .collect();
        assert_eq!(
            acp,
            [
                "@agentclientprotocol/claude-agent-acp",
                "@anthropic-ai/claude-code"
            ]
        );
        let one = pins(&c, &["gemini".into()]).expect("pins");
        assert_eq!(one[0].package, "@google/gemini-cli");
        let e = pins(&c, &["nope".into()]).expect_err("unknown");
        assert!(e.to_string().contains("unknown provider nope"), "{e}");
    }
}
