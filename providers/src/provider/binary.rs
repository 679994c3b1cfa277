//! Where a CLI's executable is ([`BinaryLocation`]) and the default way to find it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::ProviderConfig;
use crate::error::ProviderError;

/// Where a CLI's executable is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum BinaryLocation {
    /// An executable file.
    Path(PathBuf),
    /// Run through `npx --yes <package>` (the configured fallback).
    Npx {
        /// The npx executable.
        npx: PathBuf,
        /// `package@version` to run.
        package: String,
    },
}

impl BinaryLocation {
    /// The program to execute and the arguments that come before the CLI's own.
    pub fn command_prefix(&self) -> (PathBuf, Vec<String>) {
        match self {
            BinaryLocation::Path(p) => (p.clone(), Vec::new()),
            BinaryLocation::Npx { npx, package } => (
                npx.clone(),
                vec!["--yes".to_owned(), package.clone(), "--".to_owned()],
            ),
        }
    }

    /// For display.
    pub fn describe(&self) -> String {
        match self {
            BinaryLocation::Path(p) => p.display().to_string(),
            BinaryLocation::Npx { npx, package } => {
                format!("{} --yes {package}", npx.display())
            }
        }
    }
}

/// The default binary discovery (see [`AiCliProvider::binary_path`]).
///
/// [`AiCliProvider::binary_path`]: super::AiCliProvider::binary_path
pub fn default_binary_path(
    name: &str,
    config: &ProviderConfig,
    search_path: Option<&str>,
) -> Result<BinaryLocation, ProviderError> {
    // The npm package at the pinned version: what npx runs and what to install.
    let package = match &config.version {
        Some(v) => format!("{}@{v}", config.package),
        None => config.package.clone(),
    };
    if let Some(p) = &config.binary_path {
        return if is_executable(p) {
            Ok(BinaryLocation::Path(p.clone()))
        } else {
            Err(ProviderError::BadBinaryPath {
                provider: name.to_owned(),
                path: p.clone(),
                package,
            })
        };
    }
    let path_var = search_path
        .map(str::to_owned)
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_default();
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    if let Ok(p) = which::which_in(&config.binary_name, Some(&path_var), &cwd) {
        return Ok(BinaryLocation::Path(p));
    }
    if config.npx_fallback
        && let Ok(npx) = which::which_in("npx", Some(&path_var), &cwd)
    {
        return Ok(BinaryLocation::Npx { npx, package });
    }
    Err(ProviderError::NotInstalled {
        binary: config.binary_name.clone(),
        package,
        looked_in: if config.npx_fallback {
            "PATH, and npx is not on PATH".to_owned()
        } else {
            "PATH".to_owned()
        },
    })
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}
