//! The harness the integration tests and the benches share: one implementation of the
//! fake CLI's paths and argv, the git repositories, the Docker images and hosts, the
//! CLI wiring and the MCP peers.
//!
//! `tests/all.rs` has it as `mod support`; each bench that needs it includes this file by
//! path (`#[path = "../tests/support/mod.rs"] mod support;`). The tests' own helpers
//! (engines over the replay provider, event collectors, process checks) stay in
//! `tests/suite/support.rs`, the Docker tests' in `tests/suite/docker/support.rs`.

// Each bench, and the test binary, uses a part of it.
#![allow(dead_code)]
// Harness code: a failed step is a panic that says what failed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod bench;
pub mod browser;
pub mod docker;
pub mod fake;
pub mod git;
pub mod mcp;
pub mod mcp_client;
pub mod rss;
pub mod wiring;
