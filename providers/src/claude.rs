//! The Claude adapter (placeholder until the adapter lands: parses nothing).

use crate::config::ProviderConfig;
use crate::error::ProviderError;
use crate::event::AgentEvent;
use crate::provider::{AiCliProvider, CommandSpec, LaunchContext};
use crate::result::{ParseContext, SessionResult};
use crate::usage::CanonicalUsage;

/// The Claude CLI.
#[derive(Debug, Clone)]
pub struct ClaudeProvider {
    name: String,
    config: ProviderConfig,
}

impl ClaudeProvider {
    /// A provider called `name` with config entry `config`.
    pub fn new(name: &str, config: ProviderConfig) -> ClaudeProvider {
        ClaudeProvider {
            name: name.to_owned(),
            config,
        }
    }
}

impl AiCliProvider for ClaudeProvider {
    fn config(&self) -> &ProviderConfig {
        &self.config
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn headless_argv(&self, ctx: &LaunchContext<'_>) -> Result<CommandSpec, ProviderError> {
        let mut c = CommandSpec::new(ctx.binary, ctx.workdir);
        c.args([ctx.task.prompt.clone()]);
        Ok(c)
    }
    fn detect_auth_error(
        &self,
        _stderr: &str,
        _exit: Option<i32>,
        _events: &[AgentEvent],
    ) -> Option<String> {
        None
    }
    fn parse_event(&self, line: &str) -> Vec<AgentEvent> {
        vec![AgentEvent::protocol("not implemented", line.into())]
    }
    fn event_to_session_result(
        &self,
        events: &[AgentEvent],
        _stderr: &str,
        exit_code: Option<i32>,
        _ctx: &ParseContext,
    ) -> SessionResult {
        let b = crate::common::basics(events);
        let mut r = crate::common::base_result(&self.name, &b);
        r.exit_code = exit_code;
        r
    }
    fn canonical_usage(&self, _events: &[AgentEvent], _ctx: &ParseContext) -> CanonicalUsage {
        CanonicalUsage::default()
    }
}
