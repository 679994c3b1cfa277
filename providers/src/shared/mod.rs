//! What the CLI-wrapping adapters share, spelled once: merging the config's and the
//! task's arguments, environment and tool lists ([`args`]), the tables that turn API
//! error types, HTTP statuses and error words into an [`crate::ErrorKind`]
//! ([`errors`]), text helpers ([`text`]) and a run's own settings home
//! ([`settings_home`]), and bubblewrap for a CLI with no sandbox of its own
//! ([`confine`]).

pub mod args;
pub mod confine;
pub mod errors;
pub mod settings_home;
pub mod text;
pub mod usage_limit;
