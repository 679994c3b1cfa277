//! The processes a fake CLI starts or becomes: grandchildren (one of them a daemon in
//! its own session), a `setsid` daemon whose parent exits at once, a double fork; a
//! sleeper; a hang; SIGTERM ignored.

use std::process::Command;
use std::time::Duration;

use crate::opts::Opts;

/// `--ignore-sigterm`: SIGTERM ignored from now on (children inherit it).
pub fn ignore_sigterm() {
    // SAFETY: installing SIG_IGN has no preconditions.
    unsafe {
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
    }
}

/// `--sleeper`: a grandchild that sleeps until killed (SIGTERM ignored if asked).
pub fn sleeper(ignore: bool) -> ! {
    if ignore {
        ignore_sigterm();
    }
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// `--hang`, `--hang-after`: sleep until killed.
pub fn hang() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// `--spawn-grandchildren`, `--daemon-exit` (which exits here), `--pid-file`,
/// `--double-fork-daemon`.
pub fn start(o: &Opts) {
    let me = std::env::current_exe().unwrap();
    let mut pids = vec![std::process::id()];
    for i in 0..o.grandchildren {
        let mut c = Command::new(&me);
        c.arg("--sleeper");
        if o.ignore_sigterm {
            c.arg("--ignore-sigterm");
        }
        c.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        if i == 0 {
            use std::os::unix::process::CommandExt;
            // One grandchild leaves the session and process group, like a daemon.
            // SAFETY: setsid() is async-signal-safe.
            unsafe {
                c.pre_exec(|| {
                    libc::setsid();
                    Ok(())
                });
            }
        }
        pids.push(c.spawn().unwrap().id());
    }
    if o.daemon_exit {
        // A daemon the way tools make one: a child that leaves the session and process
        // group, then the parent exits before printing anything.
        let mut c = Command::new(&me);
        c.arg("--sleeper")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        use std::os::unix::process::CommandExt;
        // SAFETY: setsid() is async-signal-safe.
        unsafe {
            c.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        pids.push(c.spawn().unwrap().id());
    }
    if let Some(f) = &o.pid_file {
        let text: Vec<String> = pids.iter().map(u32::to_string).collect();
        std::fs::write(f, text.join("\n")).unwrap();
    }
    if o.daemon_exit {
        std::process::exit(0);
    }
    if let Some(f) = &o.double_fork {
        Command::new(&me)
            .args(["--daemon-exit", "--pid-file", f])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
    }
}
