//! The container's user's way into the directories a local engine bind-mounts.

use std::path::PathBuf;

use super::super::paths::{HOME, PRIVATE, WORKSPACE, common_git_dir, owner_of};
use super::super::{DockerError, idmap};
use super::DockerPlacement;

impl DockerPlacement {
    /// The directories a local engine bind-mounts: (this machine's, the container's).
    pub(super) fn bind_dirs(&self) -> Vec<(PathBuf, String)> {
        let s = &self.spec;
        let mut v = vec![
            (s.workspace.clone(), WORKSPACE.to_owned()),
            (s.private_dir.clone(), PRIVATE.to_owned()),
            (s.task_home.clone(), HOME.to_owned()),
        ];
        if let Some(gitdir) = common_git_dir(&s.workspace) {
            let at = gitdir.display().to_string();
            v.push((gitdir, at));
        }
        v
    }

    /// The container's user's way into each of `dirs`: as root, a uid-mapped mount of
    /// each one it does not own (see [`super::idmap`]); otherwise, when it is not this
    /// process's user, the run's private directory and the task's home are given to it.
    pub(super) fn give_access(
        &self,
        name: &str,
        dirs: &mut [(PathBuf, String)],
    ) -> Result<Option<idmap::Staged>, DockerError> {
        let s = &self.spec;
        let euid = nix::unistd::geteuid();
        if !euid.is_root() {
            if s.user.0 != euid.as_raw() {
                for d in [&s.private_dir, &s.task_home] {
                    if let Err(e) = super::super::chown_tree(d, s.user) {
                        tracing::warn!(dir = %d.display(), error = %e, "cannot give the container's user its directory");
                    }
                }
            }
            return Ok(None);
        }
        idmap::sweep();
        let mut staged: Option<idmap::Staged> = None;
        for (src, _) in dirs.iter_mut() {
            let Some(owner) = owner_of(src) else { continue };
            if owner == s.user {
                continue;
            }
            let work = |e: std::io::Error| DockerError::Work(e.to_string());
            if staged.is_none() {
                staged = Some(idmap::Staged::new(name).map_err(work)?);
            }
            if let Some(st) = staged.as_mut() {
                *src = st.mount(src, owner, s.user).map_err(work)?;
            }
        }
        Ok(staged)
    }
}
