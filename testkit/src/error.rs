//! The testkit's error type.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::Vendor;

/// What can go wrong when starting a fake, waiting on it, or preparing a CLI run.
#[derive(Debug, thiserror::Error)]
pub enum FakeApiError {
    /// The listening socket could not be bound.
    #[error("binding the fake {vendor} API to {addr}: {source}")]
    Bind {
        /// Which fake.
        vendor: Vendor,
        /// The address asked for.
        addr: SocketAddr,
        /// The bind error.
        #[source]
        source: io::Error,
    },
    /// [`crate::FakeApi::wait_for_requests`] ran out of time.
    #[error(
        "the fake {vendor} API received {received} of the {expected} model requests expected within {waited:?}; requests seen: {seen}"
    )]
    Timeout {
        /// Which fake.
        vendor: Vendor,
        /// Model requests waited for.
        expected: usize,
        /// Model requests received.
        received: usize,
        /// How long it waited.
        waited: Duration,
        /// One line per request received (all kinds), or "none".
        seen: String,
    },
    /// The pinned CLI is not in the cache directory.
    #[error(
        "{cli} is not installed at {}: run `aicli install` or .ci/install-clis.sh (they install the versions pinned in ai_cli_providers.json into aicli's cache, default ~/.cache/aicli/npm)",
        path.display()
    )]
    CliNotInstalled {
        /// The binary name (`claude`, `codex`, `gemini`, `claude-agent-acp`, ...).
        cli: String,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// A run directory or a settings file could not be written.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
}
