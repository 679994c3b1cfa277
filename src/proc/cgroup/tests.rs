use super::*;

#[test]
fn a_record_can_only_name_a_run_cgroup() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("aicli/12-3-ab0f");
    std::fs::create_dir_all(&fake).unwrap();
    // Well formed, but not in a cgroup hierarchy.
    assert!(RunCgroup::open(&fake).is_none());
    // Not aicli's.
    for p in [
        "/sys/fs/cgroup",
        "/sys/fs/cgroup/unified",
        "/sys/fs/cgroup/unified/docker",
        "/sys/fs/cgroup/system.slice",
        "/sys/fs/cgroup/aicli/../docker",
    ] {
        assert!(RunCgroup::open(Path::new(p)).is_none(), "{p}");
    }
}

#[test]
fn mountinfo_paths_are_unescaped_and_own_paths_map_under_the_mount() {
    assert_eq!(unescape(r"/sys/fs/cgroup/a\040b"), "/sys/fs/cgroup/a b");
    assert_eq!(
        dir_under(Path::new("/sys/fs/cgroup"), "/", "/user.slice/u.scope"),
        PathBuf::from("/sys/fs/cgroup/user.slice/u.scope")
    );
    // A mount of a sub-tree (a container's view): its root is stripped.
    assert_eq!(
        dir_under(Path::new("/sys/fs/cgroup"), "/docker/abc", "/docker/abc/x"),
        PathBuf::from("/sys/fs/cgroup/x")
    );
    assert_eq!(
        dir_under(Path::new("/sys/fs/cgroup/unified"), "/", "/"),
        PathBuf::from("/sys/fs/cgroup/unified")
    );
}
