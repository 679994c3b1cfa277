//! The integration tests of aicli: one binary, modules under `tests/suite/`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
mod support;
