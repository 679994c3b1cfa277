//! The real CLIs wired to the testkit's fake model APIs, as aicli's config entries.

use aicli_testkit::{CliWiring, Vendor};

/// The model a run against the fake asks for: Codex `gpt-5.5` (plain function tools;
/// its default model speaks "code mode"), Gemini `gemini-2.5-flash` (no router call, so
/// every model request is one the script answers), Claude its own default.
pub fn fake_model(vendor: Vendor) -> Option<&'static str> {
    match vendor {
        Vendor::Anthropic => None,
        Vendor::OpenAi => Some("gpt-5.5"),
        Vendor::Gemini => Some("gemini-2.5-flash"),
    }
}

/// The wiring's arguments for a config entry's `extra_args`: all but what the adapter
/// passes itself (the model flag, Gemini's `--skip-trust`).
pub fn wiring_extra_args(wiring: &CliWiring) -> Vec<String> {
    let mut args = wiring.args.iter();
    let mut extra = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "-m" | "--model" => {
                args.next();
            }
            "--skip-trust" => {}
            _ => extra.push(a.clone()),
        }
    }
    extra
}
