use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use nix::sys::stat::Mode;

use super::root::Root;
use super::{FilesError, FilesRequest, MAX_ENTRIES, check_relative, get_files};

fn req(path: &str, pattern: &str, read: bool) -> FilesRequest {
    FilesRequest {
        path: path.into(),
        pattern: pattern.into(),
        read,
        max_bytes: 1_000_000,
    }
}

fn tree() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("ws/src/deep")).unwrap();
    std::fs::write(d.path().join("ws/README.md"), "hello").unwrap();
    std::fs::write(d.path().join("ws/src/main.rs"), "fn main() {}").unwrap();
    std::fs::write(d.path().join("ws/src/deep/x.rs"), "x").unwrap();
    std::fs::write(d.path().join("secret.txt"), "TOP SECRET").unwrap();
    d
}

#[test]
fn lexical_checks_refuse_absolute_and_parent() {
    assert!(matches!(
        check_relative("/etc"),
        Err(FilesError::Absolute { .. })
    ));
    assert!(matches!(
        check_relative("a/../../b"),
        Err(FilesError::ParentDir { .. })
    ));
    assert!(matches!(
        check_relative("a\0b"),
        Err(FilesError::Nul { .. })
    ));
    assert_eq!(check_relative("./a/./b").unwrap(), PathBuf::from("a/b"));
    assert_eq!(check_relative(".").unwrap(), PathBuf::new());
}

#[test]
fn lists_top_level_and_recursive() {
    let d = tree();
    let ws = d.path().join("ws");
    let top = get_files(&ws, &req(".", "*", false)).unwrap();
    let names: Vec<_> = top.entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(names, ["README.md", "src"]);
    let rs = get_files(&ws, &req(".", "**/*.rs", true)).unwrap();
    let names: Vec<_> = rs.entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(names, ["src/deep/x.rs", "src/main.rs"]);
    assert_eq!(rs.entries[1].content.as_deref(), Some("fn main() {}"));
    let sub = get_files(&ws, &req("src", "*.rs", false)).unwrap();
    let names: Vec<_> = sub.entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(names, ["src/main.rs"]);
}

#[test]
fn bad_glob_names_the_pattern() {
    let d = tree();
    let err = get_files(&d.path().join("ws"), &req(".", "a[", false)).unwrap_err();
    assert!(err.to_string().contains("\"a[\""), "{err}");
}

#[test]
fn symlink_to_outside_is_refused_and_not_followed_in_listing() {
    let d = tree();
    let ws = d.path().join("ws");
    symlink(d.path().join("secret.txt"), ws.join("leak")).unwrap();
    symlink(d.path(), ws.join("up")).unwrap();
    let err = get_files(&ws, &req("leak", "*", true)).unwrap_err();
    assert!(matches!(err, FilesError::Outside { .. }), "{err}");
    let err = get_files(&ws, &req("up/secret.txt", "*", true)).unwrap_err();
    assert!(matches!(err, FilesError::Outside { .. }), "{err}");
    let all = get_files(&ws, &req(".", "**", true)).unwrap();
    let json = serde_json::to_string(&all).unwrap();
    assert!(!json.contains("TOP SECRET"), "{json}");
    let leak = all.entries.iter().find(|e| e.path == "leak").unwrap();
    assert_eq!(leak.kind, "symlink");
}

#[test]
fn symlink_inside_the_workspace_is_followed_when_named() {
    let d = tree();
    let ws = d.path().join("ws");
    symlink("README.md", ws.join("readme-link")).unwrap();
    let got = get_files(&ws, &req("readme-link", "*", true)).unwrap();
    assert_eq!(got.entries[0].content.as_deref(), Some("hello"));
}

#[test]
fn swap_between_resolve_and_open_is_caught() {
    let d = tree();
    let ws = d.path().join("ws");
    let root = Root::open(&ws).unwrap();
    let rel = root
        .resolve(Path::new("src/main.rs"), "src/main.rs")
        .unwrap();
    // The agent swaps the directory for a symlink to outside after the check.
    std::fs::rename(ws.join("src"), d.path().join("moved")).unwrap();
    std::fs::create_dir(d.path().join("evil")).unwrap();
    std::fs::write(d.path().join("evil/main.rs"), "TOP SECRET").unwrap();
    symlink(d.path().join("evil"), ws.join("src")).unwrap();
    let err = root.open_beneath(&rel, "src/main.rs").unwrap_err();
    assert!(matches!(err, FilesError::Outside { .. }), "{err}");
    // And the file itself swapped for a symlink.
    std::fs::remove_file(ws.join("src")).unwrap();
    std::fs::create_dir(ws.join("src")).unwrap();
    symlink(d.path().join("secret.txt"), ws.join("src/main.rs")).unwrap();
    let err = root.open_beneath(&rel, "src/main.rs").unwrap_err();
    assert!(matches!(err, FilesError::Outside { .. }), "{err}");
}

#[test]
fn oversized_files_are_listed_not_read() {
    let d = tree();
    let ws = d.path().join("ws");
    std::fs::write(ws.join("big.bin"), vec![b'a'; 2048]).unwrap();
    let mut r = req(".", "big.bin", true);
    r.max_bytes = 1024;
    let got = get_files(&ws, &r).unwrap();
    assert_eq!(got.entries[0].size, 2048);
    assert!(got.entries[0].content.is_none());
    assert!(
        got.entries[0]
            .skipped
            .as_deref()
            .unwrap()
            .contains("max_bytes")
    );
}

#[test]
fn too_many_entries_truncate() {
    let d = tree();
    let ws = d.path().join("ws/many");
    std::fs::create_dir(&ws).unwrap();
    for i in 0..(MAX_ENTRIES + 5) {
        std::fs::write(ws.join(format!("f{i:05}")), "").unwrap();
    }
    let got = get_files(&ws, &req(".", "*", false)).unwrap();
    assert_eq!(got.entries.len(), MAX_ENTRIES);
    assert!(got.truncated);
    assert!(got.note.unwrap().contains("truncated"));
}

#[test]
fn fifo_is_not_opened_for_reading() {
    let d = tree();
    let ws = d.path().join("ws");
    nix::unistd::mkfifo(&ws.join("pipe"), Mode::from_bits_truncate(0o600)).unwrap();
    let got = get_files(&ws, &req(".", "pipe", true)).unwrap();
    assert_eq!(got.entries[0].kind, "other");
    let err = get_files(&ws, &req("pipe", "*", true)).unwrap_err();
    assert!(matches!(err, FilesError::NotFileOrDir { .. }), "{err}");
}
