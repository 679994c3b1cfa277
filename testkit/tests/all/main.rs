//! One test binary: the fakes over plain HTTP (`wire`), and each real CLI against its
//! fake (`claude`, `codex`, `gemini`). The CLI tests need the pinned CLIs from
//! `.ci/install-clis.sh`; each run gets its own HOME/TMPDIR under the target dir, a clean
//! environment pointed at a fake on 127.0.0.1, and a timeout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod mcp_echo;

mod claude;
mod codex;
mod gemini;
mod timings;
mod wire;
