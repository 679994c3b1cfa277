use super::*;

fn pipe() -> (OwnedFd, OwnedFd) {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap()
}

fn run(program: &str, args: &[&str], env: &[(&str, &str)]) -> io::Result<(String, Option<i32>)> {
    let env = environment(true, env.iter().copied(), &[]);
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let plan = Plan::new(Path::new(program), &args, &env, Path::new("/"))?;
    let null = OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
    let (r, w) = pipe();
    let (er, ew) = pipe();
    let started = spawn(
        &plan,
        ChildFds {
            stdin: &null,
            stdout: &w,
            stderr: &ew,
        },
    )?;
    drop((w, ew, er));
    let mut out = String::new();
    std::io::Read::read_to_string(&mut std::fs::File::from(r), &mut out).unwrap();
    let code = wait_pidfd(&started.pidfd, 0)?.unwrap();
    Ok((out, code))
}

#[test]
fn the_child_gets_its_argv_env_directory_and_group_and_its_exit_code_comes_back() {
    let (out, code) = run(
        "sh",
        &[
            "-c",
            r#"printf '%s|%s|%s|' "$1" "$X" "$(pwd)"; [ "$(cut -d' ' -f5 /proc/$$/stat)" = "$$" ] && printf group; exit 3"#,
            "sh",
            "arg with 'quotes' and ✓",
        ],
        &[("X", "a=b"), ("PATH", "/usr/bin:/bin")],
    )
    .unwrap();
    assert_eq!(out, "arg with 'quotes' and ✓|a=b|/|group");
    assert_eq!(code, Some(3));
}

#[test]
fn a_missing_program_or_directory_is_a_clear_error() {
    let e = run("no-such-cli-here", &[], &[("PATH", "/usr/bin:/bin")]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
    assert!(e.to_string().contains("no-such-cli-here"), "{e}");
    let e = run("/nonexistent/cli", &[], &[]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
    assert!(e.to_string().contains("/nonexistent/cli"), "{e}");
    // A directory is no program: the exec says so, naming its step.
    let e = run("/tmp", &[], &[]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
    assert!(e.to_string().starts_with("executing it"), "{e}");
    let env = environment(true, [], &[]);
    let plan = Plan::new(Path::new("/bin/true"), &[], &env, Path::new("/nonexistent-dir")).unwrap();
    let null = OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
    let e = spawn(&plan, ChildFds { stdin: &null, stdout: &null, stderr: &null }).err().unwrap();
    assert!(e.to_string().starts_with("changing to its working directory"), "{e}");
}

#[test]
fn the_child_dies_with_the_thread_that_started_it() {
    // The parent-death signal is set before the exec: when the spawning thread
    // ends, the kernel SIGKILLs the child (aicli's death does the same).
    let env = environment(true, [], &[]);
    let plan = Plan::new(Path::new("/bin/sleep"), &["30".into()], &env, Path::new("/")).unwrap();
    let started = std::thread::spawn(move || {
        let null = OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        spawn(&plan, ChildFds { stdin: &null, stdout: &null, stderr: &null }).unwrap()
    })
    .join()
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let code = loop {
        if let Some(code) = wait_pidfd(&started.pidfd, libc::WNOHANG).unwrap() {
            break code;
        }
        assert!(std::time::Instant::now() < deadline, "the child outlived its parent thread");
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert_eq!(code, None, "killed by a signal, not exited");
}

#[test]
fn a_script_without_a_shebang_runs_in_sh() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("tool");
    std::fs::write(&script, "echo \"script $1\"\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .unwrap();
    let (out, code) = run(script.to_str().unwrap(), &["ran"], &[]).unwrap();
    assert_eq!((out.as_str(), code), ("script ran\n", Some(0)));
}

#[test]
fn sigpipe_is_back_to_its_default_and_a_signal_death_has_no_code() {
    // Rust ignores SIGPIPE; the CLI must not inherit that.
    let (out, code) = run(
        "sh",
        &["-c", "grep SigIgn /proc/self/status; kill -TERM $$"],
        &[("PATH", "/usr/bin:/bin")],
    )
    .unwrap();
    let ignored = u64::from_str_radix(out.split_whitespace().nth(1).unwrap(), 16).unwrap();
    assert_eq!(ignored & (1 << (libc::SIGPIPE - 1)), 0, "{out}");
    assert_eq!(code, None);
}
