//! Spawning a CLI ([`LocalProcess`]): its own process group, a cgroup of its own where
//! one can be made, a parent-death signal ([`super::direct`]), its processes recorded
//! before it exists ([`super::leftovers::PidRecord`]), its pipes read ([`super::lines`]); and the explicit shutdown of its
//! whole tree ([`super::tree::RunTree`]) — SIGTERM, a grace period, SIGKILL — with
//! `Drop` as the safety net.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

use aicli_providers::CommandSpec;
use tokio::io::AsyncWriteExt;
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;
use tokio::task::JoinHandle;

use super::cgroup::CgroupMode;
use super::leftovers::{PidRecord, write_pids};
use super::lines::{
    LINE_QUEUE_BYTES, LineReceiver, StderrTail, drain_stderr, line_channel, read_lines,
};
use super::reaper::spawn_leader;
use super::direct;
use super::stdin::{StdinWriter, StdoutRecord};
use super::tree::{RUN_MARKER_VAR, RunTree, new_marker, run_cgroup};

/// Options for reading a child's output.
#[derive(Debug)]
pub struct OutputOptions {
    /// Longest stdout line accepted, bytes.
    pub line_cap: usize,
    /// Bytes of stderr kept in memory (the tail).
    pub stderr_tail: usize,
    /// Every stdout byte, as read, goes here too (the run record's `events.ndjson`).
    pub stdout_tee: Option<File>,
    /// Every stderr byte goes to this file too, up to `stderr_file_cap` (the run
    /// record's `stderr.log`): opened for appending (made 0600) on the first byte, so a
    /// CLI that prints nothing there makes no file.
    pub stderr_tee: Option<std::path::PathBuf>,
    /// Most stderr bytes written to `stderr_tee`.
    pub stderr_file_cap: u64,
    /// Where the run's leader, marker and cgroup are recorded while it lives (a task's
    /// run: its batch's journal), so that `aicli resume` can kill what is left if aicli
    /// itself dies.
    pub pids: Option<PidRecord>,
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
            pids: None,
            raw_pipes: false,
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
    child: Leader,
    pid: u32,
    /// A two-way run's stdin ([`CommandSpec::stdin_open`]), until taken.
    pub stdin_writer: Option<StdinWriter>,
    /// Closed when stdout reaches EOF (at once with [`OutputOptions::raw_pipes`]).
    pub lines: LineReceiver,
    /// The pipes handed to the caller with [`OutputOptions::raw_pipes`].
    stdin: Option<pipe::Sender>,
    stdout: Option<pipe::Receiver>,
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
        // The CLI starts straight from a vfork'd child ([`super::direct`]): its
        // parent-death signal set (if aicli itself dies, even by SIGKILL, the kernel
        // kills it; its own descendants are found and killed on the next `aicli
        // resume`, through the record written before the spawn), its own process group
        // (pgid = its pid: the whole group can be signalled, and a Ctrl-C on aicli's
        // terminal does not reach it), and the run's cgroup joined, so that every
        // descendant is born in it. The run's marker: every descendant inherits it, so an
        // orphan aicli adopts (or finds after a restart) can be told apart from other
        // runs' without a cgroup.
        let marker = new_marker();
        let mut env = direct::environment(
            cmd.env_clear,
            cmd.env.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            &cmd.env_remove,
        );
        env.insert(RUN_MARKER_VAR.into(), marker.clone().into());
        let start_error = |source: std::io::Error| SpawnError::Start {
            program: cmd.program.display().to_string(),
            source,
        };
        let mut plan = direct::Plan::new(&cmd.program, &cmd.args, &env, &cmd.cwd)
            .map_err(start_error)?;
        let cgroup = run_cgroup(cgroups);
        if let Some(cg) = &cgroup {
            let v2 = (cg.version() == super::cgroup::Version::V2).then(|| cg.path());
            plan.join(&cg.procs_file(), v2).map_err(start_error)?;
        }
        // What `aicli resume` needs to find the run's processes goes into its record
        // before any of them exists: a kill -9 of aicli between the spawn and the
        // leader's line leaves the marker and the cgroup to look in.
        if let Some(r) = &out.pids {
            write_pids(r, None, &marker, cgroup.as_ref());
        }
        let pipes = Pipes::new(cmd.stdin.is_some() || cmd.stdin_open || out.raw_pipes)
            .map_err(start_error)?;
        let started = match spawn_leader(|| direct::spawn(&plan, pipes.child()), |s| Some(s.pid))
        {
            Ok(started) => started,
            Err(e) => {
                // Nothing started: nothing of the run is left behind either.
                if let Some(cg) = &cgroup {
                    cg.remove();
                }
                if let Some(r) = &out.pids {
                    r.clear();
                }
                return Err(start_error(e));
            }
        };
        let pid = started.pid;
        let tree = RunTree::started(pid, marker, cgroup, out.pids.clone());
        // SAFETY: the pidfd is owned by the AsyncFd and closed only with it.
        let registered = unsafe {
            AsyncFd::register_with_interest(started.pidfd, tokio::io::Interest::READABLE)
        };
        let child = match registered {
            Ok(pidfd) => Leader { pidfd },
            Err(e) => {
                let (pidfd, e) = e.into_parts();
                // aicli cannot wait for it (the runtime refused the descriptor): it goes
                // at once, with everything of its run.
                let mut tree = tree;
                tree.abandon(Some(pidfd));
                return Err(start_error(e));
            }
        };
        let io = Io::attach(pipes.parent(), cmd, out);
        tracing::debug!(pid, program = %cmd.program.display(), cgroup = ?tree.cgroup().map(|c| c.path().display().to_string()), "spawned");
        Ok(LocalProcess {
            child,
            pid,
            stdin_writer: io.stdin_writer,
            lines: io.lines,
            stdin: io.stdin,
            stdout: io.stdout,
            stderr: io.stderr,
            readers: io.readers,
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
    pub fn take_stdin(&mut self) -> Option<pipe::Sender> {
        self.stdin.take()
    }

    /// The child's stdout, once ([`OutputOptions::raw_pipes`] only).
    pub fn take_stdout(&mut self) -> Option<pipe::Receiver> {
        self.stdout.take()
    }

    /// Waits for the child to exit; `Some(code)`, or `None` when a signal ended it.
    pub async fn wait(&mut self) -> Option<i32> {
        if let Some(code) = self.exit {
            return code;
        }
        let code = self.child.wait().await.unwrap_or(None);
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
                Ok(Some(code)) => {
                    *exit = Some(code);
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
        // still there is killed now, without grace; the cleanup thread reaps the leader
        // (through a copy of its pidfd) and what the reaper finds.
        if self.shut_down {
            return;
        }
        let leader = match self.exit {
            None => self.child.pidfd.get_ref().try_clone().ok(),
            Some(_) => None,
        };
        self.tree.abandon(leader);
    }
}

/// Whether `path` is an executable file.
pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The child's standard streams: pipes (stdin a pipe only when something is written to
/// it, else `/dev/null`), the parent's ends already made non-blocking for tokio (a
/// pipe's two ends are apart, so the child's stay blocking). Every descriptor is
/// close-on-exec: a CLI spawned meanwhile by another thread inherits none.
struct Pipes {
    child_stdin: OwnedFd,
    child_stdout: OwnedFd,
    child_stderr: OwnedFd,
    stdin: Option<pipe::Sender>,
    stdout: pipe::Receiver,
    stderr: pipe::Receiver,
}

impl Pipes {
    fn new(stdin_piped: bool) -> std::io::Result<Pipes> {
        let make = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from);
        let (child_stdin, stdin) = if stdin_piped {
            let (r, w) = make()?;
            (r, Some(pipe::Sender::from_owned_fd(w)?))
        } else {
            (OwnedFd::from(File::open("/dev/null")?), None)
        };
        let (out_r, out_w) = make()?;
        let (err_r, err_w) = make()?;
        Ok(Pipes {
            child_stdin,
            child_stdout: out_w,
            child_stderr: err_w,
            stdin,
            stdout: pipe::Receiver::from_owned_fd(out_r)?,
            stderr: pipe::Receiver::from_owned_fd(err_r)?,
        })
    }

    fn child(&self) -> direct::ChildFds<'_> {
        direct::ChildFds {
            stdin: &self.child_stdin,
            stdout: &self.child_stdout,
            stderr: &self.child_stderr,
        }
    }

    /// The parent's ends; the child's are closed here (the child has its copies).
    fn parent(self) -> ParentEnds {
        ParentEnds {
            stdin: self.stdin,
            stdout: self.stdout,
            stderr: self.stderr,
        }
    }
}

/// The parent's ends of a child's pipes.
struct ParentEnds {
    stdin: Option<pipe::Sender>,
    stdout: pipe::Receiver,
    stderr: pipe::Receiver,
}

/// A run's leader as aicli waits for it: its pidfd, readable once it exits.
#[derive(Debug)]
struct Leader {
    pidfd: AsyncFd<OwnedFd>,
}

impl Leader {
    /// Waits for the exit and reaps it: `Some(code)`, or `None` when a signal ended it.
    async fn wait(&self) -> std::io::Result<Option<i32>> {
        loop {
            if let Some(code) = self.try_wait()? {
                return Ok(code);
            }
            let mut ready = self.pidfd.readable().await?;
            ready.clear_ready();
        }
    }

    /// Reaps the exit if it came (`Some`), without waiting.
    fn try_wait(&self) -> std::io::Result<Option<Option<i32>>> {
        direct::wait_pidfd(self.pidfd.get_ref(), libc::WNOHANG)
    }
}

/// A just-spawned child's pipes, as [`LocalProcess`] keeps them: stdin written (its
/// text, or a two-way run's [`StdinWriter`]) or handed over raw, stdout read into
/// lines, stderr drained into its tail.
struct Io {
    stdin_writer: Option<StdinWriter>,
    lines: LineReceiver,
    stdin: Option<pipe::Sender>,
    stdout: Option<pipe::Receiver>,
    stderr: StderrTail,
    readers: Vec<JoinHandle<()>>,
}

impl Io {
    /// Takes the child's pipes and starts the tasks that write and read them.
    fn attach(ends: ParentEnds, cmd: &CommandSpec, out: OutputOptions) -> Io {
        let ParentEnds {
            mut stdin,
            stdout,
            stderr: err,
        } = ends;
        let mut readers = Vec::new();
        let mut stdout = Some(stdout);
        let (mut raw_stdin, mut raw_stdout) = (None, None);
        if out.raw_pipes {
            raw_stdin = stdin.take();
            raw_stdout = stdout.take();
        }
        let record = StdoutRecord::from(out.stdout_tee);
        let mut stdin_writer = None;
        match (cmd.stdin_open, stdin) {
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
        if let Some(stdout) = stdout {
            let cap = out.line_cap;
            readers.push(tokio::spawn(read_lines(stdout, cap, record, tx)));
        }
        let stderr = StderrTail::new(out.stderr_tail);
        {
            let tail = stderr.clone();
            let tee = out.stderr_tee;
            let cap = out.stderr_file_cap;
            readers.push(tokio::spawn(drain_stderr(err, tail, tee, cap)));
        }
        Io {
            stdin_writer,
            lines: rx,
            stdin: raw_stdin,
            stdout: raw_stdout,
            stderr,
            readers,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sleep_30() -> CommandSpec {
        CommandSpec {
            program: "/bin/sleep".into(),
            args: vec!["30".into()],
            env: Default::default(),
            env_remove: Vec::new(),
            env_clear: false,
            stdin: None,
            stdin_open: false,
            cwd: "/".into(),
            files: Vec::new(),
            links: Vec::new(),
            notices: Vec::new(),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cli_starts_in_its_run_cgroup() {
        for mode in [CgroupMode::V2, CgroupMode::V1] {
            if super::super::cgroup::available(mode).is_none() {
                eprintln!("cgroups {mode:?}: not available on this machine; not tested here");
                continue;
            }
            let mut p = LocalProcess::spawn_in(&sleep_30(), OutputOptions::default(), mode).unwrap();
            let cgroup = p.tree.cgroup().expect("a run cgroup").path().to_path_buf();
            let name = cgroup.file_name().unwrap().to_str().unwrap().to_owned();
            let text = std::fs::read_to_string(format!("/proc/{}/cgroup", p.pid())).unwrap();
            assert!(
                text.lines().any(|l| l.ends_with(&format!("/{name}"))),
                "{mode:?}: the CLI is not in {}:\n{text}",
                cgroup.display()
            );
            p.shutdown(Duration::from_secs(1)).await;
            assert!(!cgroup.exists(), "{mode:?}: {} is left", cgroup.display());
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_dropped_without_a_wait_leaves_no_zombie() {
        let p = LocalProcess::spawn_in(&sleep_30(), OutputOptions::default(), CgroupMode::Off).unwrap();
        let pid = p.pid();
        assert!(super::super::procfs::proc_stat(pid).is_some());
        drop(p);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while let Some(st) = super::super::procfs::proc_stat(pid) {
            assert!(
                std::time::Instant::now() < deadline,
                "pid {pid} is still there ({}) 5 s after its run was dropped",
                st.state
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
