//! The command: `gemini --output-format stream-json --skip-trust [-m MODEL]
//! --approval-mode MODE [--resume ID] ...`, the prompt on stdin, with the run's own
//! Gemini home (see the module docs).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::settings::{
    RunSettings, admit_mcp_servers, approval_mode, list_dir, merge_layer, read_user_settings,
};
use super::{
    GEMINI_DIR, GeminiProvider, HOME_DIR_NAME, HOME_ENTRIES, HOME_ENV, KEPT_DIRS, SETTINGS_FILE,
};
use crate::error::ProviderError;
use crate::provider::{CommandSpec, FileSpec, LaunchContext, LinkSpec, McpWiring};
use crate::shared::args;
use crate::task::TaskSpec;

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
        c.args(["--approval-mode", approval_mode(mode)]);
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
        let user_home = self.user_home(Some(task), ctx.env.get("HOME").map(Path::new));
        c.wire(self.run_home(&settings, ctx.private_dir, user_home.as_deref())?);
        c.stdin = Some(task.prompt.clone());
        Ok(c)
    }

    /// The home of the user a run is for: `HOME` from the task's env, else the config's,
    /// else the one of the environment the engine runs the CLI with, else aicli's own.
    /// `None` when unset or relative.
    fn user_home(&self, task: Option<&TaskSpec>, run_home: Option<&Path>) -> Option<PathBuf> {
        task.and_then(|t| t.env.get("HOME"))
            .or_else(|| self.config.env.get("HOME"))
            .map(PathBuf::from)
            .or_else(|| run_home.map(Path::to_path_buf))
            .or_else(|| std::env::var("HOME").ok().map(PathBuf::from))
            .filter(|h| h.is_absolute())
    }

    /// The run's Gemini home under `private_dir`, as `GEMINI_CLI_HOME`, one file and links:
    ///
    /// - `gemini-home/.gemini/settings.json` (0600): the user's `~/.gemini/settings.json`
    ///   (when there is one; comments allowed, as Gemini allows them) with `settings`
    ///   merged over it the way Gemini merges a higher settings layer. When the user
    ///   restricts MCP servers (`mcp.allowed`, `mcp.excluded`), aicli's server is
    ///   admitted. A file that is not a JSON object (Gemini would refuse to start) is an
    ///   [`ProviderError::InvalidTask`] naming the file and the problem.
    /// - a link `gemini-home/.gemini/<entry>` -> `~/.gemini/<entry>` for every other entry
    ///   of the user's `~/.gemini`, and for the kept directories whether or not they
    ///   exist yet (the engine creates them first);
    /// - a link `gemini-home/<entry>` -> `~/<entry>` for `.agents` and `.env` when the
    ///   user has them.
    ///
    /// Without a `user_home` the run gets the settings alone.
    fn run_home(
        &self,
        settings: &RunSettings<'_>,
        private_dir: &Path,
        user_home: Option<&Path>,
    ) -> Result<McpWiring, ProviderError> {
        settings.check().map_err(|m| self.invalid(m))?;
        let home = private_dir.join(HOME_DIR_NAME);
        let dir = home.join(GEMINI_DIR);
        let Value::Object(ours) = serde_json::to_value(settings)
            .map_err(|e| self.invalid(format!("cannot write the settings file: {e}")))?
        else {
            return Err(self.invalid("the run's settings are not a JSON object"));
        };
        let mut merged = Map::new();
        let mut links = Vec::new();
        if let Some(user_home) = user_home {
            let user_dir = user_home.join(GEMINI_DIR);
            let entries = list_dir(&user_dir).map_err(|m| self.invalid(m))?;
            if let Some(user) =
                read_user_settings(&user_dir.join(SETTINGS_FILE)).map_err(|m| self.invalid(m))?
            {
                merged = user;
            }
            for name in entries {
                if name == SETTINGS_FILE || KEPT_DIRS.iter().any(|k| name == *k) {
                    continue;
                }
                links.push(LinkSpec {
                    link: dir.join(&name),
                    target: user_dir.join(&name),
                    create_target_dir: false,
                });
            }
            links.extend(KEPT_DIRS.iter().map(|name| LinkSpec {
                link: dir.join(name),
                target: user_dir.join(name),
                create_target_dir: true,
            }));
            links.sort_by(|a, b| a.link.cmp(&b.link));
            for name in HOME_ENTRIES {
                let target = user_home.join(name);
                if target.symlink_metadata().is_ok() {
                    links.push(LinkSpec {
                        link: home.join(name),
                        target,
                        create_target_dir: false,
                    });
                }
            }
        }
        merge_layer(&mut merged, &ours, &[]);
        let servers: Vec<&str> = settings.mcp_servers.keys().copied().collect();
        admit_mcp_servers(&mut merged, &servers);
        let contents = serde_json::to_string_pretty(&merged)
            .map_err(|e| self.invalid(format!("cannot write the settings file: {e}")))?;
        let mut env = BTreeMap::new();
        env.insert(HOME_ENV.to_owned(), home.display().to_string());
        Ok(McpWiring {
            args: Vec::new(),
            env,
            files: vec![FileSpec {
                path: dir.join(SETTINGS_FILE),
                contents: contents + "\n",
                mode: 0o600,
            }],
            links,
        })
    }
}
