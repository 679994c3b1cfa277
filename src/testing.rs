//! Support for tests and benches: a provider that runs `aicli-fake-cli` (a real
//! process that replays a recorded transcript) and parses its output with any real
//! adapter. Vendor-neutral: it wraps whatever provider it is given.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use aicli_providers::{
    AgentEvent, AiCliProvider, CanonicalUsage, CommandSpec, Decoder, ExitStatus, LaunchContext,
    Line, McpEndpoint, ParseContext, ProviderConfig, ProviderError, SessionResult, SharedProvider,
};

/// Runs `aicli-fake-cli` instead of a real CLI and parses its output with `inner`.
///
/// The command is `aicli-fake-cli [--replay F.ndjson --stderr-file F.stderr --exit-file
/// F.exit] [--session-id ID when resuming] <task.extra_args...>`, so each task picks its
/// behaviour through `extra_args` (see the fake CLI's docs).
#[derive(Debug, Clone)]
pub struct ReplayProvider {
    name: String,
    inner: SharedProvider,
    config: ProviderConfig,
    fixture: Option<PathBuf>,
}

impl ReplayProvider {
    /// A provider called `name` running `fake_cli`, parsing with `inner`, replaying
    /// `fixture` (the path without extension, e.g. `fixtures/claude/text`) unless a
    /// task's `extra_args` say otherwise.
    pub fn new(
        name: &str,
        inner: SharedProvider,
        fake_cli: &Path,
        fixture: Option<&Path>,
    ) -> ReplayProvider {
        let mut config = inner.config().clone();
        config.binary_path = Some(fake_cli.to_path_buf());
        config.binary_name = "aicli-fake-cli".to_owned();
        config.env.clear();
        config.extra_args.clear();
        config.auth_env_vars.clear();
        config.auth_files.clear();
        ReplayProvider {
            name: name.to_owned(),
            inner,
            config,
            fixture: fixture.map(Path::to_path_buf),
        }
    }

    /// The same, shared.
    pub fn shared(self) -> SharedProvider {
        Arc::new(self)
    }

    /// Changes the config (e.g. supported features, prices).
    pub fn with_config(mut self, f: impl FnOnce(&mut ProviderConfig)) -> ReplayProvider {
        f(&mut self.config);
        self
    }
}

fn with_ext(stem: &Path, ext: &str) -> String {
    format!("{}.{ext}", stem.display())
}

impl AiCliProvider for ReplayProvider {
    fn config(&self) -> &ProviderConfig {
        &self.config
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn command(&self, ctx: &LaunchContext<'_>) -> Result<CommandSpec, ProviderError> {
        let mut c = CommandSpec::new(ctx.binary, ctx.workdir);
        if let Some(f) = &self.fixture
            && !ctx.task.extra_args.iter().any(|a| a == "--replay")
        {
            c.args([
                "--replay".to_owned(),
                with_ext(f, "ndjson"),
                "--stderr-file".to_owned(),
                with_ext(f, "stderr"),
                "--exit-file".to_owned(),
                with_ext(f, "exit"),
            ]);
        }
        if let Some(id) = &ctx.task.resume_session_id {
            c.args(["--session-id".to_owned(), id.clone()]);
        }
        if let Some(b) = ctx.budget_remaining_usd {
            c.env("AICLI_FAKE_BUDGET_USD", b.to_string());
        }
        c.args(ctx.task.extra_args.iter().cloned());
        c.env.extend(ctx.task.env.clone());
        if let Some(m) = ctx.mcp {
            c.env("AICLI_MCP_URL", m.url.clone());
            c.env("AICLI_MCP_TOKEN", m.token.clone());
        }
        c.args(["--prompt".to_owned(), ctx.task.prompt.clone()]);
        Ok(c)
    }
    fn ide_lockfile(
        &self,
        endpoint: &McpEndpoint,
        port: u16,
        workspace: &Path,
        pid: u32,
    ) -> Option<(String, String)> {
        self.inner.ide_lockfile(endpoint, port, workspace, pid)
    }
    fn decoder(&self, ctx: &ParseContext) -> Box<dyn Decoder> {
        Box::new(Renamed {
            inner: self.inner.decoder(ctx),
            name: self.name.clone(),
        })
    }
}

/// The inner provider's decoder, its result under this provider's name.
struct Renamed {
    inner: Box<dyn Decoder>,
    name: String,
}

impl Decoder for Renamed {
    fn decode(&mut self, line: Line<'_>, out: &mut Vec<AgentEvent>) {
        self.inner.decode(line, out)
    }
    fn usage(&self) -> CanonicalUsage {
        self.inner.usage()
    }
    fn finished(&self) -> bool {
        self.inner.finished()
    }
    fn finish(self: Box<Self>, stderr: &str, exit: ExitStatus) -> SessionResult {
        let mut r = self.inner.finish(stderr, exit);
        r.provider = self.name;
        r
    }
}

/// A fault injected into runs (the guard tests): the engine's run of a task panics, so
/// that what the run held must be released by its guards' `Drop` alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The run of task `task_id` panics once it has read `lines` lines of the CLI's
    /// stdout (mid-stream: the CLI is running, its token granted, its budget reserved).
    PanicAfterLines {
        /// The task.
        task_id: String,
        /// Lines read before the panic.
        lines: usize,
    },
}

impl Fault {
    /// Whether the fault is for `task_id`.
    pub fn applies_to(&self, task_id: &str) -> bool {
        match self {
            Fault::PanicAfterLines { task_id: t, .. } => t == task_id,
        }
    }

    /// Called after each line the run read (`seen` so far): panics when it is time.
    #[allow(clippy::panic)]
    pub fn after_line(&self, seen: usize) {
        match self {
            Fault::PanicAfterLines { lines, task_id } if seen >= *lines => {
                panic!("injected fault: the run of task {task_id} panics after {seen} lines")
            }
            Fault::PanicAfterLines { .. } => {}
        }
    }
}
