//! Process supervision: spawn a command in its own process group, stream its stdout as
//! capped lines, drain its stderr into a bounded tail, and shut the whole tree down —
//! SIGTERM, a grace period, SIGKILL — on cancel, timeout and drop.
//!
//! "The whole tree" is every process of the run ([`crate::proctree::RunTree`]): its
//! process group, its cgroup where one can be made (every descendant is born in it), and
//! the orphans aicli adopts as their subreaper — a daemon that left the group and whose
//! parent exited at once is reparented to aicli and killed with its run. If aicli itself
//! is killed, the kernel kills the direct child (parent-death signal) and `aicli resume`
//! kills the rest from the run's pid file (its cgroup, or its marker). The group is made
//! with `posix_spawn`'s process-group attribute (no `fork` of aicli's address space, so
//! spawning stays cheap however large aicli gets).

use std::fs::File;
use std::io::Write;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aicli_providers::CommandSpec;
use nix::sys::signal::Signal;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub use crate::cgroup::CgroupMode;
pub use crate::proctree::{
    ProcStat, RUN_MARKER_VAR, RunTree, all_processes, group_is_empty, kill_leftovers, proc_stat,
};
pub use crate::stdin::{StdinWriter, StdoutRecord};

/// One line of a child's stdout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StdoutLine {
    /// A complete line (without `\n`), or the last bytes before EOF.
    Line(Vec<u8>),
    /// A line longer than the cap: its size and first bytes (the rest was not kept in
    /// memory; the tee file has all of it).
    Overlong {
        /// The line's length in bytes.
        len: u64,
        /// Its first bytes (up to 4 KiB).
        prefix: Vec<u8>,
    },
}

/// How much of an over-long line is kept.
const OVERLONG_PREFIX: usize = 4096;

/// Bytes of stdout lines read but not yet taken by the session, per run (one line is
/// always let through, however long): when the session falls behind, the reader waits
/// (and the CLI with it, on a full pipe) instead of queueing the stream in memory.
pub const LINE_QUEUE_BYTES: usize = 256 * 1024;

/// A channel of stdout lines bounded in bytes ([`LINE_QUEUE_BYTES`] by default).
pub fn line_channel(max_bytes: usize) -> (LineSender, LineReceiver) {
    let max_bytes = max_bytes.clamp(1, u32::MAX as usize);
    let room = Arc::new(tokio::sync::Semaphore::new(max_bytes));
    // Every line holds at least this many bytes of room: the count of lines queued is
    // bounded too.
    let (tx, rx) = mpsc::channel(max_bytes / MIN_LINE_COST + 1);
    (
        LineSender {
            tx,
            room,
            max_bytes,
        },
        LineReceiver { rx, held: None },
    )
}

const MIN_LINE_COST: usize = 64;

type Queued = (StdoutLine, tokio::sync::OwnedSemaphorePermit);

/// The reader's side of a [`line_channel`].
#[derive(Debug)]
pub struct LineSender {
    tx: mpsc::Sender<Queued>,
    room: Arc<tokio::sync::Semaphore>,
    max_bytes: usize,
}

impl LineSender {
    /// Queues `line`, waiting for room; `Err` when the receiver is gone.
    pub async fn send(&self, line: StdoutLine) -> Result<(), StdoutLine> {
        let len = match &line {
            StdoutLine::Line(b) => b.len(),
            StdoutLine::Overlong { prefix, .. } => prefix.len(),
        };
        let cost = len.clamp(MIN_LINE_COST, self.max_bytes) as u32;
        let Ok(permit) = self.room.clone().acquire_many_owned(cost).await else {
            return Err(line);
        };
        self.tx.send((line, permit)).await.map_err(|e| e.0.0)
    }
}

/// The session's side of a [`line_channel`]: a line's room is given back when the
/// next one is taken (the session is done with it by then).
#[derive(Debug)]
pub struct LineReceiver {
    rx: mpsc::Receiver<Queued>,
    held: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl LineReceiver {
    /// The next line; `None` at EOF (when the reader is done).
    pub async fn recv(&mut self) -> Option<StdoutLine> {
        self.held = None;
        let (line, permit) = self.rx.recv().await?;
        self.held = Some(permit);
        Some(line)
    }

    /// A receiver that is closed already (what a handle gives once its lines were
    /// taken).
    pub fn closed() -> LineReceiver {
        let (_, rx) = line_channel(1);
        rx
    }
}

/// Options for reading a child's output.
#[derive(Debug)]
pub struct OutputOptions {
    /// Longest stdout line accepted, bytes.
    pub line_cap: usize,
    /// Bytes of stderr kept in memory (the tail).
    pub stderr_tail: usize,
    /// Every stdout byte, as read, goes here too (the run record's `events.ndjson`).
    pub stdout_tee: Option<File>,
    /// Every stderr byte goes here too, up to `stderr_file_cap` (the run record's
    /// `stderr.log`).
    pub stderr_tee: Option<File>,
    /// Most stderr bytes written to `stderr_tee`.
    pub stderr_file_cap: u64,
    /// Where the run's leader, marker and cgroup are written while it lives (the run
    /// record's `pid`), so that `aicli resume` can kill what is left if aicli itself dies.
    pub pid_file: Option<std::path::PathBuf>,
    /// Hand stdin and stdout to the caller ([`LocalProcess::take_stdin`],
    /// [`LocalProcess::take_stdout`]) instead of writing the command's stdin text and
    /// reading stdout as lines: for a child that speaks a protocol on its pipes (an MCP
    /// server on stdio) or whose output is read as bytes (a command-backed tool). stderr
    /// is drained into the tail as always.
    pub raw_pipes: bool,
}

impl Default for OutputOptions {
    fn default() -> OutputOptions {
        OutputOptions {
            line_cap: aicli_providers::replay::DEFAULT_LINE_CAP,
            stderr_tail: 64 * 1024,
            stdout_tee: None,
            stderr_tee: None,
            stderr_file_cap: 16 * 1024 * 1024,
            pid_file: None,
            raw_pipes: false,
        }
    }
}

/// The last bytes a child wrote to stderr.
#[derive(Debug, Clone, Default)]
pub struct StderrTail {
    inner: Arc<Mutex<TailBuf>>,
}

#[derive(Debug, Default)]
struct TailBuf {
    buf: Vec<u8>,
    cap: usize,
    dropped: u64,
}

impl StderrTail {
    /// A tail keeping the last `cap` bytes.
    pub(crate) fn new(cap: usize) -> StderrTail {
        StderrTail {
            inner: Arc::new(Mutex::new(TailBuf {
                buf: Vec::new(),
                cap,
                dropped: 0,
            })),
        }
    }

    fn push(&self, bytes: &[u8]) {
        let Ok(mut t) = self.inner.lock() else { return };
        t.buf.extend_from_slice(bytes);
        if t.buf.len() > t.cap {
            let excess = t.buf.len() - t.cap;
            t.buf.drain(..excess);
            t.dropped += excess as u64;
        }
    }

    /// The kept tail as text (lossy UTF-8), prefixed with a note when bytes were dropped.
    pub fn text(&self) -> String {
        let Ok(t) = self.inner.lock() else {
            return String::new();
        };
        let body = String::from_utf8_lossy(&t.buf);
        if t.dropped > 0 {
            format!(
                "[aicli: {} earlier bytes of stderr not kept]\n{body}",
                t.dropped
            )
        } else {
            body.into_owned()
        }
    }
}

/// Errors starting a process.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The executable could not be started.
    #[error("cannot start {program}: {source}")]
    Start {
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The working directory does not exist.
    #[error("working directory {0} does not exist")]
    NoCwd(String),
}

/// A running child process in its own session, with its output being read.
#[derive(Debug)]
pub struct LocalProcess {
    child: Child,
    pid: u32,
    /// A two-way run's stdin ([`CommandSpec::stdin_open`]), until taken.
    pub stdin_writer: Option<StdinWriter>,
    /// Closed when stdout reaches EOF (at once with [`OutputOptions::raw_pipes`]).
    pub lines: LineReceiver,
    /// The pipes handed to the caller with [`OutputOptions::raw_pipes`].
    stdin: Option<tokio::process::ChildStdin>,
    stdout: Option<tokio::process::ChildStdout>,
    /// The stderr tail.
    pub stderr: StderrTail,
    readers: Vec<JoinHandle<()>>,
    exit: Option<Option<i32>>,
    /// Every process of the run: group, cgroup, adopted orphans.
    tree: RunTree,
    /// `shutdown` ran to its end: nothing of the tree is left, `Drop` has nothing to do.
    shut_down: bool,
}

impl LocalProcess {
    /// Spawns `cmd` with its environment on top of the inherited one (or alone, with
    /// [`CommandSpec::env_clear`]), in a new process group whose id is the child's pid,
    /// in a cgroup of its own where one can be made, stdin null unless the command has
    /// stdin text.
    pub fn spawn(cmd: &CommandSpec, out: OutputOptions) -> Result<LocalProcess, SpawnError> {
        LocalProcess::spawn_in(cmd, out, CgroupMode::Auto)
    }

    /// [`LocalProcess::spawn`], with a cgroup only as `cgroups` allows.
    pub fn spawn_in(
        cmd: &CommandSpec,
        out: OutputOptions,
        cgroups: CgroupMode,
    ) -> Result<LocalProcess, SpawnError> {
        if !cmd.cwd.is_dir() {
            return Err(SpawnError::NoCwd(cmd.cwd.display().to_string()));
        }
        // If aicli itself dies (even by SIGKILL), the kernel kills the child: no CLI keeps
        // running unsupervised (its own descendants are found and killed on the next
        // `aicli resume`, through the pid file written before the spawn). The
        // parent-death signal is set by `setpriv --pdeathsig` (util-linux), which then
        // execs a shell that checks that its parent is still aicli (a parent that died
        // before the signal was set would never send it) and only then joins the run's
        // cgroup and execs the CLI: from the CLI's first instruction on, aicli's death
        // kills it, and everything stays posix_spawn. Without setpriv, a pre_exec hook
        // does the same, which makes std fork aicli's whole address space for every CLI
        // (~3x slower spawning). (A missing program is left to spawn itself, so its
        // error says "not found".)
        let missing = cmd.program.components().count() > 1 && !cmd.program.exists();
        let trampoline = setpriv().filter(|_| !missing);
        // The run's cgroup, joined before the CLI starts so that every descendant is born
        // in it.
        let cgroup = if missing {
            None
        } else {
            crate::proctree::run_cgroup(cgroups)
        };
        let shell = Path::new("/bin/sh");
        let parent = std::process::id();
        let (mut c, hooked) = match trampoline {
            Some(setpriv) if shell.exists() => {
                let mut c = Command::new(setpriv);
                c.args(["--pdeathsig", "KILL", "--"]).arg(shell).arg("-c");
                match &cgroup {
                    Some(cg) => {
                        c.arg(TRAMPOLINE_JOIN)
                            .arg(parent.to_string())
                            .arg(cg.procs_file());
                    }
                    None => {
                        c.arg(TRAMPOLINE).arg(parent.to_string());
                    }
                }
                c.arg(&cmd.program);
                (c, false)
            }
            Some(_) | None => (Command::new(&cmd.program), true),
        };
        c.args(&cmd.args)
            .current_dir(&cmd.cwd)
            .stdin(if cmd.stdin.is_some() || cmd.stdin_open || out.raw_pipes {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if cmd.env_clear {
            c.env_clear();
        }
        c.envs(&cmd.env);
        for k in &cmd.env_remove {
            c.env_remove(k);
        }
        // The run's marker: every descendant inherits it, so an orphan aicli adopts (or
        // finds after a restart) can be told apart from other runs' without a cgroup.
        let marker = crate::proctree::new_marker();
        c.env(RUN_MARKER_VAR, &marker);
        // What `aicli resume` needs to find the run's processes goes into its record
        // before any of them exists: a kill -9 of aicli between the spawn and the
        // leader's line leaves the marker and the cgroup to look in.
        if let Some(f) = &out.pid_file {
            crate::proctree::write_pid_file(f, None, &marker, cgroup.as_ref());
        }
        // Own process group (pgid = the child's pid): the whole group can be signalled,
        // and a Ctrl-C on aicli's terminal does not reach it (aicli shuts it down itself).
        c.process_group(0);
        if hooked {
            let join = cgroup.as_ref().and_then(|cg| {
                std::ffi::CString::new(cg.procs_file().into_os_string().into_vec()).ok()
            });
            // SAFETY: prctl, getppid, open, write and close are async-signal-safe; the
            // path was allocated before the fork; no parent memory is touched.
            unsafe {
                c.pre_exec(move || {
                    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
                        .map_err(std::io::Error::from)?;
                    if std::os::unix::process::parent_id() != parent {
                        // The parent died between fork and prctl.
                        return Err(std::io::Error::other("aicli exited while starting the CLI"));
                    }
                    if let Some(path) = &join {
                        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                        if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                            return Err(std::io::Error::last_os_error());
                        }
                        libc::close(fd);
                    }
                    Ok(())
                });
            }
        }
        let mut child =
            crate::proctree::spawn_leader(|| c.spawn(), Child::id).map_err(|source| {
                SpawnError::Start {
                    program: cmd.program.display().to_string(),
                    source,
                }
            })?;
        let pid = child.id().unwrap_or(0);
        let tree = RunTree::started(pid, marker, cgroup, out.pid_file.clone());
        let mut readers = Vec::new();
        let (mut raw_stdin, mut raw_stdout) = (None, None);
        if out.raw_pipes {
            raw_stdin = child.stdin.take();
            raw_stdout = child.stdout.take();
        }
        let record = StdoutRecord::from(out.stdout_tee);
        let mut stdin_writer = None;
        match (cmd.stdin_open, child.stdin.take()) {
            (true, Some(stdin)) => {
                stdin_writer = Some(StdinWriter::spawn(stdin, record.clone(), cmd.stdin.clone()));
            }
            (false, Some(mut stdin)) => {
                if let Some(text) = cmd.stdin.clone() {
                    readers.push(tokio::spawn(async move {
                        // A child that exits without reading its stdin is not an error here.
                        let _ = stdin.write_all(text.as_bytes()).await;
                        let _ = stdin.shutdown().await;
                    }));
                }
            }
            (_, None) => {}
        }
        let (tx, rx) = line_channel(LINE_QUEUE_BYTES);
        if let Some(stdout) = child.stdout.take() {
            let cap = out.line_cap;
            readers.push(tokio::spawn(read_lines(stdout, cap, record, tx)));
        }
        let stderr = StderrTail::new(out.stderr_tail);
        if let Some(err) = child.stderr.take() {
            let tail = stderr.clone();
            let tee = out.stderr_tee;
            let cap = out.stderr_file_cap;
            readers.push(tokio::spawn(drain_stderr(err, tail, tee, cap)));
        }
        tracing::debug!(pid, program = %cmd.program.display(), cgroup = ?tree.cgroup().map(|c| c.path().display().to_string()), "spawned");
        Ok(LocalProcess {
            child,
            pid,
            stdin_writer,
            lines: rx,
            stdin: raw_stdin,
            stdout: raw_stdout,
            stderr,
            readers,
            exit: None,
            tree,
            shut_down: false,
        })
    }

    /// The child's pid (also its process-group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The child's stdin, once ([`OutputOptions::raw_pipes`] only).
    pub fn take_stdin(&mut self) -> Option<tokio::process::ChildStdin> {
        self.stdin.take()
    }

    /// The child's stdout, once ([`OutputOptions::raw_pipes`] only).
    pub fn take_stdout(&mut self) -> Option<tokio::process::ChildStdout> {
        self.stdout.take()
    }

    /// Waits for the child to exit; `Some(code)`, or `None` when a signal ended it.
    pub async fn wait(&mut self) -> Option<i32> {
        if let Some(code) = self.exit {
            return code;
        }
        let code = match self.child.wait().await {
            Ok(status) => status.code(),
            Err(_) => None,
        };
        self.exit = Some(code);
        self.tree.leader_reaped();
        code
    }

    /// Waits until stdout and stderr are fully read (after the child and everything
    /// holding its pipes exited, or were killed).
    pub async fn drain(&mut self) {
        for h in self.readers.drain(..) {
            let _ = h.await;
        }
    }

    /// Shuts the whole tree down: SIGTERM to the run's group, cgroup and adopted
    /// orphans, up to `grace` for them to go, then SIGKILL to whatever is left. Returns
    /// the child's exit code (as [`LocalProcess::wait`]).
    pub async fn shutdown(&mut self, grace: Duration) -> Option<i32> {
        let (child, exit) = (&mut self.child, &mut self.exit);
        let done = || {
            if exit.is_some() {
                return true;
            }
            match child.try_wait() {
                Ok(Some(status)) => {
                    *exit = Some(status.code());
                    true
                }
                Ok(None) => false,
                Err(_) => {
                    *exit = Some(None);
                    true
                }
            }
        };
        self.tree.shutdown(grace, done).await;
        let code = self.wait().await;
        self.tree.finish();
        self.shut_down = true;
        code
    }
}

impl Drop for LocalProcess {
    fn drop(&mut self) {
        // Safety net: an explicit shutdown() is the normal path. Whatever of the tree is
        // still there is killed now, without grace; tokio reaps the child.
        if self.shut_down {
            return;
        }
        self.tree.kill_now();
        self.tree.leader_reaped();
        self.tree.finish_soon();
    }
}

/// Reads `stdout` into capped lines on `tx`, every byte going to `tee` (the run
/// record) as it is read.
pub(crate) async fn read_lines<R: AsyncRead + Unpin>(
    stdout: R,
    cap: usize,
    tee: impl Into<StdoutRecord>,
    tx: LineSender,
) {
    let tee: StdoutRecord = tee.into();
    let mut reader = BufReader::with_capacity(64 * 1024, stdout);
    let mut line: Vec<u8> = Vec::new();
    // While skipping an over-long line: its length so far.
    let mut overlong: Option<u64> = None;
    loop {
        let chunk = match reader.fill_buf().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "reading stdout failed");
                break;
            }
        };
        if chunk.is_empty() {
            break;
        }
        tee.write(chunk);
        let n = chunk.len();
        let mut start = 0;
        let mut out = Vec::new();
        while start < n {
            match memchr(b'\n', &chunk[start..]) {
                Some(i) => {
                    let piece = &chunk[start..start + i];
                    match overlong.take() {
                        Some(len) => out.push(StdoutLine::Overlong {
                            len: len + piece.len() as u64,
                            prefix: std::mem::take(&mut line),
                        }),
                        None => {
                            if line.len() + piece.len() > cap {
                                let total = (line.len() + piece.len()) as u64;
                                extend_prefix(&mut line, piece);
                                out.push(StdoutLine::Overlong {
                                    len: total,
                                    prefix: std::mem::take(&mut line),
                                });
                            } else {
                                line.extend_from_slice(piece);
                                out.push(StdoutLine::Line(std::mem::take(&mut line)));
                            }
                        }
                    }
                    start += i + 1;
                }
                None => {
                    let piece = &chunk[start..];
                    match overlong.as_mut() {
                        Some(len) => *len += piece.len() as u64,
                        None => {
                            if line.len() + piece.len() > cap {
                                let total = (line.len() + piece.len()) as u64;
                                extend_prefix(&mut line, piece);
                                overlong = Some(total);
                            } else {
                                line.extend_from_slice(piece);
                            }
                        }
                    }
                    start = n;
                }
            }
        }
        reader.consume(n);
        for l in out {
            // When nobody listens any more, keep draining so the child never blocks on
            // a full pipe, and keep recording.
            let _ = tx.send(l).await;
        }
    }
    if let Some(len) = overlong {
        let _ = tx
            .send(StdoutLine::Overlong {
                len,
                prefix: std::mem::take(&mut line),
            })
            .await;
    } else if !line.is_empty() {
        let _ = tx.send(StdoutLine::Line(line)).await;
    }
    tee.end_of_stdout();
    sync_off_thread(tee.file_for_sync()).await;
}

/// `setpriv` (util-linux) when it is installed and supports `--pdeathsig`.
/// The trampoline's shell script without a cgroup (`$0`: aicli's pid; then the CLI and
/// its arguments): the CLI starts only while aicli lives.
const TRAMPOLINE: &str = r#"[ "$PPID" = "$0" ] || exit 125; exec "$@""#;

/// The trampoline's shell script with a cgroup (`$0`: aicli's pid, `$1`: the cgroup's
/// `cgroup.procs`; then the CLI and its arguments): joins it, then starts the CLI.
const TRAMPOLINE_JOIN: &str =
    r#"[ "$PPID" = "$0" ] || exit 125; echo 0 >"$1" || exit 125; shift; exec "$@""#;

fn setpriv() -> Option<&'static Path> {
    static SETPRIV: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    SETPRIV
        .get_or_init(|| {
            let p = ["/usr/bin/setpriv", "/bin/setpriv", "/usr/sbin/setpriv"]
                .iter()
                .map(std::path::PathBuf::from)
                .find(|p| is_executable(p))?;
            // Only a setpriv that knows the option (util-linux >= 2.33).
            let ok = std::process::Command::new(&p)
                .args(["--pdeathsig", "KILL", "--", "true"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            ok.then_some(p)
        })
        .as_deref()
}

/// fsyncs a record file on the blocking pool: an fsync takes milliseconds, and on an
/// async worker it would stall every other run's I/O.
pub async fn sync_off_thread(file: Option<File>) {
    if let Some(f) = file {
        let _ = tokio::task::spawn_blocking(move || f.sync_data()).await;
    }
}

fn extend_prefix(prefix: &mut Vec<u8>, piece: &[u8]) {
    if prefix.len() > OVERLONG_PREFIX {
        prefix.truncate(OVERLONG_PREFIX);
    }
    let room = OVERLONG_PREFIX.saturating_sub(prefix.len());
    prefix.extend_from_slice(&piece[..room.min(piece.len())]);
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|b| *b == needle)
}

/// Drains `err` into `tail`, teeing up to `file_cap` bytes into `tee`.
pub(crate) async fn drain_stderr<R: AsyncRead + Unpin>(
    mut err: R,
    tail: StderrTail,
    mut tee: Option<File>,
    file_cap: u64,
) {
    let mut buf = vec![0u8; 16 * 1024];
    let mut written: u64 = 0;
    let mut truncated = false;
    loop {
        let n = match err.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        tail.push(&buf[..n]);
        if let Some(f) = tee.as_mut() {
            if written < file_cap {
                let take = ((file_cap - written) as usize).min(n);
                let _ = f.write_all(&buf[..take]);
                written += take as u64;
            } else if !truncated {
                truncated = true;
                let _ = writeln!(f, "\n[aicli: stderr.log truncated after {file_cap} bytes]");
            }
        }
    }
    sync_off_thread(tee).await;
}

/// Whether `path` is an executable file.
pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_split_and_capped() {
        let input: &[u8] = b"one\ntwo\r\nthree-is-long\nfour";
        let (tx, mut rx) = line_channel(1 << 20);
        read_lines(input, 8, None, tx).await;
        let mut got = Vec::new();
        while let Some(l) = rx.recv().await {
            got.push(l);
        }
        assert_eq!(
            got,
            vec![
                StdoutLine::Line(b"one".to_vec()),
                StdoutLine::Line(b"two\r".to_vec()),
                StdoutLine::Overlong {
                    len: 13,
                    prefix: b"three-is-long".to_vec()
                },
                StdoutLine::Line(b"four".to_vec()),
            ]
        );
    }

    #[tokio::test]
    async fn an_overlong_line_spanning_reads_keeps_only_a_prefix() {
        let big = vec![b'x'; 200_000];
        let mut input = big.clone();
        input.extend_from_slice(b"\nok\n");
        let (tx, mut rx) = line_channel(1 << 20);
        read_lines(&input[..], 1024, None, tx).await;
        match rx.recv().await {
            Some(StdoutLine::Overlong { len, prefix }) => {
                assert_eq!(len, 200_000);
                assert_eq!(prefix.len(), OVERLONG_PREFIX);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(rx.recv().await, Some(StdoutLine::Line(b"ok".to_vec())));
    }

    #[tokio::test]
    async fn lines_wait_for_room_in_bytes_and_one_long_line_still_passes() {
        let (tx, mut rx) = line_channel(1000);
        let reader = tokio::spawn(async move {
            for i in 0..10 {
                tx.send(StdoutLine::Line(vec![b'a' + i; 400]))
                    .await
                    .unwrap();
            }
            // Longer than the whole bound: it takes all the room, and passes alone.
            tx.send(StdoutLine::Line(vec![b'z'; 5000])).await.unwrap();
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Two lines of 400 fit in 1000 bytes; the reader waits for the third.
        assert!(!reader.is_finished());
        assert_eq!(rx.rx.len(), 2);
        let mut got = Vec::new();
        while let Some(StdoutLine::Line(l)) = rx.recv().await {
            got.push(l.len());
            assert!(rx.rx.len() <= 2, "more queued than the bound");
        }
        assert_eq!(
            got,
            [400, 400, 400, 400, 400, 400, 400, 400, 400, 400, 5000]
        );
        reader.await.unwrap();
    }

    #[test]
    fn stderr_tail_keeps_the_end() {
        let t = StderrTail::new(5);
        t.push(b"hello ");
        t.push(b"world");
        assert_eq!(
            t.text(),
            "[aicli: 6 earlier bytes of stderr not kept]\nworld"
        );
    }
}

/// What a short command printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    /// Its stdout.
    pub stdout: String,
    /// Its stderr (tail).
    pub stderr: String,
    /// Its exit code (`None`: killed, e.g. by the timeout).
    pub exit_code: Option<i32>,
    /// Whether the timeout ended it.
    pub timed_out: bool,
}

/// Runs a short command (a version or status probe) under the same supervision as a
/// CLI run — own session, tree killed at the end — and captures its output.
pub async fn run_capture(cmd: &CommandSpec, timeout: Duration) -> Result<Captured, SpawnError> {
    let mut p = LocalProcess::spawn(cmd, OutputOptions::default())?;
    let mut stdout = Vec::new();
    let collect = async {
        while let Some(line) = p.lines.recv().await {
            match line {
                StdoutLine::Line(l) => stdout.push(String::from_utf8_lossy(&l).into_owned()),
                StdoutLine::Overlong { prefix, .. } => {
                    stdout.push(String::from_utf8_lossy(&prefix).into_owned())
                }
            }
        }
    };
    let timed_out = tokio::time::timeout(timeout, collect).await.is_err();
    let exit_code = if timed_out {
        p.shutdown(Duration::from_millis(500)).await
    } else {
        let code = tokio::time::timeout(timeout, p.wait()).await.ok().flatten();
        p.shutdown(Duration::from_millis(500)).await;
        code
    };
    p.drain().await;
    Ok(Captured {
        stdout: stdout.join("\n"),
        stderr: p.stderr.text(),
        exit_code,
        timed_out,
    })
}
