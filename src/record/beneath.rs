//! Reading a record without following a symlink anywhere below the runs directory.
//!
//! A batch directory, its `tasks/` directory, a task's directory and the file itself
//! are each opened with `O_NOFOLLOW`, one component at a time from an open descriptor of
//! the runs directory: a symlink at any level (one planted in the records, or swapped in
//! between a check and an open) is refused, never followed. The runs directory itself
//! is the user's choice and may be reached through a link.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Component, Path};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

/// Opens `rel` below `root`, refusing a symlink at every component of `rel`: a file
/// (the last component not a directory) or, with `dir`, a directory.
pub(crate) fn open(root: &Path, rel: &Path, dir: bool) -> io::Result<File> {
    let comps: Vec<&OsStr> = rel
        .components()
        .map(|c| match c {
            Component::Normal(s) => Ok(s),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: not a plain relative path", rel.display()),
            )),
        })
        .collect::<io::Result<_>>()?;
    let mut cur: OwnedFd = nix::fcntl::open(
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    for (i, comp) in comps.iter().enumerate() {
        let last = i + 1 == comps.len();
        let mut flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        if !last || dir {
            flags |= OFlag::O_DIRECTORY;
        } else {
            // Never block on a FIFO planted in the records.
            flags |= OFlag::O_NONBLOCK;
        }
        cur = nix::fcntl::openat(&cur, *comp, flags, Mode::empty()).map_err(|e| match e {
            // O_NOFOLLOW on a symlink: ELOOP; O_DIRECTORY on a symlink: ENOTDIR.
            Errno::ELOOP | Errno::ENOTDIR | Errno::EMLINK => io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: refused: run records are never read through a symlink (or a component is not a directory)",
                    root.join(rel.iter().take(i + 1).collect::<std::path::PathBuf>())
                        .display()
                ),
            ),
            e => io::Error::from(e),
        })?;
    }
    let f = File::from(cur);
    if !dir && !f.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not a regular file", root.join(rel).display()),
        ));
    }
    Ok(f)
}

/// The whole file `rel` below `root` ([`open`]).
pub(crate) fn read(root: &Path, rel: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::new();
    open(root, rel, false)?.read_to_end(&mut buf)?;
    Ok(buf)
}

/// The names of the entries of directory `rel` below `root` ([`open`]).
pub(crate) fn list(root: &Path, rel: &Path) -> io::Result<Vec<std::ffi::OsString>> {
    use std::os::unix::ffi::OsStrExt;
    let d = open(root, rel, true)?;
    let mut dir = nix::dir::Dir::from_fd(OwnedFd::from(d))?;
    Ok(dir
        .iter()
        .flatten()
        .map(|e| OsStr::from_bytes(e.file_name().to_bytes()).to_owned())
        .filter(|n| n != "." && n != "..")
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlink_at_any_level_is_refused_and_plain_paths_open() {
        let d = tempfile::tempdir().unwrap();
        let (root, other) = (d.path().join("runs"), d.path().join("other"));
        std::fs::create_dir_all(root.join("b/tasks/t")).unwrap();
        std::fs::create_dir_all(other.join("tasks/t")).unwrap();
        std::fs::write(root.join("b/tasks/t/task.json"), "{}").unwrap();
        std::fs::write(other.join("tasks/t/task.json"), "{}").unwrap();
        assert_eq!(read(&root, Path::new("b/tasks/t/task.json")).unwrap(), b"{}");
        assert_eq!(list(&root, Path::new("b/tasks")).unwrap(), vec!["t"]);
        let links = [
            ("l1", other.clone()),
            ("b/tasks/l2", other.join("tasks/t")),
            ("b/tasks/t/l3.json", other.join("tasks/t/task.json")),
        ];
        for (link, to) in &links {
            std::os::unix::fs::symlink(to, root.join(link)).unwrap();
        }
        for rel in ["l1/tasks/t/task.json", "b/tasks/l2/task.json", "b/tasks/t/l3.json"] {
            let e = read(&root, Path::new(rel)).unwrap_err();
            assert!(e.to_string().contains("never read through a symlink"), "{rel}: {e}");
        }
        assert!(list(&root, Path::new("l1/tasks")).is_err());
        assert!(read(&root, Path::new("b/../b/tasks/t/task.json")).is_err(), "no ..");
        assert!(read(&root, Path::new("b/tasks/t")).is_err(), "a directory is no file");
    }
}
