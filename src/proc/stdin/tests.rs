use super::*;

#[test]
fn record_lines_wait_for_the_line_in_progress() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("events.ndjson");
    let rec = StdoutRecord::from(Some(File::create(&path).expect("file")));
    rec.note("{\"aicli_stdin\":1}");
    rec.write(b"{\"a\":1}\n{\"b\":");
    rec.note("{\"aicli_stdin\":2}");
    rec.write(b"2}\n");
    rec.write(b"{\"c\":");
    rec.note("{\"aicli_stdin\":3}");
    rec.end_of_stdout();
    rec.note("{\"aicli_stdin\":4}");
    let text = std::fs::read_to_string(&path).expect("read");
    assert_eq!(
        text,
        "{\"aicli_stdin\":1}\n{\"a\":1}\n{\"b\":2}\n{\"aicli_stdin\":2}\n{\"c\":\n{\"aicli_stdin\":3}\n{\"aicli_stdin\":4}\n"
    );
}

#[test]
fn a_cut_last_line_stays_as_printed_when_nothing_of_aicli_s_follows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("events.ndjson");
    let rec = StdoutRecord::from(Some(File::create(&path).expect("file")));
    rec.write(b"{\"a\":1}\n{\"type\":\"res");
    rec.end_of_stdout();
    let text = std::fs::read_to_string(&path).expect("read");
    assert_eq!(text, "{\"a\":1}\n{\"type\":\"res");
    // A message after the end still gets a line of its own.
    rec.note("{\"aicli_stdin\":1}");
    let text = std::fs::read_to_string(&path).expect("read");
    assert_eq!(text, "{\"a\":1}\n{\"type\":\"res\n{\"aicli_stdin\":1}\n");
}
