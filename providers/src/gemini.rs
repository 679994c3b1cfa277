//! The Gemini CLI adapter: `@google/gemini-cli` 0.61.0 run as
//! `gemini -p PROMPT --output-format stream-json --skip-trust`.
//!
//! # Launch
//!
//! Flags carry the prompt, the model (`-m`), the approval mode (`--approval-mode`) and
//! `--resume <uuid>`. Everything else Gemini only takes from a settings file, so each run
//! gets its own Gemini home: [`HOME_ENV`] points at `<private_dir>/gemini-home`, whose
//! `.gemini/settings.json` (0600) is the user's own `~/.gemini/settings.json` with aicli's
//! per-run settings merged over it as Gemini merges a higher settings layer (aicli's
//! values win, `mcpServers` merges by server name, `tools.exclude` is a union):
//! `privacy.usageStatisticsEnabled: false`, `model.maxSessionTurns` (Gemini has no turn
//! flag), `tools.allowed` / `tools.exclude` (the `--allowed-tools` flag is deprecated)
//! and, when aicli's MCP server runs, `mcpServers.<name>` with the bearer token (the
//! token is never in argv). Every other entry of the user's `~/.gemini` (login, chats,
//! `GEMINI.md`, extensions, ...) is a symbolic link to the real one, so login and
//! `--resume` work as in the user's own sessions; `~/.gemini/tmp` (chats) and
//! `~/.gemini/history` are created first when missing, so a run's session outlives its
//! private directory. The links are [`LinkSpec`]s the engine creates: the adapter only
//! reads `~/.gemini` (`~` is `HOME` of the task's env, the config's, the environment the engine runs the CLI with, or aicli's). This
//! works for any user: Gemini 0.61 reads a *system* settings file
//! (`GEMINI_CLI_SYSTEM_SETTINGS_PATH`) only when root owns it and every directory above
//! it, which is why an earlier version was root-only.
//!
//! aicli's settings are now the *user* layer. So the admin's system settings
//! (`/etc/gemini-cli/settings.json`) apply and rank above them, and so do a worktree's
//! `.gemini/settings.json` when Gemini trusts the folder at startup (folder trust off,
//! the folder trusted, or `GEMINI_CLI_TRUST_WORKSPACE=true`; `--skip-trust` is read only
//! after the settings are loaded). Elsewhere in settings, `~/` other than `~/.gemini`
//! means the run's home (e.g. `policyPaths`).
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
//! A run is classified from `result.error` and the exit code first, stderr text last.
//!
//! # Usage
//!
//! `result.stats` is per run (not cumulative on `--resume`) and per model; it includes
//! the model router's call (`gemini-3.5-flash-lite`) when no `-m` is given. Gemini's
//! `input_tokens` includes `cached`; thinking tokens are counted only in `total_tokens`.
//! See [`canonical_model_usage`]. Gemini reports no cost: it is estimated per model from
//! the config's price table.
//!
//! Wire shapes: `packages/core/src/output/types.ts` and `packages/cli/src/utils/errors.ts`
//! of google-gemini/gemini-cli (checked against the 0.61.0 bundle's behaviour in
//! `fixtures/gemini/`).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::common::{self, CowStr, strict};
use crate::config::ProviderConfig;
use crate::error::{ErrorKind, ProviderError};
use crate::event::{AgentEvent, EventKind};
use crate::provider::{
    AiCliProvider, CommandSpec, FileSpec, LaunchContext, LinkSpec, McpEndpoint, McpWiring,
};
use crate::result::{ParseContext, SessionResult};
use crate::task::{PermissionMode, TaskSpec};
use crate::usage::{CanonicalUsage, Cost};

/// The environment variable through which Gemini finds its home: its `~/.gemini` is
/// `$GEMINI_CLI_HOME/.gemini` (and `~/.agents`, `~/.env` move along). aicli points it at
/// the run's own home, `<private_dir>/`[`HOME_DIR_NAME`].
pub const HOME_ENV: &str = "GEMINI_CLI_HOME";

/// The run's Gemini home, a directory inside the run's private directory.
pub const HOME_DIR_NAME: &str = "gemini-home";

/// Gemini's directory in a home.
const GEMINI_DIR: &str = ".gemini";

/// Gemini's settings file in [`GEMINI_DIR`].
const SETTINGS_FILE: &str = "settings.json";

/// Directories of `~/.gemini` that every run writes (`tmp/<project>/chats` holds the
/// sessions `--resume` finds, `tmp` and `history` the markers that name a project): they
/// are linked even when the user has none yet, and the engine creates them first, so
/// what a run writes there outlives the run's private directory.
const KEPT_DIRS: [&str; 2] = ["history", "tmp"];

/// Entries of the home itself that Gemini reads from its home: `.env` (the last place
/// it looks for an env file, e.g. with `GEMINI_API_KEY`) and `.agents` (user skills).
/// Linked when the user has them.
const HOME_ENTRIES: [&str; 2] = [".agents", ".env"];

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

    /// The home of the user a run is for: `HOME` from the task's env, else the config's,
    /// else the one of the environment the engine runs the CLI with
    /// ([`LaunchContext::home`]), else aicli's own. `None` when unset or relative.
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
    ///   merged over it the way Gemini merges a higher settings layer (aicli's values
    ///   win; `mcpServers` merges by server name, `tools.exclude` is a union). When the
    ///   user restricts MCP servers (`mcp.allowed`, `mcp.excluded`), aicli's server is
    ///   admitted. A file that is not a JSON object (Gemini would refuse to start) is an
    ///   [`ProviderError::InvalidTask`] naming the file and the problem.
    /// - a link `gemini-home/.gemini/<entry>` -> `~/.gemini/<entry>` for every other entry
    ///   of the user's `~/.gemini`, and for [`KEPT_DIRS`] whether or not they exist yet
    ///   (the engine creates them, `~/.gemini` included, before linking);
    /// - a link `gemini-home/<entry>` -> `~/<entry>` for each of [`HOME_ENTRIES`] the user
    ///   has.
    ///
    /// Without a `user_home` the run gets the settings alone: no login files, and its
    /// sessions go with the private directory.
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

impl AiCliProvider for GeminiProvider {
    fn config(&self) -> &ProviderConfig {
        &self.config
    }

    fn name(&self) -> &str {
        &self.name
    }

    /// `gemini -p PROMPT --output-format stream-json --skip-trust [-m MODEL]
    /// --approval-mode MODE [--resume ID] [config extra_args] [task extra_args]`, in
    /// `workdir` (+ the task's `cwd`), with the run's own Gemini home (see the module
    /// docs). Reads the user's `~/.gemini` (its listing and `settings.json`), nothing else.
    ///
    /// A task's `max_budget_usd` is not passed on (Gemini has no budget; the config does
    /// not list `max_budget`, so the engine enforces budgets itself).
    /// `append_system_prompt` is refused: Gemini can only replace its system prompt.
    fn headless_argv(&self, ctx: &LaunchContext<'_>) -> Result<CommandSpec, ProviderError> {
        let task = ctx.task;
        if task.prompt.trim().is_empty() {
            // `gemini -p ""` exits 42 "No input provided via stdin", also with --resume.
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
        if task.prompt.starts_with('-') {
            // yargs would read `-p -x` as two flags; the `=` form keeps the value whole.
            c.args([format!("--prompt={}", task.prompt)]);
        } else {
            c.args(["-p", task.prompt.as_str()]);
        }
        // --skip-trust: without it Gemini exits 55 in a directory it has not been told to
        // trust (every fresh worktree).
        c.args(["--output-format", "stream-json", "--skip-trust"]);
        if let Some(model) = self.model_for(task) {
            c.args(["-m".to_owned(), model]);
        }
        c.args(["--approval-mode", approval_mode(self.permission_mode(task))]);
        if let Some(id) = &task.resume_session_id {
            c.args(["--resume", id.as_str()]);
        }
        c.args(self.config.extra_args.iter().cloned());
        c.args(task.extra_args.iter().cloned());
        for (k, v) in self.config.env.iter().chain(task.env.iter()) {
            c.env(k.clone(), v.clone());
        }
        if c.env.contains_key(HOME_ENV) {
            return Err(self.invalid(format!(
                "env {HOME_ENV} is set by the task or the config, but aicli points it at the \
                 run's own Gemini home (its settings: turn limit, tools, MCP server)"
            )));
        }
        let allowed: Vec<&str> = self
            .config
            .allowed_tools
            .iter()
            .chain(&task.allowed_tools)
            .map(String::as_str)
            .collect();
        let excluded: Vec<&str> = self
            .config
            .disallowed_tools
            .iter()
            .chain(&task.disallowed_tools)
            .map(String::as_str)
            .collect();
        let settings = RunSettings::new(
            task.max_turns.or(self.config.max_turns),
            allowed,
            excluded,
            ctx.mcp,
        );
        let user_home = self.user_home(Some(task), ctx.env.get("HOME").map(Path::new));
        c.wire(self.run_home(&settings, ctx.private_dir, user_home.as_deref())?);
        Ok(c)
    }

    /// The run's Gemini home (see the module docs) with `mcpServers.<name> =
    /// {httpUrl, headers: {Authorization: Bearer TOKEN}, trust: true}` (and usage
    /// statistics off) over the user's settings, found through [`HOME_ENV`]; the user's
    /// home is `HOME` from the config's env, else aicli's. [`AiCliProvider::headless_argv`]
    /// already includes this when `ctx.mcp` is set, in the same file with the run's other
    /// settings: do not add both.
    ///
    /// `trust: true` is required: without it Gemini does not even declare the server's
    /// tools to the model. No `--allowed-mcp-server-names` is added: it would hide the
    /// user's own MCP servers, which stay available as in an interactive session.
    fn mcp_wiring(
        &self,
        endpoint: &McpEndpoint,
        private_dir: &Path,
    ) -> Result<McpWiring, ProviderError> {
        let settings = RunSettings::new(None, Vec::new(), Vec::new(), Some(endpoint));
        self.run_home(
            &settings,
            private_dir,
            self.user_home(None, None).as_deref(),
        )
    }

    /// Exit code 41, Gemini's "Please set an Auth method" (or its other auth-setup
    /// refusals), or a `result` error that says the key or credentials were rejected.
    fn detect_auth_error(
        &self,
        stderr: &str,
        exit_code: Option<i32>,
        events: &[AgentEvent],
    ) -> Option<String> {
        if let Some(line) =
            stderr_lines(stderr).find(|l| AUTH_SETUP_MARKERS.iter().any(|m| l.contains(m)))
        {
            return Some(line.to_owned());
        }
        if Exit::from_code(exit_code) == Exit::Auth {
            return Some(
                stderr_detail(stderr)
                    .unwrap_or_else(|| "gemini exited 41 (authentication error)".to_owned()),
            );
        }
        let (_, wire) = result_line(events)?;
        let error = wire.error?;
        let c = classify(
            Some(&error.kind),
            &error.message,
            Some(Exit::from_code(exit_code)),
        );
        (c.kind == ErrorKind::Auth).then(|| error.message.trim_end().to_owned())
    }

    fn parse_event(&self, line: &str) -> Vec<AgentEvent> {
        let raw: Arc<str> = Arc::from(line);
        let kind = match fast_kind(line) {
            Some(kind) => Ok(kind),
            None => value_kind(line),
        };
        match kind {
            Ok(kind) => vec![AgentEvent::new(kind, raw)],
            Err(message) => vec![AgentEvent::protocol(message, raw)],
        }
    }

    fn event_to_session_result(
        &self,
        events: &[AgentEvent],
        stderr: &str,
        exit_code: Option<i32>,
        ctx: &ParseContext,
    ) -> SessionResult {
        let b = common::basics(events);
        let mut r = common::base_result(&self.name, &b);
        r.exit_code = exit_code;
        if r.model.is_none() {
            r.model = ctx.model.clone();
        }
        r.response = common::assistant_text(events);
        r.canonical_usage = self.canonical_usage(events, ctx);
        let exit = Exit::from_code(exit_code);
        let mut data = Map::new();
        if exit != Exit::Ok {
            data.insert("exit_code_meaning".into(), exit.describe().into());
        }
        if let Some(retries) = ApiRetries::from_stderr(stderr) {
            data.insert("api_retries".into(), json!(retries));
        }
        if let Some(skipped) = stderr
            .lines()
            .find_map(|l| l.trim().strip_prefix(SETTINGS_SKIPPED))
        {
            // A system settings file (the admin's, or one named by the task's env) that
            // Gemini refused to read: the run went without it.
            data.insert("settings_file_skipped".into(), skipped.trim().into());
        }
        let warnings: Vec<&str> = events
            .iter()
            .filter_map(|e| {
                if let EventKind::Error {
                    message,
                    fatal: false,
                    ..
                } = &e.kind
                {
                    Some(message.as_str())
                } else {
                    None
                }
            })
            .collect();
        if !warnings.is_empty() {
            data.insert("warnings".into(), json!(warnings));
        }

        match result_line(events) {
            Some((final_event, wire)) => {
                self.apply_result_line(&mut r, &mut data, events, final_event, wire, exit);
            }
            None => {
                let (kind, message) = self.classify_without_result(events, &b, stderr, exit_code);
                r.fail(kind, message);
            }
        }
        r.provider_data = Value::Object(data);
        r
    }

    fn canonical_usage(&self, events: &[AgentEvent], _ctx: &ParseContext) -> CanonicalUsage {
        // Per run: Gemini's stats are not cumulative on --resume, so `ctx.prior` is unused.
        let mut usage = events
            .iter()
            .rev()
            .find_map(|e| {
                if let EventKind::Final { usage, .. } = &e.kind {
                    Some(usage.unwrap_or_default())
                } else {
                    None
                }
            })
            .unwrap_or_default();
        usage.request_count = usage
            .request_count
            .max(stream_request_count(events, &usage));
        usage
    }
}

// ---------------------------------------------------------------------------------------
// Launch
// ---------------------------------------------------------------------------------------

/// `--approval-mode` for a neutral permission mode.
///
/// In a headless run Gemini's policy engine turns every "ask the user" into "deny", and it
/// does not even declare a denied tool to the model. So in `default` (seen in the
/// `shell_default_mode` fixture) and in `auto_edit` (accept_edits; the same policy rules
/// in the 0.61 bundle) the shell tool and untrusted MCP tools are silently withheld,
/// unless `allowed_tools` allows them (`run_shell_command(git)` declares the shell tool
/// and allows only `git ...`). A task that must run arbitrary commands needs `bypass`.
fn approval_mode(mode: PermissionMode) -> &'static str {
    match mode {
        PermissionMode::Plan => "plan",
        PermissionMode::Default => "default",
        PermissionMode::AcceptEdits => "auto_edit",
        PermissionMode::Bypass => "yolo",
    }
}

/// aicli's per-run settings (Gemini's settings.json keys), merged over the user's.
#[derive(Debug, Serialize)]
struct RunSettings<'a> {
    /// Always off: it stops the CLI's `play.googleapis.com` traffic.
    privacy: PrivacySettings,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<ModelSettings>,
    #[serde(skip_serializing_if = "ToolSettings::is_empty")]
    tools: ToolSettings<'a>,
    #[serde(rename = "mcpServers", skip_serializing_if = "BTreeMap::is_empty")]
    mcp_servers: BTreeMap<&'a str, McpServerSettings>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct PrivacySettings {
    usage_statistics_enabled: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ModelSettings {
    /// Model calls per run; the run ends with exit 53 (`FatalTurnLimitedError`) at the limit.
    max_session_turns: u32,
}

#[derive(Debug, Serialize)]
struct ToolSettings<'a> {
    /// Tools that run without confirmation (what `--allowed-tools` sets; replaces the
    /// user's list, as the flag does).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    allowed: Vec<&'a str>,
    /// Tools never offered to the model (merged with the user's list).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    exclude: Vec<&'a str>,
}

impl ToolSettings<'_> {
    fn is_empty(&self) -> bool {
        self.allowed.is_empty() && self.exclude.is_empty()
    }
}

/// One streamable-HTTP MCP server.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct McpServerSettings {
    http_url: String,
    headers: BTreeMap<&'static str, String>,
    /// Without it Gemini does not declare the server's tools to the model.
    trust: bool,
}

impl<'a> RunSettings<'a> {
    fn new(
        max_turns: Option<u32>,
        allowed: Vec<&'a str>,
        exclude: Vec<&'a str>,
        mcp: Option<&'a McpEndpoint>,
    ) -> RunSettings<'a> {
        let mut mcp_servers = BTreeMap::new();
        if let Some(m) = mcp {
            let mut headers = BTreeMap::new();
            headers.insert("Authorization", format!("Bearer {}", m.token));
            mcp_servers.insert(
                m.name.as_str(),
                McpServerSettings {
                    http_url: m.url.clone(),
                    headers,
                    trust: true,
                },
            );
        }
        RunSettings {
            privacy: PrivacySettings {
                usage_statistics_enabled: false,
            },
            model: max_turns.map(|n| ModelSettings {
                max_session_turns: n,
            }),
            tools: ToolSettings { allowed, exclude },
            mcp_servers,
        }
    }

    /// Gemini expands `$VAR` and `${VAR}` in every string of a settings file: a value with
    /// a `$` would not reach the CLI as written.
    fn check(&self) -> Result<(), String> {
        let mut strings: Vec<(&str, &str)> = Vec::new();
        strings.extend(self.tools.allowed.iter().map(|t| ("allowed tool", *t)));
        strings.extend(self.tools.exclude.iter().map(|t| ("disallowed tool", *t)));
        for (name, server) in &self.mcp_servers {
            strings.push(("MCP server name", name));
            strings.push(("MCP server URL", server.http_url.as_str()));
            strings.extend(server.headers.values().map(|v| ("MCP token", v.as_str())));
        }
        match strings.iter().find(|(_, s)| s.contains('$')) {
            // Never echo the value: it may be the token.
            Some((what, _)) => Err(format!(
                "the {what} contains '$', which Gemini would expand as an environment variable \
                 in its settings file"
            )),
            None => Ok(()),
        }
    }
}

/// The user's Gemini settings at `path` (`~/.gemini/settings.json`): `None` when there is
/// no such file; an error message naming the file when it cannot be used. Read as Gemini
/// reads it: JSON with `//` and `/* */` comments, a JSON object at the top. (Gemini stops
/// with "Please fix the configuration file(s)" on the same files.)
fn read_user_settings(path: &Path) -> Result<Option<Map<String, Value>>, String> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(format!(
                "cannot read your Gemini settings {}: {e}",
                path.display()
            ));
        }
    };
    let bad = |what: String| {
        format!(
            "your Gemini settings {} cannot be used: {what} (gemini itself would refuse to \
             start with it; fix or move the file)",
            path.display()
        )
    };
    let text = String::from_utf8(bytes).map_err(|e| bad(format!("it is not UTF-8 ({e})")))?;
    match serde_json::from_str::<Value>(&strip_json_comments(&text)) {
        Ok(Value::Object(map)) => Ok(Some(map)),
        Ok(other) => Err(bad(format!(
            "it holds a JSON {}, not an object",
            json_type_name(&other)
        ))),
        Err(e) => Err(bad(format!("it is not valid JSON: {e}"))),
    }
}

fn json_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The names of the entries of `dir`, sorted; none when it does not exist.
fn list_dir(dir: &Path) -> Result<Vec<std::ffi::OsString>, String> {
    let cannot = |e: std::io::Error| format!("cannot list {}: {e}", dir.display());
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(cannot(e)),
    };
    let mut names = entries
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(cannot)?;
    names.sort();
    Ok(names)
}

/// `text` without its `//` and `/* */` comments (outside strings), as Gemini reads
/// settings files (`strip-json-comments`). Comments become spaces and newlines stay, so
/// a JSON error's line and column still point into the file.
fn strip_json_comments(text: &str) -> String {
    #[derive(Clone, Copy, PartialEq)]
    enum At {
        Code,
        Str,
        Line,
        Block,
    }
    let mut out = String::with_capacity(text.len());
    let mut at = At::Code;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match at {
            At::Code => match (c, chars.peek()) {
                ('"', _) => {
                    at = At::Str;
                    out.push(c);
                }
                ('/', Some('/')) => {
                    chars.next();
                    at = At::Line;
                    out.push_str("  ");
                }
                ('/', Some('*')) => {
                    chars.next();
                    at = At::Block;
                    out.push_str("  ");
                }
                _ => out.push(c),
            },
            At::Str => {
                out.push(c);
                if c == '\\' {
                    if let Some(escaped) = chars.next() {
                        out.push(escaped);
                    }
                } else if c == '"' {
                    at = At::Code;
                }
            }
            At::Line => {
                if c == '\n' || c == '\r' {
                    at = At::Code;
                    out.push(c);
                } else {
                    out.push(' ');
                }
            }
            At::Block => {
                if c == '*' && chars.peek() == Some(&'/') {
                    chars.next();
                    at = At::Code;
                    out.push_str("  ");
                } else if c == '\n' || c == '\r' {
                    out.push(c);
                } else {
                    out.push(' ');
                }
            }
        }
    }
    out
}

/// Merges settings layer `higher` into `lower` the way Gemini 0.61 merges its layers
/// (`mergeRecursively` in `packages/cli/src/utils/deepMerge.ts`) for the keys aicli
/// writes: `mcpServers` merges by server name (a server of `higher` replaces the
/// same-named one whole), `tools.exclude` is a union, other objects merge key by key,
/// and everything else in `higher` replaces what `lower` has (`tools.allowed` too).
fn merge_layer(lower: &mut Map<String, Value>, higher: &Map<String, Value>, path: &[&str]) {
    for (key, value) in higher {
        let here: Vec<&str> = path.iter().copied().chain([key.as_str()]).collect();
        match (lower.get_mut(key), value) {
            (Some(Value::Object(low)), Value::Object(high)) if here == ["mcpServers"] => {
                for (name, server) in high {
                    low.insert(name.clone(), server.clone());
                }
            }
            (Some(Value::Array(low)), high) if here == ["tools", "exclude"] => {
                let high = match high {
                    Value::Array(items) => items.clone(),
                    item => vec![item.clone()],
                };
                let mut union: Vec<Value> = Vec::with_capacity(low.len() + high.len());
                for item in low.drain(..).chain(high) {
                    if !union.contains(&item) {
                        union.push(item);
                    }
                }
                *low = union;
            }
            (Some(Value::Object(low)), Value::Object(high)) => merge_layer(low, high, &here),
            _ => {
                lower.insert(key.clone(), value.clone());
            }
        }
    }
}

/// Lets aicli's MCP servers through the user's own MCP server filters: added to a
/// non-empty `mcp.allowed` (Gemini blocks every server not in it), taken out of
/// `mcp.excluded`.
fn admit_mcp_servers(settings: &mut Map<String, Value>, names: &[&str]) {
    let Some(Value::Object(mcp)) = settings.get_mut("mcp") else {
        return;
    };
    if let Some(Value::Array(allowed)) = mcp.get_mut("allowed")
        && !allowed.is_empty()
    {
        for name in names {
            if !allowed.iter().any(|v| v == name) {
                allowed.push(Value::from(*name));
            }
        }
    }
    if let Some(Value::Array(excluded)) = mcp.get_mut("excluded") {
        excluded.retain(|v| !names.iter().any(|name| v == name));
    }
}

// ---------------------------------------------------------------------------------------
// Wire types (google-gemini/gemini-cli packages/core/src/output/types.ts)
// ---------------------------------------------------------------------------------------

/// `{"type":"init","session_id":..,"model":..}`.
#[derive(Debug, Deserialize)]
struct WireInit {
    session_id: String,
    #[serde(default)]
    model: Option<String>,
}

/// `{"type":"message","role":"user"|"assistant","content":..,"delta":true}`.
#[derive(Debug, Deserialize)]
struct WireMessage {
    role: String,
    content: String,
    #[serde(default)]
    delta: bool,
}

/// `{"type":"tool_use","tool_name":..,"tool_id":..,"parameters":{..}}`.
#[derive(Debug, Deserialize)]
struct WireToolUse {
    tool_name: String,
    tool_id: String,
    #[serde(default)]
    parameters: Value,
}

/// `{"type":"tool_result","tool_id":..,"status":"success"|"error","output":..,"error":{..}}`.
/// A shell command that exits non-zero is still `success`: its exit code is not reported.
#[derive(Debug, Deserialize)]
struct WireToolResult {
    tool_id: String,
    status: String,
    #[serde(default)]
    output: Option<String>,
    #[serde(default)]
    error: Option<WireError>,
}

/// `{"type":"error","severity":"warning"|"error","message":..}` (loop detected, turn
/// limit of the session, an invalid or empty model response).
#[derive(Debug, Deserialize)]
struct WireErrorEvent {
    #[serde(default)]
    severity: Option<String>,
    message: String,
}

/// `{"type":"result","status":"success"|"error","error":{..},"stats":{..}}`.
#[derive(Debug, Deserialize)]
struct WireResult {
    status: String,
    #[serde(default)]
    error: Option<WireError>,
    #[serde(default)]
    stats: Option<WireStats>,
}

/// `{type, message}` of a failed tool or run.
#[derive(Debug, Clone, Deserialize)]
struct WireError {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    message: String,
}

/// `result.stats`: the sums of `models`, plus duration and tool calls.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireStats {
    #[serde(flatten)]
    tokens: WireTokens,
    /// 0 on error results (the CLI passes 0 there, it measures nothing).
    duration_ms: u64,
    tool_calls: u64,
    models: BTreeMap<String, WireTokens>,
}

/// Token counts, run totals or one model's.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(default)]
struct WireTokens {
    /// The API's `totalTokenCount` summed: prompt + candidates + thoughts (+ tool-use
    /// prompt tokens, which the stream does not break out).
    total_tokens: u64,
    /// The prompt, cached part included.
    input_tokens: u64,
    /// Candidates: the visible output, thinking excluded.
    output_tokens: u64,
    /// The cached part of `input_tokens`.
    cached: u64,
}

// ---------------------------------------------------------------------------------------
// Lines -> events
// ---------------------------------------------------------------------------------------

/// The event of one line, read through a `Value`; `Err` is a protocol message.
fn value_kind(line: &str) -> Result<EventKind, String> {
    let obj = common::json_object(line)?;
    let Some(vendor_type) = common::string_field(&obj, "type") else {
        return Ok(EventKind::Unknown { vendor_type: None });
    };
    parse_object(&vendor_type, obj)
        .map_err(|e| format!("a `{vendor_type}` line that is not Gemini's shape: {e}"))
}

fn parse_object(
    vendor_type: &str,
    obj: Map<String, Value>,
) -> Result<EventKind, serde_json::Error> {
    let v = Value::Object(obj);
    Ok(match vendor_type {
        "init" => {
            let w: WireInit = common::from_value_lenient(v)?;
            EventKind::SessionStarted {
                session_id: w.session_id,
                model: w.model,
                cwd: None,
                tools: Vec::new(),
                mcp_servers: Vec::new(),
                cli_version: None,
            }
        }
        "message" => {
            let w: WireMessage = common::from_value_lenient(v)?;
            message_kind(&w.role, w.content, w.delta)
        }
        "tool_use" => tool_use_kind(common::from_value_lenient(v)?),
        "tool_result" => tool_result_kind(common::from_value_lenient(v)?),
        "error" => {
            let w: WireErrorEvent = common::from_value_lenient(v)?;
            let error_kind = if w.message.contains("session turns") {
                ErrorKind::MaxTurns
            } else {
                text_kind(&w.message).unwrap_or(ErrorKind::Unknown)
            };
            EventKind::Error {
                error_kind,
                fatal: w.severity.as_deref() != Some("warning"),
                message: w.message,
                http_status: None,
            }
        }
        "result" => {
            let w: WireResult = common::from_value_lenient(v)?;
            final_event(&w)
        }
        other => EventKind::Unknown {
            vendor_type: Some(other.to_owned()),
        },
    })
}

/// The event of a `message` line.
fn message_kind(role: &str, content: String, delta: bool) -> EventKind {
    match role {
        "user" => EventKind::UserMessage { text: content },
        "assistant" => EventKind::AssistantText {
            text: content,
            delta,
        },
        _ => EventKind::Unknown {
            vendor_type: Some(format!("message/{role}")),
        },
    }
}

/// The event of a `tool_use` line.
fn tool_use_kind(w: WireToolUse) -> EventKind {
    let (name, mcp_server) = match split_mcp_tool_name(&w.tool_name) {
        Some((server, tool)) => (tool.to_owned(), Some(server.to_owned())),
        None => (w.tool_name, None),
    };
    EventKind::ToolCall {
        id: w.tool_id,
        name,
        input: w.parameters,
        mcp_server,
    }
}

/// The event of a `tool_result` line.
fn tool_result_kind(w: WireToolResult) -> EventKind {
    let is_error = w.status != "success";
    let mut output = w.output.unwrap_or_default();
    if output.is_empty()
        && let Some(e) = &w.error
    {
        output = format!("{}: {}", e.kind, e.message);
    }
    EventKind::ToolResult {
        id: w.tool_id,
        name: None,
        output,
        is_error,
        // Gemini does not report a command's exit code (a failing command is still
        // `status: success`).
        exit_code: None,
    }
}

// The fast path: the frequent lines read straight into borrowed structs (see
// `common::strict`). Each struct reads every field of its `Value`-path twin with the same
// type, plus `type` (checked against the hint, and unique). `init`, `error` and `result`
// lines (one or a few a run) and anything the fast read refuses go the `Value` path,
// which also gives the protocol messages.

/// Any line, for its `type` alone (the rest is read and dropped).
#[derive(Deserialize)]
struct FastTyped<'a> {
    #[serde(borrow)]
    r#type: Cow<'a, str>,
}

/// [`WireMessage`] with its type.
#[derive(Deserialize)]
struct FastMessage<'a> {
    #[serde(borrow)]
    r#type: Cow<'a, str>,
    #[serde(borrow)]
    role: CowStr<'a>,
    content: String,
    #[serde(default)]
    delta: bool,
}

/// [`WireToolUse`] with its type.
#[derive(Deserialize)]
struct FastToolUse<'a> {
    #[serde(borrow)]
    r#type: Cow<'a, str>,
    tool_name: String,
    tool_id: String,
    #[serde(default)]
    parameters: Value,
}

/// [`WireToolResult`] with its type.
#[derive(Deserialize)]
struct FastToolResult<'a> {
    #[serde(borrow)]
    r#type: Cow<'a, str>,
    tool_id: String,
    status: String,
    #[serde(default)]
    output: Option<String>,
    #[serde(default)]
    error: Option<WireError>,
}

/// The event of one line by the fast path; `None` leaves it to the `Value` path.
fn fast_kind(line: &str) -> Option<EventKind> {
    let hint = common::line_type(line)?;
    let check = |t: &str| (t == hint.as_ref()).then_some(());
    Some(match hint.as_ref() {
        "message" => {
            let w: FastMessage<'_> = strict::from_str(line).ok()?;
            check(&w.r#type)?;
            message_kind(w.role.as_str(), w.content, w.delta)
        }
        "tool_use" => {
            let w: FastToolUse<'_> = strict::from_str(line).ok()?;
            check(&w.r#type)?;
            tool_use_kind(WireToolUse {
                tool_name: w.tool_name,
                tool_id: w.tool_id,
                parameters: w.parameters,
            })
        }
        "tool_result" => {
            let w: FastToolResult<'_> = strict::from_str(line).ok()?;
            check(&w.r#type)?;
            tool_result_kind(WireToolResult {
                tool_id: w.tool_id,
                status: w.status,
                output: w.output,
                error: w.error,
            })
        }
        "init" | "error" | "result" => return None,
        other => {
            let w: FastTyped<'_> = strict::from_str(line).ok()?;
            check(&w.r#type)?;
            EventKind::Unknown {
                vendor_type: Some(other.to_owned()),
            }
        }
    })
}

/// The `Final` event of a `result` line. Its error kind is decided from the line alone;
/// the session result decides again with the exit code.
fn final_event(w: &WireResult) -> EventKind {
    let success = w.status == "success";
    let (error_kind, error) = match (&w.error, success) {
        (_, true) => (None, None),
        (Some(e), false) => {
            let c = classify(Some(&e.kind), &e.message, None);
            (Some(c.kind), Some(e.message.trim_end().to_owned()))
        }
        (None, false) => (Some(ErrorKind::Unknown), None),
    };
    let usage = w.stats.as_ref().map(stats_usage);
    let duration_ms = w
        .stats
        .as_ref()
        .map(|s| s.duration_ms)
        .filter(|ms| success || *ms > 0);
    EventKind::Final {
        success,
        text: None,
        error_kind,
        error,
        usage,
        cost_usd: None,
        num_turns: None,
        duration_ms,
    }
}

/// Splits an MCP tool name `mcp_<server>_<tool>` the way Gemini itself does
/// (`parseMcpToolName`: the server is the first `_`-separated segment).
fn split_mcp_tool_name(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix("mcp_")?;
    let (server, tool) = rest.split_once('_')?;
    (!server.is_empty() && !tool.is_empty()).then_some((server, tool))
}

/// The last `Final` event and its line re-read as Gemini's `result`.
fn result_line(events: &[AgentEvent]) -> Option<(&AgentEvent, WireResult)> {
    let ev = events
        .iter()
        .rev()
        .find(|e| matches!(e.kind, EventKind::Final { .. }))?;
    let value: Value = serde_json::from_str(&ev.raw).ok()?;
    let wire = common::from_value_lenient(value).ok()?;
    Some((ev, wire))
}

// ---------------------------------------------------------------------------------------
// Usage
// ---------------------------------------------------------------------------------------

/// One model's (or a run's) tokens in the canonical meaning:
///
/// - `input_tokens = input_tokens - cached` (Gemini's prompt count includes the cached
///   part; its own `input` field is the same difference),
/// - `cache_read = cached`, `cache_write = 0` (the stream reports no cache writes),
/// - `reasoning_tokens = total_tokens - input_tokens - output_tokens` when positive
///   (thinking tokens appear only in the total), and
/// - `output_tokens = output_tokens + reasoning_tokens` (canonical output includes
///   reasoning).
///
/// `request_count` is left 0: the stats do not say (the result counts requests from the
/// stream instead).
pub fn canonical_model_usage(
    total_tokens: u64,
    input_tokens: u64,
    output_tokens: u64,
    cached: u64,
) -> CanonicalUsage {
    let reasoning = total_tokens.saturating_sub(input_tokens.saturating_add(output_tokens));
    CanonicalUsage {
        input_tokens: input_tokens.saturating_sub(cached),
        output_tokens: output_tokens.saturating_add(reasoning),
        cache_read: cached,
        cache_write: 0,
        reasoning_tokens: reasoning,
        request_count: 0,
    }
}

fn tokens_usage(t: &WireTokens) -> CanonicalUsage {
    canonical_model_usage(t.total_tokens, t.input_tokens, t.output_tokens, t.cached)
}

/// The run's usage from `result.stats`: the sum of the per-model figures (the run totals
/// when no model is listed). `request_count` is the number of models that used tokens,
/// a lower bound refined by [`stream_request_count`].
fn stats_usage(s: &WireStats) -> CanonicalUsage {
    if s.models.is_empty() {
        return tokens_usage(&s.tokens);
    }
    let mut total = CanonicalUsage::default();
    for t in s.models.values() {
        let u = tokens_usage(t);
        total += u;
        if !u.is_zero() {
            total.request_count += 1;
        }
    }
    total
}

/// Model API requests that answered, counted from the stream (the stats do not count
/// requests): one per model response (a run of assistant text and tool calls between tool
/// results), plus the router's classification call when the model is `auto` and any
/// tokens were used. Failed attempts and retries are not counted.
fn stream_request_count(events: &[AgentEvent], usage: &CanonicalUsage) -> u64 {
    let mut responses = 0u64;
    let mut in_response = false;
    let mut auto = false;
    for e in events {
        match &e.kind {
            EventKind::SessionStarted { model, .. } => {
                auto = model.as_deref() == Some(AUTO_MODEL);
            }
            EventKind::AssistantText { .. }
            | EventKind::Thinking { .. }
            | EventKind::ToolCall { .. } => {
                if !in_response {
                    responses += 1;
                    in_response = true;
                }
            }
            EventKind::ToolResult { .. } | EventKind::UserMessage { .. } => in_response = false,
            EventKind::Usage { .. }
            | EventKind::Retry { .. }
            | EventKind::RateLimit { .. }
            | EventKind::PermissionDenied { .. }
            | EventKind::Error { .. }
            | EventKind::Final { .. }
            | EventKind::Log { .. }
            | EventKind::Question { .. }
            | EventKind::Protocol { .. }
            | EventKind::Unknown { .. } => {}
        }
    }
    let router = u64::from(auto && !usage.is_zero());
    responses + router
}

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

/// What Gemini's exit code says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exit {
    /// 0.
    Ok,
    /// 41: `FatalAuthenticationError` (no auth method, an invalid one, a missing key).
    Auth,
    /// 42: `FatalInputError` (an unknown `--resume` session, an empty prompt, ...).
    Input,
    /// 44: `FatalSandboxError`.
    Sandbox,
    /// 52: `FatalConfigError` (a bad settings file, YOLO disabled by the admin, ...).
    Config,
    /// 53: `FatalTurnLimitedError` (`model.maxSessionTurns` reached).
    TurnLimit,
    /// 54: `FatalToolExecutionError` (a tool error Gemini cannot continue after).
    ToolFatal,
    /// 55: `FatalUntrustedWorkspaceError`.
    Untrusted,
    /// 130: `FatalCancellationError`.
    Cancelled,
    /// 124: not Gemini's own code; timeout(1) exits with it when it stops a command.
    TimedOut,
    /// A failed API call's HTTP status & 0xff (`handleError` exits with the status).
    Http(u16),
    /// Anything else (1 = an uncaught error).
    Other(i32),
    /// Killed by a signal, or no exit code known.
    Signal,
}

/// HTTP statuses a model API answers with, for reading them back from `status & 0xff`.
const HTTP_STATUSES: [u16; 15] = [
    400, 401, 403, 404, 408, 409, 413, 422, 429, 499, 500, 501, 502, 503, 504,
];

impl Exit {
    fn from_code(code: Option<i32>) -> Exit {
        let Some(code) = code else {
            return Exit::Signal;
        };
        match code {
            0 => Exit::Ok,
            41 => Exit::Auth,
            42 => Exit::Input,
            44 => Exit::Sandbox,
            52 => Exit::Config,
            53 => Exit::TurnLimit,
            54 => Exit::ToolFatal,
            55 => Exit::Untrusted,
            124 => Exit::TimedOut,
            130 => Exit::Cancelled,
            c => HTTP_STATUSES
                .into_iter()
                .find(|s| i32::from(*s & 0xff) == c)
                .map_or(Exit::Other(c), Exit::Http),
        }
    }

    fn describe(self) -> String {
        match self {
            Exit::Ok => "success".to_owned(),
            Exit::Auth => "41: authentication error (FatalAuthenticationError)".to_owned(),
            Exit::Input => "42: input error (FatalInputError)".to_owned(),
            Exit::Sandbox => "44: sandbox error (FatalSandboxError)".to_owned(),
            Exit::Config => "52: configuration error (FatalConfigError)".to_owned(),
            Exit::TurnLimit => "53: session turn limit reached (FatalTurnLimitedError)".to_owned(),
            Exit::ToolFatal => "54: fatal tool error (FatalToolExecutionError)".to_owned(),
            Exit::Untrusted => "55: untrusted directory (FatalUntrustedWorkspaceError)".to_owned(),
            Exit::Cancelled => "130: cancelled (FatalCancellationError)".to_owned(),
            Exit::TimedOut => {
                "124: stopped by timeout(1) (gemini never exits 124 itself)".to_owned()
            }
            Exit::Http(s) => format!("{}: HTTP {s} & 0xff (a failed API call)", s & 0xff),
            Exit::Other(c) => format!("{c}: not one of Gemini's documented exit codes"),
            Exit::Signal => "killed by a signal".to_owned(),
        }
    }

    /// The kind this exit code alone decides (Gemini's own fatal errors).
    fn kind(self, text: &str) -> Option<ErrorKind> {
        match self {
            Exit::Auth => Some(ErrorKind::Auth),
            Exit::Input => Some(input_kind(text)),
            Exit::TurnLimit => Some(ErrorKind::MaxTurns),
            Exit::Untrusted => Some(ErrorKind::Permission),
            Exit::Cancelled => Some(ErrorKind::Cancelled),
            Exit::TimedOut => Some(ErrorKind::Timeout),
            Exit::Ok
            | Exit::Sandbox
            | Exit::Config
            | Exit::ToolFatal
            | Exit::Http(_)
            | Exit::Other(_)
            | Exit::Signal => None,
        }
    }
}

/// An API error quoted in a message: `{"error":{"code":400,"message":..,"status":..,
/// "details":[{"reason":..}]}}`, or the `(Status: RESOURCE_EXHAUSTED)` form.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
struct ApiError {
    #[serde(skip_serializing_if = "Option::is_none")]
    http_status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WireApiErrorBody {
    error: WireApiError,
}

#[derive(Debug, Deserialize)]
struct WireApiError {
    #[serde(default)]
    code: Option<u16>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    details: Vec<WireApiErrorDetail>,
}

#[derive(Debug, Deserialize)]
struct WireApiErrorDetail {
    #[serde(default)]
    reason: Option<String>,
}

impl ApiError {
    /// The first API error quoted in `text`, if any.
    fn find(text: &str) -> Option<ApiError> {
        for (at, _) in text.match_indices("{\"error\"") {
            let mut values =
                serde_json::Deserializer::from_str(&text[at..]).into_iter::<WireApiErrorBody>();
            if let Some(Ok(body)) = values.next() {
                let e = body.error;
                let http_status = e
                    .code
                    .or_else(|| e.status.as_deref().and_then(http_of_grpc_status));
                return Some(ApiError {
                    http_status,
                    status: e.status,
                    reason: e.details.into_iter().find_map(|d| d.reason),
                    message: e.message,
                });
            }
        }
        let status = text.split("(Status: ").nth(1)?.split(')').next()?.trim();
        Some(ApiError {
            http_status: http_of_grpc_status(status),
            status: Some(status.to_owned()),
            reason: None,
            message: None,
        })
    }
}

/// The HTTP status of a google.rpc status name.
fn http_of_grpc_status(status: &str) -> Option<u16> {
    Some(match status {
        "INVALID_ARGUMENT" | "FAILED_PRECONDITION" | "OUT_OF_RANGE" => 400,
        "UNAUTHENTICATED" => 401,
        "PERMISSION_DENIED" => 403,
        "NOT_FOUND" => 404,
        "RESOURCE_EXHAUSTED" => 429,
        "CANCELLED" => 499,
        "INTERNAL" | "UNKNOWN" | "DATA_LOSS" => 500,
        "UNIMPLEMENTED" => 501,
        "UNAVAILABLE" => 503,
        "DEADLINE_EXCEEDED" => 504,
        _ => return None,
    })
}

/// A classified failure.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Classified {
    kind: ErrorKind,
    /// The failed API call's HTTP status, from the quoted error or the exit code.
    http_status: Option<u16>,
    api: Option<ApiError>,
}

/// Classifies a failure from Gemini's error type, its message and the exit code: the
/// error type first, then Gemini's own exit codes, then the HTTP status (quoted in the
/// message, else read back from the exit code), then the words. `exit` is `None` where
/// the exit code is not known yet (a `result` line parsed on its own).
fn classify(error_type: Option<&str>, message: &str, exit: Option<Exit>) -> Classified {
    let api = ApiError::find(message);
    let exit_status = match exit {
        Some(Exit::Http(s)) => Some(s),
        Some(
            Exit::Ok
            | Exit::Auth
            | Exit::Input
            | Exit::Sandbox
            | Exit::Config
            | Exit::TurnLimit
            | Exit::ToolFatal
            | Exit::Untrusted
            | Exit::Cancelled
            | Exit::TimedOut
            | Exit::Other(_)
            | Exit::Signal,
        )
        | None => None,
    };
    let http_status = api.as_ref().and_then(|a| a.http_status).or(exit_status);
    let kind = error_type
        .and_then(|t| fatal_type_kind(t, message))
        .or_else(|| exit.and_then(|e| e.kind(message)))
        .or_else(|| http_status.map(|s| http_kind(s, api.as_ref(), message)))
        .or_else(|| text_kind(message))
        .unwrap_or(ErrorKind::Unknown);
    Classified {
        kind,
        http_status,
        api,
    }
}

/// The kind of Gemini's own fatal error types.
fn fatal_type_kind(error_type: &str, message: &str) -> Option<ErrorKind> {
    Some(match error_type {
        "FatalTurnLimitedError" => ErrorKind::MaxTurns,
        "FatalCancellationError" => ErrorKind::Cancelled,
        "FatalAuthenticationError" => ErrorKind::Auth,
        "FatalUntrustedWorkspaceError" => ErrorKind::Permission,
        "FatalInputError" => input_kind(message),
        _ => return None,
    })
}

/// Exit 42 is a bad `--resume` or some other bad input (an empty prompt, a failing
/// `@file`).
fn input_kind(text: &str) -> ErrorKind {
    let lower = text.to_ascii_lowercase();
    if lower.contains("resuming session") || lower.contains("session identifier") {
        ErrorKind::InvalidResume
    } else {
        ErrorKind::BadRequest
    }
}

/// The kind of a failed API call's HTTP status. A 400 `API_KEY_INVALID` is Google's
/// answer to a bad key (auth); a 403 about the key (blocked, leaked, unregistered caller)
/// is auth too, any other 403 (API disabled for the project, no access to the model) is
/// permission.
fn http_kind(status: u16, api: Option<&ApiError>, text: &str) -> ErrorKind {
    let reason = api.and_then(|a| a.reason.as_deref()).unwrap_or("");
    match status {
        400 if reason == "API_KEY_INVALID" || text.contains("API key not valid") => ErrorKind::Auth,
        403 if reason.starts_with("API_KEY")
            || text.contains("API key")
            || text.contains("unregistered callers") =>
        {
            ErrorKind::Auth
        }
        404 => ErrorKind::BadRequest,
        s => ErrorKind::from_http_status(s).unwrap_or(ErrorKind::Unknown),
    }
}

/// The kind the words of a message say, where they say one.
fn text_kind(text: &str) -> Option<ErrorKind> {
    let lower = text.to_ascii_lowercase();
    if lower.contains("resource has been exhausted") || lower.contains("quota") {
        Some(ErrorKind::RateLimit)
    } else if lower.contains("api key not valid") {
        Some(ErrorKind::Auth)
    } else if [
        "fetch failed",
        "econnrefused",
        "enotfound",
        "eai_again",
        "etimedout",
        "econnreset",
        // undici's message when the response body stream is cut midway (seen with
        // gemini 0.61 on a dropped SSE stream: "[API Error: terminated]", exit 1).
        "api error: terminated",
    ]
    .iter()
    .any(|m| lower.contains(m))
    {
        Some(ErrorKind::Network)
    } else {
        None
    }
}

/// stderr lines in which Gemini refuses to start for lack of auth (exit 41).
const AUTH_SETUP_MARKERS: [&str; 4] = [
    "Please set an Auth method",
    "Invalid auth method selected",
    "you must specify the GEMINI_API_KEY",
    "When using Vertex AI, you must specify",
];

/// The stderr line in which Gemini says it ignored a system settings file.
const SETTINGS_SKIPPED: &str = "Security Warning: Skipping system settings file";

/// stderr lines that say nothing about why a run ended: start-up noise Gemini prints on
/// every run, and the skipped-settings warning (reported on its own).
const STDERR_NOISE: [&str; 5] = [
    "Warning: 256-color support not detected",
    "Ripgrep is not available",
    "[STARTUP]",
    "YOLO mode is enabled",
    SETTINGS_SKIPPED,
];

/// The stderr lines that say something: no start-up noise, no stack frames.
fn stderr_lines(stderr: &str) -> impl Iterator<Item = &str> {
    stderr.lines().map(str::trim).filter(|l| {
        !(l.is_empty()
            || l.starts_with("at ")
            || *l == "}"
            || l.starts_with("status: ")
            || STDERR_NOISE.iter().any(|n| l.starts_with(n)))
    })
}

/// What stderr says went wrong: the `error.message` of a JSON error report (`-o json`),
/// else the first line that says something.
fn stderr_detail(stderr: &str) -> Option<String> {
    if let Ok(v) = serde_json::from_str::<Value>(stderr.trim())
        && let Some(m) = v.pointer("/error/message").and_then(Value::as_str)
    {
        return Some(common::truncate_chars(m, 500));
    }
    stderr_lines(stderr)
        .next()
        .map(|l| common::truncate_chars(l, 500))
}

/// The CLI's API retries as stderr shows them (`Attempt N failed ... Retrying with
/// backoff... ERROR`); they never reach the stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct ApiRetries {
    /// `Attempt N failed` lines.
    failed_attempts: u32,
    /// The last one's error.
    last_error: String,
}

impl ApiRetries {
    fn from_stderr(stderr: &str) -> Option<ApiRetries> {
        let mut failed_attempts = 0;
        let mut last_error = String::new();
        for line in stderr.lines() {
            if !(line.starts_with("Attempt ") && line.contains(" failed")) {
                continue;
            }
            failed_attempts += 1;
            let error = match line.split_once("Retrying with backoff... ") {
                Some((_, e)) => e,
                None => line.split_once(": ").map_or(line, |(_, e)| e),
            };
            last_error = common::truncate_chars(error.trim(), 300);
        }
        (failed_attempts > 0).then_some(ApiRetries {
            failed_attempts,
            last_error,
        })
    }
}

// ---------------------------------------------------------------------------------------
// Result
// ---------------------------------------------------------------------------------------

impl GeminiProvider {
    /// Fills `r` from the run's `result` line.
    fn apply_result_line(
        &self,
        r: &mut SessionResult,
        data: &mut Map<String, Value>,
        events: &[AgentEvent],
        final_event: &AgentEvent,
        wire: WireResult,
        exit: Exit,
    ) {
        if let Some(stats) = &wire.stats {
            if let Ok(Value::Object(line)) = serde_json::from_str::<Value>(&final_event.raw)
                && let Some(raw_stats) = line.get("stats")
            {
                data.insert("stats".into(), raw_stats.clone());
            }
            let per_model: BTreeMap<&str, CanonicalUsage> = stats
                .models
                .iter()
                .map(|(m, t)| (m.as_str(), tokens_usage(t)))
                .collect();
            if !per_model.is_empty() {
                // Without `request_count`: the stats do not say how many calls each model
                // answered.
                let shown: Map<String, Value> = per_model
                    .iter()
                    .map(|(m, u)| {
                        let mut v = json!(u);
                        if let Some(o) = v.as_object_mut() {
                            o.remove("request_count");
                        }
                        ((*m).to_owned(), v)
                    })
                    .collect();
                data.insert("usage_by_model".into(), Value::Object(shown));
            }
            let estimate = if per_model.is_empty() {
                // No per-model figures: only a run that used nothing can be priced.
                r.canonical_usage.is_zero().then_some(0.0)
            } else {
                self.config
                    .prices
                    .estimate(per_model.iter().map(|(m, u)| (*m, u)))
            };
            r.set_cost(Cost::estimated(estimate));
        }
        let cli_ms = if let EventKind::Final { duration_ms, .. } = &final_event.kind {
            *duration_ms
        } else {
            None
        };
        match cli_ms.or_else(|| timestamp_span_ms(events, final_event)) {
            Some(ms) => {
                r.duration_ms = ms;
                let source = if cli_ms.is_some() {
                    "stats"
                } else {
                    "timestamps"
                };
                data.insert("duration_source".into(), source.into());
            }
            None => r.duration_ms = 0,
        }

        if wire.status == "success" {
            r.succeed();
            return;
        }
        let (error_type, message) = match wire.error {
            Some(e) => (Some(e.kind), e.message.trim_end().to_owned()),
            // An invalid or empty model response: the reason is in the `error` event
            // before the result.
            None => (
                None,
                common::basics(events)
                    .fatal_error
                    .map(|(_, m)| m)
                    .unwrap_or_else(|| {
                        "the CLI reported status \"error\" without saying why".to_owned()
                    }),
            ),
        };
        let c = classify(error_type.as_deref(), &message, Some(exit));
        if let Some(t) = error_type {
            data.insert("error_type".into(), t.into());
        }
        if let Some(s) = c.http_status {
            data.insert("http_status".into(), s.into());
        }
        if let Some(api) = &c.api {
            data.insert("api_error".into(), json!(api));
        }
        r.fail(c.kind, message);
    }

    /// Why a run that printed no `result` line failed: Gemini's exit code first (41, 42,
    /// 53, 55, 130, an HTTP status), then the shape of the stream, then stderr.
    fn classify_without_result(
        &self,
        events: &[AgentEvent],
        b: &common::Basics,
        stderr: &str,
        exit_code: Option<i32>,
    ) -> (ErrorKind, String) {
        let exit = Exit::from_code(exit_code);
        let detail = stderr_detail(stderr);
        let with_detail = |what: &str| match &detail {
            Some(d) => format!("{what}: {d} (exit code {})", exit_code.unwrap_or_default()),
            None => format!(
                "{what} (exit code {}, nothing on stderr)",
                exit_code.unwrap_or_default()
            ),
        };
        match exit {
            Exit::Auth => return (ErrorKind::Auth, with_detail("not authenticated")),
            Exit::Input => {
                let kind = input_kind(stderr);
                let what = if kind == ErrorKind::InvalidResume {
                    "the session to resume does not exist"
                } else {
                    "the CLI rejected its input"
                };
                return (kind, with_detail(what));
            }
            Exit::TurnLimit => return (ErrorKind::MaxTurns, with_detail("turn limit reached")),
            Exit::Untrusted => {
                return (
                    ErrorKind::Permission,
                    with_detail("the CLI refused to run in an untrusted directory"),
                );
            }
            Exit::Cancelled => return (ErrorKind::Cancelled, with_detail("cancelled")),
            Exit::TimedOut => {
                let mut m = "stopped by a time limit (exit code 124, as timeout(1) reports) \
                             before the CLI printed a result"
                    .to_owned();
                if let Some(r) = ApiRetries::from_stderr(stderr) {
                    m.push_str(&format!(
                        "; it was still retrying its API request ({} failed attempts, the last: {})",
                        r.failed_attempts, r.last_error
                    ));
                }
                return (ErrorKind::Timeout, m);
            }
            Exit::Http(status) => {
                let api = ApiError::find(stderr);
                let kind = http_kind(status, api.as_ref(), stderr);
                return (
                    kind,
                    with_detail(&format!("the API answered HTTP {status}")),
                );
            }
            Exit::Sandbox | Exit::Config | Exit::ToolFatal => {
                return (ErrorKind::Unknown, with_detail(&exit.describe()));
            }
            Exit::Ok | Exit::Other(_) | Exit::Signal => {}
        }
        if common::looks_foreign(events) {
            return (
                ErrorKind::Protocol,
                format!(
                    "no line was a Gemini event ({} lines of another shape: another CLI's \
                     transcript?)",
                    events.len()
                ),
            );
        }
        let filtered: Vec<&str> = stderr_lines(stderr).collect();
        let auth = self.detect_auth_error(stderr, exit_code, events);
        common::classify_without_final(&self.name, b, &filtered.join("\n"), exit_code, auth)
    }
}

/// Milliseconds from the first line with a `timestamp` to the `result` line (Gemini puts
/// 0 in `stats.duration_ms` of an error result).
fn timestamp_span_ms(events: &[AgentEvent], final_event: &AgentEvent) -> Option<u64> {
    let stamp = |e: &AgentEvent| -> Option<i64> {
        let v: Value = serde_json::from_str(&e.raw).ok()?;
        unix_millis(v.get("timestamp")?.as_str()?)
    };
    let start = events.iter().find_map(stamp)?;
    let end = stamp(final_event)?;
    u64::try_from(end - start).ok()
}

/// Milliseconds since the Unix epoch of an RFC 3339 UTC time as Gemini writes it
/// (`2026-11-30T03:35:40.563Z`).
fn unix_millis(ts: &str) -> Option<i64> {
    let b = ts.as_bytes();
    let seps = [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')];
    if b.len() < 20 || b.last() != Some(&b'Z') || seps.iter().any(|(i, c)| b[*i] != *c) {
        return None;
    }
    let num = |from: usize, to: usize| ts.get(from..to)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (h, mi, s) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    let frac = ts.get(19..ts.len() - 1)?;
    let millis = match frac.strip_prefix('.') {
        None if frac.is_empty() => 0,
        None => return None,
        Some(digits) => {
            let mut ms = 0;
            for (i, c) in digits.chars().enumerate() {
                let d = i64::from(c.to_digit(10)?);
                if i < 3 {
                    ms = ms * 10 + d;
                }
            }
            ms * 10i64.pow(3u32.saturating_sub(digits.len() as u32))
        }
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((mo + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + h) * 60 + mi) * 60_000 + s * 1000 + millis)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use pretty_assertions::assert_eq;

    use super::*;
    use crate::config::AiCliConfig;
    use crate::provider::BinaryLocation;
    use crate::replay;
    use crate::result::SessionStatus;
    use crate::task::TaskSpec;
    use crate::usage::CostSource;

    fn provider() -> GeminiProvider {
        let config = AiCliConfig::builtin().unwrap_or_else(|e| panic!("{e}"));
        let entry = config
            .providers
            .get("gemini")
            .cloned()
            .unwrap_or_else(|| panic!("no gemini entry in the built-in config"));
        GeminiProvider::new("gemini", entry)
    }

    /// A recorded fixture replayed through the provider: (events, result).
    macro_rules! fixture {
        ($name:literal, $model:expr) => {
            replay_fixture(
                include_bytes!(concat!("../../fixtures/gemini/", $name, ".ndjson")),
                include_str!(concat!("../../fixtures/gemini/", $name, ".stderr")),
                include_str!(concat!("../../fixtures/gemini/", $name, ".exit")),
                $model,
            )
        };
    }

    fn replay_fixture(
        stdout: &[u8],
        stderr: &str,
        exit: &str,
        model: Option<&str>,
    ) -> (Vec<AgentEvent>, SessionResult) {
        let exit = exit.trim().parse::<i32>().ok();
        let ctx = ParseContext {
            model: model.map(str::to_owned),
            prior: None,
        };
        replay::replay(&provider(), stdout, stderr, exit, &ctx)
    }

    fn run(stdout: &str, stderr: &str, exit: Option<i32>) -> (Vec<AgentEvent>, SessionResult) {
        replay::replay(
            &provider(),
            stdout.as_bytes(),
            stderr,
            exit,
            &ParseContext::default(),
        )
    }

    fn usage(
        input: u64,
        output: u64,
        cache_read: u64,
        reasoning: u64,
        requests: u64,
    ) -> CanonicalUsage {
        CanonicalUsage {
            input_tokens: input,
            output_tokens: output,
            cache_read,
            cache_write: 0,
            reasoning_tokens: reasoning,
            request_count: requests,
        }
    }

    fn kinds(events: &[AgentEvent]) -> Vec<&'static str> {
        events.iter().map(AgentEvent::type_name).collect()
    }

    /// (status, error kind, error message) of a result.
    fn outcome(r: &SessionResult) -> (SessionStatus, Option<ErrorKind>, Option<String>) {
        (r.status, r.error_kind, r.error.clone())
    }

    fn assert_close(actual: Option<f64>, expected: f64) {
        let a = actual.unwrap_or(f64::NAN);
        assert!((a - expected).abs() < 1e-12, "{a} != {expected}");
    }

    const INIT: &str = r#"{"type":"init","timestamp":"2026-11-30T03:35:26.354Z","session_id":"s-1","model":"gemini-2.5-flash"}"#;
    const ZERO_STATS: &str = r#""stats":{"total_tokens":0,"input_tokens":0,"output_tokens":0,"cached":0,"input":0,"duration_ms":0,"tool_calls":0,"models":{"gemini-2.5-flash":{"total_tokens":0,"input_tokens":0,"output_tokens":0,"cached":0,"input":0}}}"#;

    /// A stream that fails with `message` (as `result.error.message`).
    fn api_error_stream(message: &str) -> String {
        let error = json!({"type": "unknown", "message": message});
        format!(
            "{INIT}\n{{\"type\":\"result\",\"timestamp\":\"2026-11-30T03:35:27.000Z\",\"status\":\"error\",\"error\":{error},{ZERO_STATS}}}\n"
        )
    }

    // --- the recorded runs --------------------------------------------------------------

    #[test]
    fn text_with_the_router_counts_both_models() {
        let (events, r) = fixture!("text", None);
        assert_eq!(
            events[0].kind,
            EventKind::SessionStarted {
                session_id: "ea7b22cc-15cd-436a-96b6-39fbd009390d".into(),
                model: Some("auto".into()),
                cwd: None,
                tools: vec![],
                mcp_servers: vec![],
                cli_version: None,
            }
        );
        assert_eq!(
            events[1].kind,
            EventKind::UserMessage {
                text: "Say hello".into()
            }
        );
        assert_eq!(r.status, SessionStatus::Succeeded);
        assert_eq!(r.response, "Hello from the fake Gemini API.");
        assert_eq!(r.model.as_deref(), Some("auto"));
        // Two models x (200 prompt incl. 50 cached, 11 candidates, 236 total -> 25 thinking);
        // the router's call and the main call.
        assert_eq!(r.canonical_usage, usage(300, 72, 100, 50, 2));
        // flash-lite 150*0.1 + 50*0.01 + 36*0.4 = 29.9; 3.8-flash 150*0.3 + 50*0.03 + 36*2.5
        // = 136.5 (USD per million tokens).
        assert_eq!(r.cost_source, CostSource::Estimated);
        assert_close(r.cost_usd, 166.4e-6);
        assert_eq!(r.duration_ms, 134);
        assert_eq!(r.num_turns, None);
        assert_eq!(
            r.provider_data["usage_by_model"]["gemini-3.5-flash-lite"],
            json!({"input_tokens":150,"output_tokens":36,"cache_read":50,"cache_write":0,"reasoning_tokens":25})
        );
    }

    #[test]
    fn text_with_a_model_flag_counts_one_request() {
        let (_, r) = fixture!("text_model_flag", Some("gemini-2.5-flash"));
        assert_eq!(outcome(&r), (SessionStatus::Succeeded, None, None));
        assert_eq!(r.model.as_deref(), Some("gemini-2.5-flash"));
        assert_eq!(r.canonical_usage, usage(150, 36, 50, 25, 1));
        assert_close(r.cost_usd, 136.5e-6);
        assert_eq!(r.duration_ms, 99);
    }

    #[test]
    fn shell_call_and_result_are_normalized() {
        let (events, r) = fixture!("shell", Some("gemini-2.5-flash"));
        let calls: Vec<&EventKind> = events
            .iter()
            .map(|e| &e.kind)
            .filter(|k| matches!(k, EventKind::ToolCall { .. } | EventKind::ToolResult { .. }))
            .collect();
        let id = "run_shell_command__run_shell_command_1796009707464_0";
        assert_eq!(
            calls,
            [
                &EventKind::ToolCall {
                    id: id.into(),
                    name: "run_shell_command".into(),
                    input: json!({"command": "echo hi", "description": "run it"}),
                    mcp_server: None,
                },
                &EventKind::ToolResult {
                    id: id.into(),
                    name: None,
                    output: "hi".into(),
                    is_error: false,
                    exit_code: None,
                },
            ]
        );
        assert_eq!(r.status, SessionStatus::Succeeded);
        assert_eq!(r.tool_calls, 1);
        // Two model calls: the one that asked for the tool and the one that answered.
        assert_eq!(r.canonical_usage, usage(300, 72, 100, 50, 2));
        assert_eq!(r.provider_data["stats"]["tool_calls"], json!(1));
    }

    #[test]
    fn shell_in_default_mode_is_not_offered_and_the_run_still_succeeds() {
        let (events, r) = fixture!("shell_default_mode", Some("gemini-2.5-flash"));
        assert!(!kinds(&events).contains(&"tool_call"));
        assert_eq!(outcome(&r), (SessionStatus::Succeeded, None, None));
        assert!(
            r.response.starts_with("NO SHELL TOOL OFFERED"),
            "{}",
            r.response
        );
        assert_eq!(r.tool_calls, 0);
    }

    #[test]
    fn mcp_tools_name_their_server() {
        let (events, r) = fixture!("mcp", Some("gemini-2.5-flash"));
        let call = events
            .iter()
            .find(|e| e.type_name() == "tool_call")
            .map(|e| e.kind.clone());
        assert_eq!(
            call,
            Some(EventKind::ToolCall {
                id: "mcp_echo_echo__mcp_echo_echo_1796009713456_0".into(),
                name: "echo".into(),
                input: json!({"text": "ping from fake model"}),
                mcp_server: Some("echo".into()),
            })
        );
        assert_eq!(r.status, SessionStatus::Succeeded);
        assert_eq!(r.tool_calls, 1);
        assert_eq!(
            split_mcp_tool_name("mcp_aicli_ask_user"),
            Some(("aicli", "ask_user"))
        );
        assert_eq!(split_mcp_tool_name("run_shell_command"), None);
        assert_eq!(split_mcp_tool_name("mcp_x"), None);
    }

    #[test]
    fn an_untrusted_mcp_server_is_not_offered() {
        let (events, r) = fixture!("mcp_untrusted", Some("gemini-2.5-flash"));
        assert!(!kinds(&events).contains(&"tool_call"));
        assert_eq!(r.status, SessionStatus::Succeeded);
        assert!(
            r.response.starts_with("NO MCP TOOL OFFERED"),
            "{}",
            r.response
        );
    }

    #[test]
    fn api_errors_are_classified_by_status_and_key() {
        let cases = [
            (
                fixture!("err400", Some("gemini-2.5-flash")).1,
                ErrorKind::BadRequest,
                400,
                144,
            ),
            (
                fixture!("err401", Some("gemini-2.5-flash")).1,
                ErrorKind::Auth,
                400,
                144,
            ),
            (
                fixture!("err429", Some("gemini-2.5-flash")).1,
                ErrorKind::RateLimit,
                429,
                173,
            ),
            (
                fixture!("err500", Some("gemini-2.5-flash")).1,
                ErrorKind::ServerError,
                500,
                244,
            ),
        ];
        for (r, kind, http, exit) in cases {
            assert_eq!(
                (
                    r.status,
                    r.error_kind,
                    r.exit_code,
                    r.provider_data["http_status"].clone()
                ),
                (SessionStatus::Failed, Some(kind), Some(exit), json!(http))
            );
            // A failed call costs nothing, and the stats say so.
            assert_eq!(
                (r.cost_usd, r.cost_source),
                (Some(0.0), CostSource::Estimated)
            );
        }
        let (_, r) = fixture!("err401", Some("gemini-2.5-flash"));
        assert_eq!(
            r.provider_data["api_error"],
            json!({"http_status":400,"status":"INVALID_ARGUMENT","reason":"API_KEY_INVALID","message":"API key not valid. Please pass a valid API key."})
        );
        assert!(
            provider()
                .detect_auth_error("", Some(144), &fixture!("err401", None).0)
                .is_some()
        );
        assert_eq!(
            provider().detect_auth_error("", Some(144), &fixture!("err400", None).0),
            None
        );
    }

    #[test]
    fn a_429_names_its_retries_and_its_real_duration() {
        let (_, r) = fixture!("err429", Some("gemini-2.5-flash"));
        assert_eq!(
            r.error.as_deref(),
            Some(
                "[API Error: Resource has been exhausted (e.g. check quota).]\nPlease wait and try again later. To increase your limits, request a quota increase through AI Studio, or switch to another /auth method"
            )
        );
        assert_eq!(
            r.provider_data["api_retries"],
            json!({"failed_attempts": 10, "last_error": "Resource has been exhausted (e.g. check quota).. Max attempts reached"})
        );
        // stats.duration_ms is 0 on error results; the line timestamps span 03:35:40.563 to
        // 03:39:22.750.
        assert_eq!(r.duration_ms, 222_187);
        assert_eq!(r.provider_data["duration_source"], json!("timestamps"));
    }

    #[test]
    fn status_codes_without_a_recording_classify_too() {
        let p = provider();
        let cases = [
            (
                r#"[API Error: {"error":{"code":403,"message":"Generative Language API has not been used in project 1 before or it is disabled.","status":"PERMISSION_DENIED"}}]"#,
                147,
                ErrorKind::Permission,
            ),
            (
                r#"[API Error: {"error":{"code":403,"message":"Your API key was reported as leaked. Please use another API key.","status":"PERMISSION_DENIED"}}]"#,
                147,
                ErrorKind::Auth,
            ),
            (
                r#"[API Error: {"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}]"#,
                247,
                ErrorKind::Overloaded,
            ),
            (
                "[API Error: The model is overloaded. (Status: UNAVAILABLE)]",
                1,
                ErrorKind::Overloaded,
            ),
            (
                r#"[API Error: {"error":{"code":401,"message":"Request had invalid authentication credentials.","status":"UNAUTHENTICATED"}}]"#,
                145,
                ErrorKind::Auth,
            ),
            (
                r#"[API Error: {"error":{"code":404,"message":"models/nope is not found","status":"NOT_FOUND"}}]"#,
                148,
                ErrorKind::BadRequest,
            ),
            (
                "[API Error: exception TypeError: fetch failed sending request]",
                1,
                ErrorKind::Network,
            ),
            // No JSON in the message: the exit code says 429.
            (
                "[API Error: something unexpected]",
                173,
                ErrorKind::RateLimit,
            ),
        ];
        for (message, exit, kind) in cases {
            let (_, r) = run(&api_error_stream(message), "", Some(exit));
            assert_eq!(
                outcome(&r),
                (SessionStatus::Failed, Some(kind), Some(message.to_owned())),
                "{message}"
            );
        }
        let (events, _) = run(&api_error_stream(cases[1].0), "", Some(147));
        assert!(p.detect_auth_error("", Some(147), &events).is_some());
    }

    #[test]
    fn the_turn_limit_is_max_turns() {
        let (events, r) = fixture!("maxturns2", Some("gemini-2.5-flash"));
        assert_eq!(
            kinds(&events),
            [
                "session_started",
                "user_message",
                "tool_call",
                "tool_result",
                "tool_call",
                "tool_result",
                "final"
            ]
        );
        assert_eq!(
            outcome(&r),
            (
                SessionStatus::Failed,
                Some(ErrorKind::MaxTurns),
                Some("Reached max session turns for this session. Increase the number of turns by specifying maxSessionTurns in settings.json.".into())
            )
        );
        assert_eq!(r.exit_code, Some(53));
        assert_eq!(r.tool_calls, 2);
        assert_eq!(r.canonical_usage, usage(300, 72, 100, 50, 2));
        assert_eq!(
            r.provider_data["error_type"],
            json!("FatalTurnLimitedError")
        );
        assert_eq!(r.response, "");
    }

    #[test]
    fn resume_by_uuid_keeps_the_session_and_counts_only_its_own_usage() {
        let (_, first) = fixture!("resume_first", Some("gemini-2.5-flash"));
        let prior = crate::result::SessionTotals {
            usage: first.canonical_usage,
            cost_usd: first.cost_usd,
        };
        let (events, _) = fixture!("resume_by_uuid", Some("gemini-2.5-flash"));
        let ctx = ParseContext {
            model: Some("gemini-2.5-flash".into()),
            prior: Some(prior),
        };
        let r = provider().event_to_session_result(&events, "", Some(0), &ctx);
        assert_eq!(r.session_id, first.session_id);
        assert_eq!(r.status, SessionStatus::Succeeded);
        // Gemini's stats are per run: nothing is subtracted, nothing is cumulative.
        assert_eq!(r.canonical_usage, first.canonical_usage);
        assert_eq!(r.session_totals, None);
    }

    #[test]
    fn an_unknown_resume_id_is_invalid_resume() {
        let (events, r) = fixture!("resume_unknown", Some("gemini-2.5-flash"));
        assert!(events.is_empty());
        assert_eq!(
            outcome(&r),
            (
                SessionStatus::Failed,
                Some(ErrorKind::InvalidResume),
                Some("the session to resume does not exist: Error resuming session: Invalid session identifier \"11111111-2222-3333-4444-555555555555\". (exit code 42)".into())
            )
        );
        // Exit 42 for another reason (an empty prompt) is a bad request.
        let (_, r) = run(
            "",
            "No input provided via stdin. Input can be provided by piping data into gemini or using the --prompt option.\n",
            Some(42),
        );
        assert_eq!(r.error_kind, Some(ErrorKind::BadRequest));
    }

    #[test]
    fn every_unauthenticated_variant_is_auth() {
        let results = [
            fixture!("unauth_nokey", None),
            fixture!("unauth_nokey_skiptrust", None),
            fixture!("unauth_nokey_jsonformat", None),
        ];
        for (events, r) in &results {
            assert!(events.is_empty());
            assert_eq!(
                (r.status, r.error_kind, r.exit_code),
                (SessionStatus::Failed, Some(ErrorKind::Auth), Some(41))
            );
            let message = r.error.clone().unwrap_or_default();
            assert!(
                message.starts_with("not authenticated: Please set an Auth method in your /home/tester/gemini-unauth"),
                "{message}"
            );
            assert!(
                message.ends_with("GOOGLE_GENAI_USE_GCA (exit code 41)"),
                "{message}"
            );
        }
        let (_, r) = fixture!("text_try1", None);
        assert_eq!(
            outcome(&r),
            (
                SessionStatus::Failed,
                Some(ErrorKind::Auth),
                Some("not authenticated: Invalid auth method selected. (exit code 41)".into())
            )
        );
        let stderr = include_str!("../../fixtures/gemini/unauth_nokey.stderr");
        assert_eq!(
            provider().detect_auth_error(stderr, Some(41), &[]),
            Some(stderr.trim().to_owned())
        );
        assert_eq!(provider().detect_auth_error("", Some(0), &[]), None);
    }

    #[test]
    fn an_untrusted_directory_is_permission() {
        let stderr = "Gemini CLI is not running in a trusted directory. To proceed, either use --skip-trust, set the GEMINI_CLI_TRUST_WORKSPACE=true environment variable, or trust this directory in interactive mode.\n";
        let (_, r) = run("", stderr, Some(55));
        assert_eq!(r.error_kind, Some(ErrorKind::Permission));
        assert!(
            r.error
                .clone()
                .unwrap_or_default()
                .contains("use --skip-trust")
        );
    }

    #[test]
    fn a_run_stopped_by_timeout_says_what_it_was_doing() {
        let (events, r) = fixture!("badkey", None);
        assert_eq!(kinds(&events), ["session_started", "user_message"]);
        assert_eq!(
            outcome(&r),
            (
                SessionStatus::Failed,
                Some(ErrorKind::Timeout),
                Some("stopped by a time limit (exit code 124, as timeout(1) reports) before the CLI printed a result; it was still retrying its API request (7 failed attempts, the last: Error: exception TypeError: fetch failed sending request)".into())
            )
        );
        assert_eq!((r.cost_usd, r.cost_source), (None, CostSource::Unknown));
        assert_eq!(
            r.session_id.as_deref(),
            Some("b7e9c34a-93df-4f97-a4e6-b188d43e942f")
        );
    }

    #[test]
    fn other_fatal_exit_codes() {
        let (_, r) = run(INIT, "", Some(130));
        assert_eq!(r.error_kind, Some(ErrorKind::Cancelled));
        let (_, r) = run(
            INIT,
            "YOLO mode is disabled by the \"disableYolo\" setting.\n",
            Some(52),
        );
        assert_eq!(
            outcome(&r),
            (
                SessionStatus::Failed,
                Some(ErrorKind::Unknown),
                Some("52: configuration error (FatalConfigError): YOLO mode is disabled by the \"disableYolo\" setting. (exit code 52)".into())
            )
        );
        let (_, r) = run("", "Error: boom\n    at x (y.js:1:1)\n", Some(1));
        assert_eq!(
            outcome(&r),
            (
                SessionStatus::Failed,
                Some(ErrorKind::Crashed),
                Some(
                    "the CLI ended without any gemini event (exit code 1); stderr: Error: boom"
                        .into()
                )
            )
        );
    }

    #[test]
    fn an_invalid_model_response_takes_its_reason_from_the_error_event() {
        let stream = format!(
            "{INIT}\n{}\n{}\n",
            r#"{"type":"error","timestamp":"2026-11-30T03:35:26.400Z","severity":"error","message":"Model stream ended with an empty response."}"#,
            r#"{"type":"result","timestamp":"2026-11-30T03:35:26.500Z","status":"error","stats":{"total_tokens":0,"input_tokens":0,"output_tokens":0,"cached":0,"input":0,"duration_ms":146,"tool_calls":0,"models":{}}}"#
        );
        let (events, r) = run(&stream, "", Some(0));
        assert_eq!(
            events[1].kind,
            EventKind::Error {
                error_kind: ErrorKind::Unknown,
                message: "Model stream ended with an empty response.".into(),
                fatal: true,
                http_status: None,
            }
        );
        assert_eq!(
            outcome(&r),
            (
                SessionStatus::Failed,
                Some(ErrorKind::Unknown),
                Some("Model stream ended with an empty response.".into())
            )
        );
        assert_eq!(r.duration_ms, 146);
        // A warning does not fail a run; it is kept.
        let warning = r#"{"type":"error","timestamp":"t","severity":"warning","message":"Loop detected, stopping execution"}"#;
        let success = r#"{"type":"result","timestamp":"t","status":"success","stats":{"total_tokens":0,"input_tokens":0,"output_tokens":0,"cached":0,"input":0,"duration_ms":5,"tool_calls":0,"models":{}}}"#;
        let (_, r) = run(&format!("{INIT}\n{warning}\n{success}\n"), "", Some(0));
        assert_eq!(r.status, SessionStatus::Succeeded);
        assert_eq!(
            r.provider_data["warnings"],
            json!(["Loop detected, stopping execution"])
        );
    }

    #[test]
    fn a_tool_error_is_an_error_result() {
        let line = r#"{"type":"tool_result","timestamp":"t","tool_id":"read_file_1","status":"error","error":{"type":"FILE_NOT_FOUND","message":"File not found: /x"}}"#;
        assert_eq!(
            provider().parse_event(line)[0].kind,
            EventKind::ToolResult {
                id: "read_file_1".into(),
                name: None,
                output: "FILE_NOT_FOUND: File not found: /x".into(),
                is_error: true,
                exit_code: None,
            }
        );
    }

    #[test]
    fn a_skipped_settings_file_is_reported() {
        let stderr = "Security Warning: Skipping system settings file '/tmp/r/gemini-settings.json': Parent directory '/tmp' is insecure: Directory '/tmp' is writable by group or others (mode: 41777). To fix this, run: sudo chmod g-w,o-w \"/tmp\"\n";
        let (_, r) = fixture!("text_model_flag", None);
        let events = replay::parse_bytes(
            &provider(),
            include_bytes!("../../fixtures/gemini/text_model_flag.ndjson"),
            1 << 20,
        );
        let skipped =
            provider().event_to_session_result(&events, stderr, Some(0), &ParseContext::default());
        assert_eq!(skipped.status, r.status);
        assert_eq!(
            skipped.provider_data["settings_file_skipped"],
            json!(
                "'/tmp/r/gemini-settings.json': Parent directory '/tmp' is insecure: Directory '/tmp' is writable by group or others (mode: 41777). To fix this, run: sudo chmod g-w,o-w \"/tmp\""
            )
        );
    }

    // --- bad input ----------------------------------------------------------------------

    #[test]
    fn malformed_json_is_a_protocol_event_and_the_rest_is_kept() {
        let stream = format!("{INIT}\n{{\"type\":\"message\",\"role\":\n");
        let (events, r) = run(&stream, "", Some(0));
        assert_eq!(kinds(&events), ["session_started", "protocol"]);
        assert_eq!(
            events[1].kind,
            EventKind::Protocol {
                message: "malformed JSON: EOF while parsing a value at line 1 column 25".into(),
                line_bytes: 25,
            }
        );
        assert_eq!(r.session_id.as_deref(), Some("s-1"));
        assert_eq!(r.protocol_errors, 1);
        assert_eq!(
            outcome(&r),
            (
                SessionStatus::Failed,
                Some(ErrorKind::Protocol),
                Some("the stream ended without a final event after 1 malformed or over-long lines (exit code 0)".into())
            )
        );
    }

    #[test]
    fn invalid_utf8_is_a_protocol_event() {
        let mut bytes = INIT.as_bytes().to_vec();
        bytes.extend_from_slice(
            b"\n{\"type\":\"message\",\"role\":\"assistant\",\"content\":\"\xff\xfe\"}\n",
        );
        let events = replay::parse_bytes(&provider(), &bytes, 1 << 20);
        assert_eq!(kinds(&events), ["session_started", "protocol"]);
        assert_eq!(
            events[1].kind,
            EventKind::Protocol {
                message: "line is not valid UTF-8 (invalid byte at offset 48)".into(),
                line_bytes: 52,
            }
        );
        let r = provider().event_to_session_result(&events, "", Some(0), &ParseContext::default());
        assert_eq!(r.error_kind, Some(ErrorKind::Protocol));
    }

    #[test]
    fn an_over_long_line_is_a_protocol_event() {
        let line = format!(
            r#"{{"type":"message","role":"assistant","content":"{}","delta":true}}"#,
            "x".repeat(200)
        );
        let events = replay::parse_line_bytes(&provider(), line.as_bytes(), 64);
        assert_eq!(
            events.iter().map(|e| e.kind.clone()).collect::<Vec<_>>(),
            [EventKind::Protocol {
                message: "line of 263 bytes exceeds the cap of 64 bytes; kept its first 263 bytes"
                    .into(),
                line_bytes: 263,
            }]
        );
    }

    #[test]
    fn an_empty_stream_is_a_crash() {
        let (events, r) = run("", "", Some(0));
        assert!(events.is_empty());
        assert_eq!(
            outcome(&r),
            (
                SessionStatus::Failed,
                Some(ErrorKind::Crashed),
                Some("the CLI ended without any gemini event (exit code 0)".into())
            )
        );
        let (_, r) = run("", "", None);
        assert_eq!(
            r.error.as_deref(),
            Some("the CLI ended without any gemini event (killed by a signal)")
        );
    }

    #[test]
    fn a_stream_cut_mid_line_keeps_what_came_before() {
        let full = include_str!("../../fixtures/gemini/text_model_flag.ndjson");
        let cut = &full[..full.len() - 40];
        let (events, r) = run(cut, "", None);
        assert_eq!(kinds(&events).last(), Some(&"protocol"));
        assert_eq!(kinds(&events).len(), 9);
        assert_eq!(r.response, "Hello from the fake Gemini API.");
        assert_eq!(
            r.session_id.as_deref(),
            Some("133e6e35-49a9-43e1-a712-94e64101bc9a")
        );
        assert_eq!(
            outcome(&r),
            (
                SessionStatus::Failed,
                Some(ErrorKind::Protocol),
                Some("the stream ended without a final event after 1 malformed or over-long lines (killed by a signal)".into())
            )
        );
    }

    #[test]
    fn a_claude_transcript_is_not_taken_for_gemini() {
        let claude = concat!(
            r#"{"type":"system","subtype":"init","cwd":"/workspace/demo","session_id":"20d19ac2-06fa-4ed4-8c4f-6e8abb872002","model":"claude-opus-5-5"}"#,
            "\n",
            r#"{"type":"assistant","message":{"id":"msg_fake0007","type":"message","role":"assistant","model":"claude-opus-5-5","content":[{"type":"text","text":"Hello from the fake Anthropic API."}]},"session_id":"20d19ac2-06fa-4ed4-8c4f-6e8abb872002"}"#,
            "\n",
            r#"{"type":"result","subtype":"success","is_error":false,"result":"Hello from the fake Anthropic API.","session_id":"20d19ac2-06fa-4ed4-8c4f-6e8abb872002","total_cost_usd":0.0003692}"#,
            "\n"
        );
        let (events, r) = run(claude, "", Some(0));
        assert_eq!(kinds(&events), ["unknown", "unknown", "protocol"]);
        assert_eq!(
            events[2].kind,
            EventKind::Protocol {
                message: "a `result` line that is not Gemini's shape: missing field `status`"
                    .into(),
                line_bytes: 179,
            }
        );
        assert_eq!(
            outcome(&r),
            (
                SessionStatus::Failed,
                Some(ErrorKind::Protocol),
                Some("no line was a Gemini event (3 lines of another shape: another CLI's transcript?)".into())
            )
        );
        assert_eq!(r.session_id, None);
    }

    #[test]
    fn a_stream_without_a_result_line_is_a_crash() {
        let full = include_str!("../../fixtures/gemini/text_model_flag.ndjson");
        let without_result: String = full
            .lines()
            .filter(|l| !l.contains("\"result\""))
            .map(|l| format!("{l}\n"))
            .collect();
        let (events, r) = run(&without_result, "", Some(0));
        assert_eq!(events.len(), 8);
        assert_eq!(r.response, "Hello from the fake Gemini API.");
        assert_eq!(
            outcome(&r),
            (
                SessionStatus::Failed,
                Some(ErrorKind::Crashed),
                Some("the CLI ended without a final event (exit code 0)".into())
            )
        );
        assert_eq!((r.cost_usd, r.cost_source), (None, CostSource::Unknown));
    }

    #[test]
    fn list_sessions_text_output_is_not_a_run() {
        // `gemini --list-sessions` (shared/transcripts/gemini/list_sessions): plain text on
        // stdout, exit 0. Not a headless run, so not a fixture; aicli resumes by uuid and
        // never parses this list.
        let stdout = "\nAvailable sessions for this project (1):\n  1. ok (Just now) [49e4ff3c-f478-40e9-a4b7-ac429591d1e6]\n";
        let (events, r) = run(stdout, "", Some(0));
        assert_eq!(kinds(&events), ["protocol", "protocol"]);
        assert_eq!(
            outcome(&r),
            (
                SessionStatus::Failed,
                Some(ErrorKind::Protocol),
                Some("no line was a valid gemini event (2 malformed or over-long lines; exit code 0)".into())
            )
        );
    }

    #[test]
    fn odd_but_valid_lines_never_fail_a_run() {
        let p = provider();
        assert_eq!(p.parse_event("[1,2]")[0].type_name(), "protocol");
        assert_eq!(
            p.parse_event(r#"{"no_type":1}"#)[0].kind,
            EventKind::Unknown { vendor_type: None }
        );
        assert_eq!(
            p.parse_event(r#"{"type":"thought","text":"hm"}"#)[0].kind,
            EventKind::Unknown {
                vendor_type: Some("thought".into())
            }
        );
        assert_eq!(
            p.parse_event(r#"{"type":"message","role":"system","content":"x"}"#)[0].kind,
            EventKind::Unknown {
                vendor_type: Some("message/system".into())
            }
        );
        assert_eq!(
            p.parse_event(r#"{"type":"init"}"#)[0].type_name(),
            "protocol"
        );
    }

    // --- launch -------------------------------------------------------------------------

    fn endpoint() -> McpEndpoint {
        McpEndpoint {
            name: "aicli".into(),
            url: "http://127.0.0.1:4567/mcp".into(),
            token: "tok-secret-123".into(),
            tools: vec!["ask_user".into()],
        }
    }

    /// A home that does not exist: no `~/.gemini`, nothing to read.
    const NO_HOME: &str = "/nonexistent/aicli-test-home";

    /// `task` launched with a private dir under `/root/.cache/aicli/runs/r1`; `HOME` is
    /// [`NO_HOME`] unless the task's env sets it.
    fn launch(
        task: &TaskSpec,
        mcp: Option<&McpEndpoint>,
        is_root: bool,
    ) -> Result<CommandSpec, ProviderError> {
        let mut task = task.clone();
        task.env
            .entry("HOME".into())
            .or_insert_with(|| NO_HOME.into());
        let task = &task;
        let binary = BinaryLocation::Path(PathBuf::from("/usr/bin/gemini"));
        let ctx = LaunchContext {
            env: &std::collections::BTreeMap::new(),
            task,
            binary: &binary,
            workdir: Path::new("/repo/wt/task-1"),
            private_dir: Path::new("/root/.cache/aicli/runs/r1"),
            mcp,
            budget_remaining_usd: None,
            is_root,
            in_container: false,
        };
        provider().headless_argv(&ctx)
    }

    fn args_of(task: &TaskSpec) -> Vec<String> {
        launch(task, None, true)
            .map(|c| c.args)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_plain_command() {
        let c = launch(&TaskSpec::new("Say hello"), None, true).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.program, PathBuf::from("/usr/bin/gemini"));
        assert_eq!(
            c.args,
            [
                "-p",
                "Say hello",
                "--output-format",
                "stream-json",
                "--skip-trust",
                "--approval-mode",
                "auto_edit"
            ]
        );
        assert_eq!(c.cwd, PathBuf::from("/repo/wt/task-1"));
        assert_eq!(c.stdin, None);
        let mut env = BTreeMap::new();
        env.insert("GEMINI_CLI_NO_RELAUNCH".to_owned(), "true".to_owned());
        env.insert("HOME".to_owned(), NO_HOME.to_owned());
        env.insert(
            HOME_ENV.to_owned(),
            "/root/.cache/aicli/runs/r1/gemini-home".to_owned(),
        );
        assert_eq!(c.env, env);
        assert_eq!(
            c.files,
            [FileSpec {
                path: PathBuf::from("/root/.cache/aicli/runs/r1/gemini-home/.gemini/settings.json"),
                contents: "{\n  \"privacy\": {\n    \"usageStatisticsEnabled\": false\n  }\n}\n"
                    .into(),
                mode: 0o600,
            }]
        );
        // No ~/.gemini yet: only the state directories, which the engine creates there.
        let kept = |name: &str| LinkSpec {
            link: PathBuf::from("/root/.cache/aicli/runs/r1/gemini-home/.gemini").join(name),
            target: Path::new(NO_HOME).join(".gemini").join(name),
            create_target_dir: true,
        };
        assert_eq!(c.links, [kept("history"), kept("tmp")]);
    }

    #[test]
    fn approval_modes_map_one_to_one() {
        let modes = [
            (PermissionMode::Plan, "plan"),
            (PermissionMode::Default, "default"),
            (PermissionMode::AcceptEdits, "auto_edit"),
            (PermissionMode::Bypass, "yolo"),
        ];
        for (mode, flag) in modes {
            let mut t = TaskSpec::new("x");
            t.permission_mode = Some(mode);
            let args = args_of(&t);
            let at = args
                .iter()
                .position(|a| a == "--approval-mode")
                .unwrap_or(usize::MAX);
            assert_eq!(args.get(at + 1).map(String::as_str), Some(flag), "{mode:?}");
        }
    }

    #[test]
    fn model_resume_cwd_extra_args_and_env() {
        let mut t = TaskSpec::new("Second prompt");
        t.model = Some("gemini-2.5-flash".into());
        t.resume_session_id = Some("49e4ff3c-f478-40e9-a4b7-ac429591d1e6".into());
        t.cwd = Some("sub/dir".into());
        t.extra_args = vec!["--debug".into()];
        t.env
            .insert("GEMINI_CLI_NO_RELAUNCH".into(), "false".into());
        t.env.insert("X".into(), "1".into());
        let mut p = provider();
        p.config.extra_args = vec!["--include-directories".into(), "/data".into()];
        let binary = BinaryLocation::Path(PathBuf::from("/usr/bin/gemini"));
        let ctx = LaunchContext {
            env: &std::collections::BTreeMap::new(),
            task: &t,
            binary: &binary,
            // The engine joins the task's cwd into the workdir it hands over.
            workdir: Path::new("/repo/wt/task-1/sub/dir"),
            private_dir: Path::new("/root/.cache/aicli/runs/r1"),
            mcp: None,
            budget_remaining_usd: None,
            is_root: true,
            in_container: false,
        };
        let c = p.headless_argv(&ctx).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            c.args,
            [
                "-p",
                "Second prompt",
                "--output-format",
                "stream-json",
                "--skip-trust",
                "-m",
                "gemini-2.5-flash",
                "--approval-mode",
                "auto_edit",
                "--resume",
                "49e4ff3c-f478-40e9-a4b7-ac429591d1e6",
                "--include-directories",
                "/data",
                "--debug",
            ]
        );
        assert_eq!(c.cwd, PathBuf::from("/repo/wt/task-1/sub/dir"));
        assert_eq!(
            c.env.get("GEMINI_CLI_NO_RELAUNCH").map(String::as_str),
            Some("false")
        );
        assert_eq!(c.env.get("X").map(String::as_str), Some("1"));
        // The config's default model applies when the task names none.
        p.config.default_model = Some("gemini-2.5-pro".into());
        let mut t2 = t.clone();
        t2.model = None;
        let ctx = LaunchContext { task: &t2, ..ctx };
        let args = p.headless_argv(&ctx).map(|c| c.args).unwrap_or_default();
        assert!(
            args.windows(2).any(|w| w == ["-m", "gemini-2.5-pro"]),
            "{args:?}"
        );
    }

    #[test]
    fn a_prompt_that_looks_like_a_flag_stays_whole() {
        // `gemini -p -x` exits 1 "Not enough arguments following: p" (checked on 0.61.0).
        assert_eq!(
            args_of(&TaskSpec::new("-x marks the spot"))[0],
            "--prompt=-x marks the spot"
        );
    }

    const SETTINGS_PATH: &str = "/root/.cache/aicli/runs/r1/gemini-home/.gemini/settings.json";

    fn settings_of(c: &CommandSpec) -> Value {
        let file = c
            .files
            .iter()
            .find(|f| f.path == Path::new(SETTINGS_PATH))
            .unwrap_or_else(|| panic!("no settings file in {c:?}"));
        assert_eq!(file.mode, 0o600);
        serde_json::from_str(&file.contents).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_settings_file_carries_mcp_turns_and_tools_and_the_token_only_there() {
        let mut t = TaskSpec::new("go");
        t.max_turns = Some(7);
        t.allowed_tools = vec!["run_shell_command(git)".into()];
        t.disallowed_tools = vec!["google_web_search".into()];
        let ep = endpoint();
        let c = launch(&t, Some(&ep), true).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.files.len(), 1);
        assert_eq!(
            settings_of(&c),
            json!({
                "privacy": {"usageStatisticsEnabled": false},
                "model": {"maxSessionTurns": 7},
                "tools": {"allowed": ["run_shell_command(git)"], "exclude": ["google_web_search"]},
                "mcpServers": {"aicli": {
                    "httpUrl": "http://127.0.0.1:4567/mcp",
                    "headers": {"Authorization": "Bearer tok-secret-123"},
                    "trust": true
                }}
            })
        );
        assert_eq!(
            c.env.get(HOME_ENV).map(String::as_str),
            Some("/root/.cache/aicli/runs/r1/gemini-home")
        );
        assert!(
            !c.args.iter().any(|a| a.contains("tok-secret-123")),
            "{:?}",
            c.args
        );
        assert!(!c.env.values().any(|v| v.contains("tok-secret-123")));
        assert!(
            !c.args.iter().any(|a| a.starts_with("--allowed")),
            "{:?}",
            c.args
        );
        assert!(!format!("{c:?}").contains("tok-secret-123"));
    }

    /// A user's home with a `~/.gemini` as Gemini 0.61 leaves it, a `~/.env`, and
    /// `settings` as `~/.gemini/settings.json` (when given).
    fn fake_home(settings: Option<&str>) -> tempfile::TempDir {
        let home = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let dir = home.path().join(".gemini");
        for d in ["tmp/repo/chats", "extensions"] {
            std::fs::create_dir_all(dir.join(d)).unwrap_or_else(|e| panic!("{e}"));
        }
        for f in [
            "oauth_creds.json",
            "google_accounts.json",
            "installation_id",
            "projects.json",
            "GEMINI.md",
            ".env",
        ] {
            std::fs::write(dir.join(f), "x").unwrap_or_else(|e| panic!("{e}"));
        }
        if let Some(s) = settings {
            std::fs::write(dir.join("settings.json"), s).unwrap_or_else(|e| panic!("{e}"));
        }
        std::fs::write(home.path().join(".env"), "GEMINI_API_KEY=k\n")
            .unwrap_or_else(|e| panic!("{e}"));
        home
    }

    fn with_home(task: &TaskSpec, home: &Path) -> TaskSpec {
        let mut t = task.clone();
        t.env.insert("HOME".into(), home.display().to_string());
        t
    }

    #[test]
    fn every_entry_of_the_users_gemini_dir_is_linked_but_the_settings() {
        let home = fake_home(Some("{}"));
        let h = home.path();
        let c = launch(
            &with_home(&TaskSpec::new("go"), h),
            Some(&endpoint()),
            false,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let run = Path::new("/root/.cache/aicli/runs/r1/gemini-home");
        let link = |name: &str, create_target_dir: bool| LinkSpec {
            link: run.join(".gemini").join(name),
            target: h.join(".gemini").join(name),
            create_target_dir,
        };
        assert_eq!(
            c.links,
            [
                link(".env", false),
                link("GEMINI.md", false),
                link("extensions", false),
                link("google_accounts.json", false),
                // Not there yet: made by the engine so the run's history outlives it.
                link("history", true),
                link("installation_id", false),
                link("oauth_creds.json", false),
                link("projects.json", false),
                // Chats: --resume finds earlier sessions, later runs find this one.
                link("tmp", true),
                // ~/.env, where Gemini looks for an env file last (~/.agents: none here).
                LinkSpec {
                    link: run.join(".env"),
                    target: h.join(".env"),
                    create_target_dir: false,
                },
            ]
        );
        assert_eq!(c.files.len(), 1);
        assert_eq!(c.files[0].path, Path::new(SETTINGS_PATH));
        assert_eq!(c.env.get(HOME_ENV).map(Path::new), Some(run), "{:?}", c.env);
    }

    #[test]
    fn the_users_gemini_dir_is_found_under_home_of_the_runs_environment() {
        // The engine runs the CLI with an environment of its own (`Engine::with_env`):
        // its HOME, not aicli's, is the user whose `~/.gemini` the run reads.
        let home = fake_home(Some(
            r#"{"security": {"auth": {"selectedType": "gemini-api-key"}}}"#,
        ));
        let binary = BinaryLocation::Path(PathBuf::from("/usr/bin/gemini"));
        let task = TaskSpec::new("go");
        let env = BTreeMap::from([("HOME".to_owned(), home.path().display().to_string())]);
        let ctx = LaunchContext {
            env: &env,
            task: &task,
            binary: &binary,
            workdir: Path::new("/repo/wt/task-1"),
            private_dir: Path::new("/root/.cache/aicli/runs/r1"),
            mcp: None,
            budget_remaining_usd: None,
            is_root: false,
            in_container: false,
        };
        let c = provider()
            .headless_argv(&ctx)
            .unwrap_or_else(|e| panic!("{e}"));
        let v = settings_of(&c);
        assert_eq!(v["security"]["auth"]["selectedType"], "gemini-api-key");
        assert!(
            c.links
                .iter()
                .any(|l| l.target == home.path().join(".gemini/tmp")),
            "{:?}",
            c.links
        );
        // A HOME in the task's env still wins.
        let other = fake_home(None);
        let task = with_home(&task, other.path());
        let c = provider()
            .headless_argv(&LaunchContext { task: &task, ..ctx })
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            c.links
                .iter()
                .any(|l| l.target == other.path().join(".gemini/tmp")),
            "{:?}",
            c.links
        );
    }

    #[test]
    fn the_users_settings_are_merged_under_the_runs() {
        // Comments as Gemini allows them; a `$VAR` of the user's stays for Gemini to expand.
        let user = r#"{
          // my servers
          "mcpServers": {
            "mine": {"command": "my-mcp", "args": ["--x"], "env": {"K": "$MY_KEY"}},
            "aicli": {"command": "old-aicli"} /* replaced whole, not merged */
          },
          "mcp": {"allowed": ["mine"], "excluded": ["aicli", "other"]},
          "tools": {"exclude": ["write_file", "google_web_search"], "allowed": ["ls"]},
          "model": {"name": "gemini-2.5-pro", "maxSessionTurns": 100},
          "privacy": {"usageStatisticsEnabled": true},
          "ui": {"theme": "GitHub", "url": "http://x//not-a-comment"}
        }"#;
        let home = fake_home(Some(user));
        let mut t = with_home(&TaskSpec::new("go"), home.path());
        t.max_turns = Some(7);
        t.allowed_tools = vec!["run_shell_command(git)".into()];
        t.disallowed_tools = vec!["google_web_search".into(), "web_fetch".into()];
        let c = launch(&t, Some(&endpoint()), false).unwrap_or_else(|e| panic!("{e}"));
        let v = settings_of(&c);
        assert_eq!(
            v,
            json!({
                "mcpServers": {
                    "mine": {"command": "my-mcp", "args": ["--x"], "env": {"K": "$MY_KEY"}},
                    "aicli": {
                        "httpUrl": "http://127.0.0.1:4567/mcp",
                        "headers": {"Authorization": "Bearer tok-secret-123"},
                        "trust": true
                    }
                },
                "mcp": {"allowed": ["mine", "aicli"], "excluded": ["other"]},
                "tools": {
                    "exclude": ["write_file", "google_web_search", "web_fetch"],
                    "allowed": ["run_shell_command(git)"]
                },
                "model": {"name": "gemini-2.5-pro", "maxSessionTurns": 7},
                "privacy": {"usageStatisticsEnabled": false},
                "ui": {"theme": "GitHub", "url": "http://x//not-a-comment"}
            })
        );
        // The user's key order is kept; aicli's keys come after.
        let keys: Vec<&String> = v
            .as_object()
            .map(|o| o.keys().collect())
            .unwrap_or_default();
        assert_eq!(
            keys,
            ["mcpServers", "mcp", "tools", "model", "privacy", "ui"]
        );
        // Without a turn limit or tool lists the user's own stay.
        let c = launch(&with_home(&TaskSpec::new("go"), home.path()), None, false)
            .unwrap_or_else(|e| panic!("{e}"));
        let v = settings_of(&c);
        assert_eq!(
            v["model"],
            json!({"name": "gemini-2.5-pro", "maxSessionTurns": 100})
        );
        assert_eq!(v["tools"]["allowed"], json!(["ls"]));
        assert_eq!(v["mcpServers"]["aicli"], json!({"command": "old-aicli"}));
        assert_eq!(v["mcp"]["allowed"], json!(["mine"]));
    }

    #[test]
    fn unusable_user_settings_are_a_clear_error() {
        let refused = |settings: &str| {
            let home = fake_home(Some(settings));
            let path = home.path().join(".gemini/settings.json");
            let err = launch(&with_home(&TaskSpec::new("go"), home.path()), None, false)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            let prefix = format!(
                "invalid task for provider gemini: your Gemini settings {} cannot be used: ",
                path.display()
            );
            assert!(err.starts_with(&prefix), "{err}");
            err[prefix.len()..].to_owned()
        };
        assert_eq!(
            refused("{\n  \"ui\": {\"theme\": \"x\"},,\n}"),
            "it is not valid JSON: key must be a string at line 2 column 24 (gemini itself \
             would refuse to start with it; fix or move the file)"
        );
        assert!(refused("[1]").starts_with("it holds a JSON array, not an object"));
        assert!(refused("").starts_with("it is not valid JSON: EOF while parsing"));
        assert!(refused("{\"a\": \"\u{0}\" \u{1}}").starts_with("it is not valid JSON"));
        // A settings.json that cannot be read at all.
        let home = fake_home(None);
        let dir = home.path().join(".gemini/settings.json");
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
        let err = launch(&with_home(&TaskSpec::new("go"), home.path()), None, false)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.starts_with(&format!(
                "invalid task for provider gemini: cannot read your Gemini settings {}: ",
                dir.display()
            )),
            "{err}"
        );
        // ~/.gemini that is not a directory.
        let home = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(home.path().join(".gemini"), "").unwrap_or_else(|e| panic!("{e}"));
        let err = launch(&with_home(&TaskSpec::new("go"), home.path()), None, false)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert_eq!(
            err,
            format!(
                "invalid task for provider gemini: cannot list {}/.gemini: Not a directory (os error 20)",
                home.path().display()
            )
        );
    }

    #[test]
    fn mcp_wiring_is_the_same_home() {
        let home = fake_home(Some(r#"{"mcpServers": {"mine": {"command": "m"}}}"#));
        let mut p = provider();
        p.config
            .env
            .insert("HOME".into(), home.path().display().to_string());
        let private = Path::new("/root/.cache/aicli/runs/r1");
        let w = p
            .mcp_wiring(&endpoint(), private)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(w.args.is_empty());
        let binary = BinaryLocation::Path(PathBuf::from("/usr/bin/gemini"));
        let task = TaskSpec::new("go");
        let ep = endpoint();
        let ctx = LaunchContext {
            env: &std::collections::BTreeMap::new(),
            task: &task,
            binary: &binary,
            workdir: Path::new("/w"),
            private_dir: private,
            mcp: Some(&ep),
            budget_remaining_usd: None,
            is_root: false,
            in_container: false,
        };
        let c = p.headless_argv(&ctx).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(w.files, c.files);
        assert_eq!(w.links, c.links);
        assert_eq!(w.env.get(HOME_ENV), c.env.get(HOME_ENV));
        assert_eq!(w.env.len(), 1);
        let v: Value = serde_json::from_str(&w.files[0].contents).unwrap_or_default();
        assert_eq!(v["mcpServers"]["aicli"]["trust"], json!(true));
        assert_eq!(v["mcpServers"]["mine"], json!({"command": "m"}));
        assert!(
            w.links
                .iter()
                .any(|l| l.target == home.path().join(".gemini/tmp"))
        );
    }

    #[test]
    fn root_or_not_and_wherever_the_private_dir_is_a_run_gets_the_same_home() {
        let ep = endpoint();
        let mut t = TaskSpec::new("go");
        t.max_turns = Some(3);
        let root = launch(&t, Some(&ep), true).unwrap_or_else(|e| panic!("{e}"));
        let user = launch(&t, Some(&ep), false).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(root, user);
        // A private dir under /tmp is fine too (Gemini checks nothing about the home).
        let binary = BinaryLocation::Path(PathBuf::from("gemini"));
        let ctx = LaunchContext {
            env: &std::collections::BTreeMap::new(),
            task: &t,
            binary: &binary,
            workdir: Path::new("/w"),
            private_dir: Path::new("/tmp/aicli/r1"),
            mcp: Some(&ep),
            budget_remaining_usd: None,
            is_root: false,
            in_container: false,
        };
        let c = provider()
            .headless_argv(&ctx)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            c.env.get(HOME_ENV).map(String::as_str),
            Some("/tmp/aicli/r1/gemini-home")
        );
        // Without a user's home: the settings alone (no login files to link).
        let settings = RunSettings::new(None, Vec::new(), Vec::new(), Some(&ep));
        let w = provider()
            .run_home(&settings, Path::new("/p"), None)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(w.links.is_empty());
        assert_eq!(
            w.files[0].path,
            Path::new("/p/gemini-home/.gemini/settings.json")
        );
    }

    #[test]
    fn tasks_gemini_cannot_run_as_written_are_refused() {
        let refused = |t: &TaskSpec, mcp: Option<&McpEndpoint>| {
            launch(t, mcp, true)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert_eq!(
            refused(&TaskSpec::new("  "), None),
            "invalid task for provider gemini: gemini needs a prompt, also when resuming a session"
        );
        let mut t = TaskSpec::new("x");
        t.append_system_prompt = Some("be brief".into());
        assert!(refused(&t, None).contains("append_system_prompt"));
        let mut t = TaskSpec::new("x");
        t.env.insert(HOME_ENV.into(), "/home/me".into());
        assert!(refused(&t, None).contains("env GEMINI_CLI_HOME is set by the task or the config"));
        let mut ep = endpoint();
        ep.token = "ab$cd".into();
        let err = refused(&TaskSpec::new("x"), Some(&ep));
        assert_eq!(
            err,
            "invalid task for provider gemini: the MCP token contains '$', which Gemini would expand as an environment variable in its settings file"
        );
        let mut t = TaskSpec::new("x");
        t.allowed_tools = vec!["run_shell_command(echo $HOME)".into()];
        assert!(refused(&t, None).contains("allowed tool contains '$'"));
    }

    #[test]
    fn comments_are_stripped_as_gemini_strips_them() {
        let text = "{\"a\": \"//x\\\" /*y*/\", // c\n /* multi\nline */ \"b\": 1}";
        let stripped = strip_json_comments(text);
        assert_eq!(stripped.len(), text.len());
        assert_eq!(stripped.lines().count(), text.lines().count());
        assert_eq!(
            serde_json::from_str::<Value>(&stripped).unwrap_or_default(),
            json!({"a": "//x\" /*y*/", "b": 1})
        );
    }

    // --- pieces ---------------------------------------------------------------------------

    #[test]
    fn usage_math() {
        // 200 prompt (50 cached), 11 candidates, 236 total: 25 thinking tokens.
        assert_eq!(
            canonical_model_usage(236, 200, 11, 50),
            usage(150, 36, 50, 25, 0)
        );
        // A total below prompt + candidates (no thinking) never goes negative.
        assert_eq!(
            canonical_model_usage(100, 90, 20, 0),
            usage(90, 20, 0, 0, 0)
        );
    }

    #[test]
    fn exit_codes_read_back() {
        assert_eq!(
            [144, 145, 147, 173, 244, 247, 41, 42, 53, 55, 124, 130, 1, 0]
                .map(|c| Exit::from_code(Some(c))),
            [
                Exit::Http(400),
                Exit::Http(401),
                Exit::Http(403),
                Exit::Http(429),
                Exit::Http(500),
                Exit::Http(503),
                Exit::Auth,
                Exit::Input,
                Exit::TurnLimit,
                Exit::Untrusted,
                Exit::TimedOut,
                Exit::Cancelled,
                Exit::Other(1),
                Exit::Ok,
            ]
        );
        assert_eq!(Exit::from_code(None), Exit::Signal);
    }

    #[test]
    fn timestamps_read() {
        assert_eq!(unix_millis("1970-01-01T00:00:00.000Z"), Some(0));
        assert_eq!(
            unix_millis("2026-11-30T03:35:40.563Z"),
            Some(1_796_009_740_563)
        );
        assert_eq!(unix_millis("2000-03-01T00:00:01Z"), Some(951_868_801_000));
        assert_eq!(unix_millis("2026-11-30 03:35:40Z"), None);
        assert_eq!(unix_millis("t"), None);
    }

    /// Wherever the fast path answers it answers what the `Value` path does (see the
    /// Claude adapter's test of the same name).
    #[test]
    fn the_fast_path_agrees_with_the_value_path() {
        let (mut total, mut fast) = (0, 0);
        for v in common::test_lines::all() {
            total += 1;
            if let Some(kind) = fast_kind(v) {
                fast += 1;
                assert_eq!(Ok(kind), value_kind(v), "{v}");
            }
        }
        assert!(fast * 8 > total, "{fast} of {total}");
    }
}
