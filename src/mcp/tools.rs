//! The tools an agent may call, as an rmcp `ServerHandler`.
//!
//! One [`AgentTools`] value serves one MCP session; all of them share the server state
//! and one tool router built at start (so no call rebuilds it). Each tool finds its
//! caller's [`TaskContext`](super::TaskContext) in the request head rmcp passes along
//! (`Extension<http::request::Parts>`), put there by the auth middleware.
//!
//! Parameter structs have no `Option` fields (their schemas stay portable); optional
//! arguments are plain fields with serde defaults, which the schemas advertise.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use aicli_providers::{AgentEvent, EventKind, LogLevel};
use axum::http::request::Parts;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::{Extension, ToolCallContext};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock,
    Implementation, ListToolsResult, PaginatedRequestParams, ProtocolVersion, ResultType,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler, tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::auth::Caller;
use super::calls::CallRecord;
use super::granted::Target;
use super::record::McpCallRecord;
use super::server::Shared;
use super::skills;
use super::workspace::{self, FilesRequest};

/// The built-in tools' exact names, in the order `tools/list` shows them (before the
/// tools a token was granted).
pub const TOOL_NAMES: &[&str] = aicli_providers::mcp_tools::BUILTIN_MCP_TOOLS;

/// What `askUser` answers the agent. The model reads it: it must stop and end its turn,
/// because the engine ends the run as blocked and resumes the session with the answer.
pub const ASK_USER_REPLY: &str = "Your question has been delivered to the user. End your turn now: \
do not call any more tools and do not continue working on the task. The user's answer will \
arrive as your next message when the task resumes.";

/// The default longest `broadcastLog` message, in characters (`mcp.limits.
/// log_message_chars`); longer ones are cut.
pub const MAX_LOG_CHARS: usize = 5_000;

/// The per-session handler.
#[derive(Clone)]
pub(crate) struct AgentTools {
    /// State shared by every session.
    shared: Arc<Shared>,
    /// The router, built once at server start.
    router: Arc<ToolRouter<AgentTools>>,
}

fn dot() -> String {
    ".".into()
}
fn star() -> String {
    "*".into()
}
fn default_max_bytes() -> u64 {
    1_000_000
}
fn info() -> String {
    "info".into()
}

/// Arguments of `getWorkspaceFiles`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct WorkspaceFilesArgs {
    /// Directory (or a single file) relative to the workspace root. No absolute paths, no '..'.
    #[serde(default = "dot")]
    pub path: String,
    /// Glob over paths relative to `path` ('*' = direct entries, '**/*.rs' = all Rust files below).
    #[serde(default = "star")]
    pub pattern: String,
    /// Return file contents too (UTF-8 text files up to max_bytes).
    #[serde(default)]
    pub read: bool,
    /// Largest file whose contents are returned; bigger files are listed with their size only.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
}

/// Arguments of `getSkill`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct SkillArgs {
    /// The skill's name, as listSkills shows it.
    pub name: String,
}

/// Arguments of `getCredential`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct CredentialArgs {
    /// The credential's name (for example an environment variable name).
    pub name: String,
}

/// Arguments of `broadcastLog`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct LogArgs {
    /// The message (long messages are cut; the answer says so).
    pub message: String,
    /// One of: debug, info, warning, error.
    #[serde(default = "info")]
    pub level: String,
    /// Who is logging (free text, e.g. a step name).
    #[serde(default)]
    pub source: String,
}

/// Arguments of `askUser`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct AskArgs {
    /// The question for the human, self-contained.
    pub question: String,
    /// Suggested answers, if any.
    #[serde(default)]
    pub options: Vec<String>,
}

fn tool_error(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

/// Why `value` (argument `arg`) is refused when it has more than `max` characters;
/// `setting` names the limit in the config.
fn cap(arg: &str, value: &str, max: usize, setting: &str) -> Result<(), String> {
    if value.len() <= max || value.chars().nth(max).is_none() {
        return Ok(());
    }
    Err(format!(
        "`{arg}` has {} characters; at most {max} are accepted (mcp.limits.{setting})",
        value.chars().count()
    ))
}

/// At most 40 characters of `s`, for echoing a bad value back.
fn excerpt(s: &str) -> String {
    match s.char_indices().nth(40) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_owned(),
    }
}

/// Returns a failed [`cap`] from the tool as a tool error.
macro_rules! check {
    ($e:expr) => {
        if let Err(why) = $e {
            return Ok(tool_error(why));
        }
    };
}

fn stream_closed() -> CallToolResult {
    tool_error("this task's event stream is closed: the task has ended")
}

fn caller(parts: &Parts) -> Result<Caller, ErrorData> {
    parts
        .extensions
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| ErrorData::internal_error("request reached a tool without a caller", None))
}

fn to_structured<T: serde::Serialize>(v: &T) -> Result<CallToolResult, ErrorData> {
    serde_json::to_value(v)
        .map(CallToolResult::structured)
        .map_err(|e| ErrorData::internal_error(format!("cannot encode result: {e}"), None))
}

/// Runs blocking file work off the runtime, giving up when the request is cancelled.
async fn blocking<T: Send + 'static>(
    ct: &CancellationToken,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ErrorData> {
    let job = tokio::task::spawn_blocking(f);
    tokio::select! {
        r = job => r.map_err(|e| ErrorData::internal_error(format!("tool task failed: {e}"), None)),
        () = ct.cancelled() => Err(ErrorData::internal_error("request cancelled", None)),
    }
}

impl AgentTools {
    /// A handler for one session.
    pub(crate) fn new(shared: Arc<Shared>, router: Arc<ToolRouter<AgentTools>>) -> AgentTools {
        AgentTools { shared, router }
    }

    /// The router (built once by the server).
    pub(crate) fn build_router() -> ToolRouter<AgentTools> {
        Self::tool_router()
    }

    /// Sends an event into the caller's task stream; `false` when the stream is closed.
    fn publish(&self, caller: &Caller, kind: EventKind) -> bool {
        caller.ctx.events.send(AgentEvent::synthetic(kind)).is_ok()
    }
}

#[tool_router]
impl AgentTools {
    #[tool(
        name = "getWorkspaceFiles",
        description = "List or read files in your task's workspace (its git worktree). `path` is relative to the workspace root (default '.'); `pattern` is a glob over paths relative to `path` ('*' lists direct entries, '**/*.md' searches below). Set `read` to get contents of UTF-8 files up to `max_bytes` each. At most 1000 entries per call (the answer says when truncated). Paths outside the workspace, absolute paths and '..' are refused; symlinks in listings are not followed.",
        annotations(read_only_hint = true)
    )]
    async fn get_workspace_files(
        &self,
        Parameters(args): Parameters<WorkspaceFilesArgs>,
        Extension(parts): Extension<Parts>,
        ct: CancellationToken,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        let l = &self.shared.limits;
        check!(cap("path", &args.path, l.path_chars, "path_chars"));
        check!(cap(
            "pattern",
            &args.pattern,
            l.pattern_chars,
            "pattern_chars"
        ));
        let workspace = caller.ctx.workspace.clone();
        let req = FilesRequest {
            path: args.path,
            pattern: args.pattern,
            read: args.read,
            max_bytes: args.max_bytes,
        };
        match blocking(&ct, move || workspace::get_files(&workspace, &req)).await? {
            Ok(listing) => to_structured(&listing),
            Err(e) => {
                tracing::debug!(task_id = %caller.ctx.task_id, error = %e, "getWorkspaceFiles refused");
                Ok(tool_error(e.to_string()))
            }
        }
    }

    #[tool(
        name = "listSkills",
        description = "List the skills connected to your task: name, description, allowed tools and metadata. Use getSkill to read one.",
        annotations(read_only_hint = true)
    )]
    async fn list_skills(
        &self,
        Extension(parts): Extension<Parts>,
        ct: CancellationToken,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        let dir = self.shared.skills_dir.clone();
        let connected = caller.ctx.skills.clone();
        let (ok, errors) = blocking(&ct, move || skills::list_skills(&dir, &connected)).await?;
        let errors: Vec<_> = errors
            .into_iter()
            .map(|(name, error)| json!({"name": name, "error": error}))
            .collect();
        let mut v = json!({ "skills": ok });
        if !errors.is_empty() {
            v["errors"] = json!(errors);
        }
        Ok(CallToolResult::structured(v))
    }

    #[tool(
        name = "getSkill",
        description = "Read one skill connected to your task: its instructions (SKILL.md body) and the text of its scripts/ and references/ files.",
        annotations(read_only_hint = true)
    )]
    async fn get_skill(
        &self,
        Parameters(args): Parameters<SkillArgs>,
        Extension(parts): Extension<Parts>,
        ct: CancellationToken,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        check!(cap(
            "name",
            &args.name,
            self.shared.limits.name_chars,
            "name_chars"
        ));
        let dir = self.shared.skills_dir.clone();
        let connected = caller.ctx.skills.clone();
        let name = args.name;
        match blocking(&ct, move || skills::get_skill(&dir, &connected, &name)).await? {
            Ok(skill) => to_structured(&skill),
            Err(e) => Ok(tool_error(e.to_string())),
        }
    }

    #[tool(
        name = "getCredential",
        description = "Get the value of a credential your task is allowed to read (by name). Names not granted to this task are refused with status 403.",
        annotations(read_only_hint = true)
    )]
    async fn get_credential(
        &self,
        Parameters(args): Parameters<CredentialArgs>,
        Extension(parts): Extension<Parts>,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        check!(cap(
            "name",
            &args.name,
            self.shared.limits.name_chars,
            "name_chars"
        ));
        let name = args.name;
        if !caller.ctx.credentials.contains(&name) {
            tracing::info!(task_id = %caller.ctx.task_id, credential = %name, "getCredential refused: not on the task's allowlist");
            return Ok(CallToolResult::structured_error(json!({
                "status": 403,
                "error": "forbidden",
                "message": format!("credential {name:?} is not granted to this task"),
            })));
        }
        let source = self.shared.credentials.clone();
        let lookup_name = name.clone();
        let found = tokio::task::spawn_blocking(move || source.lookup(&lookup_name))
            .await
            .map_err(|e| ErrorData::internal_error(format!("tool task failed: {e}"), None))?;
        match found {
            Ok(value) => {
                // The name only: the value never reaches a log.
                tracing::info!(task_id = %caller.ctx.task_id, credential = %name, "getCredential served");
                Ok(CallToolResult::structured(
                    json!({"name": name, "value": value}),
                ))
            }
            Err(e) => {
                let status = match e {
                    super::CredentialError::NotFound { .. } => 404,
                    super::CredentialError::File { .. } => 500,
                };
                Ok(CallToolResult::structured_error(json!({
                    "status": status,
                    "error": if status == 404 { "not_found" } else { "unavailable" },
                    "message": e.to_string(),
                })))
            }
        }
    }

    #[tool(
        name = "broadcastLog",
        description = "Publish a progress or diagnostic line to the people watching your task. `level` is one of debug, info, warning, error (default info); `source` says who logs (optional, short). Long messages are cut (the answer says so)."
    )]
    async fn broadcast_log(
        &self,
        Parameters(args): Parameters<LogArgs>,
        Extension(parts): Extension<Parts>,
    ) -> Result<CallToolResult, ErrorData> {
        let caller = caller(&parts)?;
        let l = &self.shared.limits;
        let level = match args.level.as_str() {
            "debug" => LogLevel::Debug,
            "info" => LogLevel::Info,
            "warning" => LogLevel::Warning,
            "error" => LogLevel::Error,
            other => {
                return Ok(tool_error(format!(
                    "invalid level {:?}: use one of debug, info, warning, error",
                    excerpt(other)
                )));
            }
        };
        check!(cap(
            "source",
            &args.source,
            l.log_source_chars,
            "log_source_chars"
        ));
        let max = l.log_message_chars;
        let mut message = args.message;
        let cut = match message.char_indices().nth(max) {
            Some((i, _)) => {
                message.truncate(i);
                true
            }
            None => false,
        };
        if !self.publish(
            &caller,
            EventKind::Log {
                level,
                message,
                source: args.source,
            },
        ) {
            return Ok(stream_closed());
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(if cut {
            format!("logged (message cut to {max} characters: mcp.limits.log_message_chars)")
        } else {
            "logged".to_owned()
        })]))
    }

    // Two names for one tool. `ask_user` is the documented name; Gemini CLI (0.61) never
    // shows it to the model: it removes its own `ask_user` tool in headless runs by adding
    // that name to its tool exclusions, and the exclusion also matches an MCP tool's
    // unqualified name. `askUser` (camelCase like the other tools) reaches every CLI.
    #[tool(
        name = "ask_user",
        description = "Ask the human a question when you cannot go on without their decision. The question is delivered and your task pauses: after calling this you must end your turn. The answer arrives as your next message when the task resumes. (Same tool as askUser.)"
    )]
    async fn ask_user(
        &self,
        Parameters(args): Parameters<AskArgs>,
        Extension(parts): Extension<Parts>,
    ) -> Result<CallToolResult, ErrorData> {
        self.ask(args, &parts)
    }

    #[tool(
        name = "askUser",
        description = "Ask the human a question when you cannot go on without their decision. The question is delivered and your task pauses: after calling this you must end your turn. The answer arrives as your next message when the task resumes."
    )]
    async fn ask_user_camel(
        &self,
        Parameters(args): Parameters<AskArgs>,
        Extension(parts): Extension<Parts>,
    ) -> Result<CallToolResult, ErrorData> {
        self.ask(args, &parts)
    }
}

impl AgentTools {
    /// `ask_user` / `askUser`: publish the question, tell the agent to end its turn.
    fn ask(&self, args: AskArgs, parts: &Parts) -> Result<CallToolResult, ErrorData> {
        let caller = caller(parts)?;
        let l = &self.shared.limits;
        check!(cap(
            "question",
            &args.question,
            l.question_chars,
            "question_chars"
        ));
        if args.options.len() > l.max_options {
            return Ok(tool_error(format!(
                "`options` has {} entries; at most {} are accepted (mcp.limits.max_options)",
                args.options.len(),
                l.max_options
            )));
        }
        for (i, o) in args.options.iter().enumerate() {
            check!(cap(
                &format!("options[{i}]"),
                o,
                l.option_chars,
                "option_chars"
            ));
        }
        let question = args.question.trim().to_owned();
        if question.is_empty() {
            return Ok(tool_error("the question is empty"));
        }
        if !self.publish(
            &caller,
            EventKind::Question {
                question,
                options: args.options,
            },
        ) {
            return Ok(stream_closed());
        }
        tracing::info!(task_id = %caller.ctx.task_id, "askUser: question delivered; the task will block");
        Ok(CallToolResult::success(vec![ContentBlock::text(
            ASK_USER_REPLY,
        )]))
    }
}

const INSTRUCTIONS: &str = "aicli's tools for the agent of one task: read your workspace (getWorkspaceFiles), the skills connected to your task (listSkills, getSkill) and the credentials granted to it (getCredential); publish progress (broadcastLog); ask the human a question and then end your turn (askUser, also named ask_user). Other tools listed here were granted to your task by its configuration.";

/// What a call produced, for the record: its response, and a command's exit code.
struct Outcome {
    res: Result<CallToolResponse, ErrorData>,
    exit_code: Option<i32>,
}

impl AgentTools {
    /// Runs a call: a built-in through the router, a granted tool through its target;
    /// anything else gets the router's answer for an unknown tool.
    async fn dispatch(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
        who: Option<&Caller>,
    ) -> Outcome {
        let builtin = self.router.has_route(request.name.as_ref());
        let target = match who {
            Some(c) if !builtin => self.shared.resolve(&c.ctx, request.name.as_ref()).await,
            Some(_) | None => None,
        };
        let (Some(target), Some(c)) = (target, who) else {
            let tcc = ToolCallContext::new(self, request, context);
            return Outcome {
                res: self.router.call(tcc).await,
                exit_code: None,
            };
        };
        // A granted tool's arguments have a size too: too many bytes and nothing runs
        // (a command never starts, an upstream is never asked).
        let limit = self.shared.limits.tool_argument_bytes;
        let size = request.arguments.as_ref().map_or(0, json_size);
        if size > limit {
            tracing::info!(task_id = %c.ctx.task_id, tool = %request.name, size, limit, "refused a tool call: its arguments are too large");
            return Outcome {
                res: Err(ErrorData::invalid_params(
                    format!(
                        "invalid arguments for tool {}: {size} bytes of JSON; at most {limit} are accepted (mcp.limits.tool_argument_bytes)",
                        request.name
                    ),
                    Some(json!({"tool": request.name, "bytes": size, "limit": limit})),
                )),
                exit_code: None,
            };
        }
        // Killed when the client cancels, and when the task's token is revoked.
        let cancel = c.cancel.child_token();
        let _on_request_cancel = {
            let ct = context.ct.clone();
            let cancel = cancel.clone();
            tokio::spawn(async move {
                ct.cancelled().await;
                cancel.cancel();
            })
        };
        let out = match target {
            Target::Command(tool) => {
                match super::command::call(
                    &tool,
                    request.arguments,
                    &c.ctx,
                    &self.shared.tool_env,
                    &cancel,
                )
                .await
                {
                    Ok(ran) => Outcome {
                        res: Ok(ran.result.into()),
                        exit_code: ran.exit_code,
                    },
                    Err(e) => Outcome {
                        res: Err(e),
                        exit_code: None,
                    },
                }
            }
            Target::Upstream(inst, tool) => Outcome {
                res: inst.call(&tool, request, &cancel).await,
                exit_code: None,
            },
        };
        _on_request_cancel.abort();
        out
    }
}

/// The length of `args` as compact JSON, counted without building the text.
fn json_size(args: &rmcp::model::JsonObject) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut n = Count(0);
    // Writing a JSON value to a counter cannot fail.
    let _ = serde_json::to_writer(&mut n, args);
    n.0
}

/// A response as text for the record (never a credential's value).
fn result_text(tool: &str, res: &Result<CallToolResponse, ErrorData>) -> String {
    if tool == "getCredential" {
        return "[not recorded: getCredential's answer]".to_owned();
    }
    match res {
        Ok(CallToolResponse::Complete(r)) => {
            let mut parts: Vec<String> = r
                .content
                .iter()
                .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                .collect();
            if parts.is_empty()
                && let Some(v) = &r.structured_content
            {
                parts.push(v.to_string());
            }
            parts.join("\n")
        }
        Ok(other) => format!("{other:?}"),
        Err(e) => format!("error {}: {}", e.code.0, e.message),
    }
}

impl ServerHandler for AgentTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("aicli", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS.to_owned())
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        self.router.get(name).cloned()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut tools = self.router.list_all();
        if let Some(c) = context
            .extensions
            .get::<Parts>()
            .and_then(|p| p.extensions.get::<Caller>())
        {
            tools.extend(self.shared.granted_tools(c).await);
        }
        let hints = context
            .protocol_version()
            .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        Ok(ListToolsResult {
            result_type: Some(ResultType::COMPLETE),
            tools,
            meta: None,
            next_cursor: None,
            ttl_ms: hints.then_some(0),
            // The list depends on the caller's token: no one else may reuse it.
            cache_scope: hints.then_some(CacheScope::Private),
        })
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let Some(c) = context
            .extensions
            .get::<Parts>()
            .and_then(|p| p.extensions.get::<Caller>())
        {
            self.shared.peers.register(c, context.peer.clone());
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let at = SystemTime::now();
        let started = Instant::now();
        let tool = request.name.to_string();
        let who = context
            .extensions
            .get::<Parts>()
            .and_then(|p| p.extensions.get::<Caller>())
            .cloned();
        let Outcome { res, exit_code } = self.dispatch(request, context, who.as_ref()).await;
        let ok = matches!(&res, Ok(CallToolResponse::Complete(r)) if r.is_error != Some(true));
        let duration = started.elapsed();
        if let Some(c) = who {
            tracing::debug!(token = %c.prefix, task_id = %c.ctx.task_id, tool = %tool, ok, elapsed_us = duration.as_micros() as u64, "MCP tool call");
            if let Some(dir) = &c.ctx.record_dir {
                let rec = McpCallRecord {
                    attempt: c.ctx.attempt,
                    at: humantime::format_rfc3339_millis(at).to_string(),
                    tool: tool.clone(),
                    duration_ms: duration.as_millis() as u64,
                    ok,
                    exit_code,
                    result: String::new(),
                    truncated: false,
                }
                .with_result(&result_text(&tool, &res));
                super::record::append(dir, &rec);
            }
            self.shared.calls.push(CallRecord {
                batch_id: c.ctx.batch_id.clone(),
                task_id: c.ctx.task_id.clone(),
                tool,
                ok,
                exit_code,
                at,
                duration,
            });
        }
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_match_the_router() {
        let router = AgentTools::build_router();
        let mut names: Vec<String> = router
            .list_all()
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        names.sort();
        assert_eq!(names, TOOL_NAMES);
    }

    #[test]
    fn schemas_have_no_nullable_types_and_advertise_defaults() {
        let router = AgentTools::build_router();
        for t in router.list_all() {
            let schema = serde_json::Value::Object((*t.input_schema).clone());
            let text = schema.to_string();
            assert!(!text.contains("\"null\""), "{}: {text}", t.name);
            if t.name == "getWorkspaceFiles" {
                assert_eq!(schema["properties"]["path"]["default"], ".");
                assert_eq!(schema["properties"]["pattern"]["default"], "*");
                assert_eq!(schema["properties"]["max_bytes"]["default"], 1_000_000);
                assert!(schema.get("required").is_none_or(|r| r == &json!([])));
            }
            if t.name == "broadcastLog" {
                assert_eq!(schema["required"], json!(["message"]));
            }
        }
    }
}
