//! Log lines of the MCP library that are known to be benign: what an MCP client's own
//! habits make rmcp say, with nothing lost and nothing to do. The binary shows them as
//! notes (with `-v`), never as warnings.

/// One known-benign log line.
struct Known {
    /// The `tracing` target starts with this.
    target: &'static str,
    /// The message starts with this.
    starts: &'static str,
    /// And holds this.
    holds: &'static str,
    /// Why it is benign, for the note.
    why: &'static str,
}

const KNOWN: &[Known] = &[Known {
    target: "rmcp::",
    starts: "Resume failed (",
    holds: "returning empty stream",
    why: "an MCP client re-opened the event stream of a session whose stream had already \
          ended; it got an empty stream, and no message was lost",
}];

/// Why a log line of `target` saying `message` is benign, when it is one of the known
/// ones.
pub fn benign_log(target: &str, message: &str) -> Option<&'static str> {
    KNOWN
        .iter()
        .find(|k| {
            target.starts_with(k.target)
                && message.starts_with(k.starts)
                && message.contains(k.holds)
        })
        .map(|k| k.why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resume_of_a_closed_stream_is_benign_and_other_lines_are_not() {
        let target = "rmcp::transport::streamable_http_server::tower";
        let line = "Resume failed (Session error: Channel closed: Some(2)), returning empty stream";
        assert!(benign_log(target, line).is_some());
        // The same words from aicli itself, or another rmcp warning, are not.
        assert_eq!(benign_log("aicli::mcp", line), None);
        assert_eq!(
            benign_log(target, "rejected request with missing Host header"),
            None
        );
    }
}
