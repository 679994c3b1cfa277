//! A fake CLI's run (not `--acp`): what it records, checks and starts, what it prints,
//! and how it ends, in that order.

use std::io::Write;
use std::time::Duration;

use crate::opts::Opts;
use crate::procs::{hang, ignore_sigterm};
use crate::record::{record, timeline};
use crate::{procs, replay};

/// Runs as `o` asks (`args`: the whole command line, for the records); exits the process.
pub fn run(mut o: Opts, args: &[String]) {
    if let Some(f) = &o.record_stdin {
        let mut text = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut text).unwrap();
        std::fs::write(f, text).unwrap();
    }
    timeline(&o.timeline, "start");
    once(&mut o);
    record(&o, args);
    check_env(&o);
    if o.ignore_sigterm {
        ignore_sigterm();
    }
    procs::start(&o);
    before_output(&o);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    junk(&mut out, &o);
    replay::replay(&mut out, &o);
    end(&mut out, &o);
}

/// `--once`: the misbehaviour only on the first run (the file is made then).
fn once(o: &mut Opts) {
    if let Some(f) = &o.once {
        if std::path::Path::new(f).exists() {
            o.daemon_exit = false;
            o.double_fork = None;
            o.grandchildren = 0;
            o.linger = 0;
            o.hang = false;
            o.hang_after = None;
        } else {
            std::fs::write(f, b"").unwrap();
        }
    }
}

/// `--require-env-unset`, `--require-env`: exit 3 when the environment is not as asked.
fn check_env(o: &Opts) {
    for k in &o.require_unset {
        if std::env::var_os(k).is_some() {
            eprintln!("fake-cli: environment variable {k} is set");
            std::process::exit(3);
        }
    }
    for kv in &o.require_env {
        let (k, v) = kv.split_once('=').unwrap_or((kv.as_str(), ""));
        if std::env::var(k).ok().as_deref() != Some(v) {
            eprintln!("fake-cli: environment variable {k} is not '{v}'");
            std::process::exit(3);
        }
    }
}

/// `--touch`, `--write`, `--stderr`, `--start-delay-ms`, `--wait-for-file`,
/// `--require-file`.
fn before_output(o: &Opts) {
    for t in &o.touch {
        std::fs::write(t, b"touched by aicli-fake-cli\n").unwrap();
    }
    for (file, text) in &o.write {
        if let Some(dir) = std::path::Path::new(file).parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(file, text).unwrap();
    }
    if let Some(s) = &o.stderr {
        eprintln!("{s}");
    }
    if o.start_delay > 0 {
        std::thread::sleep(Duration::from_millis(o.start_delay));
    }
    if let Some(f) = &o.wait_for_file {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !std::path::Path::new(f).exists() {
            if std::time::Instant::now() >= deadline {
                eprintln!("fake-cli: waited 60 s for {f}");
                std::process::exit(3);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // Checked after the start delay: "the file is still there when I get going".
    for f in &o.require_file {
        if !std::path::Path::new(f).exists() {
            eprintln!("fake-cli: required file {f} does not exist");
            std::process::exit(3);
        }
    }
}

/// `--garbage`, `--overlong`, `--invalid-utf8`: what comes before the transcript.
fn junk(out: &mut impl Write, o: &Opts) {
    for i in 0..o.garbage {
        writeln!(out, "this is not json #{i} {{{{").unwrap();
    }
    if o.overlong > 0 {
        let mut line = vec![b'x'; o.overlong];
        line.push(b'\n');
        out.write_all(&line).unwrap();
    }
    if o.invalid_utf8 {
        out.write_all(b"{\"type\":\"\xff\xfe\"}\n").unwrap();
    }
    out.flush().unwrap();
}

/// After the transcript: `--stderr-file`, `--crash-mid-line`, `--hang`, `--linger-ms`,
/// then the exit code (`--exit`, `--exit-file`).
fn end(out: &mut impl Write, o: &Opts) -> ! {
    if let Some(f) = &o.stderr_file {
        let bytes = std::fs::read(f).unwrap_or_default();
        std::io::stderr().write_all(&bytes).unwrap();
    }
    if o.crash_mid_line {
        out.write_all(b"{\"type\":\"result\",\"subtype\":\"succ")
            .unwrap();
        out.flush().unwrap();
        std::process::abort();
    }
    if o.hang {
        hang();
    }
    if o.linger > 0 {
        std::thread::sleep(Duration::from_millis(o.linger));
    }
    timeline(&o.timeline, "end");
    let code = o.exit.unwrap_or_else(|| {
        o.exit_file
            .as_ref()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    });
    std::process::exit(code);
}
