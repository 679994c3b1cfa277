//! What the CLI-wrapping adapters share, spelled once: merging the config's and the
//! task's arguments, environment and tool lists ([`args`]), the tables that turn API
//! error types, HTTP statuses and error words into an [`crate::ErrorKind`]
//! ([`errors`]), and text helpers ([`text`]).

pub mod args;
pub mod errors;
pub mod text;
