//! Replaying the transcript on stdout: line by line (with `--line-delay-ms`,
//! `--hang-after`, `--session-id`), or `--repeat-to` a given size.

use std::io::Write;
use std::time::Duration;

use crate::opts::Opts;
use crate::procs::hang;

/// `--replay` (or `--repeat-to`) onto `out`, the session id replaced as asked.
pub fn replay(out: &mut impl Write, o: &Opts) {
    let transcript = o
        .replay
        .as_ref()
        .map(|p| std::fs::read(p).unwrap_or_else(|e| panic!("{p}: {e}")))
        .unwrap_or_default();
    let mut replayed = &transcript[..];
    if let Some(total) = o.repeat_to {
        repeat_to(out, &transcript, total);
        replayed = &[];
    }
    let recorded_sid = find_session_id(replayed);
    let mut lines = replayed.split(|b| *b == b'\n').peekable();
    let mut n = 0;
    while let Some(line) = lines.next() {
        if lines.peek().is_none() && line.is_empty() {
            break;
        }
        if o.hang_after == Some(n) {
            out.flush().unwrap();
            hang();
        }
        if o.line_delay > 0 {
            std::thread::sleep(Duration::from_millis(o.line_delay));
        }
        let mut line = line.to_vec();
        if let (Some(new), Some(old)) = (&o.session_id, &recorded_sid) {
            line = replace_all(&line, old.as_bytes(), new.as_bytes());
        }
        line.push(b'\n');
        out.write_all(&line).unwrap();
        out.flush().unwrap();
        n += 1;
    }
}

/// `--repeat-to`: the transcript's lines but the last, over and over, until `total` bytes
/// are out; then its last line (in place of the normal replay).
fn repeat_to(out: &mut impl Write, transcript: &[u8], total: u64) {
    let text = transcript.strip_suffix(b"\n").unwrap_or(transcript);
    let (body, last) = match text.iter().rposition(|b| *b == b'\n') {
        Some(i) => (&text[..=i], &text[i + 1..]),
        None => (&text[..0], text),
    };
    let mut written = 0u64;
    while !body.is_empty() && written + last.len() as u64 + 1 < total {
        for line in body.split_inclusive(|b| *b == b'\n') {
            out.write_all(line).unwrap();
            written += line.len() as u64;
        }
    }
    out.write_all(last).unwrap();
    out.write_all(b"\n").unwrap();
    out.flush().unwrap();
}

/// The first `session_id` / `thread_id` value in the transcript.
fn find_session_id(transcript: &[u8]) -> Option<String> {
    for line in transcript.split(|b| *b == b'\n') {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) else {
            continue;
        };
        for k in ["session_id", "thread_id"] {
            if let Some(s) = v.get(k).and_then(|x| x.as_str()) {
                return Some(s.to_owned());
            }
        }
    }
    None
}

fn replace_all(hay: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    if from.is_empty() {
        return hay.to_vec();
    }
    let mut out = Vec::with_capacity(hay.len());
    let mut i = 0;
    while i < hay.len() {
        if hay[i..].starts_with(from) {
            out.extend_from_slice(to);
            i += from.len();
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    out
}
