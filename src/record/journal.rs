//! The batch's journal, `<batch>/journal.ndjson`: every write of every task's record,
//! appended as one line `{"task":ID,"record":TaskRecord}` (issue 38 part 1.3). A task's
//! record is its last line here; `task.json` is the copy written once, when the task
//! settles. A running attempt's processes are lines `{"task":ID,"pids":TEXT}` (what
//! [`crate::proc::leftovers::write_pids`] writes; `""` once the run has ended), which a
//! `resume` after a killed aicli reads to kill what is left.
//!
//! - **Appends** are one `write(2)` each on an `O_APPEND` descriptor, so lines of
//!   concurrent writers (the batch's tasks, another aicli process answering one of them)
//!   never interleave. A line a killed writer left torn is ended by the next append;
//!   where another process's line was glued to it in the meantime, readers find that
//!   line's start in it ([`parse_line`]) and skip only the torn part.
//! - **Durability by group commit**: a settled task waits for one `fdatasync` of the
//!   journal that started after its line was written; every end written meanwhile shares
//!   it. The page cache survives a killed aicli, so progress lines need none.
//! - **Reads** keep an index (task → where its last line's record is) and read only what
//!   was appended since the last look, so a page following one task of a big batch reads
//!   a few bytes per look, not the journal.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::TaskRecord;

/// The longest line a reader takes: a record past it is refused with its place named.
const MAX_LINE: usize = 64 << 20;
/// What a reader reads at once.
const CHUNK: usize = 1 << 20;

/// One batch's journal: its writer's descriptor and group commit, and a reader's index.
pub(super) struct Journal {
    path: PathBuf,
    writer: Mutex<Option<Arc<File>>>,
    /// Whether the journal was made by this writer and its directory not yet synced (a
    /// machine crash would lose the name of a file whose content was synced).
    new_name: AtomicBool,
    /// Lines written so far by this writer.
    appended: AtomicU64,
    /// Lines known durable: the first `n` appended. Held across an `fdatasync`, so one
    /// runs at a time and the ends that queue behind it share the next.
    synced: tokio::sync::Mutex<u64>,
    /// `fdatasync`s run (the group commit's figure: ends per sync).
    syncs: AtomicU64,
    index: Mutex<Index>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal").field("path", &self.path).finish()
    }
}

/// Where each task's last record is in the journal, as far as it has been read.
#[derive(Default)]
struct Index {
    /// The journal's device and inode when read (a journal replaced is read again).
    file: (u64, u64),
    /// Bytes read: the end of the last whole line.
    read: u64,
    /// Task id → (offset, length) of its last line's record.
    last: HashMap<String, (u64, usize)>,
    /// Task id → its running attempt's processes, as last recorded (none once ended).
    pids: HashMap<String, String>,
}

#[derive(serde::Serialize)]
struct LineOut<'a> {
    task: &'a str,
    record: &'a TaskRecord,
}

#[derive(serde::Serialize)]
struct PidsOut<'a> {
    task: &'a str,
    pids: &'a str,
}

#[derive(serde::Deserialize)]
struct LineIn<'a> {
    #[serde(borrow)]
    task: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    record: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, default)]
    pids: Option<std::borrow::Cow<'a, str>>,
}

/// `rec` as one journal line, its newline included.
pub(super) fn line(rec: &TaskRecord) -> std::io::Result<Vec<u8>> {
    to_line(&LineOut {
        task: &rec.task.id,
        record: rec,
    })
}

/// The line saying task `task`'s running attempt's processes are `pids` (`""`: none).
pub(super) fn pids_line(task: &str, pids: &str) -> std::io::Result<Vec<u8>> {
    to_line(&PidsOut { task, pids })
}

fn to_line(v: &impl serde::Serialize) -> std::io::Result<Vec<u8>> {
    let mut out = serde_json::to_vec(v).map_err(std::io::Error::other)?;
    out.push(b'\n');
    Ok(out)
}

impl Journal {
    pub(super) fn new(path: PathBuf) -> Journal {
        Journal {
            path,
            writer: Mutex::new(None),
            new_name: AtomicBool::new(false),
            appended: AtomicU64::new(0),
            synced: tokio::sync::Mutex::new(0),
            syncs: AtomicU64::new(0),
            index: Mutex::new(Index::default()),
        }
    }

    /// The writer's descriptor, opened (and the journal made, 0600) on first use.
    fn writer(&self) -> std::io::Result<Arc<File>> {
        let mut w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = &*w {
            return Ok(f.clone());
        }
        let open = |create_new: bool| {
            std::fs::OpenOptions::new()
                .read(true)
                .append(true)
                .create_new(create_new)
                .mode(crate::util::PRIVATE_FILE_MODE)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&self.path)
        };
        let f = match open(true) {
            Ok(f) => {
                self.new_name.store(true, Ordering::Release);
                f
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => open(false)?,
            Err(e) => return Err(e),
        };
        let f = Arc::new(f);
        *w = Some(f.clone());
        Ok(f)
    }

    /// Appends `lines` (whole lines, each ending in a newline) in one write; the number
    /// to wait for in [`Journal::commit`].
    pub(super) fn append(&self, lines: &[u8]) -> std::io::Result<u64> {
        let f = self.writer()?;
        let len = f.metadata()?.len();
        let mut last = [0u8];
        let torn = len > 0 && f.read_exact_at(&mut last, len - 1).is_ok() && last[0] != b'\n';
        if torn {
            // A writer killed in the middle of its line: end that line, so it does not
            // take this one with it.
            let mut out = Vec::with_capacity(lines.len() + 1);
            out.push(b'\n');
            out.extend_from_slice(lines);
            (&*f).write_all(&out)?;
        } else {
            (&*f).write_all(lines)?;
        }
        Ok(self.appended.fetch_add(1, Ordering::AcqRel) + 1)
    }

    /// Returns once append number `n` is on disk: by an `fdatasync` that started after
    /// it was written, its own or one it shares with the appends written meanwhile.
    pub(super) async fn commit(self: &Arc<Self>, n: u64) -> std::io::Result<()> {
        let mut synced = self.synced.lock().await;
        if *synced >= n {
            return Ok(());
        }
        let upto = self.appended.load(Ordering::Acquire);
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.commit_now())
            .await
            .map_err(std::io::Error::other)??;
        *synced = upto;
        Ok(())
    }

    /// An `fdatasync` of everything appended so far, on this thread (and of the
    /// directory, once, when this writer made the journal).
    pub(super) fn commit_now(&self) -> std::io::Result<()> {
        let f = self.writer()?;
        let new_name = self.new_name.swap(false, Ordering::AcqRel);
        let dir = self.path.parent().filter(|_| new_name);
        let synced = f.sync_data().and_then(|()| match dir {
            Some(d) => File::open(d)?.sync_all(),
            None => Ok(()),
        });
        if let Err(e) = synced {
            // The directory's sync is owed still.
            self.new_name.fetch_or(new_name, Ordering::AcqRel);
            return Err(e);
        }
        self.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The last record of `task` in the journal `f` (this journal, opened by the
    /// caller), `None` when it has none.
    pub(super) fn record(&self, f: &File, task: &str) -> Option<Result<TaskRecord, String>> {
        let index = match self.refresh(f) {
            Ok(i) => i,
            Err(e) => return Some(Err(format!("{}: {e}", self.path.display()))),
        };
        let &(at, len) = index.last.get(task)?;
        drop(index);
        Some(self.read_record(f, task, at, len))
    }

    /// What the last line about `task`'s processes in the journal `f` says, unless its
    /// run ended.
    pub(super) fn pids(&self, f: &File, task: &str) -> Option<String> {
        self.refresh(f).ok()?.pids.get(task).cloned()
    }

    /// Whether `task` has a record in the journal `f`.
    pub(super) fn has(&self, f: &File, task: &str) -> bool {
        self.refresh(f).is_ok_and(|i| i.last.contains_key(task))
    }

    fn read_record(&self, f: &File, task: &str, at: u64, len: usize) -> Result<TaskRecord, String> {
        let mut buf = vec![0; len];
        f.read_exact_at(&mut buf, at)
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        serde_json::from_slice(&buf).map_err(|e| {
            format!(
                "{}: the record of task {task} at byte {at}: {e}",
                self.path.display()
            )
        })
    }

    /// The index, brought up to the journal's end.
    fn refresh(&self, f: &File) -> std::io::Result<MutexGuard<'_, Index>> {
        let md = f.metadata()?;
        let mut ix = self.index.lock().unwrap_or_else(|e| e.into_inner());
        let file = (md.dev(), md.ino());
        if ix.file != file || md.len() < ix.read {
            *ix = Index {
                file,
                ..Index::default()
            };
        }
        let mut want = CHUNK;
        while ix.read < md.len() {
            let left = usize::try_from(md.len() - ix.read).unwrap_or(usize::MAX);
            let mut buf = vec![0; want.min(left)];
            let n = f.read_at(&mut buf, ix.read)?;
            buf.truncate(n);
            let Some(end) = buf.iter().rposition(|&b| b == b'\n') else {
                if n >= MAX_LINE {
                    // Longer than any record: skipped (its rest, up to its newline, is
                    // a line that does not parse).
                    tracing::warn!(journal = %self.path.display(), at = ix.read, "a line longer than {MAX_LINE} bytes is skipped");
                    ix.read += n as u64;
                    want = CHUNK;
                    continue;
                }
                if n < want {
                    // The last line is being written (or was torn): read again when it
                    // has ended.
                    break;
                }
                want = (want * 2).min(MAX_LINE);
                continue;
            };
            let base = ix.read;
            for (start, line) in lines(&buf[..=end]) {
                let Some((skip, l)) = parse_line(line) else {
                    continue;
                };
                let (start, line) = (start + skip, &line[skip..]);
                match (l.record, l.pids) {
                    (Some(raw), _) => {
                        let raw = raw.get();
                        let off = raw.as_ptr() as usize - line.as_ptr() as usize;
                        let at = base + (start + off) as u64;
                        ix.last.insert(l.task.into_owned(), (at, raw.len()));
                    }
                    (None, Some(p)) if p.is_empty() => {
                        ix.pids.remove(l.task.as_ref());
                    }
                    (None, Some(p)) => {
                        ix.pids.insert(l.task.into_owned(), p.into_owned());
                    }
                    (None, None) => {}
                }
            }
            ix.read = base + end as u64 + 1;
            want = CHUNK;
        }
        Ok(ix)
    }
}

/// A journal line, and where in `line` it starts: at 0, or, for a line a killed writer
/// left torn and another writer's line was appended to before the torn one was ended,
/// at that line's start (every line starts `{"task":"`, which no JSON string holds
/// unescaped). `None` for a line with no whole line in it.
fn parse_line(line: &[u8]) -> Option<(usize, LineIn<'_>)> {
    const START: &[u8] = b"{\"task\":\"";
    let mut from = 0;
    loop {
        let at = from + line[from..].windows(START.len()).position(|w| w == START)?;
        if let Ok(l) = serde_json::from_slice::<LineIn<'_>>(&line[at..]) {
            return Some((at, l));
        }
        from = at + 1;
    }
}

/// The non-empty lines of `buf` (which ends in a newline), each with its offset.
fn lines(buf: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let mut start = 0;
    buf.split(|&b| b == b'\n').filter_map(move |l| {
        let at = start;
        start += l.len() + 1;
        (!l.is_empty()).then_some((at, l))
    })
}

#[cfg(test)]
mod tests;
