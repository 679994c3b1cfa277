//! Bubblewrap around a CLI that has no sandbox of its own that works here (Gemini's
//! `--sandbox` needs a container image from a registry): the whole filesystem read-only,
//! the working directory, the run's private directory and the CLI's own state writable,
//! a private `TMPDIR`; the network, the process group and the environment as they were.
//! `docs/permissions.md` says what it allows and what it does not.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use crate::provider::CommandSpec;

/// The run's temporary directory under its private directory (`TMPDIR` inside).
pub const TMP_DIR: &str = "tmp";

/// A working `bwrap` on `search_path`, when there is one: found, and seen to start a
/// confined `true` once (the answer is kept per binary for the life of the process).
pub fn bubblewrap(search_path: Option<&str>) -> Option<PathBuf> {
    static WORKS: Mutex<BTreeMap<PathBuf, bool>> = Mutex::new(BTreeMap::new());
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let bwrap = which::which_in("bwrap", search_path, cwd).ok()?;
    let mut seen = WORKS.lock().unwrap_or_else(|e| e.into_inner());
    let works = *seen.entry(bwrap.clone()).or_insert_with(|| {
        Command::new(&bwrap)
            .args(["--ro-bind", "/", "/", "--dev", "/dev", "--", "true"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    works.then_some(bwrap)
}

/// Runs `c` inside `bwrap`: everything read-only but `writable` (each bound where it is,
/// skipped when missing), `c.cwd` and the run's `tmp` (under `private_dir`, made by the
/// engine with the run's files, and `TMPDIR` inside). `--die-with-parent`, and no new
/// session: the CLI stays in the run's process group, so killing the group kills it.
pub fn wrap(c: &mut CommandSpec, bwrap: PathBuf, private_dir: &Path, writable: &[PathBuf]) {
    let tmp = private_dir.join(TMP_DIR);
    let mut args: Vec<String> = ["--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev"]
        .map(str::to_owned)
        .to_vec();
    let mut bind = |flag: &str, p: &Path| {
        let p = p.to_string_lossy().into_owned();
        args.extend([flag.to_owned(), p.clone(), p]);
    };
    bind("--bind", &c.cwd);
    bind("--bind", private_dir);
    for w in writable {
        bind("--bind-try", w);
    }
    args.push("--".to_owned());
    args.push(c.program.to_string_lossy().into_owned());
    args.append(&mut c.args);
    c.program = bwrap;
    c.args = args;
    c.env
        .insert("TMPDIR".to_owned(), tmp.to_string_lossy().into_owned());
    c.files.push(crate::provider::FileSpec {
        path: tmp.join(".keep"),
        contents: String::new(),
        mode: 0o600,
    });
}
