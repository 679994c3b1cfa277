//! The Gemini CLI adapter: `@google/gemini-cli` 0.61.0 run as
//! `gemini --output-format stream-json --skip-trust` with the prompt on stdin.
//!
//! | module | owns |
//! |---|---|
//! | [`wire`] | the stream-json line types (pinned to gemini-cli's `output/types.ts`) |
//! | `argv` | the command and the run's own Gemini home |
//! | `settings` | aicli's per-run settings merged over the user's |
//! | `decode` | lines -> events, the per-run fold, canonical usage |
//! | `classify` | exit codes, API error bodies and words -> kinds |
//! | `result` | the final [`SessionResult`] |
//!
//! # Launch
//!
//! **The prompt goes on stdin**: with stdin not a terminal and no `-p`, gemini runs
//! headless and reads the prompt there, so it never shows in `/proc/PID/cmdline`. Flags
//! carry the model (`-m`), the approval mode (`--approval-mode`) and `--resume <uuid>`.
//! Everything else Gemini only takes from a settings file, so each run gets its own
//! Gemini home: [`HOME_ENV`] points at `<private_dir>/gemini-home`, whose
//! `.gemini/settings.json` (0600) is the user's own `~/.gemini/settings.json` with
//! aicli's per-run settings merged over it as Gemini merges a higher settings layer
//! (aicli's values win, `mcpServers` merges by server name, `tools.exclude` is a union):
//! `privacy.usageStatisticsEnabled: false`, `model.maxSessionTurns` (Gemini has no turn
//! flag), `tools.allowed` / `tools.exclude` and, when aicli's MCP server runs,
//! `mcpServers.<name>` with the bearer token (never in argv). Every other entry of the
//! user's `~/.gemini` is a symbolic link to the real one, so login and `--resume` work as
//! in the user's own sessions; `~/.gemini/tmp` and `~/.gemini/history` are created first
//! when missing, so a run's session outlives its private directory.
//!
//! aicli's settings are the *user* layer: the admin's system settings and a trusted
//! worktree's `.gemini/settings.json` rank above them.
//!
//! # Stream
//!
//! `init` (session id, model), `message` (the prompt echoed as role `user`; the answer as
//! role `assistant` chunks with `delta: true`), `tool_use`, `tool_result`, `error`
//! (`severity` warning or error) and one `result` (status, error, stats). There is no
//! final-text field: the answer is the concatenation of the assistant chunks.
//!
//! # Errors
//!
//! Gemini exits with the HTTP status of a failed API call & 0xff (400 -> 144, 403 -> 147,
//! 429 -> 173, 500 -> 244, 503 -> 247) after a `result` line whose `error.message` quotes
//! the API's error JSON; its own fatal errors have codes 41 (auth), 42 (input: a bad
//! `--resume`, an empty prompt), 44 (sandbox), 52 (config), 53 (turn limit), 54 (fatal
//! tool error), 55 (untrusted directory) and 130 (cancelled). Several of them print no
//! `result` line at all (41, 42, 55): the exit code and stderr then say what happened.
//! Gemini turns every API 404 (a model that does not exist) into a `ModelNotFoundError`:
//! exit 1, a `result` line of `error.type` `unknown` with the API's message alone
//! (`[API Error: Requested entity was not found.]`), and on stderr the class and `code:
//! 404` (`bad_request`). Structured fields decide first (the error type, the exit code,
//! a quoted status), then the error stderr reports, then the message's words. Without a
//! known exit code nothing is said about one.
//!
//! # Usage
//!
//! `result.stats` is per run (not cumulative on `--resume`) and per model; it includes
//! the model router's call (`gemini-3.5-flash-lite`) when no `-m` is given. Gemini's
//! `input_tokens` includes `cached`; thinking tokens are counted only in `total_tokens`.
//! See [`canonical_model_usage`]. Gemini reports no cost: it is estimated per model from
//! the config's price table. `usage_by_model` keeps the split.

mod argv;
mod classify;
mod decode;
mod result;
mod settings;
pub mod wire;

pub use decode::{GeminiDecoder, canonical_model_usage};

use crate::config::ProviderConfig;
use crate::decode::{Decoder, ExitStatus};
use crate::error::ProviderError;
use crate::provider::{AiCliProvider, CommandSpec, LaunchContext};
use crate::result::ParseContext;
#[cfg(doc)]
use crate::result::SessionResult;
use crate::shared::settings_home::SettingsHome;

/// The environment variable through which Gemini finds its home: its `~/.gemini` is
/// `$GEMINI_CLI_HOME/.gemini`. aicli points it at the run's own home,
/// `<private_dir>/`[`HOME_DIR_NAME`].
pub const HOME_ENV: &str = "GEMINI_CLI_HOME";

/// The run's Gemini home, a directory inside the run's private directory.
pub const HOME_DIR_NAME: &str = "gemini-home";

/// The run's own Gemini home ([`crate::shared::settings_home`]): `.gemini/settings.json`,
/// `tmp` (`tmp/<project>/chats` holds the sessions `--resume` finds) and `history`
/// linked even when the user has none yet, `.env` and `.agents` (user skills) from the
/// home itself.
pub const GEMINI_HOME: SettingsHome<'static> = SettingsHome {
    label: "Gemini",
    env: HOME_ENV,
    home_dir: HOME_DIR_NAME,
    dir: ".gemini",
    settings_file: "settings.json",
    kept_dirs: &["history", "tmp"],
    home_entries: &[".agents", ".env"],
};

/// The model name `init` reports when no `-m` was given (the CLI routes each prompt).
pub const AUTO_MODEL: &str = "auto";

/// The Gemini CLI.
#[derive(Debug, Clone)]
pub struct GeminiProvider {
    name: String,
    config: ProviderConfig,
}

impl GeminiProvider {
    /// A provider called `name` with config entry `config`.
    pub fn new(name: &str, config: ProviderConfig) -> GeminiProvider {
        GeminiProvider {
            name: name.to_owned(),
            config,
        }
    }

    fn invalid(&self, message: impl Into<String>) -> ProviderError {
        ProviderError::InvalidTask {
            provider: self.name.clone(),
            message: message.into(),
        }
    }
}

impl AiCliProvider for GeminiProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn config(&self) -> &ProviderConfig {
        &self.config
    }

    fn command(&self, ctx: &LaunchContext<'_>) -> Result<CommandSpec, ProviderError> {
        self.build_command(ctx)
    }

    fn decoder(&self, ctx: &ParseContext) -> Box<dyn Decoder> {
        Box::new(GeminiDecoder::new(self.clone(), ctx.clone()))
    }

    /// Gemini saves a session once a model turn of it succeeded: a run whose only request
    /// failed (a usage limit at the first request) left none to resume ("No previous
    /// sessions found"), so its continuation is a new run.
    fn resumable(&self, last: &crate::result::SessionResult) -> bool {
        let no_turn = last.canonical_usage.request_count == 0
            && last.canonical_usage.output_tokens == 0
            && last.tool_calls == 0
            && last.response.is_empty();
        self.supports(crate::provider::Feature::Resume) && !no_turn
    }

    /// Exit code 41, or Gemini's "Please set an Auth method" (or its other auth-setup
    /// refusals) on stderr.
    fn detect_auth_error(&self, stderr: &str, exit: ExitStatus) -> Option<String> {
        auth_from_stderr(stderr, exit)
    }
}

fn auth_from_stderr(stderr: &str, exit: ExitStatus) -> Option<String> {
    if let Some(line) = classify::stderr_lines(stderr)
        .find(|l| classify::AUTH_SETUP_MARKERS.iter().any(|m| l.contains(m)))
    {
        return Some(line.to_owned());
    }
    (classify::Exit::from_exit(exit) == classify::Exit::Auth).then(|| {
        classify::stderr_detail(stderr)
            .unwrap_or_else(|| "gemini exited 41 (authentication error)".to_owned())
    })
}

#[cfg(test)]
mod tests;
