//! `getWorkspaceFiles`: list or read files under a task's worktree without ever leaving it.
//!
//! The rules, in the order they apply:
//!
//! 1. The requested path is checked as text: absolute paths, `..` components and NUL
//!    bytes are refused before the file system is touched.
//! 2. The workspace root and the requested path are canonicalized (symlinks resolved);
//!    a path that resolves outside the root is refused. A symlink inside the workspace
//!    that points elsewhere inside it is fine.
//! 3. The canonical path is then opened one component at a time from an open file
//!    descriptor of the root, with `O_NOFOLLOW` on every component: a symlink swapped in
//!    after step 2 (time of check vs. time of use) fails the open instead of being
//!    followed. Every file that is read is re-checked through `/proc/self/fd` before its
//!    bytes are used.
//! 4. Directories are walked through their descriptors (`openat`/`fstatat`, never by
//!    path), and symlinks met while walking are listed, never followed.
//!
//! Limits: at most [`MAX_ENTRIES`] entries per answer (the answer says when it was
//! truncated); a file larger than `max_bytes` is listed with its size but not read; all
//! file contents of one answer together stay under [`READ_BUDGET`] bytes.
//!
//! | module | owns |
//! |---|---|
//! | this one | the request and the answer, the lexical check, [`get_files`] |
//! | `root` | the open, canonical root: resolve, open beneath it, re-check (rules 2 and 3) |
//! | `walk` | walking directories through their descriptors, reading files (rule 4, the limits) |
//! | `error` | [`FilesError`] |

mod error;
mod root;
mod walk;

use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use globset::GlobBuilder;
use serde::Serialize;

pub(crate) use error::FilesError;
use root::Root;
use walk::Walk;

/// Most entries one answer lists.
pub const MAX_ENTRIES: usize = 1000;
/// Most bytes of file contents one answer carries, all files together.
pub const READ_BUDGET: u64 = 16 * 1024 * 1024;

/// What the agent asked for (the tool's arguments, validated by the caller).
#[derive(Debug, Clone)]
pub(crate) struct FilesRequest {
    /// Directory or file, relative to the workspace.
    pub path: String,
    /// Glob over paths relative to `path`.
    pub pattern: String,
    /// Return contents too.
    pub read: bool,
    /// Largest file whose contents are returned.
    pub max_bytes: u64,
}

/// The answer: entries matched, possibly with contents.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FilesListing {
    /// The requested path.
    pub path: String,
    /// The pattern used.
    pub pattern: String,
    /// Matched entries, in walk order (sorted by name within each directory).
    pub entries: Vec<FileEntry>,
    /// Whether more entries matched than [`MAX_ENTRIES`].
    pub truncated: bool,
    /// A sentence for the agent when something was left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One listed entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct FileEntry {
    /// Path relative to the workspace root.
    pub path: String,
    /// `file`, `dir`, `symlink` or `other`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Size in bytes (of the link itself for a symlink).
    pub size: u64,
    /// The contents, when asked for and readable as UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Why the contents were not returned although asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// Lists or reads what `req` asks for under `workspace`.
pub(crate) fn get_files(workspace: &Path, req: &FilesRequest) -> Result<FilesListing, FilesError> {
    let rel = check_relative(&req.path)?;
    let matcher = GlobBuilder::new(&req.pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map_err(|source| FilesError::BadGlob {
            pattern: req.pattern.clone(),
            source,
        })?
        .compile_matcher();
    let root = Root::open(workspace)?;
    let canon_rel = root.resolve(&rel, &req.path)?;
    let fd = root.open_beneath(&canon_rel, &req.path)?;
    let file = File::from(fd);
    let meta = file.metadata().map_err(|source| FilesError::Io {
        path: display(&canon_rel),
        source,
    })?;
    let recurse = req.pattern.contains('/') || req.pattern.contains("**");
    let mut out = Walk::new(&root, &matcher, recurse, req.read, req.max_bytes);
    if meta.is_file() {
        // A file named directly is returned whatever the pattern says.
        out.push_file(file, &canon_rel, meta.len());
    } else if meta.is_dir() {
        out.walk_dir(OwnedFd::from(file), &canon_rel, Path::new(""), 0)?;
    } else {
        return Err(FilesError::NotFileOrDir {
            path: req.path.clone(),
        });
    }
    let mut notes = Vec::new();
    if out.truncated {
        notes.push(format!(
            "listing truncated at {MAX_ENTRIES} entries: narrow `path` or `pattern`"
        ));
    }
    if out.budget_hit {
        notes.push(format!(
            "contents stopped after {READ_BUDGET} bytes in all: read the remaining files in another call"
        ));
    }
    Ok(FilesListing {
        path: req.path.clone(),
        pattern: req.pattern.clone(),
        entries: out.entries,
        truncated: out.truncated,
        note: (!notes.is_empty()).then(|| notes.join("; ")),
    })
}

/// The lexical check: a relative path of normal components (`.` allowed).
pub(crate) fn check_relative(path: &str) -> Result<PathBuf, FilesError> {
    if path.as_bytes().contains(&0) {
        return Err(FilesError::Nul { path: path.into() });
    }
    let p = Path::new(path);
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(s) => out.push(s),
            Component::CurDir => {}
            Component::ParentDir => return Err(FilesError::ParentDir { path: path.into() }),
            Component::RootDir | Component::Prefix(_) => {
                return Err(FilesError::Absolute { path: path.into() });
            }
        }
    }
    Ok(out)
}

/// A path relative to the root as shown to the agent (`.` for the root itself).
pub(super) fn display(p: &Path) -> String {
    let s = p.to_string_lossy();
    if s.is_empty() {
        ".".into()
    } else {
        s.into_owned()
    }
}

#[cfg(test)]
mod tests;
