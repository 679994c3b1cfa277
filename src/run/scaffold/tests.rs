use std::os::unix::fs::PermissionsExt;

use super::*;

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn links_are_made_with_private_dirs_and_removed_without_their_targets() {
    let tmp = tempfile::tempdir().unwrap();
    let user = tmp.path().join("home/.gemini");
    let run = tmp.path().join("private/gemini-home/.gemini");
    std::fs::create_dir_all(&user).unwrap();
    std::fs::write(user.join("oauth_creds.json"), "{}").unwrap();
    let links = [
        LinkSpec {
            link: run.join("oauth_creds.json"),
            target: user.join("oauth_creds.json"),
            create_target_dir: false,
        },
        // State that must outlive the run: its target is made first.
        LinkSpec {
            link: run.join("tmp"),
            target: user.join("tmp"),
            create_target_dir: true,
        },
    ];
    let mut scaffold = Scaffold::default();
    for l in &links {
        create_link(l, &l.target).unwrap();
        scaffold.links.push(l.link.clone());
    }
    assert_eq!(mode(&run), 0o700);
    assert_eq!(mode(&user.join("tmp")), 0o700);
    assert_eq!(
        std::fs::read_link(run.join("tmp")).unwrap(),
        user.join("tmp")
    );
    // Written through the link, kept in the user's directory.
    std::fs::write(run.join("tmp/chat.json"), "[]").unwrap();
    assert!(user.join("tmp/chat.json").exists());
    // A leftover link or file is replaced (the CLI may rename a file over a link);
    // a directory in the way is an error.
    create_link(&links[0], &links[0].target).unwrap();
    std::fs::write(run.join("projects.json"), "{}").unwrap();
    let leftover = LinkSpec {
        link: run.join("projects.json"),
        target: user.join("projects.json"),
        create_target_dir: false,
    };
    create_link(&leftover, &leftover.target).unwrap();
    assert_eq!(
        std::fs::read_link(run.join("projects.json")).unwrap(),
        user.join("projects.json")
    );
    std::fs::create_dir(run.join("extensions")).unwrap();
    let in_the_way = LinkSpec {
        link: run.join("extensions"),
        target: user.join("extensions"),
        create_target_dir: false,
    };
    assert_eq!(
        create_link(&in_the_way, &in_the_way.target)
            .unwrap_err()
            .kind(),
        std::io::ErrorKind::AlreadyExists
    );
    // Dropped (or removed): the links go, never their targets.
    drop(scaffold);
    assert!(run.join("tmp").symlink_metadata().is_err());
    assert!(run.join("oauth_creds.json").symlink_metadata().is_err());
    assert!(user.join("tmp/chat.json").exists());
    assert!(user.join("oauth_creds.json").exists());
}

#[test]
fn a_dropped_scaffold_releases_its_ide_lockfile_for_the_next_run() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("ide/4000.lock");
    lockfiles::acquire(&path, "{}").unwrap();
    assert_eq!(mode(&path), 0o600);
    // Another run of the same port gets none while this one holds it.
    assert!(lockfiles::acquire(&path, "{}").is_err());
    let mut scaffold = Scaffold::default();
    scaffold.lockfile = Some(path.clone());
    drop(scaffold);
    assert!(!lockfiles::is_held(&path));
    assert!(!path.exists());
    lockfiles::acquire(&path, "{}").unwrap();
    lockfiles::release(&path);
}
