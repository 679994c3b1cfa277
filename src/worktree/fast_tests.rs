//! The worktrees aicli makes and removes without the repository's lock, seen by real
//! git: `git worktree list`, `prune`, `remove` and the reflog find what they find for
//! git's own; many at once leave nothing behind; a packed branch and a layout the fast
//! path does not cover go through git, with the same results.

use std::path::Path;

use super::fast::Way;
use super::*;

fn run(dir: &Path, args: &[&str]) -> String {
    let o = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.email=a@b", "-c", "user.name=a"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A repository with one commit holding `a.txt`.
fn repo_with_a_file() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    run(dir.path(), &["init", "-q", "-b", "main"]);
    std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
    run(dir.path(), &["add", "a.txt"]);
    run(dir.path(), &["commit", "-q", "-m", "a"]);
    dir
}

/// `git worktree list --porcelain`'s block of `path`, its path line left out.
fn listed(root: &Path, path: &Path) -> Option<Vec<String>> {
    let canonical = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    run(root, &["worktree", "list", "--porcelain"])
        .split("\n\n")
        .find(|b| {
            b.lines().next().is_some_and(|l| {
                l.strip_prefix("worktree ")
                    .is_some_and(|p| Path::new(p) == path || Path::new(p) == canonical)
            })
        })
        .map(|b| b.lines().skip(1).map(str::to_owned).collect())
}

#[tokio::test]
async fn git_sees_aicli_s_worktrees_as_its_own() {
    let dir = repo_with_a_file();
    let r = dir.path();
    let repo = Repo::open(r).await.unwrap();
    assert!(matches!(Way::of(&repo).await, Way::Fast(_)), "the usual layout");
    let ours = r.join(".aicli/worktrees/b1/t");
    let wt = repo.add_worktree("aicli/b1/t", &ours, "HEAD").await.unwrap();
    // git's own, for the comparison: same last component, so git names it `t1`.
    let theirs = r.join(".aicli/worktrees/b2/t");
    run(
        r,
        &["worktree", "add", "-q", "-b", "aicli/b2/t", theirs.to_str().unwrap(), "HEAD"],
    );
    assert!(r.join(".git/worktrees/t").is_dir() && r.join(".git/worktrees/t1").is_dir());
    let a = listed(r, &ours).expect("git lists aicli's worktree");
    let b = listed(r, &theirs).expect("git lists its own");
    assert_eq!(a[0], b[0], "the same HEAD");
    assert_eq!(a[1], "branch refs/heads/aicli/b1/t");
    assert_eq!(a.len(), b.len(), "{a:?} / {b:?}: no `locked` or `prunable` line");
    assert_eq!(run(r, &["worktree", "prune", "--dry-run", "--verbose"]), "");
    assert_eq!(std::fs::read_to_string(ours.join("a.txt")).unwrap(), "a\n");
    assert_eq!(run(&ours, &["status", "--porcelain"]), "");
    assert_eq!(
        run(&ours, &["rev-parse", "--abbrev-ref", "HEAD"]).trim(),
        "aicli/b1/t"
    );
    assert!(
        run(r, &["reflog", "show", "aicli/b1/t"]).contains("branch: Created from"),
        "the branch's reflog"
    );
    // A commit in it lands on its branch, as in git's own.
    std::fs::write(ours.join("b.txt"), "b\n").unwrap();
    run(&ours, &["add", "b.txt"]);
    run(&ours, &["commit", "-q", "-m", "b"]);
    assert_eq!(
        run(r, &["log", "-1", "--format=%s", "aicli/b1/t"]).trim(),
        "b"
    );
    assert_eq!(
        repo.cleanup(&wt).await.unwrap(),
        Cleanup::Kept {
            reason: "1 commit not on any other branch".into()
        }
    );

    // The user's `git worktree remove` removes one of aicli's.
    let third = r.join(".aicli/worktrees/b3/t");
    repo.add_worktree("aicli/b3/t", &third, "HEAD").await.unwrap();
    run(r, &["worktree", "remove", third.to_str().unwrap()]);
    assert!(listed(r, &third).is_none() && !third.exists());

    // aicli's removal: gone for git, with its branch and its admin directory.
    let fourth = r.join(".aicli/worktrees/b4/t");
    let wt4 = repo.add_worktree("aicli/b4/t", &fourth, "HEAD").await.unwrap();
    let admin = linked_git_dir(&fourth).unwrap();
    assert_eq!(repo.cleanup(&wt4).await.unwrap(), Cleanup::Removed);
    assert!(listed(r, &fourth).is_none() && !fourth.exists() && !admin.exists());
    assert!(run(r, &["branch", "--list", "aicli/b4/t"]).is_empty());
    assert!(!r.join(".aicli/worktrees/b4").exists(), "its empty batch directory");
    assert_eq!(run(r, &["worktree", "prune", "--dry-run", "--verbose"]), "");

    // A worktree whose directory the user deleted: git's prune takes its entry away.
    let fifth = r.join(".aicli/worktrees/b5/t");
    repo.add_worktree("aicli/b5/t", &fifth, "HEAD").await.unwrap();
    std::fs::remove_dir_all(&fifth).unwrap();
    let said = std::process::Command::new("git")
        .arg("-C")
        .arg(r)
        .args(["worktree", "prune", "--verbose"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&said.stdout).contains("non-existent location")
            || String::from_utf8_lossy(&said.stderr).contains("non-existent location"),
        "{said:?}"
    );
    assert!(listed(r, &fifth).is_none());
    run(r, &["fsck", "--no-progress"]);
}

/// `git worktree list --porcelain` in `dir`, run while worktrees come and go: `Err` with
/// git's message when it died of its own race, which `git worktree remove` causes just
/// as much (git 2.47 lists the admin directories, then takes each one's real path to say
/// whether it is prunable, and dies when one went in between: "Invalid path
/// '<common>/worktrees/<name>': No such file or directory"). Any other failure panics.
fn list_racing(dir: &Path) -> Result<String, String> {
    let o = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["worktree", "list", "--porcelain"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    if o.status.success() {
        return Ok(String::from_utf8_lossy(&o.stdout).into_owned());
    }
    let gone = format!("fatal: Invalid path '{}/", dir.join(".git/worktrees").display());
    assert!(
        err.starts_with(&gone) && err.trim_end().ends_with("': No such file or directory"),
        "git worktree list: {err}"
    );
    Err(err)
}

/// 40 tasks' worktrees made and removed at once: each gets its own admin directory, git
/// lists all 40, and nothing is left after; meanwhile git commands that read every
/// worktree (`worktree list`, `worktree add` and `remove`, `branch -D` of another
/// branch), as another process runs them, never meet one half made. The one failure
/// allowed is `worktree list`'s own race with a removal ([`list_racing`]), which git's
/// own `worktree remove` causes as well (measured: 6 of 400 lists beside six loops of
/// `git worktree add`/`remove`).
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn many_at_once_leave_nothing_behind() {
    let dir = repo_with_a_file();
    let r = dir.path().to_path_buf();
    let repo = Repo::open(&r).await.unwrap();
    let base = repo.resolve("HEAD").await.unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (r, stop) = (r.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let other = r.join(format!("other-{n}"));
                let other = other.to_str().unwrap();
                let _ = list_racing(&r);
                run(&r, &["worktree", "add", "-q", "-b", &format!("other-{n}"), other]);
                run(&r, &["worktree", "remove", other]);
                run(&r, &["branch", "-D", &format!("other-{n}")]);
                n += 1;
            }
            n
        })
    };
    let made = futures_util::future::join_all((0..40).map(|i| {
        let (repo, r, base) = (repo.clone(), r.clone(), base.clone());
        async move {
            // Every task is `t`: the admin names are t, t1 … t39.
            let p = r.join(format!(".aicli/worktrees/b{i}/t"));
            repo.add_worktree(&format!("aicli/b{i}/t"), &p, &base).await
        }
    }))
    .await;
    let made: Vec<Worktree> = made.into_iter().map(Result::unwrap).collect();
    let list = run(&r, &["worktree", "list", "--porcelain"]);
    assert_eq!(list.matches("branch refs/heads/aicli/").count(), 40, "{list}");
    let names: std::collections::BTreeSet<_> = std::fs::read_dir(r.join(".git/worktrees"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('t'))
        .collect();
    assert_eq!(names.len(), 40, "{names:?}");
    let removed = futures_util::future::join_all(made.iter().map(|wt| repo.cleanup(wt))).await;
    assert!(removed.into_iter().all(|c| c.unwrap() == Cleanup::Removed));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = reader.join().expect("git never failed beside the tasks");
    assert!(rounds > 0);
    assert_eq!(
        run(&r, &["worktree", "list", "--porcelain"])
            .matches("worktree ")
            .count(),
        1
    );
    assert!(run(&r, &["branch", "--list", "aicli/*"]).is_empty());
    // git removes `worktrees/` once it is empty.
    assert_eq!(
        std::fs::read_dir(r.join(".git/worktrees")).map_or(0, Iterator::count),
        0
    );
    assert_eq!(run(&r, &["worktree", "prune", "--dry-run", "--verbose"]), "");
}

/// One batch's 40 tasks, as a batch runs them: their branches share `refs/heads/aicli/b/`
/// (git makes and removes that directory as refs come and go), and half are removed
/// while the other half are still being made.
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn one_batch_s_tasks_come_and_go_side_by_side() {
    let dir = repo_with_a_file();
    let r = dir.path().to_path_buf();
    let repo = Repo::open(&r).await.unwrap();
    let base = repo.resolve("HEAD").await.unwrap();
    let task = |i: usize| {
        let (repo, r, base) = (repo.clone(), r.clone(), base.clone());
        async move {
            let p = r.join(format!(".aicli/worktrees/b/t{i}"));
            let wt = repo.add_worktree(&format!("aicli/b/t{i}"), &p, &base).await?;
            assert_eq!(std::fs::read_to_string(p.join("a.txt")).unwrap(), "a\n");
            repo.cleanup(&wt).await
        }
    };
    let ends = futures_util::future::join_all((0..40).map(task)).await;
    for (i, e) in ends.into_iter().enumerate() {
        assert_eq!(e.unwrap_or_else(|e| panic!("t{i}: {e}")), Cleanup::Removed);
    }
    assert!(run(&r, &["branch", "--list", "aicli/*"]).is_empty());
    assert_eq!(
        run(&r, &["worktree", "list", "--porcelain"])
            .matches("worktree ")
            .count(),
        1
    );
    assert!(!r.join(".aicli/worktrees/b").exists());
    run(&r, &["fsck", "--no-progress"]);
}

/// A packed branch is deleted by git (`packed-refs` is rewritten under the lock); a
/// repository with `extensions.worktreeConfig` gets git's own `worktree add`: the
/// results are the same.
#[tokio::test]
async fn packed_branches_and_other_layouts_go_through_git() {
    let dir = repo_with_a_file();
    let r = dir.path();
    let repo = Repo::open(r).await.unwrap();
    let p = r.join(".aicli/worktrees/b/t");
    let wt = repo.add_worktree("aicli/b/t", &p, "HEAD").await.unwrap();
    run(r, &["pack-refs", "--all"]);
    assert!(!r.join(".git/refs/heads/aicli/b/t").exists(), "packed");
    assert_eq!(repo.cleanup(&wt).await.unwrap(), Cleanup::Removed);
    assert!(run(r, &["branch", "--list", "aicli/*"]).is_empty());
    assert!(listed(r, &p).is_none());

    let dir = repo_with_a_file();
    let r = dir.path();
    run(r, &["config", "extensions.worktreeConfig", "true"]);
    let repo = Repo::open(r).await.unwrap();
    assert!(matches!(
        Way::of(&repo).await,
        Way::Git {
            post_checkout_hook: false
        }
    ));
    let p = r.join(".aicli/worktrees/b/t");
    let wt = repo.add_worktree("aicli/b/t", &p, "HEAD").await.unwrap();
    assert!(listed(r, &p).is_some());
    assert_eq!(std::fs::read_to_string(p.join("a.txt")).unwrap(), "a\n");
    assert_eq!(repo.cleanup(&wt).await.unwrap(), Cleanup::Removed);
    assert!(listed(r, &p).is_none());
}

/// With a post-checkout hook, `git worktree add` makes the worktree (it runs the hook
/// as it should: in the new worktree, once checked out).
#[tokio::test]
async fn a_post_checkout_hook_is_run_by_git_s_own_add() {
    use std::os::unix::fs::PermissionsExt;
    let dir = repo_with_a_file();
    let r = dir.path();
    let hook = r.join(".git/hooks/post-checkout");
    std::fs::create_dir_all(hook.parent().unwrap()).unwrap();
    std::fs::write(&hook, "#!/bin/sh\ncat a.txt > hooked.txt\n").unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let repo = Repo::open(r).await.unwrap();
    assert!(matches!(
        Way::of(&repo).await,
        Way::Git {
            post_checkout_hook: true
        }
    ));
    let p = r.join(".aicli/worktrees/b/t");
    let wt = repo.add_worktree("aicli/b/t", &p, "HEAD").await.unwrap();
    assert_eq!(std::fs::read_to_string(p.join("hooked.txt")).unwrap(), "a\n");
    std::fs::remove_file(p.join("hooked.txt")).unwrap();
    assert_eq!(repo.cleanup(&wt).await.unwrap(), Cleanup::Removed);
    assert!(listed(r, &p).is_none());
}

/// A worktree path that holds files is refused, and the branch it would have made is
/// not left behind.
#[tokio::test]
async fn a_path_in_use_is_refused_leaving_nothing() {
    let dir = repo_with_a_file();
    let r = dir.path();
    let repo = Repo::open(r).await.unwrap();
    let p = r.join(".aicli/worktrees/b/t");
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(p.join("mine.txt"), "keep").unwrap();
    let e = repo.add_worktree("aicli/b/t", &p, "HEAD").await.unwrap_err();
    assert!(e.to_string().contains("not empty"), "{e}");
    assert_eq!(std::fs::read_to_string(p.join("mine.txt")).unwrap(), "keep");
    assert!(run(r, &["branch", "--list", "aicli/*"]).is_empty());
    assert!(!r.join(".git/worktrees").exists() || std::fs::read_dir(r.join(".git/worktrees")).unwrap().count() == 0);
}
