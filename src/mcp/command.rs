//! Command-backed tools (`mcp_tools` in the config): one supervised process per call.
//!
//! A call's arguments are checked against the tool's `input_schema` first; a mismatch is
//! a JSON-RPC `invalid params` error and nothing runs. Then the command starts the way a
//! CLI does ([`LocalProcess`]: its own process group, a cgroup where one can be made,
//! aicli as subreaper, the parent-death signal), with the arguments as JSON on stdin,
//! the task's worktree (or the configured directory) as cwd, and only the environment
//! its config gives it ([`ToolEnv::for_process`]). Its stdout, up to
//! `max_output_bytes`, is the result; a non-zero exit is `isError` with the stderr tail;
//! a call still running at `timeout_secs`, cancelled by the client, or whose task ended,
//! is killed with its whole tree.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aicli_providers::{CgroupMode, CommandSpec, InputSchema, McpToolConfig};
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::TaskContext;
use crate::proc::spawn::{LocalProcess, OutputOptions};

/// Bytes of a failed tool's stderr kept for its result (the tail).
pub const TOOL_STDERR_TAIL: usize = 8 * 1024;

/// How long a tool's output may still arrive after it exited (a child that kept the
/// pipe open is killed then).
const AFTER_EXIT: Duration = Duration::from_secs(1);

/// What the processes the server starts get from aicli's side.
#[derive(Debug, Clone)]
pub(crate) struct ToolEnv {
    /// aicli's environment (the only source of passed-through variables).
    pub source: BTreeMap<String, String>,
    /// `engine.env_passthrough`: the base set every such process gets.
    pub base: Vec<String>,
    /// Whether each gets a cgroup of its own.
    pub cgroups: CgroupMode,
    /// Between SIGTERM and SIGKILL of a process tree.
    pub kill_grace: Duration,
    /// The repository (a stdio upstream's default working directory).
    pub repo: PathBuf,
}

impl ToolEnv {
    /// The environment of a tool or upstream process: the base set, the variables its
    /// `env_passthrough` names (both from aicli's environment), its `env`, then `extra`.
    pub(crate) fn for_process(
        &self,
        passthrough: &[String],
        env: &BTreeMap<String, String>,
        extra: &BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        crate::env::explicit_env(&self.source, &[&self.base, passthrough], &[env, extra])
    }
}

/// A configured tool, compiled once at server start.
#[derive(Debug)]
pub(crate) struct CommandTool {
    /// Its name.
    pub name: String,
    /// Its config entry.
    pub config: McpToolConfig,
    /// Its compiled argument schema.
    schema: InputSchema,
    /// How `tools/list` shows it.
    pub tool: Tool,
}

impl CommandTool {
    /// Compiles `config`'s schema; the error says what is wrong with it.
    pub(crate) fn new(name: &str, config: McpToolConfig) -> Result<CommandTool, String> {
        let schema = InputSchema::compile(&config.input_schema)?;
        let input: JsonObject = config.input_schema.as_object().cloned().unwrap_or_default();
        let tool = Tool::new(name.to_owned(), config.description.clone(), Arc::new(input));
        Ok(CommandTool {
            name: name.to_owned(),
            config,
            schema,
            tool,
        })
    }
}

/// The outcome of one call, for the result and the record.
#[derive(Debug)]
pub(crate) struct Ran {
    /// What the agent gets.
    pub result: CallToolResult,
    /// The command's exit code (`None`: killed, or it never started).
    pub exit_code: Option<i32>,
}

/// Numbers the pid files of concurrent tool runs of one task.
static RUN_SEQ: AtomicU64 = AtomicU64::new(1);

/// Runs one call of `tool` for the task of `ctx`. `Err` is a protocol error (arguments
/// that do not fit the schema: nothing ran); everything else is a tool result.
pub(crate) async fn call(
    tool: &CommandTool,
    args: Option<JsonObject>,
    ctx: &TaskContext,
    env: &ToolEnv,
    cancel: &CancellationToken,
) -> Result<Ran, ErrorData> {
    let args = check_args(tool, args, ctx)?;
    let mut p = match spawn(tool, ctx, env) {
        Ok(p) => p,
        Err(m) => return Ok(failed(format!("cannot start tool {}: {m}", tool.name))),
    };
    let input = serde_json::to_vec(&args).unwrap_or_default();
    let (ended, output) = supervise(&mut p, input, &tool.config, env, cancel).await;
    let stdout = output.text(&tool.name, tool.config.max_output_bytes);
    let result = result_for(tool, &ended, stdout, &p.stderr.text(), ctx);
    let exit_code = match ended {
        End::Exited(c) => c,
        End::TimedOut | End::Cancelled => None,
    };
    Ok(Ran { result, exit_code })
}

/// The call's arguments as one JSON object, if they fit the tool's `input_schema`; an
/// `invalid params` error naming each mismatch otherwise.
fn check_args(
    tool: &CommandTool,
    args: Option<JsonObject>,
    ctx: &TaskContext,
) -> Result<Value, ErrorData> {
    let args = Value::Object(args.unwrap_or_default());
    let Err(errors) = tool.schema.check(&args) else {
        return Ok(args);
    };
    let summary: Vec<String> = errors
        .iter()
        .map(|e| {
            if e.path.is_empty() {
                e.message.clone()
            } else {
                format!("{}: {}", e.path, e.message)
            }
        })
        .collect();
    tracing::info!(task_id = %ctx.task_id, tool = %tool.name, "refused a tool call: its arguments do not match the input schema");
    Err(ErrorData::invalid_params(
        format!(
            "invalid arguments for tool {}: {} (see the tool's inputSchema)",
            tool.name,
            summary.join("; ")
        ),
        Some(json!({"tool": tool.name, "errors": errors})),
    ))
}

/// Starts the tool's process for the task of `ctx`: in the worktree (or its configured
/// directory), with its environment and the task's `AICLI_*` variables; `Err` says why
/// it cannot start.
fn spawn(tool: &CommandTool, ctx: &TaskContext, env: &ToolEnv) -> Result<LocalProcess, String> {
    let c = &tool.config;
    let cwd = if c.cwd == aicli_providers::mcp_tools::CWD_WORKSPACE {
        ctx.workspace.clone()
    } else {
        PathBuf::from(&c.cwd)
    };
    let extra = BTreeMap::from([
        ("AICLI_TASK_ID".to_owned(), ctx.task_id.clone()),
        ("AICLI_BATCH_ID".to_owned(), ctx.batch_id.clone()),
        (
            "AICLI_WORKSPACE".to_owned(),
            ctx.workspace.display().to_string(),
        ),
    ]);
    let vars = env.for_process(&c.env_passthrough, &c.env, &extra);
    let cmd = process_spec(&c.command, vars, cwd)?;
    let out = OutputOptions {
        stderr_tail: TOOL_STDERR_TAIL,
        raw_pipes: true,
        // While it runs, the task's record names its processes: a `resume` after aicli
        // was killed kills what is left of it.
        pids: ctx.record_dir.as_ref().map(|d| {
            crate::proc::leftovers::PidRecord::File(d.join(format!(
                "pid.tool-{}",
                RUN_SEQ.fetch_add(1, Ordering::Relaxed)
            )))
        }),
        ..OutputOptions::default()
    };
    LocalProcess::spawn_in(&cmd, out, env.cgroups).map_err(|e| e.to_string())
}

/// Feeds `input` to `p`'s stdin and reads its stdout (capped) until it exits, its
/// timeout, or `cancel`; then its whole tree goes, whatever it left running.
async fn supervise(
    p: &mut LocalProcess,
    input: Vec<u8>,
    c: &McpToolConfig,
    env: &ToolEnv,
    cancel: &CancellationToken,
) -> (End, Output) {
    let stdin = p.take_stdin();
    let writer = tokio::spawn(async move {
        if let Some(mut w) = stdin {
            // A tool that exits without reading its arguments is not an error here.
            let _ = w.write_all(&input).await;
            let _ = w.shutdown().await;
        }
    });
    let cap = c.max_output_bytes;
    let mut reader = p.take_stdout().map(|r| tokio::spawn(read_capped(r, cap)));
    let timeout = Duration::from_secs(c.timeout_secs);
    let ended = tokio::select! {
        code = p.wait() => End::Exited(code),
        () = tokio::time::sleep(timeout) => End::TimedOut,
        () = cancel.cancelled() => End::Cancelled,
    };
    // Output written just before the exit is still in the pipe: read it (briefly),
    // then the whole tree goes.
    let mut output = None;
    if matches!(ended, End::Exited(_))
        && let Some(r) = reader.as_mut()
        && let Ok(Ok(o)) = tokio::time::timeout(AFTER_EXIT, r).await
    {
        output = Some(o);
        reader = None;
    }
    p.shutdown(env.kill_grace).await;
    if let Some(r) = reader {
        output = r.await.ok();
    }
    writer.abort();
    p.drain().await;
    (ended, output.unwrap_or_default())
}

/// What the agent gets for a call that ended as `ended`, having printed `stdout` (cut)
/// and `stderr` (its tail).
fn result_for(
    tool: &CommandTool,
    ended: &End,
    stdout: String,
    stderr: &str,
    ctx: &TaskContext,
) -> CallToolResult {
    let c = &tool.config;
    match ended {
        End::Exited(Some(0)) => CallToolResult::success(vec![ContentBlock::text(stdout)]),
        End::Exited(code) => {
            let status = match code {
                Some(c) => format!("exit code {c}"),
                None => "killed by a signal".to_owned(),
            };
            let mut blocks = vec![ContentBlock::text(format!(
                "tool {} failed ({status}); the end of its stderr:\n{stderr}",
                tool.name
            ))];
            if !stdout.is_empty() {
                blocks.push(ContentBlock::text(stdout));
            }
            CallToolResult::error(blocks)
        }
        End::TimedOut => {
            tracing::warn!(task_id = %ctx.task_id, tool = %tool.name, secs = c.timeout_secs, "tool call timed out; killed");
            CallToolResult::error(vec![ContentBlock::text(format!(
                "tool {} was killed after {} s (mcp_tools.{}.timeout_secs); its output so far:\n{stdout}\nthe end of its stderr:\n{stderr}",
                tool.name, c.timeout_secs, tool.name
            ))])
        }
        End::Cancelled => CallToolResult::error(vec![ContentBlock::text(format!(
            "tool {} was stopped: the call was cancelled or the task ended",
            tool.name
        ))]),
    }
}

/// How a call's process ended.
enum End {
    /// It exited (`None`: by a signal).
    Exited(Option<i32>),
    /// Its timeout came first.
    TimedOut,
    /// The request was cancelled or the task's token revoked.
    Cancelled,
}

fn failed(message: String) -> Ran {
    Ran {
        result: CallToolResult::error(vec![ContentBlock::text(message)]),
        exit_code: None,
    }
}

/// The process of a command-backed tool or a stdio upstream: `argv[0]` resolved on
/// `env`'s PATH (a relative path from `cwd`), run in `cwd` with `env` only.
pub(super) fn process_spec(
    argv: &[String],
    env: BTreeMap<String, String>,
    cwd: PathBuf,
) -> Result<CommandSpec, String> {
    let (program, args) = argv.split_first().ok_or_else(|| "no command".to_owned())?;
    let program = resolve_program(program, &cwd, env.get("PATH").map(String::as_str))?;
    Ok(CommandSpec {
        program,
        args: args.to_vec(),
        env,
        env_remove: Vec::new(),
        env_clear: true,
        stdin: None,
        stdin_open: false,
        cwd,
        files: Vec::new(),
        links: Vec::new(),
        notices: Vec::new(),
    })
}

/// A program name as the process will be started: a bare name looked up on the tool's
/// own `PATH`, a relative path against its working directory.
fn resolve_program(program: &str, cwd: &Path, path: Option<&str>) -> Result<PathBuf, String> {
    let p = Path::new(program);
    if p.is_absolute() {
        return Ok(p.to_path_buf());
    }
    if program.contains('/') {
        return Ok(cwd.join(p));
    }
    which::which_in(program, path, cwd).map_err(|_| format!("{program:?} is not found on its PATH"))
}

/// What a tool printed: the first `cap` bytes, and how many it printed in all.
#[derive(Debug, Default)]
struct Output {
    kept: Vec<u8>,
    total: u64,
}

impl Output {
    /// The kept bytes as text, with a note when the output was cut.
    fn text(&self, tool: &str, cap: usize) -> String {
        let mut s = String::from_utf8_lossy(&self.kept).into_owned();
        if self.total > self.kept.len() as u64 {
            s.push_str(&format!(
                "\n[aicli: output cut at {cap} bytes (mcp_tools.{tool}.max_output_bytes); the tool printed {} bytes]",
                self.total
            ));
        }
        s
    }
}

/// Reads `r` to its end, keeping the first `cap` bytes (the rest is read and dropped, so
/// the tool never blocks on a full pipe).
async fn read_capped(mut r: impl tokio::io::AsyncRead + Unpin, cap: usize) -> Output {
    let mut out = Output::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        out.total += n as u64;
        let room = cap.saturating_sub(out.kept.len());
        out.kept.extend_from_slice(&buf[..n.min(room)]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn output_is_capped_and_says_so() {
        let big = vec![b'x'; 300_000];
        let o = read_capped(&big[..], 1000).await;
        assert_eq!(o.kept.len(), 1000);
        assert_eq!(o.total, 300_000);
        let t = o.text("flood", 1000);
        assert!(t.ends_with("(mcp_tools.flood.max_output_bytes); the tool printed 300000 bytes]"));
        let small = read_capped(&b"hello"[..], 1000).await;
        assert_eq!(small.text("t", 1000), "hello");
    }

    #[test]
    fn programs_resolve_on_the_tool_path() {
        let cwd = Path::new("/tmp");
        assert_eq!(
            resolve_program("/bin/sh", cwd, None).unwrap(),
            PathBuf::from("/bin/sh")
        );
        assert_eq!(
            resolve_program("./x.sh", cwd, None).unwrap(),
            PathBuf::from("/tmp/./x.sh")
        );
        assert!(resolve_program("sh", cwd, Some("/usr/bin:/bin")).is_ok());
        assert!(resolve_program("sh", cwd, Some("/nonexistent")).is_err());
    }
}
