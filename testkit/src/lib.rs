//! # aicli-testkit: fake model APIs for running the real CLIs offline
//!
//! (Crate docs are completed below once the behaviour is measured.)
#![deny(missing_docs)]

mod anthropic;
mod error;
mod gemini;
mod openai;
mod pyjson;
mod render;
pub mod script;
mod server;
mod sse;
pub mod wiring;

use std::fmt;

pub use error::FakeApiError;
pub use script::{ErrorFlavor, ErrorReply, Script, Step, Usage};
pub use server::{FakeApi, RecordedRequest, RequestKind, serve};
pub use wiring::{CliWiring, HomeFile, RunDirs, WiringOptions, cli_cache_dir, installed_cli};

/// Which model API a fake speaks, and so which CLI it serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    /// Anthropic Messages API, for Claude Code (`claude`).
    Anthropic,
    /// OpenAI Responses API, for Codex CLI (`codex`).
    OpenAi,
    /// Gemini API, for Gemini CLI (`gemini`).
    Gemini,
}

impl Vendor {
    /// All vendors.
    pub const ALL: [Vendor; 3] = [Vendor::Anthropic, Vendor::OpenAi, Vendor::Gemini];

    /// The CLI binary this vendor's fake serves: `claude`, `codex`, `gemini`.
    pub fn cli_name(self) -> &'static str {
        match self {
            Vendor::Anthropic => "claude",
            Vendor::OpenAi => "codex",
            Vendor::Gemini => "gemini",
        }
    }

    /// Parses `anthropic`/`claude`, `openai`/`codex`, `gemini`/`google`.
    pub fn parse(name: &str) -> Option<Vendor> {
        match name.to_ascii_lowercase().as_str() {
            "anthropic" | "claude" => Some(Vendor::Anthropic),
            "openai" | "codex" => Some(Vendor::OpenAi),
            "gemini" | "google" => Some(Vendor::Gemini),
            _ => None,
        }
    }
}

impl fmt::Display for Vendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Vendor::Anthropic => "Anthropic",
            Vendor::OpenAi => "OpenAI",
            Vendor::Gemini => "Gemini",
        })
    }
}
