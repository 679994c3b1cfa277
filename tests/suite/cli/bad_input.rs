//! Issue 21 F7: bad input is exit 2 and names what is wrong.

use super::*;

/// `aicli parse` of a file that is not there is bad input (exit 2, naming the file), as
/// are an unreadable `--stderr` file, a directory that is not a task's record and an
/// attempt the record does not have; a transcript that is there still parses (exit 0).
#[test]
fn parse_of_a_missing_file_is_bad_input() {
    let cli = Cli::new();
    let missing = cli.dir.path().join("no-such.ndjson");
    let m = missing.to_str().unwrap();
    let bad = |args: &[&str], says: &str| {
        let out = cli.run(args);
        assert_code(&out, 2, &format!("aicli {args:?}"));
        let err = stderr(&out);
        assert!(err.contains(says), "aicli {args:?}: {says:?} not in: {err}");
    };
    bad(
        &["parse", "--provider", "gemini", m],
        &format!("cannot read {m}: No such file or directory"),
    );
    // Without --provider the missing file is still what is said.
    bad(&["parse", m], &format!("cannot read {m}"));
    let fx = fixture("gemini", "text");
    let fx_ndjson = fx.with_extension("ndjson");
    let good = fx_ndjson.to_str().unwrap();
    bad(
        &["parse", "--provider", "gemini", good, "--stderr", m],
        &format!("cannot read {m}"),
    );
    let empty_dir = cli.dir.path().join("not-a-task");
    std::fs::create_dir(&empty_dir).unwrap();
    bad(
        &["parse", empty_dir.to_str().unwrap()],
        "is not a run record's task directory",
    );
    let out = cli.run(&["parse", "--provider", "gemini", good]);
    assert_code(&out, 0, "parse of a fixture");
    assert_eq!(json_lines(&out)[0]["provider"], "gemini");
}

/// An entry naming an adapter aicli does not have says so (exit 2), instead of
/// "missing field `package`".
#[test]
fn an_unknown_adapter_is_named_with_the_known_ones() {
    let cli = Cli::with_providers(serde_json::json!({"x": {"adapter": "martian"}}));
    let out = cli.run(&["providers"]);
    assert_code(&out, 2, "aicli providers");
    let err = stderr(&out);
    assert!(
        err.contains(
            r#"at providers.x.adapter: unknown adapter "martian" (known: claude, codex, gemini, acp)"#
        ),
        "{err}"
    );
}
