//! The file a running web view writes about itself (its address, origin, pid and API
//! token), for `aicli web --link` and scripts: 0600 in a 0700 directory of this user's,
//! removed when the server stops.

use std::net::SocketAddr;

/// Where this user's runtime files go: `$XDG_RUNTIME_DIR`, else the temporary directory.
pub(super) fn runtime_dir() -> std::path::PathBuf {
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(std::path::PathBuf::from)
        .filter(|d| d.is_dir())
        .unwrap_or_else(std::env::temp_dir)
}

/// The directory of the running web views' server files (this user's: 0700):
/// `aicli-web-<uid>` in [`runtime_dir`].
pub fn server_files_dir() -> std::path::PathBuf {
    runtime_dir().join(format!("aicli-web-{}", nix::unistd::getuid()))
}

/// What a running web view writes about itself for `aicli web --link` and scripts (a
/// file of this user's alone, 0600, removed when the server stops).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ServerFile {
    /// The run records it serves (the runs directory, canonical).
    pub runs_dir: std::path::PathBuf,
    /// The address it listens on.
    pub addr: SocketAddr,
    /// Its page's origin (`http://aicli-….localhost:PORT`).
    pub origin: String,
    /// Served over TLS.
    pub tls: bool,
    /// The serving process.
    pub pid: u32,
    /// The API token (`Authorization: Bearer`).
    pub api_token: String,
}

/// Writes `f` as `<dir>/<port>.json`, 0600 in a 0700 directory.
pub(super) fn write(f: &ServerFile) -> std::io::Result<tempfile::TempPath> {
    let dir = server_files_dir();
    crate::util::create_private_dirs(&dir)?;
    check_private_dir(&dir)?;
    let path = dir.join(format!("{}.json", f.addr.port()));
    let text = serde_json::to_string_pretty(f).map_err(std::io::Error::other)?;
    crate::util::write_private_file(&path, &text, 0o600)?;
    tempfile::TempPath::try_from_path(path)
}

/// Refuses `dir` unless this user owns it and nobody else may enter it (a directory of
/// that name someone else made in a shared temporary directory).
pub fn check_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(dir)?;
    if !m.is_dir() || m.uid() != nix::unistd::getuid().as_raw() || m.mode() & 0o077 != 0 {
        return Err(std::io::Error::other(format!(
            "{} is not a directory of this user's alone (0700)",
            dir.display()
        )));
    }
    Ok(())
}
