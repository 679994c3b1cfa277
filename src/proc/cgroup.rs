//! Per-run cgroups: where aicli may make one, each run's processes live in a cgroup of
//! their own, and the run's end kills the cgroup — every process in it, however it left
//! its parent, session or process group (`KillMode=control-group`, as systemd says).
//! The cgroup outlives a killed aicli: `aicli resume` kills what is left in it.
//!
//! Where: under aicli's own cgroup, `<mount><own cgroup>/aicli/<pid>-<n>-<rand>`, in
//! cgroup v2 (the unified hierarchy, pure or hybrid) when aicli may write there — as
//! root, or in a subtree delegated to its user —, else in cgroup v1's `freezer`
//! hierarchy (or `pids`). No resource controller is enabled or changed: the cgroup is
//! for membership only. A CLI joins its cgroup before it starts (the spawned child
//! writes itself to `cgroup.procs` before its exec, [`super::direct`]), so every
//! descendant is born in it.
//!
//! Killing: v2 writes `cgroup.kill` (one atomic SIGKILL of the subtree, kernel 5.14+;
//! older kernels freeze, kill each member, thaw); v1 freezes through the freezer (so
//! nothing forks while it is killed), SIGKILLs every member of the subtree and thaws.
//! Without the freezer (v1 `pids`), members are killed until none is left.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

pub use aicli_providers::CgroupMode;

/// The cgroup version a run's cgroup lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// The unified hierarchy.
    V2,
    /// A v1 hierarchy (freezer or pids).
    V1,
}

/// Where run cgroups are made.
#[derive(Debug, Clone)]
struct Root {
    version: Version,
    /// `<mount><own cgroup>/aicli`.
    dir: PathBuf,
    /// A v1 freezer hierarchy (members can be frozen before they are killed).
    freezer: bool,
}

/// Name of the directory under aicli's own cgroup that holds the run cgroups.
const DIR_NAME: &str = "aicli";

/// One run's cgroup.
#[derive(Debug)]
pub struct RunCgroup {
    version: Version,
    path: PathBuf,
    freezer: bool,
}

/// `(mount point, root, fstype, super options)` of each cgroup mount of this process.
fn cgroup_mounts() -> Vec<(PathBuf, String, String, String)> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((before, after)) = line.split_once(" - ") else {
            continue;
        };
        let f: Vec<&str> = before.split(' ').collect();
        let a: Vec<&str> = after.split(' ').collect();
        if f.len() < 5 || a.len() < 3 || !a[0].starts_with("cgroup") {
            continue;
        }
        out.push((
            PathBuf::from(unescape(f[4])),
            unescape(f[3]),
            a[0].to_owned(),
            a[2].to_owned(),
        ));
    }
    out
}

/// mountinfo escapes spaces and a few others as `\NNN` (octal).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8)
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// aicli's own cgroup path in the hierarchy whose `/proc/self/cgroup` controller field
/// is `controllers` (`""` for v2).
fn own_cgroup(matches: impl Fn(&str) -> bool) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|l| {
        let mut it = l.splitn(3, ':');
        let (_id, ctl, path) = (it.next()?, it.next()?, it.next()?);
        matches(ctl).then(|| path.to_owned())
    })
}

/// `<mount>` + the part of `own` below the mount's root.
fn dir_under(mount: &Path, mount_root: &str, own: &str) -> PathBuf {
    let rel = own
        .strip_prefix(mount_root.trim_end_matches('/'))
        .unwrap_or(own)
        .trim_start_matches('/');
    let mut d = mount.to_path_buf();
    if !rel.is_empty() {
        d.push(rel);
    }
    d
}

/// Whether aicli can make run cgroups under `own_dir` (its own cgroup's directory).
fn usable(own_dir: &Path) -> Option<PathBuf> {
    // Moving a process from aicli's cgroup into a child of it needs write access to the
    // common ancestor's cgroup.procs: aicli's own.
    nix::unistd::access(
        &own_dir.join("cgroup.procs"),
        nix::unistd::AccessFlags::W_OK,
    )
    .ok()?;
    let dir = own_dir.join(DIR_NAME);
    match std::fs::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            tracing::debug!(dir = %dir.display(), error = %e, "cannot make run cgroups here");
            return None;
        }
    }
    nix::unistd::access(&dir, nix::unistd::AccessFlags::W_OK).ok()?;
    Some(dir)
}

fn discover_v2() -> Option<Root> {
    let (mount, root, ..) = cgroup_mounts().into_iter().find(|m| m.2 == "cgroup2")?;
    let own = own_cgroup(|ctl| ctl.is_empty())?;
    let dir = usable(&dir_under(&mount, &root, &own))?;
    Some(Root {
        version: Version::V2,
        dir,
        freezer: false,
    })
}

fn discover_v1() -> Option<Root> {
    let mounts = cgroup_mounts();
    for controller in ["freezer", "pids"] {
        let Some((mount, root, ..)) = mounts
            .iter()
            .find(|m| m.2 == "cgroup" && m.3.split(',').any(|o| o == controller))
        else {
            continue;
        };
        let Some(own) = own_cgroup(|ctl| ctl.split(',').any(|c| c == controller)) else {
            continue;
        };
        if let Some(dir) = usable(&dir_under(mount, root, &own)) {
            return Some(Root {
                version: Version::V1,
                dir,
                freezer: controller == "freezer",
            });
        }
    }
    None
}

fn roots() -> &'static (Option<Root>, Option<Root>) {
    static ROOTS: OnceLock<(Option<Root>, Option<Root>)> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let v2 = discover_v2();
        let v1 = discover_v1();
        for r in v2.iter().chain(v1.iter()) {
            sweep(&r.dir);
        }
        tracing::debug!(v2 = ?v2.as_ref().map(|r| &r.dir), v1 = ?v1.as_ref().map(|r| &r.dir), "cgroup roots");
        (v2, v1)
    })
}

fn root_for(mode: CgroupMode) -> Option<&'static Root> {
    let (v2, v1) = roots();
    match mode {
        CgroupMode::Auto => v2.as_ref().or(v1.as_ref()),
        CgroupMode::V2 => v2.as_ref(),
        CgroupMode::V1 => v1.as_ref(),
        CgroupMode::Off => None,
    }
}

/// Which cgroup version runs get under `mode` on this machine (`None`: no cgroups).
#[cfg(feature = "test-helpers")]
pub fn available(mode: CgroupMode) -> Option<Version> {
    root_for(mode).map(|r| r.version)
}

/// Removes the empty run cgroups of aicli processes that are gone (a killed aicli whose
/// runs were resumed, or had nothing left). A cgroup that still has processes cannot be
/// removed (rmdir refuses): it waits for `aicli resume`.
fn sweep(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let owner: Option<i32> = name.split('-').next().and_then(|p| p.parse().ok());
        let Some(owner) = owner else { continue };
        let dead = matches!(
            kill(Pid::from_raw(owner), None),
            Err(nix::errno::Errno::ESRCH)
        );
        if dead {
            let _ = remove_tree(&e.path());
        }
    }
}

/// rmdir of a cgroup and its child cgroups, deepest first.
fn remove_tree(path: &Path) -> std::io::Result<()> {
    if let Ok(entries) = std::fs::read_dir(path) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&e.path())?;
            }
        }
    }
    std::fs::remove_dir(path)
}

impl RunCgroup {
    /// A new cgroup for one run, when `mode` allows one and the machine has a usable
    /// hierarchy.
    pub fn create(mode: CgroupMode) -> Option<RunCgroup> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let root = root_for(mode)?;
        let name = format!(
            "{}-{}-{:04x}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            rand::random::<u16>()
        );
        let path = root.dir.join(name);
        match std::fs::create_dir(&path) {
            Ok(()) => Some(RunCgroup {
                version: root.version,
                path,
                freezer: root.freezer,
            }),
            Err(e) => {
                tracing::warn!(cgroup = %path.display(), error = %e, "cannot make the run's cgroup; the run goes without one");
                None
            }
        }
    }

    /// The cgroup recorded at `path` by a run of an earlier aicli (possibly started from
    /// another cgroup than this one), if it is a run cgroup as aicli makes them — a
    /// `<pid>-<n>-<hex>` directory in an `aicli` directory of a cgroup v2 or a v1
    /// freezer/pids hierarchy: a record never names another cgroup to kill — and it still
    /// exists.
    pub fn open(path: &Path) -> Option<RunCgroup> {
        let name = path.file_name()?.to_str()?;
        let parts: Vec<&str> = name.split('-').collect();
        let well_formed = parts.len() == 3
            && parts[0].chars().all(|c| c.is_ascii_digit())
            && parts[1].chars().all(|c| c.is_ascii_digit())
            && parts[2].chars().all(|c| c.is_ascii_hexdigit())
            && parts.iter().all(|p| !p.is_empty());
        if !well_formed || path.parent()?.file_name()? != DIR_NAME || !path.is_dir() {
            return None;
        }
        let (_, _, fstype, opts) = cgroup_mounts()
            .into_iter()
            .filter(|m| path.starts_with(&m.0))
            .max_by_key(|m| m.0.components().count())?;
        let freezer = opts.split(',').any(|o| o == "freezer");
        let version = match fstype.as_str() {
            "cgroup2" => Version::V2,
            "cgroup" if freezer || opts.split(',').any(|o| o == "pids") => Version::V1,
            _ => return None,
        };
        Some(RunCgroup {
            version,
            path: path.to_path_buf(),
            freezer,
        })
    }

    /// The hierarchy it is in.
    pub fn version(&self) -> Version {
        self.version
    }

    /// Its directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file a process writes `0` to in order to join it.
    pub fn procs_file(&self) -> PathBuf {
        self.path.join("cgroup.procs")
    }

    /// Every process in it and in its child cgroups (a nested aicli makes some).
    pub fn pids(&self) -> Vec<u32> {
        let mut out = Vec::new();
        collect_pids(&self.path, &mut out);
        out
    }

    /// Sends `sig` to every process in it; returns them.
    pub fn signal(&self, sig: Signal) -> Vec<u32> {
        let pids = self.pids();
        for p in &pids {
            let _ = kill(Pid::from_raw(*p as i32), sig);
        }
        pids
    }

    /// SIGKILLs every process in it, without a chance to fork away: v2's `cgroup.kill`,
    /// else freeze, kill, thaw. Returns the processes seen in it.
    pub fn kill(&self) -> Vec<u32> {
        let seen = self.pids();
        if seen.is_empty() {
            return seen;
        }
        match self.version {
            Version::V2 if write(&self.path.join("cgroup.kill"), "1").is_ok() => {}
            Version::V2 => {
                let frozen = write(&self.path.join("cgroup.freeze"), "1").is_ok();
                if frozen {
                    wait_for(Duration::from_millis(500), || {
                        std::fs::read_to_string(self.path.join("cgroup.events"))
                            .is_ok_and(|t| t.lines().any(|l| l == "frozen 1"))
                    });
                }
                self.signal(Signal::SIGKILL);
                if frozen {
                    let _ = write(&self.path.join("cgroup.freeze"), "0");
                }
            }
            Version::V1 if self.freezer => {
                let state = self.path.join("freezer.state");
                let frozen = write(&state, "FROZEN").is_ok();
                if frozen {
                    wait_for(Duration::from_millis(500), || {
                        std::fs::read_to_string(&state).is_ok_and(|t| t.trim() == "FROZEN")
                    });
                }
                self.signal(Signal::SIGKILL);
                if frozen {
                    let _ = write(&state, "THAWED");
                }
            }
            Version::V1 => {
                // No freezer: kill until nothing is left (a fork between the read and
                // the kill is caught by the next round).
                for _ in 0..50 {
                    if self.signal(Signal::SIGKILL).is_empty() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        }
        seen
    }

    /// Removes it (and child cgroups a nested aicli left); it must be empty. Returns
    /// whether it is gone.
    pub fn remove(&self) -> bool {
        remove_tree(&self.path).is_ok() || !self.path.exists()
    }
}

fn collect_pids(dir: &Path, out: &mut Vec<u32>) {
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        out.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                collect_pids(&e.path(), out);
            }
        }
    }
}

fn write(path: &Path, text: &str) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(text.as_bytes())
}

fn wait_for(max: Duration, done: impl Fn() -> bool) {
    let deadline = Instant::now() + max;
    while !done() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests;
