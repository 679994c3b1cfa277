//! How a CLI starts so that aicli's death kills it and it is in its cgroup from its
//! first instruction on.
//!
//! The parent-death signal is set by `setpriv --pdeathsig` (util-linux), which then
//! execs a shell that checks that its parent is still aicli (a parent that died before
//! the signal was set would never send it) and only then joins the run's cgroup and
//! execs the CLI: from the CLI's first instruction on, aicli's death kills it, and
//! everything stays posix_spawn. Without setpriv, a pre_exec hook ([`hook`]) does the
//! same, which makes std fork aicli's whole address space for every CLI (~3x slower
//! spawning).

use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::process::Stdio;

use nix::sys::signal::Signal;
use tokio::process::Command;

use super::cgroup::RunCgroup;
use super::spawn::is_executable;

/// The trampoline's shell script without a cgroup (`$0`: aicli's pid; then the CLI and
/// its arguments): the CLI starts only while aicli lives.
const TRAMPOLINE: &str = r#"[ "$PPID" = "$0" ] || exit 125; exec "$@""#;

/// The trampoline's shell script with a cgroup (`$0`: aicli's pid, `$1`: the cgroup's
/// `cgroup.procs`; then the CLI and its arguments): joins it, then starts the CLI.
const TRAMPOLINE_JOIN: &str =
    r#"[ "$PPID" = "$0" ] || exit 125; echo 0 >"$1" || exit 125; shift; exec "$@""#;

/// `setpriv` (util-linux) when it is installed and supports `--pdeathsig`.
pub(super) fn setpriv() -> Option<&'static Path> {
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

/// The command that starts `program` (its arguments still to add): through `setpriv`'s
/// trampoline (joining `cgroup`, if any, with `parent` as aicli's pid), or `program`
/// itself when there is no setpriv or no `/bin/sh`. The flag says whether the command
/// still needs [`hook`].
pub(super) fn command(
    program: &Path,
    setpriv: Option<&Path>,
    cgroup: Option<&RunCgroup>,
    parent: u32,
) -> (Command, bool) {
    let shell = Path::new("/bin/sh");
    match setpriv {
        Some(setpriv) if shell.exists() => {
            let mut c = Command::new(setpriv);
            c.args(["--pdeathsig", "KILL", "--"]).arg(shell).arg("-c");
            match cgroup {
                Some(cg) => {
                    c.arg(TRAMPOLINE_JOIN)
                        .arg(parent.to_string())
                        .arg(cg.procs_file());
                }
                None => {
                    c.arg(TRAMPOLINE).arg(parent.to_string());
                }
            }
            c.arg(program);
            (c, false)
        }
        Some(_) | None => (Command::new(program), true),
    }
}

/// The trampoline's work as a pre_exec hook (in the forked child, before exec): the
/// parent-death signal, the check that `parent` still lives, joining `cgroup`.
pub(super) fn hook(c: &mut Command, parent: u32, cgroup: Option<&RunCgroup>) {
    let join = cgroup
        .and_then(|cg| std::ffi::CString::new(cg.procs_file().into_os_string().into_vec()).ok());
    // SAFETY: prctl, getppid, open, write and close are async-signal-safe; the
    // path was allocated before the fork; no parent memory is touched.
    unsafe {
        c.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
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
