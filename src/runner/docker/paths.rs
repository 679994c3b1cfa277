//! Paths of this machine as a container sees them.
//!
//! A provider builds a run's command with this machine's paths (the worktree, the run's
//! private directory, the task's home), exactly as for a local run. The container gets
//! those directories at fixed places ([`WORKSPACE`], [`PRIVATE`], [`HOME`]), and a
//! [`PathMap`] rewrites the command's working directory, arguments and environment
//! values, and the targets of its links, from one to the other. A path is only rewritten
//! at a whole-name boundary: `/repo/wt/t1` never matches inside `/repo/wt/t10`.

use std::path::{Path, PathBuf};

/// Where the task's worktree is in a container.
pub const WORKSPACE: &str = "/workspace";
/// Where the run's private directory (MCP config, prompt files, per-run homes) is.
pub const PRIVATE: &str = "/aicli";
/// The task's home in a container (`HOME`): the CLI's sessions and login copies.
pub const HOME: &str = "/home/aicli";

/// Pairs of (this machine's directory, the container's), longest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathMap {
    entries: Vec<(String, String)>,
}

impl PathMap {
    /// A map of `pairs` (host directory, container directory).
    pub fn new<'a>(pairs: impl IntoIterator<Item = (&'a Path, &'a str)>) -> PathMap {
        let mut entries: Vec<(String, String)> = pairs
            .into_iter()
            .map(|(h, c)| {
                let h = h.display().to_string();
                let h = h.trim_end_matches('/').to_owned();
                (h, c.trim_end_matches('/').to_owned())
            })
            .filter(|(h, _)| !h.is_empty())
            .collect();
        entries.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
        PathMap { entries }
    }

    /// `path` in the container, when it lies under one of the mapped directories.
    pub fn container_path(&self, path: &Path) -> Option<PathBuf> {
        for (host, container) in &self.entries {
            if let Ok(rest) = path.strip_prefix(host) {
                return Some(if rest.as_os_str().is_empty() {
                    PathBuf::from(container)
                } else {
                    Path::new(container).join(rest)
                });
            }
        }
        None
    }

    /// `text` with every mapped directory (at a name boundary) rewritten.
    pub fn rewrite(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut i = 0;
        let bytes = text.as_bytes();
        'outer: while i < text.len() {
            if bytes[i] == b'/' && (i == 0 || !is_name_byte(bytes[i - 1])) {
                for (host, container) in &self.entries {
                    if text[i..].starts_with(host.as_str()) {
                        let end = i + host.len();
                        if end == text.len() || !is_name_byte(bytes[end]) {
                            out.push_str(container);
                            i = end;
                            continue 'outer;
                        }
                    }
                }
            }
            // Copy one whole character.
            let ch_len = text[i..].chars().next().map_or(1, char::len_utf8);
            out.push_str(&text[i..i + ch_len]);
            i += ch_len;
        }
        out
    }
}

/// Bytes that continue a file or directory name (so a match ending before one is not a
/// whole name). `/` is not one: `/repo` matches `/repo/x`.
fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'+' | b'@' | b'~') || b >= 0x80
}

/// The repository's common git directory, when `workspace` is a linked worktree (its
/// `.git` is a file naming a directory under the common one).
pub fn common_git_dir(workspace: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(workspace.join(".git")).ok()?;
    let gitdir = PathBuf::from(text.strip_prefix("gitdir:")?.trim());
    let gitdir = if gitdir.is_absolute() {
        gitdir
    } else {
        workspace.join(gitdir)
    };
    let common = std::fs::read_to_string(gitdir.join("commondir"))
        .map(|c| {
            let c = PathBuf::from(c.trim());
            if c.is_absolute() { c } else { gitdir.join(c) }
        })
        .unwrap_or(gitdir);
    std::fs::canonicalize(common).ok()
}

/// `uid:gid` of `path`'s owner.
pub fn owner_of(path: &Path) -> Option<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.uid(), m.gid()))
}

/// Parses `uid:gid` (or a bare uid, group the same).
pub fn parse_user(u: &str) -> Option<(u32, u32)> {
    match u.split_once(':') {
        Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
        None => {
            let uid = if u == "root" { 0 } else { u.parse().ok()? };
            Some((uid, uid))
        }
    }
}

/// The repository's git directory is bound at its own path. Under `/root` (aicli run as
/// root) the image's `/root` (0700) would keep the container's user from it, and a tmpfs
/// there keeps that mode (the engine copies it): when one of `dirs` (this machine's,
/// the container's) goes under `/root`, an empty directory of the run's (in
/// `private_dir`), 0755, to bind at `/root` and hold the bind instead.
pub fn root_stub(
    private_dir: &Path,
    dirs: &[(PathBuf, String)],
) -> std::io::Result<Option<(PathBuf, String)>> {
    use std::os::unix::fs::PermissionsExt;
    if !dirs.iter().any(|(_, c)| c.starts_with("/root/")) {
        return Ok(None);
    }
    let stub = private_dir.join(".root");
    std::fs::create_dir_all(&stub)
        .and_then(|()| std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)))
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot make {}: {e}", stub.display())))?;
    Ok(Some((stub, "/root".to_owned())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map() -> PathMap {
        PathMap::new([
            (Path::new("/r/.aicli/worktrees/b/t1"), WORKSPACE),
            (Path::new("/r/.aicli/runs/b/private/t1-1"), PRIVATE),
            (Path::new("/r/.aicli/runs/b/private/t1-home/"), HOME),
        ])
    }

    #[test]
    fn paths_map_at_name_boundaries() {
        let m = map();
        assert_eq!(
            m.container_path(Path::new("/r/.aicli/worktrees/b/t1/src")),
            Some(PathBuf::from("/workspace/src"))
        );
        assert_eq!(
            m.container_path(Path::new("/r/.aicli/worktrees/b/t1")),
            Some(PathBuf::from("/workspace"))
        );
        assert_eq!(
            m.container_path(Path::new("/r/.aicli/worktrees/b/t10")),
            None
        );
        assert_eq!(
            m.container_path(Path::new("/r/.aicli/runs/b/private/t1-home/.claude")),
            Some(PathBuf::from("/home/aicli/.claude"))
        );
    }

    #[test]
    fn text_is_rewritten_only_at_whole_names() {
        let m = map();
        assert_eq!(
            m.rewrite("--mcp-config=/r/.aicli/runs/b/private/t1-1/mcp.json"),
            "--mcp-config=/aicli/mcp.json"
        );
        assert_eq!(
            m.rewrite("cd /r/.aicli/worktrees/b/t1 && ls /r/.aicli/worktrees/b/t10"),
            "cd /workspace && ls /r/.aicli/worktrees/b/t10"
        );
        assert_eq!(
            m.rewrite("x/r/.aicli/worktrees/b/t1 \"/r/.aicli/worktrees/b/t1\""),
            "x/r/.aicli/worktrees/b/t1 \"/workspace\""
        );
        assert_eq!(
            m.rewrite("héllo /r/.aicli/worktrees/b/t1é"),
            "héllo /r/.aicli/worktrees/b/t1é"
        );
        assert_eq!(m.rewrite(""), "");
    }
}
