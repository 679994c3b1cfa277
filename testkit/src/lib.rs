//! # aicli-testkit: fake model APIs for running the real CLIs offline
//!
//! Tests of aicli run the **real** `claude`, `codex` and `gemini` binaries (installed at
//! the versions pinned in `ai_cli_providers.json` by `.ci/install-clis.sh`) against fake
//! model APIs on 127.0.0.1. This crate is those fakes, plus the plain data that points
//! each CLI at one with telemetry and update checks off.
//!
//! | module | owns |
//! |---|---|
//! | [`script`] | [`Script`] / [`Step`]: what a fake answers, request by request; [`Usage`], [`ErrorReply`] |
//! | `server` | [`FakeApi`]: the axum server on an ephemeral port, its request log ([`RecordedRequest`]), [`FakeApi::wait_for_requests`], [`serve`] |
//! | `anthropic`, `openai`, `gemini` | rendering a step in each wire format (SSE events, error JSON) |
//! | `sse` | response bodies fed from a channel, so a stream can be paced or cut midway |
//! | [`wiring`] | [`CliWiring`] (env + args + files per CLI), [`RunDirs`] (own HOME/TMPDIR per run), [`installed_cli`] |
//!
//! The `aicli-fake-api` binary runs one fake by hand (`aicli-fake-api gemini --port 8801
//! --shell 'echo hi' --log requests.jsonl`) and prints the wiring and each request.
//!
//! ## Use
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use aicli_testkit::{FakeApi, RunDirs, Script, Vendor, WiringOptions, installed_cli};
//! use serde_json::json;
//!
//! // The model calls Bash, then answers quoting what the tool printed.
//! let script = Script::tool_call("Bash", json!({"command": "touch x"})).then_quote_tool_result();
//! let fake = FakeApi::start(Vendor::Anthropic, script).await?;
//! let wiring = fake.wiring_with(&WiringOptions::default().with_max_retries(0));
//! let dirs = RunDirs::new()?;
//! wiring.write_files(&dirs.home)?;
//! let mut cmd = tokio::process::Command::new(installed_cli(Vendor::Anthropic)?);
//! cmd.args(["-p", "Create x", "--output-format", "stream-json", "--verbose", "--allowedTools", "Bash"])
//!     .args(&wiring.args)
//!     .env_clear()
//!     .envs(dirs.env_with(&wiring))
//!     .current_dir(&dirs.work)
//!     .stdin(std::process::Stdio::null())
//!     .kill_on_drop(true);
//! let out = tokio::time::timeout(Duration::from_secs(60), cmd.output()).await??;
//! // Fails with a message listing what did arrive instead of hanging.
//! let requests = fake.wait_for_requests(2, Duration::from_secs(10)).await?;
//! assert_eq!(requests[1].answer, "text quoting the tool result");
//! # let _ = out; Ok(()) }
//! ```
//!
//! A script is consumed one step per model request; past its end **the last step
//! repeats** (so `Script::error(429)` fails every retry and `Script::shell("echo hi")`
//! alone loops until the CLI's turn limit). Side calls (Gemini's router, `count_tokens`,
//! Claude's `HEAD /api/hello`) are logged but never use the script. Scripts:
//! `Script::text(..)`, `Script::tool_call(name, input)`, `Script::shell(cmd)` (the vendor's
//! own shell tool), `Script::mcp_tool_call(server, tool, input)` (with the discovery step
//! each CLI needs), `Script::error(status)`, `Script::rate_limited(after)`,
//! `Script::error_reply(ErrorReply::invalid_api_key() / quota_exhausted())`,
//! `Script::drop_mid_stream()`, `Step::StreamError`, `Script::hang()`; chain with
//! `.then_*`. Default answers and token counts are those of the reference transcripts
//! (`/work/shared/transcripts`): a plain run reproduces their final events exactly.
//!
//! ## How each CLI is pointed at a fake ([`CliWiring::for_fake`])
//!
//! Every run also gets `env_clear()` + `HOME`, `TMPDIR`, `PATH`, `LANG` of its own
//! [`RunDirs`], stdin null, and its own process group.
//!
//! - **claude** (2.1.332): env `ANTHROPIC_BASE_URL=http://127.0.0.1:PORT`,
//!   `ANTHROPIC_API_KEY=sk-ant-fake-key` (sent as `x-api-key`),
//!   `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1` (the one that stops `HEAD /api/hello`
//!   and the api.anthropic.com lookup), `DISABLE_TELEMETRY=1`, `DISABLE_AUTOUPDATER=1`,
//!   `DISABLE_ERROR_REPORTING=1`, `CLAUDE_CODE_MAX_RETRIES=<n>` (0 works: no retry);
//!   `--model M` if asked. Requests: `POST /v1/messages?beta=true`.
//! - **codex** (0.171.0), args after `exec`: `-c model_provider=fake -c
//!   'model_providers.fake={name="fake",base_url="http://127.0.0.1:PORT/v1",env_key="FAKE_OPENAI_KEY",wire_api="responses",request_max_retries=<n>,stream_max_retries=<n>}'
//!   -c analytics.enabled=false -c check_for_update_on_startup=false --disable plugins -m
//!   gpt-5.5`, env `FAKE_OPENAI_KEY=sk-fake` (sent as `Bearer`). Requests: `POST
//!   /v1/responses`. Put `HOME` (so `CODEX_HOME`) outside `/tmp` to avoid the "Refusing to
//!   create helper binaries under temporary dir" warning ([`RunDirs::new_in`]).
//! - **gemini** (0.61.0): env `GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:PORT`,
//!   `GEMINI_API_KEY=fake-gemini-key` (sent as `x-goog-api-key`),
//!   `GEMINI_CLI_NO_RELAUNCH=true`; arg `--skip-trust` (`-m M` if asked); file
//!   `~/.gemini/settings.json` `{"security":{"auth":{"selectedType":"gemini-api-key"}},
//!   "privacy":{"usageStatisticsEnabled":false},"telemetry":{"enabled":false},
//!   "general":{"enableAutoUpdate":false,"enableAutoUpdateNotification":false,
//!   "maxAttempts":<n+1>}}`. Requests: `POST
//!   /v1beta/models/<m>:streamGenerateContent?alt=sse`, and without `-m` first `POST
//!   /v1beta/models/gemini-3.5-flash-lite:generateContent` (the router).
//!
//! With this wiring the whole test suite of this crate passes inside a network namespace
//! that has only `lo`, with a DNS logger as resolver: no DNS query and no connection to
//! anything but 127.0.0.1 (checked with `strace -f -e trace=connect`).
//!
//! ## What the real CLIs did that `shared/notes/real-clis.md` does not say
//!
//! - **Gemini's router is the numerical classifier.** Without `-m`, Gemini CLI 0.61 asks
//!   `gemini-3.5-flash-lite` for `{"complexity_reasoning","complexity_score"}` (schema in
//!   `generationConfig.responseJsonSchema`), not `{"reasoning","model_choice"}`. A non-JSON
//!   answer makes it retry with backoff (4 calls and still waiting after 60 s). Score 10
//!   routes to `gemini-3.8-flash`. The fake answers any JSON schema it is asked for.
//! - **Gemini retries are bounded by `general.maxAttempts`** in settings.json (1 = no
//!   retry: a 429 then fails in ~2 s with exit 173 instead of ~4 minutes). A 429 whose
//!   details hold a per-day `QuotaFailure` is not retried at all
//!   ([`ErrorReply::quota_exhausted`]). A 401 exits 145 (401 & 0xff).
//! - **rmcp's SSE priming events break Gemini's MCP client.** rmcp 3.11 by default sends
//!   an event with empty `data:` (`id: 0/0`, `retry: 3000`) before each response, from
//!   both `StreamableHttpServerConfig::sse_retry` and the `LocalSessionManager`'s
//!   `SessionConfig::sse_retry`. Gemini CLI 0.61 runs `JSON.parse("")` on it, drops the
//!   server ("MCP issues detected. Run /mcp list for status." on stderr), does not declare
//!   its tools, and answers the model's call with "Tool not found". Set both to `None`.
//!   Claude and Codex ignore the event. This matters for aicli's own MCP server.
//! - **Gemini declares MCP tools as `mcp_<server>_<tool>`** in the first request's
//!   `functionDeclarations` (server trusted and connected); the model calls that name.
//! - **Claude's deferred MCP tools:** before `ToolSearch`, `tools[]` holds only a
//!   `DeferredToolPlaceholder` (`defer_loading: true`); after it, the tool result is
//!   `[{"type":"tool_reference","tool_name":"mcp__S__T"}]` plus a "Tool loaded." text
//!   block, and `tools[]` lists `mcp__S__T` still flagged `defer_loading: true`. The last
//!   entry of `messages[]` in a first request is the `role: "system"` message.
//! - **Codex and 429:** without `retry-after` a 429 is never retried, whatever the retry
//!   settings ("exceeded retry limit, last status: 429 Too Many Requests, request id:
//!   req_…"); with `retry-after` it is retried `request_max_retries` times. A 5xx is
//!   retried at both levels: (request_max_retries + 1) × (stream_max_retries + 1) requests,
//!   with "Reconnecting... k/n" events. A 503's message passes through; a 500's is replaced.
//! - **Request ids:** Codex quotes the `x-request-id` header in its error messages; Claude
//!   reports `request-id` as `request_id`. The fake sends both (`req_fake0001`, …).
//! - **Codex's tool list** (gpt-5.5): `exec_command` (`{cmd, justification, login, …}`),
//!   `write_stdin`, `request_user_input`, `apply_patch` (custom), `view_image`, goals, and
//!   `{"type":"tool_search"}` / `{"type":"web_search"}` without a `name`. Its client
//!   `tool_search_call` takes `{"query","limit"}`; `tool_search_output` carries
//!   `{"type":"namespace","name":"mcp__S","tools":[…]}`. `--sandbox workspace-write` works
//!   on this machine (a `touch` in the cwd succeeds); the notes only used bypass.
//! - **Codex's shell output** quoted back is exec_command's text ("Chunk ID: …\nWall
//!   time: …\nProcess exited with code 0\nOriginal token count: …\nOutput:\n…"); the
//!   reference fake trimmed it, and so does this one.
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
pub use script::{ANSWER_MARKER, ANSWER_PLACEHOLDER, ErrorFlavor, ErrorReply, Script, Step, Usage};
pub use server::{FakeApi, RecordedRequest, RequestKind, serve};
pub use wiring::{
    CliWiring, HomeFile, RunDirs, WiringOptions, cli_cache_dir, codex_acp_config, installed_binary,
    installed_cli,
};

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
