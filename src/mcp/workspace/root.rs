//! [`Root`]: an open, canonical workspace root; resolving a path under it, opening it
//! one component at a time with `O_NOFOLLOW`, and re-checking an open descriptor.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use super::FilesError;

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
