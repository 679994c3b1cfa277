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

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use globset::{GlobBuilder, GlobMatcher};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{Mode, fstatat};
use serde::Serialize;

/// Most entries one answer lists.
pub const MAX_ENTRIES: usize = 1000;
/// Most bytes of file contents one answer carries, all files together.
pub const READ_BUDGET: u64 = 16 * 1024 * 1024;
/// Deepest directory level a recursive pattern descends to.
const MAX_DEPTH: usize = 64;

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

/// Why a request was refused or failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FilesError {
    /// An absolute path.
    #[error("path {path:?} is absolute: give a path relative to the workspace root")]
    Absolute {
        /// The path as given.
        path: String,
    },
    /// A path with a `..` component.
    #[error("path {path:?} contains '..': paths must stay inside the workspace")]
    ParentDir {
        /// The path as given.
        path: String,
    },
    /// A path with a NUL byte.
    #[error("path {path:?} contains a NUL byte")]
    Nul {
        /// The path as given.
        path: String,
    },
    /// The path resolves (through symlinks) outside the workspace, or changed to do so
    /// while being opened.
    #[error("path {path:?} resolves outside the workspace")]
    Outside {
        /// The path as given.
        path: String,
    },
    /// The glob does not compile.
    #[error("bad glob pattern {pattern:?}: {source}")]
    BadGlob {
        /// The pattern as given.
        pattern: String,
        /// What globset said.
        #[source]
        source: globset::Error,
    },
    /// Nothing at the path.
    #[error("no such file or directory: {path:?}")]
    NotFound {
        /// The path as given.
        path: String,
    },
    /// The path is neither a regular file nor a directory.
    #[error("{path:?} is not a regular file or a directory")]
    NotFileOrDir {
        /// The path as given.
        path: String,
    },
    /// An I/O error on a path inside the workspace.
    #[error("cannot read {path:?}: {source}")]
    Io {
        /// The path, relative to the workspace.
        path: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The workspace root itself is unusable.
    #[error("the task's workspace {root} is not usable: {source}")]
    Workspace {
        /// The root as configured.
        root: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
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
    let mut out = Walk {
        root: &root,
        matcher: &matcher,
        recurse: req.pattern.contains('/') || req.pattern.contains("**"),
        read: req.read,
        max_bytes: req.max_bytes,
        budget: READ_BUDGET,
        entries: Vec::new(),
        truncated: false,
        budget_hit: false,
    };
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

/// An open, canonical workspace root.
pub(crate) struct Root {
    /// Canonical path of the root.
    path: PathBuf,
    /// An open descriptor of the root directory: every open starts from it.
    fd: OwnedFd,
}

impl Root {
    /// Canonicalizes and opens `workspace`.
    pub(crate) fn open(workspace: &Path) -> Result<Root, FilesError> {
        let ws_err = |source| FilesError::Workspace {
            root: workspace.to_path_buf(),
            source,
        };
        let path = std::fs::canonicalize(workspace).map_err(ws_err)?;
        let fd = nix::fcntl::open(
            &path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| ws_err(io::Error::from(e)))?;
        Ok(Root { path, fd })
    }

    /// Resolves `rel` through symlinks and returns it relative to the root, refusing
    /// anything that lands outside.
    pub(crate) fn resolve(&self, rel: &Path, shown: &str) -> Result<PathBuf, FilesError> {
        let canon = match std::fs::canonicalize(self.path.join(rel)) {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // A dangling symlink that points outside is still "outside", not "missing".
                if let Ok(target) = std::fs::read_link(self.path.join(rel)) {
                    let abs = self
                        .path
                        .join(rel)
                        .parent()
                        .map(|p| p.join(&target))
                        .unwrap_or(target);
                    if !lexically_inside(&abs, &self.path) {
                        return Err(FilesError::Outside { path: shown.into() });
                    }
                }
                return Err(FilesError::NotFound { path: shown.into() });
            }
            Err(source) => {
                return Err(FilesError::Io {
                    path: shown.into(),
                    source,
                });
            }
        };
        match canon.strip_prefix(&self.path) {
            Ok(r) => Ok(r.to_path_buf()),
            Err(_) => Err(FilesError::Outside { path: shown.into() }),
        }
    }

    /// Opens the canonical relative path `rel` one component at a time with
    /// `O_NOFOLLOW`, so that nothing swapped in since [`Root::resolve`] is followed.
    pub(crate) fn open_beneath(&self, rel: &Path, shown: &str) -> Result<OwnedFd, FilesError> {
        let mut cur = self.fd.try_clone().map_err(|source| FilesError::Io {
            path: shown.into(),
            source,
        })?;
        let comps: Vec<&OsStr> = rel
            .components()
            .filter_map(|c| match c {
                Component::Normal(s) => Some(s),
                _ => None,
            })
            .collect();
        for (i, comp) in comps.iter().enumerate() {
            let last = i + 1 == comps.len();
            let mut flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            if last {
                // Never block on a FIFO planted in the workspace.
                flags |= OFlag::O_NONBLOCK;
            } else {
                flags |= OFlag::O_DIRECTORY;
            }
            cur = match nix::fcntl::openat(&cur, *comp, flags, Mode::empty()) {
                Ok(fd) => fd,
                // A symlink where the canonical path had a directory or a file: it was
                // swapped in after the check.
                Err(Errno::ELOOP | Errno::ENOTDIR | Errno::EMLINK) => {
                    return Err(FilesError::Outside { path: shown.into() });
                }
                Err(Errno::ENOENT) => return Err(FilesError::NotFound { path: shown.into() }),
                Err(e) => {
                    return Err(FilesError::Io {
                        path: shown.into(),
                        source: e.into(),
                    });
                }
            };
        }
        self.verify(&cur, shown)?;
        Ok(cur)
    }

    /// Checks through `/proc/self/fd` that an open descriptor really is inside the root.
    pub(crate) fn verify(&self, fd: &impl AsRawFd, shown: &str) -> Result<(), FilesError> {
        let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let actual = std::fs::read_link(&link).map_err(|source| FilesError::Io {
            path: shown.into(),
            source,
        })?;
        if actual.starts_with(&self.path) && !actual.as_os_str().as_bytes().ends_with(b" (deleted)")
        {
            Ok(())
        } else {
            Err(FilesError::Outside { path: shown.into() })
        }
    }
}

/// Whether `path` (absolute, possibly with `..`) stays under `root` lexically.
fn lexically_inside(path: &Path, root: &Path) -> bool {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out.starts_with(root)
}

fn display(p: &Path) -> String {
    let s = p.to_string_lossy();
    if s.is_empty() {
        ".".into()
    } else {
        s.into_owned()
    }
}

/// The state of one listing.
struct Walk<'a> {
    root: &'a Root,
    matcher: &'a GlobMatcher,
    recurse: bool,
    read: bool,
    max_bytes: u64,
    budget: u64,
    entries: Vec<FileEntry>,
    truncated: bool,
    budget_hit: bool,
}

impl Walk<'_> {
    /// Lists the directory open as `dir`, at `ws_rel` from the root and `req_rel` from the
    /// requested path (what the pattern matches against).
    fn walk_dir(
        &mut self,
        dir: OwnedFd,
        ws_rel: &Path,
        req_rel: &Path,
        depth: usize,
    ) -> Result<(), FilesError> {
        let io_err = |source: io::Error| FilesError::Io {
            path: display(ws_rel),
            source,
        };
        let listing_fd = dir.try_clone().map_err(io_err)?;
        let mut d = nix::dir::Dir::from_fd(listing_fd).map_err(|e| io_err(e.into()))?;
        let mut names: Vec<Vec<u8>> = Vec::new();
        for ent in d.iter() {
            let ent = ent.map_err(|e| io_err(e.into()))?;
            let name = ent.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(name.to_vec());
            }
        }
        drop(d);
        names.sort();
        for name in names {
            if self.truncated {
                return Ok(());
            }
            let name_os = OsStr::from_bytes(&name);
            let ws_path = ws_rel.join(name_os);
            let req_path = req_rel.join(name_os);
            let st = match fstatat(&dir, name_os, AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                // Removed while listing: skip it.
                Err(Errno::ENOENT) => continue,
                Err(e) => {
                    return Err(FilesError::Io {
                        path: display(&ws_path),
                        source: e.into(),
                    });
                }
            };
            let kind = match st.st_mode & libc::S_IFMT {
                libc::S_IFREG => "file",
                libc::S_IFDIR => "dir",
                libc::S_IFLNK => "symlink",
                _ => "other",
            };
            let size = u64::try_from(st.st_size).unwrap_or(0);
            if self.matcher.is_match(&req_path) {
                if self.entries.len() >= MAX_ENTRIES {
                    self.truncated = true;
                    return Ok(());
                }
                if kind == "file" && self.read {
                    match self.open_child(&dir, name_os, &ws_path) {
                        Ok(file) => self.push_file(file, &ws_path, size),
                        Err(reason) => self.entries.push(FileEntry {
                            path: display(&ws_path),
                            kind,
                            size,
                            content: None,
                            skipped: Some(reason),
                        }),
                    }
                } else {
                    let skipped = (self.read && kind == "symlink").then(|| {
                        "symlinks are listed, not followed: ask for the path itself to read a target inside the workspace".to_owned()
                    });
                    self.entries.push(FileEntry {
                        path: display(&ws_path),
                        kind,
                        size,
                        content: None,
                        skipped,
                    });
                }
            }
            if kind == "dir" && self.recurse && depth + 1 < MAX_DEPTH {
                match nix::fcntl::openat(
                    &dir,
                    name_os,
                    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::empty(),
                ) {
                    Ok(child) => self.walk_dir(child, &ws_path, &req_path, depth + 1)?,
                    // Swapped for a symlink or removed meanwhile: not followed.
                    Err(Errno::ELOOP | Errno::ENOTDIR | Errno::ENOENT) => {}
                    Err(e) => {
                        return Err(FilesError::Io {
                            path: display(&ws_path),
                            source: e.into(),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// Opens a regular file in `dir` for reading, without following symlinks.
    fn open_child(&self, dir: &OwnedFd, name: &OsStr, ws_path: &Path) -> Result<File, String> {
        let fd = nix::fcntl::openat(
            dir.as_fd(),
            name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("cannot open: {e}"))?;
        self.root
            .verify(&fd, &display(ws_path))
            .map_err(|e| e.to_string())?;
        Ok(File::from(fd))
    }

    /// Adds a regular file, reading it when asked and allowed.
    fn push_file(&mut self, file: File, ws_path: &Path, size: u64) {
        let mut entry = FileEntry {
            path: display(ws_path),
            kind: "file",
            size,
            content: None,
            skipped: None,
        };
        if self.read {
            match self.read_file(file, size) {
                Ok(text) => entry.content = Some(text),
                Err(reason) => entry.skipped = Some(reason),
            }
        }
        self.entries.push(entry);
    }

    fn read_file(&mut self, file: File, size: u64) -> Result<String, String> {
        match file.metadata() {
            Ok(m) if m.is_file() => {}
            Ok(_) => return Err("not a regular file".into()),
            Err(e) => return Err(format!("cannot stat: {e}")),
        }
        if size > self.max_bytes {
            return Err(format!(
                "{size} bytes is over max_bytes ({}): not read",
                self.max_bytes
            ));
        }
        if size > self.budget {
            self.budget_hit = true;
            return Err("not read: this answer's contents budget is spent".into());
        }
        let mut buf = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        let limit = self.max_bytes.min(self.budget).saturating_add(1);
        file.take(limit)
            .read_to_end(&mut buf)
            .map_err(|e| format!("cannot read: {e}"))?;
        let n = buf.len() as u64;
        if n > self.max_bytes {
            return Err(format!(
                "grew over max_bytes ({}) while being read: not read",
                self.max_bytes
            ));
        }
        if n > self.budget {
            self.budget_hit = true;
            return Err("not read: this answer's contents budget is spent".into());
        }
        self.budget -= n;
        String::from_utf8(buf).map_err(|_| "binary file (not UTF-8): not read".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn req(path: &str, pattern: &str, read: bool) -> FilesRequest {
        FilesRequest {
            path: path.into(),
            pattern: pattern.into(),
            read,
            max_bytes: 1_000_000,
        }
    }

    fn tree() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("ws/src/deep")).unwrap();
        std::fs::write(d.path().join("ws/README.md"), "hello").unwrap();
        std::fs::write(d.path().join("ws/src/main.rs"), "fn main() {}").unwrap();
        std::fs::write(d.path().join("ws/src/deep/x.rs"), "x").unwrap();
        std::fs::write(d.path().join("secret.txt"), "TOP SECRET").unwrap();
        d
    }

    #[test]
    fn lexical_checks_refuse_absolute_and_parent() {
        assert!(matches!(
            check_relative("/etc"),
            Err(FilesError::Absolute { .. })
        ));
        assert!(matches!(
            check_relative("a/../../b"),
            Err(FilesError::ParentDir { .. })
        ));
        assert!(matches!(
            check_relative("a\0b"),
            Err(FilesError::Nul { .. })
        ));
        assert_eq!(check_relative("./a/./b").unwrap(), PathBuf::from("a/b"));
        assert_eq!(check_relative(".").unwrap(), PathBuf::new());
    }

    #[test]
    fn lists_top_level_and_recursive() {
        let d = tree();
        let ws = d.path().join("ws");
        let top = get_files(&ws, &req(".", "*", false)).unwrap();
        let names: Vec<_> = top.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(names, ["README.md", "src"]);
        let rs = get_files(&ws, &req(".", "**/*.rs", true)).unwrap();
        let names: Vec<_> = rs.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(names, ["src/deep/x.rs", "src/main.rs"]);
        assert_eq!(rs.entries[1].content.as_deref(), Some("fn main() {}"));
        let sub = get_files(&ws, &req("src", "*.rs", false)).unwrap();
        let names: Vec<_> = sub.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(names, ["src/main.rs"]);
    }

    #[test]
    fn bad_glob_names_the_pattern() {
        let d = tree();
        let err = get_files(&d.path().join("ws"), &req(".", "a[", false)).unwrap_err();
        assert!(err.to_string().contains("\"a[\""), "{err}");
    }

    #[test]
    fn symlink_to_outside_is_refused_and_not_followed_in_listing() {
        let d = tree();
        let ws = d.path().join("ws");
        symlink(d.path().join("secret.txt"), ws.join("leak")).unwrap();
        symlink(d.path(), ws.join("up")).unwrap();
        let err = get_files(&ws, &req("leak", "*", true)).unwrap_err();
        assert!(matches!(err, FilesError::Outside { .. }), "{err}");
        let err = get_files(&ws, &req("up/secret.txt", "*", true)).unwrap_err();
        assert!(matches!(err, FilesError::Outside { .. }), "{err}");
        let all = get_files(&ws, &req(".", "**", true)).unwrap();
        let json = serde_json::to_string(&all).unwrap();
        assert!(!json.contains("TOP SECRET"), "{json}");
        let leak = all.entries.iter().find(|e| e.path == "leak").unwrap();
        assert_eq!(leak.kind, "symlink");
    }

    #[test]
    fn symlink_inside_the_workspace_is_followed_when_named() {
        let d = tree();
        let ws = d.path().join("ws");
        symlink("README.md", ws.join("readme-link")).unwrap();
        let got = get_files(&ws, &req("readme-link", "*", true)).unwrap();
        assert_eq!(got.entries[0].content.as_deref(), Some("hello"));
    }

    #[test]
    fn swap_between_resolve_and_open_is_caught() {
        let d = tree();
        let ws = d.path().join("ws");
        let root = Root::open(&ws).unwrap();
        let rel = root
            .resolve(Path::new("src/main.rs"), "src/main.rs")
            .unwrap();
        // The agent swaps the directory for a symlink to outside after the check.
        std::fs::rename(ws.join("src"), d.path().join("moved")).unwrap();
        std::fs::create_dir(d.path().join("evil")).unwrap();
        std::fs::write(d.path().join("evil/main.rs"), "TOP SECRET").unwrap();
        symlink(d.path().join("evil"), ws.join("src")).unwrap();
        let err = root.open_beneath(&rel, "src/main.rs").unwrap_err();
        assert!(matches!(err, FilesError::Outside { .. }), "{err}");
        // And the file itself swapped for a symlink.
        std::fs::remove_file(ws.join("src")).unwrap();
        std::fs::create_dir(ws.join("src")).unwrap();
        symlink(d.path().join("secret.txt"), ws.join("src/main.rs")).unwrap();
        let err = root.open_beneath(&rel, "src/main.rs").unwrap_err();
        assert!(matches!(err, FilesError::Outside { .. }), "{err}");
    }

    #[test]
    fn oversized_files_are_listed_not_read() {
        let d = tree();
        let ws = d.path().join("ws");
        std::fs::write(ws.join("big.bin"), vec![b'a'; 2048]).unwrap();
        let mut r = req(".", "big.bin", true);
        r.max_bytes = 1024;
        let got = get_files(&ws, &r).unwrap();
        assert_eq!(got.entries[0].size, 2048);
        assert!(got.entries[0].content.is_none());
        assert!(
            got.entries[0]
                .skipped
                .as_deref()
                .unwrap()
                .contains("max_bytes")
        );
    }

    #[test]
    fn too_many_entries_truncate() {
        let d = tree();
        let ws = d.path().join("ws/many");
        std::fs::create_dir(&ws).unwrap();
        for i in 0..(MAX_ENTRIES + 5) {
            std::fs::write(ws.join(format!("f{i:05}")), "").unwrap();
        }
        let got = get_files(&ws, &req(".", "*", false)).unwrap();
        assert_eq!(got.entries.len(), MAX_ENTRIES);
        assert!(got.truncated);
        assert!(got.note.unwrap().contains("truncated"));
    }

    #[test]
    fn fifo_is_not_opened_for_reading() {
        let d = tree();
        let ws = d.path().join("ws");
        nix::unistd::mkfifo(&ws.join("pipe"), Mode::from_bits_truncate(0o600)).unwrap();
        let got = get_files(&ws, &req(".", "pipe", true)).unwrap();
        assert_eq!(got.entries[0].kind, "other");
        let err = get_files(&ws, &req("pipe", "*", true)).unwrap_err();
        assert!(matches!(err, FilesError::NotFileOrDir { .. }), "{err}");
    }
}
