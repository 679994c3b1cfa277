//! [`FilesError`]: why a `getWorkspaceFiles` request was refused or failed, with the
//! path or pattern as given.

use std::io;
use std::path::PathBuf;

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
