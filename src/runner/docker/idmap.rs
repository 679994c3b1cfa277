//! Uid-mapped ("idmapped") bind mounts: how a container's unprivileged user works in
//! directories owned by someone else (root, when aicli runs as root) while everything it
//! writes there lands on disk as that owner's.
//!
//! aicli (as root) makes, per container start, a mount of each directory the container
//! binds whose owner is not the container's user, with the mapping *owner ↔ container
//! user*: through it the owner's files look like the container user's, and what the
//! container user creates is written as the owner. The engine's bind mount of such a
//! mount keeps its mapping (measured on Docker 20.10 / runc 1.1, which know nothing of
//! idmapped mounts). The mounts live under [`root`], never inside a directory aicli
//! removes recursively, and only from just before the container is created until it has
//! started: a started container holds its own copy of each, so nothing on this machine
//! has to be undone when the run ends, is cancelled or aicli is killed. A mount left by an
//! aicli killed in that window (its owner file names a process that is gone) is removed
//! by [`sweep`], which every placement and `aicli containers prune` run.
//!
//! Linux ≥ 5.12 and a filesystem that supports idmapped mounts (ext4, xfs, btrfs; tmpfs
//! from 6.3, overlayfs from 5.19) are needed.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::labels;

const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Where the mounts are made: `/run/aicli-idmap` (a tmpfs on most systems, empty after a
/// reboot), else under the temp directory.
pub fn root() -> PathBuf {
    if Path::new("/run").is_dir() {
        PathBuf::from("/run/aicli-idmap")
    } else {
        std::env::temp_dir().join("aicli-idmap")
    }
}

/// The file in a container's mount directory that names the aicli that made it.
const OWNER_FILE: &str = "owner";

/// The uid-mapped mounts of one container's start (see the module docs); unmounted when
/// dropped.
#[derive(Debug)]
pub struct Staged {
    dir: PathBuf,
    mounts: Vec<PathBuf>,
}

impl Staged {
    /// An empty set for container `name`, under [`root`].
    pub fn new(name: &str) -> io::Result<Staged> {
        Staged::new_in(&root(), name)
    }

    fn new_in(base: &Path, name: &str) -> io::Result<Staged> {
        // Root's only (0700): through these mounts the owner's files look like the
        // container user's, to anyone on this machine who could reach them.
        let dir = base.join(name);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        fs::set_permissions(base, fs::Permissions::from_mode(0o700))?;
        fs::write(dir.join(OWNER_FILE), labels::this_owner())?;
        Ok(Staged {
            dir,
            mounts: Vec::new(),
        })
    }

    /// A mount of `src` where its owner's uid and gid (`from`) are `to`'s; returns where
    /// it is.
    pub fn mount(&mut self, src: &Path, from: (u32, u32), to: (u32, u32)) -> io::Result<PathBuf> {
        let dst = self.dir.join(self.mounts.len().to_string());
        fs::create_dir(&dst)?;
        match idmapped_mount(src, &dst, from, to) {
            Ok(()) => {
                self.mounts.push(dst.clone());
                Ok(dst)
            }
            Err(e) => {
                let _ = fs::remove_dir(&dst);
                Err(io::Error::new(
                    e.kind(),
                    format!(
                        "cannot make a uid-mapped mount of {} ({e}; Linux ≥ 5.12 and a filesystem with idmapped mounts are needed)",
                        src.display()
                    ),
                ))
            }
        }
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        release(&self.dir);
    }
}

/// Unmounts what is under a container's mount directory and removes it, never
/// descending into a mount (only empty directories are removed).
fn release(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if e.file_name() == OWNER_FILE {
                continue;
            }
            if is_mount_point(&p)
                && let Err(err) = unmount(&p)
            {
                tracing::warn!(mount = %p.display(), error = %err, "cannot unmount a uid-mapped mount");
                continue;
            }
            let _ = fs::remove_dir(&p);
        }
    }
    let _ = fs::remove_file(dir.join(OWNER_FILE));
    let _ = fs::remove_dir(dir);
}

/// Removes the mounts of containers whose aicli is gone (killed between making them and
/// starting its container). Returns how many directories it removed.
pub fn sweep() -> usize {
    sweep_in(&root())
}

fn sweep_in(base: &Path) -> usize {
    let Ok(entries) = fs::read_dir(base) else {
        return 0;
    };
    let mut n = 0;
    for e in entries.flatten() {
        let dir = e.path();
        let owner = fs::read_to_string(dir.join(OWNER_FILE)).ok();
        if labels::left_behind(&dir, owner.as_deref().map(str::trim)) {
            release(&dir);
            n += 1;
        }
    }
    n
}

/// Whether `path` is a mount point (listed in this process's mount table).
fn is_mount_point(path: &Path) -> bool {
    let Ok(table) = fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = path.as_os_str().as_bytes();
    table
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|m| unescape(m).as_slice() == want)
}

/// A mountinfo path field with its octal escapes (`\040` for a space) decoded.
fn unescape(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && let Ok(v) = std::str::from_utf8(&b[i + 1..i + 4])
                .map_err(|_| ())
                .and_then(|d| u8::from_str_radix(d, 8).map_err(|_| ()))
        {
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

fn unmount(path: &Path) -> io::Result<()> {
    let c = cstr(path)?;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn cstr(path: &Path) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
}

/// A user namespace whose only uid and gid are `from` inside and `to` outside (the
/// mapping of an idmapped mount: on-disk `from` is seen, and written, as `to`).
fn user_namespace(from: (u32, u32), to: (u32, u32)) -> io::Result<OwnedFd> {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new("sleep");
    cmd.arg("30")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: unshare is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::unshare(libc::CLONE_NEWUSER) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let proc = PathBuf::from(format!("/proc/{}", child.id()));
    let result = (|| {
        fs::write(proc.join("uid_map"), format!("{} {} 1\n", from.0, to.0))?;
        fs::write(proc.join("gid_map"), format!("{} {} 1\n", from.1, to.1))?;
        let f = fs::File::open(proc.join("ns/user"))?;
        Ok(OwnedFd::from(f))
    })();
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// `src` mounted at `dst` through the mapping `from` ↔ `to` (open_tree, mount_setattr
/// with `MOUNT_ATTR_IDMAP`, move_mount).
fn idmapped_mount(src: &Path, dst: &Path, from: (u32, u32), to: (u32, u32)) -> io::Result<()> {
    let ns = user_namespace(from, to)?;
    let src_c = cstr(src)?;
    let dst_c = cstr(dst)?;
    // SAFETY: valid paths; the returned fd is owned below.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            src_c.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: open_tree returned a new fd.
    let tree = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: ns.as_raw_fd() as u64,
    };
    let empty = c"";
    // SAFETY: a valid fd, an empty path with AT_EMPTY_PATH and a mount_attr of its size.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above; dst is an existing empty directory.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            dst_c.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As root: the mounts of an aicli killed before its container started are swept
    /// (unmounted, their directory removed), and the directory behind them is untouched;
    /// those of a live aicli stay.
    #[test]
    fn a_dead_owners_mounts_are_swept_and_nothing_behind_them_removed() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let src = tempfile::tempdir().unwrap();
        fs::write(src.path().join("work"), "x").unwrap();
        let base = tempfile::tempdir().unwrap();
        let mut dead = Staged::new_in(base.path(), "dead").unwrap();
        let at = dead.mount(src.path(), (0, 0), (1000, 1000)).unwrap();
        // pid 1 never started at time 0: its owner is gone; and the "crash" forgets it.
        fs::write(base.path().join("dead").join(OWNER_FILE), format!("{}:1:0", labels::hostname())).unwrap();
        std::mem::forget(dead);
        let mut live = Staged::new_in(base.path(), "live").unwrap();
        let live_at = live.mount(src.path(), (0, 0), (1000, 1000)).unwrap();
        assert!(is_mount_point(&at));
        assert_eq!(sweep_in(base.path()), 1);
        assert!(!is_mount_point(&at) && !base.path().join("dead").exists());
        assert!(is_mount_point(&live_at));
        assert_eq!(fs::read_to_string(src.path().join("work")).unwrap(), "x");
        drop(live);
        assert!(!is_mount_point(&live_at));
    }

    #[test]
    fn mountinfo_paths_are_unescaped() {
        assert_eq!(unescape("/run/a\\040b"), b"/run/a b".to_vec());
        assert_eq!(unescape("/plain"), b"/plain".to_vec());
    }

    /// As root: a root-owned directory seen through the mount as 1000's, and a file made
    /// there by uid 1000 owned by root on disk.
    #[test]
    fn an_idmapped_mount_maps_the_owner_both_ways() {
        use std::os::unix::fs::MetadataExt;
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        use std::os::unix::process::CommandExt;
        let src = tempfile::tempdir().unwrap();
        fs::set_permissions(src.path(), fs::Permissions::from_mode(0o755)).unwrap();
        fs::write(src.path().join("old"), "x").unwrap();
        let base = tempfile::tempdir().unwrap();
        let mut staged = Staged::new_in(base.path(), "c1").unwrap();
        let at = staged.mount(src.path(), (0, 0), (1000, 1000)).unwrap();
        let m = fs::metadata(at.join("old")).unwrap();
        assert_eq!((m.uid(), m.gid()), (1000, 1000));
        // Root has no id through the mount; uid 1000 writes there (the staging
        // directories are opened up for this test only).
        assert!(fs::write(at.join("by-root"), "r").is_err());
        for d in [base.path(), &base.path().join("c1")] {
            fs::set_permissions(d, fs::Permissions::from_mode(0o711)).unwrap();
        }
        let st = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("echo y > {}/new && mkdir {0}/d", at.display()))
            .uid(1000)
            .gid(1000)
            .status()
            .unwrap();
        assert!(st.success());
        drop(staged);
        assert!(!at.exists() && !base.path().join("c1").exists());
        for f in ["new", "d"] {
            let m = fs::metadata(src.path().join(f)).unwrap();
            assert_eq!((m.uid(), m.gid()), (0, 0), "{f}");
        }
    }
}
