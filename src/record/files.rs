//! Every file name of a run record, in one place (see the [record layout](super)).

/// The batch's spec, written once: `<batch>/batch.json`.
pub const BATCH_SPEC: &str = "batch.json";
/// The batch's result, rewritten as the batch ends: `<batch>/result.json`.
pub const BATCH_RESULT: &str = "result.json";
/// The directory of the batch's tasks: `<batch>/tasks/`.
pub const TASKS_DIR: &str = "tasks";
/// Every write of every task's record, appended: `<batch>/journal.ndjson`.
pub const JOURNAL: &str = "journal.ndjson";
/// A task's state and attempts, written as it settles: `tasks/<task>/task.json`.
pub const TASK: &str = "task.json";
/// Every attempt's raw stdout, appended as received: `tasks/<task>/events.ndjson`.
pub const EVENTS: &str = "events.ndjson";
/// Every attempt's stderr, appended: `tasks/<task>/stderr.log`.
pub const STDERR: &str = "stderr.log";
/// Events aicli made for the task (MCP logs, questions): `tasks/<task>/aicli-events.ndjson`.
pub const AICLI_EVENTS: &str = "aicli-events.ndjson";
/// The task's MCP tool calls: `tasks/<task>/mcp-calls.ndjson`.
pub const MCP_CALLS: &str = "mcp-calls.ndjson";
/// In a record an aicli before the batch journal wrote: the task's lock (an flock, still
/// taken when the file is there) and its running attempt's processes (still killed by
/// `resume`): `tasks/<task>/lock`, `tasks/<task>/pid`.
pub const OLDER_LOCK: &str = "lock";
/// See [`OLDER_LOCK`].
pub const OLDER_PID: &str = "pid";
/// Prefix of the pid files of an attempt's running MCP tool calls: `tasks/<task>/pid.tool-*`.
pub const PID_TOOL_PREFIX: &str = "pid.tool-";
/// Prefix of the pid files of the batch's MCP upstreams: `<batch>/pid.upstream-*`.
pub const PID_UPSTREAM_PREFIX: &str = "pid.upstream-";
/// The batch's private directory (per-run files, task homes): `<batch>/private/`.
pub const PRIVATE_DIR: &str = "private";
/// Requests to the aicli process running the batch (cancel the batch or a task), appended
/// by another process (`aicli cancel`, the web view): `<batch>/control.ndjson`.
pub const CONTROL: &str = "control.ndjson";
