//! A container run's home: the task's own directory, kept across its attempts, with
//! copies of the user's login files (each once: what the CLI changes in its copy stays
//! the task's), or started from the home of the task whose session it continues.

use std::path::Path;

/// Home files every container run gets a copy of (besides the provider's login files):
/// the user's git identity, so the agent's commits are the user's.
pub(super) const COMMON_HOME_FILES: [&str; 1] = [".gitconfig"];

/// Copies the user's login files (`files`, relative to `user_home`) into `task_home`,
/// each once: what the CLI changes in its copy stays the task's.
pub(super) fn copy_home_files(user_home: &Path, task_home: &Path, files: &[String]) -> std::io::Result<()> {
    for f in files {
        let src = user_home.join(f);
        let dst = task_home.join(f);
        if dst.symlink_metadata().is_ok() || src.symlink_metadata().is_err() {
            continue;
        }
        if let Some(parent) = dst.parent() {
            create_private_dir(parent)?;
        }
        copy_private(&src, &dst)?;
    }
    Ok(())
}

/// A finished task's home without its login copies (the provider's
/// `container_home_files` and the git identity): what is left, the CLI's session store,
/// lets a later task continue the session (`resume_session_id`), in a container too.
pub fn forget_logins(task_home: &Path, provider: &aicli_providers::ProviderConfig) {
    // A local run has no home of its own.
    if !task_home.exists() {
        return;
    }
    let files = COMMON_HOME_FILES
        .iter()
        .map(|f| (*f).to_owned())
        .chain(provider.container_home_files.iter().cloned());
    for f in files {
        let _ = std::fs::remove_file(task_home.join(f));
    }
    remove_empty_dirs(task_home);
}

/// Removes `dir` and the directories under it that hold no file (bottom up).
fn remove_empty_dirs(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_empty_dirs(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Starts a task's home from another task's (the run that made the session its
/// `resume_session_id` names), when it has none yet: the session store comes along,
/// private as it was.
pub(super) fn seed_home(task_home: &Path, origin_home: &Path) -> std::io::Result<()> {
    if task_home.exists() || !origin_home.is_dir() {
        return Ok(());
    }
    copy_private(origin_home, task_home)
}

/// Copies a file (0600) or a directory tree (0700 directories) without following links
/// out of it.
fn copy_private(src: &Path, dst: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::symlink_metadata(src)?;
    if meta.is_dir() {
        create_private_dir(dst)?;
        for e in std::fs::read_dir(src)?.flatten() {
            copy_private(&e.path(), &dst.join(e.file_name()))?;
        }
    } else if meta.is_file() {
        std::fs::copy(src, dst)?;
        std::fs::set_permissions(dst, std::fs::Permissions::from_mode(0o600))?;
    } else if meta.file_type().is_symlink() {
        // A link to the real file (dotfile managers): copy what it points to.
        if let Ok(m) = std::fs::metadata(src)
            && m.is_file()
        {
            std::fs::copy(src, dst)?;
            std::fs::set_permissions(dst, std::fs::Permissions::from_mode(0o600))?;
        }
    }
    Ok(())
}

pub(super) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

