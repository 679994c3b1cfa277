//! Small shared helpers: timestamps, atomic JSON writes, ids, private directories.

use std::io::Write;
use std::path::Path;
use std::time::SystemTime;

/// The mode of every directory aicli makes for its state (`.aicli`, `.aicli/runs`,
/// `.aicli/worktrees`, batch and task records, private run directories): the owner's
/// only, whatever the umask.
pub const PRIVATE_DIR_MODE: u32 = 0o700;

/// The mode of every file aicli writes into its state directories.
pub const PRIVATE_FILE_MODE: u32 = 0o600;

/// Locks `m`, also when a thread panicked holding it (what it guards stays usable: every
/// caller keeps it consistent between statements).
pub fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Creates `dir` and its missing parents, each new one [`PRIVATE_DIR_MODE`] (the mode is
/// given to `mkdir`, and a umask only ever removes bits, so no umask makes them wider).
/// Existing directories are left as they are.
pub fn create_private_dirs(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(PRIVATE_DIR_MODE)
        .create(dir)
}

/// [`create_private_dirs`], then sets `dir` itself to [`PRIVATE_DIR_MODE`] even when it
/// existed (made by an older aicli, or under a permissive umask).
pub fn ensure_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    create_private_dirs(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(PRIVATE_DIR_MODE))
}

/// Writes `contents` to `path` with `mode` (0600 unless a caller needs another),
/// creating missing parents ([`create_private_dirs`]); an existing file is truncated and
/// given `mode` too. The one way aicli writes a private file that is not JSON state.
pub fn write_private_file(path: &Path, contents: &str, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    if let Some(parent) = path.parent() {
        create_private_dirs(parent)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(mode)
        .open(path)?;
    f.set_permissions(std::fs::Permissions::from_mode(mode))?;
    f.write_all(contents.as_bytes())
}

/// Opens `path` for appending, created [`PRIVATE_FILE_MODE`] when missing: the record's
/// streams (a CLI's stdout, stderr, aicli's own events).
pub fn open_private_append(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(PRIVATE_FILE_MODE)
        .open(path)
}

/// Opens `path` to read and write without truncating, created [`PRIVATE_FILE_MODE`]
/// when missing (lock files).
pub fn open_private_rw(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .mode(PRIVATE_FILE_MODE)
        .open(path)
}

/// `1 file`, `2 files`: `n` and the noun in its number.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// How long ago `at` was, to the second (`3m 12s`); `None` when it is in the future.
pub fn ago(at: SystemTime) -> Option<String> {
    let d = SystemTime::now().duration_since(at).ok()?;
    Some(humantime::format_duration(std::time::Duration::from_secs(d.as_secs())).to_string())
}

/// Now, as RFC 3339 UTC with milliseconds (`2026-11-30T04:39:00.123Z`): records are
/// ordered by these strings, and two runs of a session can end within one second.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// Writes `value` as pretty JSON to `path` atomically: a temp file in the same
/// directory, fsync, rename. A reader (or a `kill -9` at any moment) sees the old file
/// or the new one, never a torn one.
pub fn write_json_atomic<T: serde::Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    write_json(path, value, true)
}

/// [`write_json_atomic`], with the fsyncs only when `durable`. The rename alone already
/// protects against a killed aicli (the page cache survives it); the fsyncs protect
/// against a machine crash, and cost milliseconds each.
pub fn write_json<T: serde::Serialize>(
    path: &Path,
    value: &T,
    durable: bool,
) -> std::io::Result<()> {
    // One write: serde writes token by token, and the temp file is unbuffered.
    let bytes = serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?;
    write_bytes(path, bytes, durable)
}

/// Writes `bytes` (and a final newline) to `path` as [`write_json`] writes JSON:
/// atomically, 0600, fsynced when `durable`.
pub fn write_bytes(path: &Path, mut bytes: Vec<u8>, durable: bool) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    create_private_dirs(dir)?;
    // The temp file is made 0600 (tempfile's default, whatever the umask) and keeps
    // that mode through the rename.
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    bytes.push(b'\n');
    tmp.write_all(&bytes)?;
    if durable {
        tmp.as_file().sync_all()?;
    }
    tmp.persist(path).map_err(|e| e.error)?;
    if durable && let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// The length of `value` as compact JSON, counted without building the text.
pub fn json_len<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut n = Count(0);
    // Writing to a counter cannot fail; a value that cannot be serialized counts what
    // was written before it failed.
    let _ = serde_json::to_writer(&mut n, value);
    n.0
}

/// Reads a JSON file into `T`, with the path in the error.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// A new batch id: UTC time to the millisecond (sortable) plus 4 random hex digits.
pub fn new_batch_id() -> String {
    let t = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
    let compact: String = t
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == 'T')
        .map(|c| if c == 'T' { '-' } else { c })
        .collect();
    format!("{compact}-{:04x}", rand::random::<u16>())
}
