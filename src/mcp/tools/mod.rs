//! aicli's own tools, the ones every agent may call (its `ServerHandler` is in `handler`).
//!
//! One [`AgentTools`] value serves one MCP session; all of them share the server state
//! and one tool router built at start (so no call rebuilds it). Each tool finds its
//! caller's [`TaskContext`](super::TaskContext) in the request head rmcp passes along
//! (`Extension<http::request::Parts>`), put there by the auth middleware.
//!
//! | module | owns |
//! |---|---|
//! | this one | [`AgentTools`], the tool router, the workspace, skill and credential tools |
//! | `events` | `broadcastLog` and `askUser`: the tools that write into the task's stream |
//! | `args` | the tools' parameter structs |

mod args;

use std::sync::Arc;

use axum::http::request::Parts;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::Extension;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{ErrorData, tool, tool_router};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use args::{AskArgs, CredentialArgs, LogArgs, SkillArgs, WorkspaceFilesArgs};

use super::auth::Caller;
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


/// The per-session handler.
#[derive(Clone)]
pub(crate) struct AgentTools {
    /// State shared by every session.
    pub(in crate::mcp) shared: Arc<Shared>,
    /// The router, built once at server start.
    pub(in crate::mcp) router: Arc<ToolRouter<AgentTools>>,
}

/// A tool result with `isError: true` and `message` for the model.
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

mod events;

impl AgentTools {
    /// A handler for one session.
    pub(crate) fn new(shared: Arc<Shared>, router: Arc<ToolRouter<AgentTools>>) -> AgentTools {
        AgentTools { shared, router }
    }

    /// The router (built once by the server).
    pub(crate) fn build_router() -> ToolRouter<AgentTools> {
        Self::tool_router()
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
        self.log(args, &parts)
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

#[cfg(test)]
mod tests;
