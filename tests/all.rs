//! The integration tests of aicli: one binary, modules under `tests/suite/`.

mod suite;
