//! Small shared helpers: timestamps, atomic JSON writes, ids.

use std::io::Write;
use std::path::Path;
use std::time::SystemTime;

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
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    // One write: serde writes token by token, and the temp file is unbuffered.
    let mut bytes = serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?;
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
