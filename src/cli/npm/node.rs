//! Which Node.js this machine has, and which the pinned CLIs need: their packages'
//! `engines.node`, asked of npm (`npm view PACKAGE@VERSION engines.node`) before
//! installing, so `aicli install` can say when they do not fit (npm itself only warns
//! `EBADENGINE` in the middle of its output, and installs anyway).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use super::Pin;

/// How long one `npm view` or `node --version` may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(60);

/// The `node` on `path` (a `PATH` value) and its `--version` (`v20.20.2`), or `None`
/// when there is none or it does not answer.
pub async fn node_on(path: &str, env: &BTreeMap<String, String>) -> Option<(PathBuf, String)> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let node = which::which_in("node", Some(path), cwd).ok()?;
    let out = ask(&node, &["--version"], env).await.ok()?;
    let version = out.trim().to_owned();
    (!version.is_empty()).then_some((node, version))
}

/// What one pinned CLI's package says it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeNeed {
    /// The pin.
    pub pin: Pin,
    /// Its `engines.node` (`>=22.0.0`); `Ok(None)` when the package names none, `Err`
    /// when npm could not say (offline, say).
    pub range: Result<Option<String>, String>,
}

/// Each pin's `engines.node`, asked of `npm` (all at once).
pub async fn node_needs(npm: &Path, pins: &[Pin], env: &BTreeMap<String, String>) -> Vec<NodeNeed> {
    let asks = pins.iter().map(|pin| async move {
        let spec = pin.spec();
        let range = ask(npm, &["view", &spec, "engines.node"], env)
            .await
            .map(|out| {
                let r = out.trim().trim_matches('"').to_owned();
                (!r.is_empty()).then_some(r)
            });
        NodeNeed {
            pin: pin.clone(),
            range,
        }
    });
    futures_util::future::join_all(asks).await
}

/// `program ARGS`'s stdout, or why not.
async fn ask(
    program: &Path,
    args: &[&str],
    env: &BTreeMap<String, String>,
) -> Result<String, String> {
    let run = tokio::process::Command::new(program)
        .args(args)
        .env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let shown = format!("{} {}", program.display(), args.join(" "));
    let out = tokio::time::timeout(ASK_TIMEOUT, run)
        .await
        .map_err(|_| format!("{shown} did not answer within {}s", ASK_TIMEOUT.as_secs()))?
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err
            .lines()
            .rfind(|l| !l.trim().is_empty())
            .unwrap_or_default();
        return Err(format!("{shown} failed ({}): {}", out.status, last.trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether `version` (`v20.20.2`, `20.20.2`) is in the npm range `range` (`>=22.0.0`,
/// `^18 || >=20`, `20.x`, `>=16 <23`); `None` for what this reading does not
/// understand (a hyphen range, a pre-release, a version that is not one).
pub fn satisfies(version: &str, range: &str) -> Option<bool> {
    let v = parse_version(version.trim().trim_start_matches('v'))?;
    if v.1.is_none() || v.2.is_none() {
        return None;
    }
    let v = (v.0, v.1.unwrap_or(0), v.2.unwrap_or(0));
    let mut unknown = false;
    for alternative in range.split("||") {
        if alternative.contains(" - ") {
            unknown = true;
            continue;
        }
        let mut all = Some(true);
        for comparator in alternative.split_whitespace() {
            all = match (all, comparator_holds(v, comparator)) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (Some(true), Some(true)) => Some(true),
                (None, _) | (_, None) => None,
            };
        }
        match all {
            Some(true) => return Some(true),
            Some(false) => {}
            None => unknown = true,
        }
    }
    if unknown { None } else { Some(false) }
}

type Version = (u64, u64, u64);

/// `22`, `22.1`, `22.1.3`, `22.x`: the numbers given (`x` and `*` are not given).
fn parse_version(s: &str) -> Option<(u64, Option<u64>, Option<u64>)> {
    let mut parts = s.split('.');
    let mut next = |required: bool| -> Option<Option<u64>> {
        match parts.next() {
            None if !required => Some(None),
            Some("x" | "X" | "*") if !required => Some(None),
            Some(p) => p.parse().ok().map(Some),
            None => None,
        }
    };
    let major = next(true)??;
    let minor = next(false)?;
    let patch = if minor.is_some() { next(false)? } else { None };
    if parts.next().is_some() {
        return None;
    }
    Some((major, minor, patch))
}

/// Whether `v` meets one comparator (`>=22.0.0`, `<23`, `^20.3`, `~20.3`, `20.x`).
fn comparator_holds(v: Version, c: &str) -> Option<bool> {
    if matches!(c, "*" | "x" | "X" | "") {
        return Some(true);
    }
    let (op, rest) = [">=", "<=", ">", "<", "=", "^", "~"]
        .iter()
        .find_map(|op| c.strip_prefix(op).map(|r| (*op, r)))
        .unwrap_or(("", c));
    let (major, minor, patch) = parse_version(rest.trim_start_matches('v'))?;
    let low = (major, minor.unwrap_or(0), patch.unwrap_or(0));
    // The first version past a partial one: `22` -> 23.0.0, `22.1` -> 22.2.0.
    let past = match (minor, patch) {
        (None, _) => (major + 1, 0, 0),
        (Some(m), None) => (major, m + 1, 0),
        (Some(m), Some(p)) => (major, m, p + 1),
    };
    Some(match op {
        ">=" => v >= low,
        ">" => v >= past,
        "<" => v < low,
        "<=" => v < past,
        "^" if major > 0 || minor.is_none() => v >= low && v < (major + 1, 0, 0),
        "^" => v >= low && v < (0, minor.unwrap_or(0) + 1, 0),
        "~" if minor.is_none() => v >= low && v < (major + 1, 0, 0),
        "~" => v >= low && v < (major, minor.unwrap_or(0) + 1, 0),
        _ => v >= low && v < past,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npm_ranges_of_the_pinned_clis_are_read() {
        assert_eq!(satisfies("v20.20.2", ">=22.0.0"), Some(false));
        assert_eq!(satisfies("v22.3.0", ">=22.0.0"), Some(true));
        assert_eq!(satisfies("v20.20.2", ">=20"), Some(true));
        assert_eq!(satisfies("v20.20.2", ">=16"), Some(true));
        assert_eq!(satisfies("v18.1.0", "^18 || >=20"), Some(true));
        assert_eq!(satisfies("v19.1.0", "^18 || >=20"), Some(false));
        assert_eq!(satisfies("v22.1.0", ">=16 <22"), Some(false));
        assert_eq!(satisfies("v21.9.9", ">=16 <22"), Some(true));
        assert_eq!(satisfies("v20.1.0", "20.x"), Some(true));
        assert_eq!(satisfies("v21.0.0", "~20.1"), Some(false));
        assert_eq!(satisfies("v20.1.5", "~20.1"), Some(true));
        assert_eq!(satisfies("v22.0.0", ">21"), Some(true));
        assert_eq!(satisfies("v21.5.0", ">21"), Some(false));
        assert_eq!(satisfies("v20.0.0", "<=20"), Some(true));
        assert_eq!(satisfies("v20.0.0", "18 - 22"), None);
        assert_eq!(satisfies("nonsense", ">=20"), None);
    }
}
