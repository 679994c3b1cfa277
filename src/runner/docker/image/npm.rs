//! The CLI's package in aicli's npm cache: its pinned version, its executable, and the
//! packages it needs.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use super::DockerError;

/// The version of `package` in the npm prefix `npm_dir` (which must be `version`, the
/// pin, when there is one) and the path of its executable `binary` inside the package;
/// `provider` names who pins it, for the error's advice.
pub(super) fn pinned_package(
    npm_dir: &Path,
    package: &str,
    version: Option<&str>,
    binary: &str,
    provider: &str,
) -> Result<(String, String), DockerError> {
    let pkg_dir = npm_dir.join("node_modules").join(package);
    let pkg = read_package(&pkg_dir)?;
    let have = pkg.get("version").and_then(Value::as_str).unwrap_or("");
    if let Some(want) = version
        && have != want
    {
        return Err(DockerError::Work(format!(
            "{package} in {} is version '{have}', the pin is {want}: install the pinned CLI first (`aicli install {provider}`)",
            npm_dir.display(),
        )));
    }
    let bin_rel = bin_entry(&pkg, binary).ok_or_else(|| {
        DockerError::Work(format!(
            "{package} has no executable '{binary}' in its package.json"
        ))
    })?;
    Ok((have.to_owned(), bin_rel))
}

pub(super) fn read_package(dir: &Path) -> Result<Value, DockerError> {
    let file = dir.join("package.json");
    let text = std::fs::read_to_string(&file).map_err(|e| {
        DockerError::Work(format!(
            "{} is not in aicli's npm cache ({e}); install the pinned CLIs first (`aicli install PROVIDER`)",
            file.display()
        ))
    })?;
    serde_json::from_str(&text)
        .map_err(|e| DockerError::Work(format!("{} is not valid JSON: {e}", file.display())))
}

/// The package's executable `name` (its `bin` entry), relative to the package.
pub(super) fn bin_entry(pkg: &Value, name: &str) -> Option<String> {
    match pkg.get("bin")? {
        Value::String(s) => Some(s.clone()),
        Value::Object(m) => m.get(name).and_then(Value::as_str).map(str::to_owned),
        _ => None,
    }
    .map(|s| s.trim_start_matches("./").to_owned())
}

/// `package` and every package it needs that is installed in `modules` (dependencies
/// and the optional ones present: a CLI's native binary for this platform).
pub(super) fn closure(modules: &Path, package: &str) -> Result<Vec<String>, DockerError> {
    let mut out = BTreeSet::new();
    let mut todo = vec![package.to_owned()];
    while let Some(p) = todo.pop() {
        if !out.insert(p.clone()) {
            continue;
        }
        let pkg = read_package(&modules.join(&p))?;
        for key in ["dependencies", "optionalDependencies"] {
            if let Some(Value::Object(deps)) = pkg.get(key) {
                for name in deps.keys() {
                    let present = modules.join(name).join("package.json").is_file();
                    if present && !out.contains(name) {
                        todo.push(name.clone());
                    } else if !present && key == "dependencies" {
                        return Err(DockerError::Work(format!(
                            "{p} needs {name}, which is not in {}",
                            modules.display()
                        )));
                    }
                }
            }
        }
    }
    Ok(out.into_iter().collect())
}
