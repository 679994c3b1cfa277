//! A run's scaffold: the links and files its command asks for (a private home's
//! settings, MCP config files), and the IDE lockfile of a CLI that looks for one. All of
//! it is removed when the run ends ([`Scaffold::remove`], or `Drop`).

use std::path::{Path, PathBuf};

use aicli_providers::{ErrorKind, LinkSpec};

use super::guards::RunGuards;
use super::launch::Launch;
use super::{NotStarted, RunSpec};
use crate::util::{create_private_dirs, write_private_file};

/// What a run laid out on disk for its CLI.
#[derive(Debug, Default)]
pub(crate) struct Scaffold {
    links: Vec<PathBuf>,
    files: Vec<PathBuf>,
    lockfile: Option<PathBuf>,
    /// Everything ever laid out, removed or not: what a commit of the run's work leaves
    /// out, should any of it be in the worktree.
    laid_out: Vec<PathBuf>,
}

impl Scaffold {
    /// Every path the run laid out for its CLI (links, files, the lockfile).
    pub(crate) fn laid_out(&self) -> &[PathBuf] {
        &self.laid_out
    }

    fn keep(&mut self, p: &Path) {
        self.laid_out.push(p.to_path_buf());
    }

    /// Removes the links (never what they point to; what the CLI put in a link's place,
    /// a file renamed over it, goes too), the files and the lockfile.
    pub(crate) fn remove(&mut self) {
        if let Some(l) = self.lockfile.take() {
            lockfiles::release(&l);
        }
        for p in self.files.drain(..).chain(self.links.drain(..)) {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl Drop for Scaffold {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Makes the command's links (which make the directories, 0700, that files may go
/// into) and writes its files, then the IDE lockfile when the CLI uses one and runs on
/// this machine. Each thing made goes into `guards.scaffold` at once.
pub(super) fn lay_out(
    launch: &mut Launch,
    spec: &RunSpec,
    guards: &mut RunGuards,
) -> Result<(), NotStarted> {
    let cmd = &launch.cmd;
    let private_dir = &spec.place.private_dir;
    if !cmd.files.is_empty() || !cmd.links.is_empty() {
        create_private_dirs(private_dir).map_err(|e| {
            NotStarted::new(
                ErrorKind::Unknown,
                format!("cannot create {}: {e}", private_dir.display()),
            )
        })?;
    }
    let placement = guards.placement()?;
    let targets: Vec<PathBuf> = cmd
        .links
        .iter()
        .map(|l| placement.visible_path(&l.target))
        .collect();
    let local = placement.agent_reach().is_none();
    for (l, target) in cmd.links.iter().zip(targets) {
        // The link points where the CLI will find its target (inside a container, the
        // target's path there).
        create_link(l, &target).map_err(|e| {
            NotStarted::new(
                ErrorKind::Unknown,
                format!(
                    "cannot link {} -> {}: {e}",
                    l.link.display(),
                    l.target.display()
                ),
            )
        })?;
        guards.scaffold.links.push(l.link.clone());
        guards.scaffold.keep(&l.link);
    }
    for f in &cmd.files {
        write_private_file(&f.path, &f.contents, f.mode).map_err(|e| {
            NotStarted::new(
                ErrorKind::Unknown,
                format!("cannot write {}: {e}", f.path.display()),
            )
        })?;
        guards.scaffold.files.push(f.path.clone());
        guards.scaffold.keep(&f.path);
    }
    if local {
        lock_ide(launch, spec, guards);
    }
    Ok(())
}

/// The IDE lockfile, for a CLI on this machine that looks for one (the file names a
/// loopback port): written when no other run has it, its variable set for the run.
fn lock_ide(launch: &mut Launch, spec: &RunSpec, guards: &mut RunGuards) {
    let provider = &spec.provider;
    let (Some((endpoint, port)), Some(dir)) = (guards.mcp(), provider.ide_lockfile_dir()) else {
        return;
    };
    let Some((name, contents)) =
        provider.ide_lockfile(endpoint, port, &spec.place.workdir, std::process::id())
    else {
        return;
    };
    let path = launch.home.join(dir).join(name);
    if lockfiles::acquire(&path, &contents).is_ok() {
        guards.scaffold.keep(&path);
        guards.scaffold.lockfile = Some(path);
        if let Some(var) = provider.ide_lock_env_var() {
            launch.cmd.env.insert(var.to_owned(), port.to_string());
        }
    }
}

/// Creates the link `l` describes (see [`LinkSpec`]), pointing at `target` (`l.target`
/// as the CLI sees it): its target directory first when asked, then its missing parents
/// (0700). A link or file already at its place (left in a private directory that was
/// not cleaned up) is replaced, as files are overwritten; a directory there is an error.
fn create_link(l: &LinkSpec, target: &Path) -> std::io::Result<()> {
    if l.create_target_dir {
        create_private_dirs(&l.target)?;
    }
    if let Some(dir) = l.link.parent() {
        create_private_dirs(dir)?;
    }
    match std::fs::symlink_metadata(&l.link) {
        Ok(m) if m.is_dir() => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "a directory is in its place",
            ));
        }
        Ok(_) => std::fs::remove_file(&l.link)?,
        Err(_) => {}
    }
    std::os::unix::fs::symlink(target, &l.link)
}

/// IDE lockfiles are named after the MCP server's port, which every run of a batch
/// shares, and carry a token scoped to one task's worktree: only one run at a time may
/// have the file (and the env var that points at it). Others of the same port run
/// without one rather than with another task's token.
pub(super) mod lockfiles {
    use std::collections::HashSet;
    use std::path::{Path, PathBuf};
    use std::sync::{Mutex, OnceLock};

    fn held() -> &'static Mutex<HashSet<PathBuf>> {
        static HELD: OnceLock<Mutex<HashSet<PathBuf>>> = OnceLock::new();
        HELD.get_or_init(|| Mutex::new(HashSet::new()))
    }

    /// Writes the lockfile at `path` for one run, unless another run has it.
    pub(crate) fn acquire(path: &Path, contents: &str) -> std::io::Result<()> {
        let mut h = held()
            .lock()
            .map_err(|_| std::io::Error::other("lockfile registry poisoned"))?;
        if h.contains(path) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "another run has this IDE lockfile",
            ));
        }
        crate::util::write_private_file(path, contents, 0o600)?;
        h.insert(path.to_path_buf());
        Ok(())
    }

    /// Removes the run's lockfile.
    pub(crate) fn release(path: &Path) {
        let Ok(mut h) = held().lock() else { return };
        if h.remove(path) {
            let _ = std::fs::remove_file(path);
        }
    }

    /// Whether a run holds `path` now.
    #[cfg(test)]
    pub(crate) fn is_held(path: &Path) -> bool {
        held().lock().is_ok_and(|h| h.contains(path))
    }
}

#[cfg(test)]
mod tests;
