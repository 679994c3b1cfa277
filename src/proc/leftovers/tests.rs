use std::path::PathBuf;

use super::*;

#[test]
fn pid_files_of_this_and_older_versions_parse() {
    assert_eq!(
        parse_pid_file("100 5\nmarker abc\ncgroup /sys/fs/cgroup/aicli/1-2-3\n"),
        PidFile {
            pids: vec![(100, 5)],
            marker: Some("abc".into()),
            cgroup: Some(PathBuf::from("/sys/fs/cgroup/aicli/1-2-3")),
        }
    );
    // An older aicli listed every descendant it had seen.
    assert_eq!(
        parse_pid_file("100 5\n101 6\n\ngarbage\n").pids,
        vec![(100, 5), (101, 6)]
    );
}
