//! The command: `gemini --output-format stream-json --skip-trust [-m MODEL]
//! --approval-mode MODE [--resume ID] ...`, the prompt on stdin, with the run's own
//! Gemini home (see the module docs).

use std::path::Path;

use serde_json::Value;

use super::settings::{RunSettings, admit_mcp_servers, approval_mode};
use super::{GEMINI_HOME, GeminiProvider, HOME_ENV};
use crate::error::ProviderError;
use crate::provider::{CommandSpec, LaunchContext, McpWiring};
use crate::shared::args;
use crate::task::PermissionMode;

/// What a `sandbox` run says when nothing can confine Gemini here.
const NO_SANDBOX: &str = "permission mode sandbox: nothing can confine gemini here (its own \
    --sandbox needs a container image from its registry; bubblewrap (`bwrap`) is not \
    installed or cannot start), so it may edit files but its shell commands are refused. \
    --runner docker confines them in a container; --permission-mode bypass runs them \
    unconfined";

impl GeminiProvider {
    /// The command for `ctx.task`. Reads the user's `~/.gemini` (its listing and
    /// `settings.json`), nothing else.
    ///
    /// A task's `max_budget_usd` is not passed on (Gemini has no budget; the config does
    /// not list `max_budget`, so the engine enforces budgets itself).
    /// `append_system_prompt` is refused: Gemini can only replace its system prompt.
    pub(super) fn build_command(
        &self,
        ctx: &LaunchContext<'_>,
    ) -> Result<CommandSpec, ProviderError> {
        let task = ctx.task;
        let config = &self.config;
        if task.prompt.trim().is_empty() {
            // `gemini` with an empty prompt exits 42 "No input provided via stdin", also
            // with --resume.
            return Err(self.invalid("gemini needs a prompt, also when resuming a session"));
        }
        if task.append_system_prompt.is_some() {
            return Err(ProviderError::Unsupported {
                provider: self.name.clone(),
                what: "append_system_prompt (Gemini has no flag to append to its system prompt)"
                    .to_owned(),
            });
        }
        // `ctx.workdir` already is the task's subdirectory when it names one.
        let mut c = CommandSpec::new(ctx.binary, ctx.workdir);
        // No `-p`: with stdin not a terminal, gemini runs headless and takes stdin as the
        // prompt (it never shows in the process list). --skip-trust: without it Gemini
        // exits 55 in a directory it has not been told to trust (every fresh worktree).
        c.args(["--output-format", "stream-json", "--skip-trust"]);
        if let Some(model) = task.model.clone().or_else(|| config.default_model.clone()) {
            c.args(args::opt("-m", &model));
        }
        let mode = task.permission_mode.unwrap_or(config.permission_mode);
        // `sandbox`: in a container, the container confines; here, bubblewrap does
        // (Gemini's own --sandbox needs a container image from its registry). Without
        // either, edits only, and the run says so.
        let bwrap = (mode == PermissionMode::Sandbox && !ctx.in_container)
            .then(|| crate::shared::confine::bubblewrap(ctx.search_path))
            .flatten();
        let approval = match mode {
            PermissionMode::Sandbox if ctx.in_container || bwrap.is_some() => "yolo",
            PermissionMode::Sandbox => {
                c.notices.push(NO_SANDBOX.to_owned());
                "auto_edit"
            }
            m => approval_mode(m),
        };
        c.args(["--approval-mode", approval]);
        if let Some(id) = &task.resume_session_id {
            c.args(args::opt("--resume", id));
        }
        c.args(args::extra_args(config, task));
        c.env.extend(args::env(config, task));
        if c.env.contains_key(HOME_ENV) {
            return Err(self.invalid(format!(
                "env {HOME_ENV} is set by the task or the config, but aicli points it at the \
                 run's own Gemini home (its settings: turn limit, tools, MCP server)"
            )));
        }
        let allowed = args::allowed_tools(config, task);
        let excluded = args::disallowed_tools(config, task);
        let settings = RunSettings::new(
            task.max_turns.or(config.max_turns),
            allowed.iter().map(String::as_str).collect(),
            excluded.iter().map(String::as_str).collect(),
            ctx.mcp,
        );
        let user_home = crate::shared::settings_home::user_home(
            Some(&task.env),
            &self.config.env,
            ctx.env.get("HOME").map(Path::new),
        );
        c.wire(self.run_home(&settings, ctx.private_dir, user_home.as_deref())?);
        if let Some(bwrap) = bwrap {
            // Gemini's state (sessions, history) lives in the user's ~/.gemini, behind
            // the run home's links.
            let state: Vec<_> = c.links.iter().map(|l| l.target.clone()).collect();
            crate::shared::confine::wrap(&mut c, bwrap, ctx.private_dir, &state);
        }
        c.stdin = Some(task.prompt.clone());
        Ok(c)
    }

    /// The run's Gemini home under `private_dir` ([`GEMINI_HOME`]): `settings` merged
    /// over the user's `~/.gemini/settings.json` (when there is one), aicli's MCP server
    /// admitted through the user's `mcp.allowed`/`mcp.excluded` filters, and a link for
    /// every other entry of the user's `~/.gemini` (`tmp` and `history` whether or not
    /// they exist yet), and for `.agents` and `.env` when the user has them. A user
    /// settings file that is not a JSON object (Gemini would refuse to start) is an
    /// [`ProviderError::InvalidTask`] naming the file and the problem. Without a
    /// `user_home` the run gets the settings alone.
    fn run_home(
        &self,
        settings: &RunSettings<'_>,
        private_dir: &Path,
        user_home: Option<&Path>,
    ) -> Result<McpWiring, ProviderError> {
        settings.check().map_err(|m| self.invalid(m))?;
        let Value::Object(ours) = serde_json::to_value(settings)
            .map_err(|e| self.invalid(format!("cannot write the settings file: {e}")))?
        else {
            return Err(self.invalid("the run's settings are not a JSON object"));
        };
        let servers: Vec<&str> = settings.mcp_servers.keys().copied().collect();
        GEMINI_HOME
            .wiring(&ours, private_dir, user_home, |merged| {
                admit_mcp_servers(merged, &servers)
            })
            .map_err(|m| self.invalid(m))
    }
}
