//! [`Walk`]: one listing, walked through directory descriptors (`openat`/`fstatat`,
//! never by path): symlinks listed, never followed; entries, depth and the contents
//! budget capped.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use globset::GlobMatcher;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{Mode, fstatat};

use super::root::Root;
use super::{FileEntry, FilesError, MAX_ENTRIES, READ_BUDGET, display};

/// Deepest directory level a recursive pattern descends to.
const MAX_DEPTH: usize = 64;

/// The state of one listing.
pub(super) struct Walk<'a> {
    root: &'a Root,
    matcher: &'a GlobMatcher,
    recurse: bool,
    read: bool,
    max_bytes: u64,
    budget: u64,
    /// What matched so far.
    pub(super) entries: Vec<FileEntry>,
    /// Whether more matched than [`MAX_ENTRIES`].
    pub(super) truncated: bool,
    /// Whether a file was left unread because the contents budget was spent.
    pub(super) budget_hit: bool,
}

impl<'a> Walk<'a> {
    /// A listing of what `matcher` matches (below the first level when `recurse`),
    /// reading files of at most `max_bytes` when `read`.
    pub(super) fn new(
        root: &'a Root,
        matcher: &'a GlobMatcher,
        recurse: bool,
        read: bool,
        max_bytes: u64,
    ) -> Walk<'a> {
        Walk {
            root,
            matcher,
            recurse,
            read,
            max_bytes,
            budget: READ_BUDGET,
            entries: Vec::new(),
            truncated: false,
            budget_hit: false,
        }
    }
}

impl Walk<'_> {
    /// Lists the directory open as `dir`, at `ws_rel` from the root and `req_rel` from the
    /// requested path (what the pattern matches against).
    pub(super) fn walk_dir(
        &mut self,
        dir: OwnedFd,
        ws_rel: &Path,
        req_rel: &Path,
        depth: usize,
    ) -> Result<(), FilesError> {
        for name in sorted_names(&dir, ws_rel)? {
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
                self.push_entry(&dir, name_os, &ws_path, kind, size);
            }
            if kind == "dir" && self.recurse && depth + 1 < MAX_DEPTH {
                self.descend(&dir, name_os, &ws_path, &req_path, depth)?;
            }
        }
        Ok(())
    }

    /// Adds a matched entry of `dir`: a regular file read when asked, anything else
    /// listed (a symlink is never followed).
    fn push_entry(
        &mut self,
        dir: &OwnedFd,
        name: &OsStr,
        ws_path: &Path,
        kind: &'static str,
        size: u64,
    ) {
        if kind == "file" && self.read {
            match self.open_child(dir, name, ws_path) {
                Ok(file) => self.push_file(file, ws_path, size),
                Err(reason) => self.entries.push(FileEntry {
                    path: display(ws_path),
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
                path: display(ws_path),
                kind,
                size,
                content: None,
                skipped,
            });
        }
    }

    /// Walks the subdirectory `name` of `dir` (at `depth + 1`), opened without
    /// following a symlink.
    fn descend(
        &mut self,
        dir: &OwnedFd,
        name: &OsStr,
        ws_path: &Path,
        req_path: &Path,
        depth: usize,
    ) -> Result<(), FilesError> {
        match nix::fcntl::openat(
            dir,
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(child) => self.walk_dir(child, ws_path, req_path, depth + 1),
            // Swapped for a symlink or removed meanwhile: not followed.
            Err(Errno::ELOOP | Errno::ENOTDIR | Errno::ENOENT) => Ok(()),
            Err(e) => Err(FilesError::Io {
                path: display(ws_path),
                source: e.into(),
            }),
        }
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
    pub(super) fn push_file(&mut self, file: File, ws_path: &Path, size: u64) {
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

    /// The contents of `file` (`size` bytes when listed) as text, within `max_bytes`
    /// and the budget left; `Err` says why they are not returned.
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

/// The names in the directory open as `dir` (at `ws_rel`), sorted, without `.` and `..`.
fn sorted_names(dir: &OwnedFd, ws_rel: &Path) -> Result<Vec<Vec<u8>>, FilesError> {
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
    names.sort();
    Ok(names)
}
