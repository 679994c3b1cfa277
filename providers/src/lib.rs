//! # aicli-providers: the plugin side of aicli
//!
//! Everything vendor-specific about running an AI coding CLI headlessly sits behind the
//! [`AiCliProvider`] trait; the engine (crate `aicli`) only ever holds
//! `Arc<dyn AiCliProvider>`. A new CLI vendor is one implementation of the trait plus one
//! [`ProviderRegistry::register_adapter`] (or [`ProviderRegistry::register`]) call.
//!
//! | module | owns |
//! |---|---|
//! | [`provider`] | the trait, [`Feature`], [`LaunchContext`] -> [`CommandSpec`], MCP wiring types |
//! | [`registry`] | [`ProviderRegistry`]: names -> providers, adapters -> factories |
//! | [`config`] | `ai_cli_providers.json`: types, loading, merging, validation |
//! | [`event`] | the normalized [`AgentEvent`] model (every event keeps its raw line) |
//! | [`usage`] | [`CanonicalUsage`], prices, cost estimation |
//! | [`task`] | [`TaskSpec`], the vendor-neutral task |
//! | [`mcp_tools`] | command-backed MCP tools and upstream MCP servers in the config, their checks |
//! | [`result`] | [`SessionResult`], the normalized outcome of one run |
//! | [`error`] | the [`ErrorKind`] taxonomy and this crate's errors |
//! | [`replay`] | bytes -> lines -> events; replaying a recorded transcript |
//! | [`common`] | helpers the adapters share |
//! | [`claude`], [`codex`], [`gemini`] | one adapter per vendor: pure functions, no process I/O |
//!
//! ```
//! use aicli_providers::{AiCliConfig, ProviderRegistry, ParseContext, replay};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let registry = ProviderRegistry::from_config(&AiCliConfig::builtin()?)?;
//! let codex = registry.get("codex")?;
//! let stream = br#"{"type":"thread.started","thread_id":"t-1"}
//! {"type":"turn.started"}
//! {"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"Hi."}}
//! {"type":"turn.completed","usage":{"input_tokens":120,"cached_input_tokens":30,"output_tokens":9,"reasoning_output_tokens":4}}
//! "#;
//! let (_events, result) = replay::replay(codex.as_ref(), stream, "", Some(0), &ParseContext::default());
//! assert!(result.success);
//! assert_eq!(result.response, "Hi.");
//! assert_eq!(result.session_id.as_deref(), Some("t-1"));
//! assert_eq!(result.canonical_usage.input_tokens, 90); // Codex counts cached input in input_tokens
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

pub mod claude;
pub mod codex;
pub mod common;
pub mod config;
pub mod error;
pub mod event;
pub mod gemini;
pub mod mcp_tools;
pub mod provider;
pub mod registry;
pub mod replay;
pub mod result;
pub mod task;
pub mod usage;

pub use config::{AiCliConfig, CgroupMode, EngineConfig, LoadedConfig, McpLimits, ProviderConfig};
pub use error::{ConfigError, ErrorKind, ProviderError};
pub use event::{AgentEvent, EventKind, LogLevel};
pub use mcp_tools::{InputSchema, McpToolConfig, McpUpstreamConfig};
pub use provider::{
    AiCliProvider, AuthStatus, BinaryLocation, CommandSpec, Feature, FileSpec, LaunchContext,
    LinkSpec, McpEndpoint, McpWiring, SharedProvider,
};
pub use registry::ProviderRegistry;
pub use result::{
    Continuation, ContinuationMode, ParseContext, PendingQuestion, SessionResult, SessionStatus,
    SessionTotals,
};
pub use task::{PermissionMode, TaskSpec};
pub use usage::{CanonicalUsage, Cost, CostSource, ModelPrice, PriceTable};
