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
