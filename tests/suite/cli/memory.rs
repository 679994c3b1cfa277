//! Memory does not grow with a run's stream, also when the display cannot keep up
//! (issue 10, item 6): the real `aicli` binary, `run --json` with its stdout read far
//! slower than it prints, on a stream of large tool results.

use std::io::Read;
use std::process::Stdio;
use std::time::Duration;

use serde_json::json;

use super::*;

/// The peak RSS (`VmHWM`, KiB) of a running process, polled until it exits, and how it
/// exited.
fn peak_rss_kib(child: &mut std::process::Child) -> (u64, std::process::ExitStatus) {
    crate::support::rss::peak_rss_kib(child, Duration::from_millis(10))
}

#[test]
fn a_long_stream_read_by_a_slow_display_keeps_memory_flat() {
    // A Claude stream of 100 KiB tool results, 48 MiB in all, then the final line.
    let cli = Cli::new();
    let sid = "9a4f3c1e-0000-4c61-9d1e-00000000beef";
    let big = "x".repeat(100 << 10);
    let transcript = [
        json!({"type":"system","subtype":"init","session_id":sid,"model":"claude-opus-5-5","tools":[],"mcp_servers":[]}),
        json!({"type":"user","session_id":sid,"message":{"role":"user","content":[
            {"type":"tool_result","tool_use_id":"toolu_1","content":big}]}}),
        json!({"type":"result","subtype":"success","is_error":false,"session_id":sid,"result":"done",
            "num_turns":1,"total_cost_usd":0.001,"usage":{"input_tokens":1,"output_tokens":1}}),
    ]
    .iter()
    .map(|v| format!("{v}\n"))
    .collect::<String>();
    let file = cli.file("big.ndjson", &transcript);
    let total: u64 = 48 << 20;
    let config = cli.file(
        "big.json",
        &json!({"default_provider": "big", "providers": {"big": {
            "adapter": "claude", "binary_path": fake_cli(),
            "extra_args": ["--replay", file, "--repeat-to", total.to_string()]}}})
        .to_string(),
    );
    let mut child = std::process::Command::new(aicli_bin())
        .arg("--config")
        .arg(&config)
        .args(["run", "print a long stream", "--json", "--no-mcp"])
        .current_dir(cli.repo.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("aicli runs");
    // The display: reads 16 KiB every 20 ms (0.8 MB/s), far slower than the stream.
    let mut out = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; 16 << 10];
        let mut n = 0usize;
        while let Ok(k) = out.read(&mut buf) {
            if k == 0 {
                break;
            }
            n += k;
            std::thread::sleep(Duration::from_millis(20));
        }
        n
    });
    let mut err = child.stderr.take().expect("stderr");
    let errors = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let (peak, status) = peak_rss_kib(&mut child);
    let shown = reader.join().expect("reader");
    let err = errors.join().expect("stderr reader");
    assert_eq!(status.code(), Some(0), "{err}");
    // Every byte is in the record; the display lost events and said so.
    let runs = cli.repo.path().join(".aicli/runs");
    let events = super::super::support::files_under(&runs)
        .into_iter()
        .find(|p| p.ends_with("events.ndjson"))
        .expect("a recorded stream");
    let recorded = std::fs::metadata(&events).expect("record").len();
    assert!(recorded >= total, "{recorded} < {total}");
    assert!(err.contains("events were not shown"), "{err}");
    assert!((shown as u64) < recorded, "{shown} bytes shown");
    // Well under what the stream would take held in memory (48 MiB of lines, twice over
    // as raw lines and decoded events): the goal for one run is 64 MiB.
    // `VmHWM` is a high-water mark: the last reading before the exit holds the peak of
    // all but the last 10 ms. A run that ended before the first reading measured nothing.
    assert!(peak > 0, "aicli exited before its memory could be read");
    assert!(peak < 64 << 10, "peak RSS {} MiB", peak >> 10);
}
