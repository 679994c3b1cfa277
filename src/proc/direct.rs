//! How a CLI starts: one `clone3` or `clone` (`CLONE_VM | CLONE_VFORK | CLONE_PIDFD`)
//! straight into the CLI's `execve`, the way `posix_spawn` starts a process, with what
//! containment needs done in the child first:
//!
//! 1. the parent-death signal (SIGKILL), then the check that its parent is still aicli
//!    (a parent that died before the signal was set would never send it): from the
//!    CLI's first instruction on, aicli's death kills it, and a CLI never starts once
//!    aicli is dead;
//! 2. its own process group;
//! 3. the run's cgroup joined, so that every descendant is born in it: a v2 cgroup on
//!    x86_64 is joined by the clone itself (`clone3` with `CLONE_INTO_CGROUP`, no
//!    migration, which would take the kernel's global cgroup lock for writing); else,
//!    or where `clone3` is refused, the child writes itself to `cgroup.procs`;
//! 4. its pipes, its directory, default signal dispositions, an empty signal mask.
//!
//! The parent-death signal follows the *thread* that spawned (the kernel's rule): a
//! spawn must run on a thread that lives as long as its run (a runtime worker, never a
//! blocking-pool thread, which retires when idle).
//!
//! The child shares aicli's memory until its `execve` (aicli's calling thread waits
//! meanwhile), so nothing is copied, and only async-signal-safe system calls run there,
//! on a stack of its own, with every signal blocked until the handlers it could run are
//! reset. A failing step is reported through that shared memory: the spawn's error
//! names the step and the OS error. The pidfd is the handle aicli waits on.
//!
//! It replaces a `setpriv --pdeathsig` + `sh -c` trampoline (3 execs per CLI) and std's
//! `pre_exec` fork (a copy of aicli's page tables per CLI).

use std::collections::BTreeMap;
use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};

use libc::{c_char, c_int, c_void};

/// The child's stack: the steps above need little (a guard page below it).
const STACK_BYTES: usize = 64 * 1024;

/// Whether `clone3` may be tried: off for good once the kernel (or a seccomp filter,
/// as Docker's default one) refuses it.
static CLONE3: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// What the child is told: everything allocated before the clone.
pub(super) struct Plan {
    /// The executable, resolved along `PATH`.
    program: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: CString,
    /// The run's cgroup's `cgroup.procs`, joined before the exec.
    cgroup_procs: Option<CString>,
    /// The run's cgroup's directory, where it is a v2 one: the child is born there
    /// (`clone3`'s `CLONE_INTO_CGROUP`, x86_64), with no migration (which takes the
    /// kernel's global cgroup lock for writing).
    cgroup_dir: Option<OwnedFd>,
}

/// The child's ends of its standard streams (dup'ed onto 0, 1, 2).
pub(super) struct ChildFds<'a> {
    pub stdin: &'a OwnedFd,
    pub stdout: &'a OwnedFd,
    pub stderr: &'a OwnedFd,
}

impl Plan {
    /// The plan for `program` with `args` (argv[0] is `program` as given), in `cwd`,
    /// with the environment `env` (whole).
    pub(super) fn new(
        program: &Path,
        args: &[String],
        env: &BTreeMap<OsString, OsString>,
        cwd: &Path,
    ) -> io::Result<Plan> {
        let resolved = resolve(program, env, cwd)?;
        let mut argv = vec![c_string(program.as_os_str().as_bytes(), "the program")?];
        for a in args {
            argv.push(c_string(a.as_bytes(), "an argument")?);
        }
        let envp = env
            .iter()
            .map(|(k, v)| {
                let mut kv = k.as_bytes().to_vec();
                kv.push(b'=');
                kv.extend_from_slice(v.as_bytes());
                c_string(&kv, "an environment variable")
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Plan {
            program: c_string(resolved.as_os_str().as_bytes(), "the program")?,
            argv,
            envp,
            cwd: c_string(cwd.as_os_str().as_bytes(), "the working directory")?,
            cgroup_procs: None,
            cgroup_dir: None,
        })
    }

    /// The child joins the cgroup whose `cgroup.procs` is `procs` before it execs;
    /// `v2_dir` is that cgroup's directory when it is in the unified hierarchy.
    pub(super) fn join(&mut self, procs: &Path, v2_dir: Option<&Path>) -> io::Result<()> {
        self.cgroup_procs = Some(c_string(procs.as_os_str().as_bytes(), "the cgroup")?);
        if cfg!(target_arch = "x86_64")
            && CLONE3.load(Ordering::Relaxed)
            && let Some(dir) = v2_dir
        {
            use std::os::unix::fs::OpenOptionsExt;
            let f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
                .open(dir)?;
            self.cgroup_dir = Some(OwnedFd::from(f));
        }
        Ok(())
    }
}

fn c_string(bytes: &[u8], what: &str) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} contains a NUL byte"),
        )
    })
}

/// `program` as `execve` needs it: a path with a slash as is (relative to `cwd`, where
/// the child is when it execs), a bare name looked up along the child's `PATH` (aicli's
/// when the child has none).
fn resolve(program: &Path, env: &BTreeMap<OsString, OsString>, cwd: &Path) -> io::Result<PathBuf> {
    if program.as_os_str().as_bytes().contains(&b'/') {
        if !cwd.join(program).exists() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} does not exist", program.display()),
            ));
        }
        return Ok(program.to_path_buf());
    }
    let path = env
        .get(std::ffi::OsStr::new("PATH"))
        .cloned()
        .or_else(|| std::env::var_os("PATH"))
        .unwrap_or_default();
    which::which_in(program, Some(path), cwd).map_err(|_| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("{} is not found along PATH", program.display()),
        )
    })
}

/// The steps the child takes, in order, as its failure names them.
const STEPS: [&str; 7] = [
    "resetting its signal handlers",
    "setting its parent-death signal",
    "checking that aicli still lives (aicli exited while starting it)",
    "making its process group",
    "joining the run's cgroup",
    "redirecting its standard streams",
    "changing to its working directory",
];
const STEP_EXEC: i32 = STEPS.len() as i32;

/// The child's view: raw pointers into the parent's memory (shared until the exec).
struct ChildArgs {
    program: *const c_char,
    argv: *const *const c_char,
    sh_argv: *const *const c_char,
    envp: *const *const c_char,
    cwd: *const c_char,
    cgroup_procs: *const c_char,
    parent: libc::pid_t,
    fds: [RawFd; 3],
    /// Written by a child that failed: the step's index (then the errno).
    failed_step: AtomicI32,
    errno: AtomicI32,
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("aicli's spawn knows the kernel's sigaction layout of x86_64 and aarch64 only");

/// The kernel's `struct sigaction` (x86_64 and aarch64), for raw `rt_sigaction`: glibc's
/// wrapper refuses its own internal signals, whose handlers must not run in the child
/// either.
#[repr(C)]
struct KernelSigaction {
    handler: usize,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

/// The kernel's signal set size (`_NSIG / 8`).
const KERNEL_SIGSET: usize = 8;

/// Sets this thread's signal mask to `set` (raw, all 64 signals), the previous one in
/// `old`.
unsafe fn set_mask(set: &u64, old: *mut u64) -> c_int {
    // SAFETY: the kernel reads 8 bytes at `set` and writes 8 at `old` (or nothing, NULL).
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            set as *const u64,
            old,
            KERNEL_SIGSET,
        ) as c_int
    }
}

/// The child, between the clone and the exec. Only raw system calls; nothing that
/// allocates, locks or can panic.
extern "C" fn child(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the parent's `ChildArgs`, alive while the parent waits (vfork).
    let a = unsafe { &*(arg as *const ChildArgs) };
    let fail = |step: i32| -> c_int {
        // SAFETY: reading errno and exiting without running any of the parent's
        // handlers are what a vfork child may do.
        unsafe {
            a.errno
                .store(*libc::__errno_location(), Ordering::Relaxed);
            a.failed_step.store(step, Ordering::Relaxed);
            libc::_exit(127)
        }
    };
    // SAFETY: raw system calls on memory the parent prepared; see each step.
    unsafe {
        // 0. No handler of aicli's may run here (it would run in aicli's memory): every
        //    caught signal back to its default; SIGPIPE too, which Rust ignores and an
        //    exec would keep ignored.
        for sig in 1..=64 {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let mut old = KernelSigaction {
                handler: 0,
                flags: 0,
                restorer: 0,
                mask: 0,
            };
            let got = libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                std::ptr::null::<KernelSigaction>(),
                &mut old as *mut KernelSigaction,
                KERNEL_SIGSET,
            );
            if got != 0 {
                continue;
            }
            let caught = old.handler != libc::SIG_DFL && old.handler != libc::SIG_IGN;
            if caught || sig == libc::SIGPIPE {
                let dfl = KernelSigaction {
                    handler: libc::SIG_DFL,
                    flags: 0,
                    restorer: 0,
                    mask: 0,
                };
                if libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    &dfl as *const KernelSigaction,
                    std::ptr::null_mut::<KernelSigaction>(),
                    KERNEL_SIGSET,
                ) != 0
                {
                    return fail(0);
                }
            }
        }
        // 1, 2. The parent-death signal, then the parent's check.
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
            return fail(1);
        }
        if libc::getppid() != a.parent {
            *libc::__errno_location() = libc::ESRCH;
            return fail(2);
        }
        // 3. Its own process group (pgid = its pid).
        if libc::setpgid(0, 0) != 0 {
            return fail(3);
        }
        // 4. The run's cgroup.
        if !a.cgroup_procs.is_null() {
            let fd = libc::open(a.cgroup_procs, libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return fail(4);
            }
            if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                return fail(4);
            }
            libc::close(fd);
        }
        // 5. stdin, stdout, stderr (the pipes are close-on-exec, their copies are not).
        for (target, fd) in a.fds.iter().enumerate() {
            let target = target as c_int;
            if *fd == target {
                let flags = libc::fcntl(target, libc::F_GETFD);
                if flags < 0 || libc::fcntl(target, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0
                {
                    return fail(5);
                }
            } else if libc::dup2(*fd, target) < 0 {
                return fail(5);
            }
        }
        // 6. Its directory.
        if libc::chdir(a.cwd) != 0 {
            return fail(6);
        }
        // Every signal unblocked, as a new process expects; nothing of aicli's can
        // catch one now.
        let empty: u64 = 0;
        if set_mask(&empty, std::ptr::null_mut()) != 0 {
            return fail(0);
        }
        libc::execve(a.program, a.argv, a.envp);
        if *libc::__errno_location() == libc::ENOEXEC {
            libc::execve(c"/bin/sh".as_ptr(), a.sh_argv, a.envp);
            *libc::__errno_location() = libc::ENOEXEC;
        }
        fail(STEP_EXEC)
    }
}

/// A started child: its pid and its pidfd.
pub(super) struct Started {
    pub pid: u32,
    pub pidfd: OwnedFd,
}

/// Starts `plan` with `fds` as its standard streams, in its own process group, with
/// `parent` (this process) as the parent its death kills it with.
pub(super) fn spawn(plan: &Plan, fds: ChildFds<'_>) -> io::Result<Started> {
    let pointers = |v: &[CString]| -> Vec<*const c_char> {
        v.iter()
            .map(|s| s.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    };
    let argv = pointers(&plan.argv);
    // `sh <program> <args>`: a script without `#!` is run by `/bin/sh`, as `execvp` and
    // a shell do.
    let sh_argv: Vec<*const c_char> = [c"sh".as_ptr(), plan.program.as_ptr()]
        .into_iter()
        .chain(argv[1..].iter().copied())
        .collect();
    let envp = pointers(&plan.envp);
    // A source below 3 that is not its own target would be overwritten by an earlier
    // dup2 in the child: such a one is copied above 2 first.
    let mut lifted = Vec::new();
    let mut source = |fd: &OwnedFd, target: RawFd| -> io::Result<RawFd> {
        let raw = fd.as_raw_fd();
        if raw >= 3 || raw == target {
            return Ok(raw);
        }
        let copy = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(3))
            .map_err(io::Error::from)?;
        // SAFETY: a new descriptor, ours alone.
        lifted.push(unsafe { OwnedFd::from_raw_fd(copy) });
        Ok(copy)
    };
    let fds = [
        source(fds.stdin, 0)?,
        source(fds.stdout, 1)?,
        source(fds.stderr, 2)?,
    ];
    let mut args = ChildArgs {
        program: plan.program.as_ptr(),
        argv: argv.as_ptr(),
        sh_argv: sh_argv.as_ptr(),
        envp: envp.as_ptr(),
        cwd: plan.cwd.as_ptr(),
        cgroup_procs: plan
            .cgroup_procs
            .as_ref()
            .map_or(std::ptr::null(), |c| c.as_ptr()),
        parent: std::process::id() as libc::pid_t,
        fds,
        failed_step: AtomicI32::new(-1),
        errno: AtomicI32::new(0),
    };
    let stack = Stack::new()?;
    let mut pidfd: c_int = -1;
    let all: u64 = !0;
    let mut old: u64 = 0;
    // SAFETY: every signal blocked on this thread across the clone (the child starts
    // with them blocked and resets the handlers before it unblocks them); `child` only
    // reads `args` and the plan, which outlive the call (CLONE_VFORK: this thread
    // resumes only once the child has exec'd or exited); the stack is the child's alone.
    let pid = unsafe {
        if set_mask(&all, &mut old) != 0 {
            return Err(io::Error::last_os_error());
        }
        if let Some(dir) = &plan.cgroup_dir {
            // Born in its cgroup: the child has nothing to join.
            let procs = std::mem::replace(&mut args.cgroup_procs, std::ptr::null());
            let pid = clone3_into(&args, &stack, dir.as_raw_fd(), &mut pidfd);
            if pid >= 0 {
                set_mask(&old, std::ptr::null_mut());
                return finish(pid, pidfd, &args);
            }
            let errno = -pid as c_int;
            if ![libc::ENOSYS, libc::EPERM, libc::E2BIG, libc::EINVAL].contains(&errno) {
                set_mask(&old, std::ptr::null_mut());
                let os = io::Error::from_raw_os_error(errno);
                return Err(io::Error::new(os.kind(), format!("{}: {os}", STEPS[4])));
            }
            // Refused: the clone below, and the child joins by itself.
            CLONE3.store(false, Ordering::Relaxed);
            tracing::debug!(errno, "clone3 refused; CLIs join their cgroup after the clone");
            args.cgroup_procs = procs;
        }
        let pid = libc::clone(
            child,
            stack.top(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD | libc::SIGCHLD,
            &args as *const ChildArgs as *mut c_void,
            &mut pidfd as *mut c_int,
        );
        let clone_error = io::Error::last_os_error();
        set_mask(&old, std::ptr::null_mut());
        if pid < 0 {
            return Err(io::Error::new(
                clone_error.kind(),
                format!("clone: {clone_error}"),
            ));
        }
        pid
    };
    drop(stack);
    finish(pid, pidfd, &args)
}

/// `struct clone_args` of `clone3(2)` (linux/sched.h, up to `cgroup`: 88 bytes).
#[repr(C)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// `CLONE_INTO_CGROUP` (Linux 5.7).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `clone3(CLONE_VM | CLONE_VFORK | CLONE_PIDFD | CLONE_INTO_CGROUP)` running [`child`]
/// with `args` on `stack`, born in the cgroup whose directory is `cgroup`: the child's
/// pid, or `-errno`. The raw system call switches stacks, so the child's first
/// instructions are this function's own (no libc wrapper exists).
unsafe fn clone3_into(args: &ChildArgs, stack: &Stack, cgroup: RawFd, pidfd: &mut c_int) -> c_int {
    let (low, size) = stack.span();
    let ca = CloneArgs {
        flags: (libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD) as u64 | CLONE_INTO_CGROUP,
        pidfd: pidfd as *mut c_int as u64,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: libc::SIGCHLD as u64,
        stack: low,
        stack_size: size,
        tls: 0,
        set_tid: 0,
        set_tid_size: 0,
        cgroup: cgroup as u64,
    };
    #[cfg(target_arch = "x86_64")]
    {
        let ret: i64;
        let entry: extern "C" fn(*mut c_void) -> c_int = child;
        // SAFETY: the kernel reads `ca` (alive across the call). In the parent the
        // syscall returns the pid (or -errno) in rax, clobbering rcx and r11 only. In the
        // child (rax 0) the stack pointer is the top of `stack` (16-byte aligned, so the
        // call leaves the callee's frame aligned as the ABI wants), r12 and r13 still hold
        // the entry and its argument; `child` never returns (it execs or `_exit`s), and
        // the exit after it is there in case it ever did.
        unsafe {
            std::arch::asm!(
                "syscall",
                "test rax, rax",
                "jnz 2f",
                "xor ebp, ebp",
                "mov rdi, r13",
                "call r12",
                "mov edi, eax",
                "mov eax, 60",
                "syscall",
                "ud2",
                "2:",
                inlateout("rax") libc::SYS_clone3 => ret,
                in("rdi") &ca as *const CloneArgs,
                in("rsi") std::mem::size_of::<CloneArgs>(),
                in("r12") entry,
                in("r13") args as *const ChildArgs as *mut c_void,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        ret as c_int
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (args, ca);
        -libc::ENOSYS
    }
}

/// The parent's side once the child exec'd or exited: its pidfd, or the step it failed
/// at (then it is reaped here).
fn finish(pid: c_int, pidfd: c_int, args: &ChildArgs) -> io::Result<Started> {
    // SAFETY: CLONE_PIDFD stored a new descriptor that is ours alone.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    let step = args.failed_step.load(Ordering::Relaxed);
    if step >= 0 {
        // The child exited at that step: reap it here, it is nobody else's.
        let _ = wait_pidfd(&pidfd, 0);
        let os = io::Error::from_raw_os_error(args.errno.load(Ordering::Relaxed));
        let what = STEPS.get(step as usize).copied().unwrap_or("executing it");
        return Err(io::Error::new(os.kind(), format!("{what}: {os}")));
    }
    Ok(Started {
        pid: pid as u32,
        pidfd,
    })
}

/// `waitid(P_PIDFD)` with `flags` (plus `WEXITED`): `None` while the child runs (with
/// `WNOHANG`), else its exit code (`None` inside when a signal ended it).
pub(super) fn wait_pidfd(pidfd: &OwnedFd, flags: c_int) -> io::Result<Option<Option<i32>>> {
    // SAFETY: a zeroed siginfo_t is valid; waitid fills it.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: a pidfd we own and a siginfo_t on our stack.
        let r = unsafe {
            libc::waitid(
                libc::P_PIDFD,
                pidfd.as_raw_fd() as libc::id_t,
                &mut info,
                libc::WEXITED | flags,
            )
        };
        if r == 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    // SAFETY: waitid filled the SIGCHLD fields (or left si_pid 0 under WNOHANG).
    let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
    if pid == 0 {
        return Ok(None);
    }
    Ok(Some(match info.si_code {
        libc::CLD_EXITED => Some(status),
        _ => None,
    }))
}

/// The child's stack, mapped for one spawn, with a guard page below it.
struct Stack {
    base: *mut c_void,
    len: usize,
    guard: usize,
}

impl Stack {
    fn new() -> io::Result<Stack> {
        // SAFETY: sysconf has no preconditions.
        let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
            p if p > 0 => p as usize,
            _ => 4096,
        };
        let len = STACK_BYTES + page;
        // SAFETY: a fresh anonymous private mapping; its lowest page made inaccessible.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            );
            if base == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            let stack = Stack {
                base,
                len,
                guard: page,
            };
            if libc::mprotect(base, page, libc::PROT_NONE) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(stack)
        }
    }

    /// The top (stacks grow down), 16-byte aligned.
    fn top(&self) -> *mut c_void {
        let top = self.base as usize + self.len;
        (top & !15) as *mut c_void
    }

    /// `clone3`'s view: the lowest usable address and the size up to [`Stack::top`].
    fn span(&self) -> (u64, u64) {
        let low = self.base as usize + self.guard;
        (low as u64, (self.top() as usize - low) as u64)
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: our mapping; the child no longer runs on it (it exec'd or exited).
        unsafe {
            libc::munmap(self.base, self.len);
        }
    }
}

/// The whole environment of a command: aicli's (unless `clear`), then `set`, less
/// `remove`.
pub(super) fn environment<'a>(
    clear: bool,
    set: impl IntoIterator<Item = (&'a str, &'a str)>,
    remove: &[String],
) -> BTreeMap<OsString, OsString> {
    let mut env: BTreeMap<OsString, OsString> = if clear {
        BTreeMap::new()
    } else {
        std::env::vars_os().collect()
    };
    for (k, v) in set {
        env.insert(k.into(), v.into());
    }
    for k in remove {
        env.remove(std::ffi::OsStr::new(k));
    }
    env
}

#[cfg(test)]
mod tests;
