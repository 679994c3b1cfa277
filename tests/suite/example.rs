//! The library example (`examples/batch.rs`, the README's) runs: cargo builds it with
//! the tests, and this runs it as a user would and checks what it prints.

use std::path::PathBuf;

/// `target/<profile>/examples/batch`, next to this test binary's `deps/`.
fn example_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|d| d.parent()).unwrap();
    profile_dir.join("examples").join("batch")
}

#[test]
fn the_library_example_runs_a_custom_vendor_and_a_configured_one_with_live_events() {
    let bin = example_bin();
    assert!(bin.is_file(), "{} is not built", bin.display());
    let out = std::process::Command::new(&bin).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for line in [
        "[greet] started on shout",
        "[greet] says: HELLO FROM THE LIBRARY",
        "[recorded] started on claude",
        "[recorded] says: Hello from the fake Anthropic API.",
        "2 of 2 succeeded",
    ] {
        assert!(stdout.contains(line), "no {line:?} in:\n{stdout}");
    }
    let greet = stdout
        .lines()
        .find(|l| l.starts_with("greet "))
        .unwrap_or_else(|| panic!("{stdout}"));
    // 22 prompt characters in and out at shout-1's prices ($1 and $2 per million).
    assert!(
        greet.contains("Succeeded")
            && greet.contains("22 tokens in,   22 out, $0.000066 (Estimated)"),
        "{greet}"
    );
}
