//! # aicli-providers: the plugin side of aicli
//!
//! Everything vendor-specific about running an AI coding CLI headlessly sits behind the
//! [`AiCliProvider`] trait; the engine (crate `aicli`) only ever holds
//! `Arc<dyn AiCliProvider>`. A new CLI vendor is one implementation of the trait plus one
//! [`ProviderRegistry::register_adapter`] (or [`ProviderRegistry::register`]) call.
//!
//! | module | owns |
//! |---|---|
//! | [`provider`] | the [`AiCliProvider`] trait (core: name, config, command, decoder), [`Feature`] |
//! | `provider/command` | [`LaunchContext`] -> [`CommandSpec`] (files, links, [`McpWiring`]), [`McpEndpoint`] |
//! | `provider/binary` | [`BinaryLocation`]: where the executable is, and the default way to find it |
//! | `provider/auth` | [`AuthStatus`], and the default pre-flight look for credentials |
//! | [`decode`] | the streaming [`Decoder`] contract, [`Line`], [`ExitStatus`], the shared fold [`Tally`] |
//! | [`wire`] | one-pass reading of `type`-tagged JSON lines into the vendors' serde enums |
//! | [`registry`] | [`ProviderRegistry`]: names -> providers, adapters -> factories |
//! | [`config`] | `ai_cli_providers.json`: the whole file's type, loading, merging, validation |
//! | `config/provider` | [`ProviderConfig`]: one provider entry and its defaults |
//! | `config/engine` | [`EngineConfig`]: the `engine` section (limits, retries, the MCP server and its [`McpLimits`], env, cgroups) |
//! | [`docker_config`] | [`RunnerKind`] and the `engine.docker` section (engines, images, limits) |
//! | [`egress_config`] | `engine.docker.egress`: the containers' egress allowlist |
//! | [`placement`] | a task's resources over `engine.docker`'s, swarm placement constraints |
//! | [`event`] | the normalized [`AgentEvent`] model (every event keeps its raw line) |
//! | [`usage`] | [`CanonicalUsage`], prices, cost estimation |
//! | [`task`] | [`TaskSpec`], the vendor-neutral task |
//! | [`mcp_tools`] | command-backed MCP tools and upstream MCP servers in the config, their checks |
//! | [`result`] | [`SessionResult`], the normalized outcome of one run |
//! | [`error`] | the [`ErrorKind`] taxonomy and this crate's errors |
//! | [`replay`] | a capped line reader, and recorded transcripts through a decoder |
//! | [`shared`] | what the adapters share: argument merging, error tables, text helpers |
//! | [`claude`], [`codex`], [`gemini`] | one adapter per vendor: `wire` (the vendor's line types), `argv`, `decode`, `classify`, `result`; pure, no process I/O |
//! | [`acp`] | the Agent Client Protocol adapter: any ACP agent from its config entry, a two-way decoder |
//!
//! # Decoding: one pass, one fold
//!
//! ```text
//! provider.command(ctx)           -> CommandSpec      (argv, env, stdin = the prompt, files)
//! provider.decoder(parse_ctx)     -> Box<dyn Decoder>  (one per run)
//! decoder.decode(bytes, &mut out) -> the line's events (typed wire enum -> AgentEvent)
//! decoder.finish(stderr, exit)    -> SessionResult     (a fold over what it saw)
//! ```
//!
//! Each line is read once, into the vendor's wire enum; the decoder keeps only what the
//! result needs, so memory does not grow with the stream (apart from the response text).
//!
//! A two-way CLI (an ACP agent, [`CommandSpec::stdin_open`]) is also spoken to: the
//! engine connects the decoder ([`Decoder::connect`]), writes what it says after each
//! line ([`Decoder::take_stdin`]) and records each message behind a direction marker
//! among the CLI's own lines, so a recorded run replays through the same decoder. One-way
//! CLIs keep the defaults of those methods.
//!
//! # Live usage
//!
//! As lines pass, decoders emit [`EventKind::Usage`] events: **increments** of the run's
//! canonical usage, each with the model that used the tokens where the CLI says. Their
//! sum over a run is the run's usage so far ([`Decoder::usage`]); after the last line it
//! equals the result's `canonical_usage`, and per model its `usage_by_model`. So a live
//! budget or token display adds them up (and prices each at its model's price):
//!
//! - Claude: a new model response gives its `message_start` snapshot (input, cache
//!   reads and writes, one request; from the `assistant` line, or the `stream_event`
//!   `message_start` with `--include-partial-messages`); `stream_event` `message_delta`
//!   gives the output increment; each `result` line the rest of what the CLI billed so
//!   far (side models and subagents from `modelUsage`).
//! - Codex: `turn.completed` gives the turn's usage (per run: the thread-cumulative
//!   figure minus what the resumed session had), with the model the run asked for.
//! - Gemini: `result` gives the run's usage per model, and the requests counted from
//!   the stream.
//!
//! ```
//! use aicli_providers::{AiCliConfig, ExitStatus, ProviderRegistry, ParseContext, replay};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let registry = ProviderRegistry::from_config(&AiCliConfig::builtin()?)?;
//! let codex = registry.get("codex")?;
//! let stream = br#"{"type":"thread.started","thread_id":"t-1"}
//! {"type":"turn.started"}
//! {"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"Hi."}}
//! {"type":"turn.completed","usage":{"input_tokens":120,"cached_input_tokens":30,"output_tokens":9,"reasoning_output_tokens":4}}
//! "#;
//! let result = replay::replay(codex.as_ref(), stream, "", ExitStatus::Code(0), &ParseContext::default());
//! assert!(result.success);
//! assert_eq!(result.response, "Hi.");
//! assert_eq!(result.session_id.as_deref(), Some("t-1"));
//! assert_eq!(result.canonical_usage.input_tokens, 90); // Codex counts cached input in input_tokens
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

pub mod acp;
pub mod claude;
pub mod codex;
pub mod config;
pub mod decode;
pub mod docker_config;
pub mod egress_config;
pub mod error;
pub mod event;
pub mod gemini;
pub mod mcp_tools;
pub mod placement;
pub mod provider;
pub mod registry;
pub mod replay;
pub mod result;
pub mod shared;
pub mod task;
pub mod usage;
pub mod wire;

pub use config::{
    AiCliConfig, CgroupMode, CommitAuthor, CommitConfig, CommitMode, EngineConfig, LoadedConfig,
    McpLimits, NotifyConfig, NotifyEvent, ProviderConfig,
};
pub use decode::{Decoder, ExitStatus, Line, STDIN_RECORD_KEY, StdinMessage, Tally};
pub use docker_config::{DockerConfig, DockerHostConfig, DockerSsh, DockerTls, RunnerKind};
pub use egress_config::{EgressConfig, HostPattern};
pub use error::{ConfigError, ErrorKind, ProviderError};
pub use event::{AgentEvent, EventKind, LogLevel, PlanItem};
pub use mcp_tools::{InputSchema, McpToolConfig, McpUpstreamConfig};
pub use placement::{Resources, TaskResources};
pub use provider::{
    AiCliProvider, AuthStatus, BinaryLocation, CommandSpec, Feature, FileSpec, LaunchContext,
    LinkSpec, McpEndpoint, McpWiring, SharedProvider,
};
pub use registry::ProviderRegistry;
pub use result::{
    AnsweredQuestion, AttemptWork, Continuation, ContinuationMode, DiffStat, LeftOut,
    LeftOutReason, ParseContext, PendingQuestion, ResetSource, SessionResult, SessionStatus,
    SessionTotals, UsageLimit,
};
pub use task::{PermissionMode, TaskSpec, check_budget};
pub use usage::{CanonicalUsage, Cost, CostSource, LiveSpend, ModelPrice, PriceTable};
