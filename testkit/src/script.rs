//! What a fake answers: a [`Script`] is a list of [`Step`]s, one per model request.
//!
//! Steps are vendor-neutral; each fake renders them in its own wire format (see the
//! `anthropic`, `openai` and `gemini` modules). The rules:
//!
//! - Each model request takes the step under the cursor, then the cursor moves on.
//! - When the steps run out, the **last step repeats**: `Script::error(429)` fails every
//!   retry, and `Script::shell("echo hi")` alone keeps calling the tool until the CLI's
//!   turn limit stops it.
//! - An empty script answers every request with the vendor's default text.
//! - [`Step::McpToolCall`] may take two requests: where the CLI defers MCP tools (Claude's
//!   `ToolSearch`, Codex's client `tool_search`), the fake first emits the discovery call
//!   and keeps the cursor until the tool shows up in a request.

use std::time::Duration;

use serde_json::Value;

use crate::Vendor;

/// Token counts a fake reports for each model request, in vendor-neutral terms.
///
/// Each vendor maps them onto its own fields:
///
/// | field | Anthropic | OpenAI Responses | Gemini |
/// |---|---|---|---|
/// | `input` | `input_tokens` (excludes cache) | `input_tokens` (includes cached) | `promptTokenCount` |
/// | `cache_read` | `cache_read_input_tokens` | `input_tokens_details.cached_tokens` | `cachedContentTokenCount` |
/// | `cache_write` | `cache_creation_input_tokens` | `input_tokens_details.cache_write_tokens` | (none) |
/// | `output` | `output_tokens` (in `message_delta`) | `output_tokens` | `candidatesTokenCount` |
/// | `reasoning` | (none) | `output_tokens_details.reasoning_tokens` | `thoughtsTokenCount` |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Input (prompt) tokens.
    pub input: u64,
    /// Output tokens.
    pub output: u64,
    /// Input tokens read from the prompt cache.
    pub cache_read: u64,
    /// Input tokens written to the prompt cache.
    pub cache_write: u64,
    /// Reasoning / thinking tokens.
    pub reasoning: u64,
}

impl Usage {
    /// The per-request counts of the reference transcripts (`/work/shared/transcripts`):
    /// Anthropic 12 in / 34 cache write / 56 cache read / 7 out; OpenAI 120 in / 30 cached /
    /// 9 out / 4 reasoning; Gemini 200 prompt / 50 cached / 11 candidates / 25 thoughts
    /// (total 236).
    pub fn default_for(vendor: Vendor) -> Usage {
        match vendor {
            Vendor::Anthropic => Usage {
                input: 12,
                output: 7,
                cache_read: 56,
                cache_write: 34,
                reasoning: 0,
            },
            Vendor::OpenAi => Usage {
                input: 120,
                output: 9,
                cache_read: 30,
                cache_write: 0,
                reasoning: 4,
            },
            Vendor::Gemini => Usage {
                input: 200,
                output: 11,
                cache_read: 50,
                cache_write: 0,
                reasoning: 25,
            },
        }
    }
}

/// Which error body a [`ErrorReply`] carries beyond its HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorFlavor {
    /// The vendor's usual error for the status.
    #[default]
    Plain,
    /// The vendor's "this API key is not valid" answer: Anthropic 401
    /// `authentication_error`, OpenAI 401 `invalid_api_key`, Gemini **400**
    /// `INVALID_ARGUMENT` with `API_KEY_INVALID` (what the real Gemini API sends for a bad
    /// key). The status of the reply is ignored for this flavor.
    InvalidApiKey,
    /// A quota that retrying cannot fix: OpenAI 429 `insufficient_quota` (Codex does not
    /// retry it), Gemini 429 with a per-day `QuotaFailure` (Gemini CLI fails at once
    /// instead of retrying 10 times over ~4 minutes). Anthropic has no such error and
    /// answers a plain `rate_limit_error`.
    QuotaExhausted,
    /// A subscription's usage limit, over until `resets_at` (Unix seconds), in the shape
    /// the real service sends it (see [`Step::UsageLimit`]): Anthropic 429
    /// `rate_limit_error` with the `anthropic-ratelimit-unified-*` headers saying
    /// `rejected` and the reset; OpenAI 429 `usage_limit_reached` with `resets_at` and
    /// `resets_in_seconds`; Gemini 429 `RESOURCE_EXHAUSTED` with a free-tier
    /// `QuotaFailure` and a `RetryInfo` `retryDelay` until the reset ("Please retry in
    /// 5.000s").
    UsageLimit {
        /// When the limit is over, Unix seconds.
        resets_at: u64,
    },
}

/// An HTTP error answer, rendered in the vendor's error JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorReply {
    /// The HTTP status (e.g. 400, 401, 403, 429, 500, 529, 503).
    pub status: u16,
    /// Overrides the vendor's default message for the status.
    pub message: Option<String>,
    /// Sent as the `retry-after` header (whole seconds, rounded up); Gemini also gets a
    /// `google.rpc.RetryInfo` detail.
    pub retry_after: Option<Duration>,
    /// Which body to send.
    pub flavor: ErrorFlavor,
}

impl ErrorReply {
    /// A plain error with the vendor's default message for `status`.
    pub fn status(status: u16) -> ErrorReply {
        ErrorReply {
            status,
            message: None,
            retry_after: None,
            flavor: ErrorFlavor::Plain,
        }
    }

    /// The vendor's "invalid API key" answer (see [`ErrorFlavor::InvalidApiKey`]).
    pub fn invalid_api_key() -> ErrorReply {
        ErrorReply {
            status: 401,
            message: None,
            retry_after: None,
            flavor: ErrorFlavor::InvalidApiKey,
        }
    }

    /// A 429 that retrying cannot fix (see [`ErrorFlavor::QuotaExhausted`]).
    pub fn quota_exhausted() -> ErrorReply {
        ErrorReply {
            status: 429,
            message: None,
            retry_after: None,
            flavor: ErrorFlavor::QuotaExhausted,
        }
    }

    /// The usage-limit answer of an account whose limit is over at `until` (see
    /// [`ErrorFlavor::UsageLimit`]), with a retry hint of the time left.
    pub fn usage_limit(until: std::time::SystemTime) -> ErrorReply {
        let now = std::time::SystemTime::now();
        let left = until.duration_since(now).unwrap_or_default();
        let epoch = until
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        ErrorReply {
            status: 429,
            message: None,
            retry_after: Some(left),
            flavor: ErrorFlavor::UsageLimit {
                resets_at: epoch.as_secs() + u64::from(epoch.subsec_nanos() > 0),
            },
        }
    }

    /// Sets the message.
    pub fn with_message(mut self, message: impl Into<String>) -> ErrorReply {
        self.message = Some(message.into());
        self
    }

    /// Sets the `retry-after` hint.
    pub fn with_retry_after(mut self, after: Duration) -> ErrorReply {
        self.retry_after = Some(after);
        self
    }

    /// The HTTP status actually sent (Gemini's invalid key is a 400).
    pub(crate) fn http_status(&self, vendor: Vendor) -> u16 {
        match (self.flavor, vendor) {
            (ErrorFlavor::InvalidApiKey, Vendor::Gemini) => 400,
            (ErrorFlavor::InvalidApiKey, Vendor::Anthropic | Vendor::OpenAi) => 401,
            (ErrorFlavor::QuotaExhausted | ErrorFlavor::UsageLimit { .. }, _) => 429,
            (ErrorFlavor::Plain, _) => self.status,
        }
    }

    /// `retry-after` in whole seconds, rounded up.
    pub(crate) fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after
            .map(|d| d.as_secs() + u64::from(d.subsec_nanos() > 0))
    }
}

/// One model answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Answer with the vendor's default text ("Hello from the fake Anthropic API.",
    /// "Hello from the fake OpenAI Responses API.", "Hello from the fake Gemini API.").
    DefaultText,
    /// Answer with this text.
    Text(String),
    /// Answer quoting the tool result carried by the request's last message, the way the
    /// reference transcripts do: Claude "The tool returned: X" ("The MCP tool returned: X"
    /// for MCP tools), Codex "The shell said: X" ("The MCP tool said: " + X as a JSON string), Gemini
    /// "The tool NAME returned: " + the response as Python-style JSON. Without a tool result it
    /// answers the default text.
    QuoteToolResult,
    /// Call a tool by the exact name the CLI declares (Claude `Bash`, Codex
    /// `exec_command`, Gemini `run_shell_command`, ...), with this input.
    ToolCall {
        /// The tool name as declared in the request.
        name: String,
        /// The arguments (an object).
        input: Value,
        /// Text the model says before the call (Claude: a text block in the same message).
        preamble: Option<String>,
    },
    /// Run a shell command with the vendor's built-in shell tool: Claude `Bash`
    /// `{command, description}`, Codex `exec_command` `{cmd}`, Gemini
    /// `run_shell_command` `{command, description}`.
    Shell {
        /// The command line.
        command: String,
        /// Text the model says before the call.
        preamble: Option<String>,
    },
    /// Call tool `tool` of MCP server `server` (the name the CLI was given for it).
    /// Claude: `ToolSearch {"query":"select:mcp__S__T"}` first unless the tool is already in
    /// `tools[]`, then `mcp__S__T`. Codex: a client `tool_search_call` first unless a
    /// `tool_search_output` with namespace `mcp__S` is in the input, then a `function_call`
    /// `{name: T, namespace: "mcp__S"}`. Gemini: a `functionCall` of the declared name
    /// (`mcp_S_T`, as Gemini CLI 0.61 declares it).
    McpToolCall {
        /// MCP server name as configured in the CLI.
        server: String,
        /// Tool name on that server.
        tool: String,
        /// The arguments (an object).
        input: Value,
    },
    /// Answer with an HTTP error.
    Error(ErrorReply),
    /// Start streaming a text answer, then drop the connection after the first text delta
    /// (no terminal event).
    DropMidStream,
    /// Start streaming, then end the stream with the vendor's in-band error: Anthropic
    /// `event: error`, OpenAI `response.failed`, Gemini a `data: {"error": …}` chunk.
    StreamError(ErrorReply),
    /// Accept the request and never answer (for timeout tests). The connection stays open
    /// until the fake is dropped.
    Hang,
    /// The account is over a subscription's usage limit for this long from the first
    /// request that meets this step: until then every model request gets the vendor's
    /// usage-limit answer ([`ErrorFlavor::UsageLimit`], whose reset and retry hint count
    /// down to that moment) and the cursor stays; the first request after it takes the
    /// next step. The moment is shared by every conversation of the fake, as an account's
    /// limit is.
    UsageLimit(Duration),
    /// This step with each [`ANSWER_PLACEHOLDER`] in its text, shell command or tool
    /// input replaced by the user's answer the request carries: the rest of the line
    /// after [`ANSWER_MARKER`] in the latest message that has it (aicli's prompt for an
    /// answered question). In a shell command the answer is one single-quoted word.
    /// Without an answer in the request, it is `(no answer in the request)`.
    WithAnswer(Box<Step>),
}

/// Where a [`Step::WithAnswer`] puts the user's answer.
pub const ANSWER_PLACEHOLDER: &str = "{answer}";

/// What precedes the user's answer in the prompt that carries it (aicli's `answer`:
/// "You asked the user: …\n\nThe user answered: ANSWER\n\n…").
pub const ANSWER_MARKER: &str = "The user answered: ";

/// What a [`Step::WithAnswer`] says when the request carries no answer.
const NO_ANSWER: &str = "(no answer in the request)";

impl Step {
    /// The step a [`Step::WithAnswer`] stands for in a request whose body is `body`
    /// (any other step as it is).
    pub(crate) fn answered(&self, body: &Value) -> Step {
        match self {
            Step::WithAnswer(inner) => {
                let answer = answer_in(body).unwrap_or_else(|| NO_ANSWER.to_owned());
                inner.with_answer(&answer)
            }
            other => other.clone(),
        }
    }

    /// This step with [`ANSWER_PLACEHOLDER`] replaced by `answer`.
    fn with_answer(&self, answer: &str) -> Step {
        let raw = |t: &str| t.replace(ANSWER_PLACEHOLDER, answer);
        match self {
            Step::Text(t) => Step::Text(raw(t)),
            Step::Shell { command, preamble } => Step::Shell {
                command: command.replace(ANSWER_PLACEHOLDER, &shell_word(answer)),
                preamble: preamble.as_deref().map(raw),
            },
            Step::ToolCall {
                name,
                input,
                preamble,
            } => Step::ToolCall {
                name: name.clone(),
                input: map_strings(input, &raw),
                preamble: preamble.as_deref().map(raw),
            },
            Step::McpToolCall {
                server,
                tool,
                input,
            } => Step::McpToolCall {
                server: server.clone(),
                tool: tool.clone(),
                input: map_strings(input, &raw),
            },
            Step::WithAnswer(inner) => inner.with_answer(answer),
            Step::DefaultText
            | Step::QuoteToolResult
            | Step::Error(_)
            | Step::DropMidStream
            | Step::StreamError(_)
            | Step::UsageLimit(_)
            | Step::Hang => self.clone(),
        }
    }
}

/// The user's answer in a request body: the rest of the line after [`ANSWER_MARKER`],
/// in the last string of the body (in its order: the latest message) that holds it.
fn answer_in(body: &Value) -> Option<String> {
    match body {
        Value::String(s) => s
            .rsplit_once(ANSWER_MARKER)
            .map(|(_, rest)| rest.lines().next().unwrap_or_default().trim().to_owned()),
        Value::Array(items) => items.iter().rev().find_map(answer_in),
        Value::Object(m) => m.values().rev().find_map(answer_in),
        Value::Null | Value::Bool(_) | Value::Number(_) => None,
    }
}

/// `value` with `f` applied to every string in it.
fn map_strings(value: &Value, f: &impl Fn(&str) -> String) -> Value {
    match value {
        Value::String(s) => Value::String(f(s)),
        Value::Array(items) => Value::Array(items.iter().map(|v| map_strings(v, f)).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), map_strings(v, f)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `s` as one single-quoted POSIX shell word.
fn shell_word(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The answers of one fake, by request. Build it with the constructors and `then_*`:
///
/// ```
/// use aicli_testkit::{Script, Step};
/// use serde_json::json;
///
/// let s = Script::tool_call("Bash", json!({"command": "touch x"})).then_text("done");
/// assert_eq!(s.steps().len(), 2);
/// let e = Script::error(429);
/// assert!(matches!(e.steps()[0], Step::Error(_)));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Script {
    steps: Vec<Step>,
    usage: Option<Usage>,
    event_delay: Duration,
    router_choice: String,
}

impl Default for Script {
    fn default() -> Self {
        Script::new()
    }
}

impl Script {
    /// An empty script: every request gets the vendor's default text.
    pub fn new() -> Script {
        Script {
            steps: Vec::new(),
            usage: None,
            event_delay: Duration::ZERO,
            router_choice: "flash".to_owned(),
        }
    }

    /// A script of one step.
    pub fn from_step(step: Step) -> Script {
        Script::new().then(step)
    }

    /// Answer with the vendor's default text (same as [`Script::new`], but explicit).
    pub fn default_text() -> Script {
        Script::from_step(Step::DefaultText)
    }

    /// Answer with `text`.
    pub fn text(text: impl Into<String>) -> Script {
        Script::from_step(Step::Text(text.into()))
    }

    /// Call a built-in tool by its declared name (see [`Step::ToolCall`]).
    pub fn tool_call(name: impl Into<String>, input: Value) -> Script {
        Script::new().then_tool_call(name, input)
    }

    /// Run `command` with the vendor's shell tool (see [`Step::Shell`]).
    pub fn shell(command: impl Into<String>) -> Script {
        Script::new().then_shell(command)
    }

    /// Call an MCP tool (see [`Step::McpToolCall`]).
    pub fn mcp_tool_call(
        server: impl Into<String>,
        tool: impl Into<String>,
        input: Value,
    ) -> Script {
        Script::new().then_mcp_tool_call(server, tool, input)
    }

    /// Answer with HTTP `status` in the vendor's error JSON.
    pub fn error(status: u16) -> Script {
        Script::from_step(Step::Error(ErrorReply::status(status)))
    }

    /// Answer 429 with a `retry-after` hint.
    pub fn rate_limited(retry_after: Duration) -> Script {
        Script::error_reply(ErrorReply::status(429).with_retry_after(retry_after))
    }

    /// The account is over its usage limit for `resets_in` from the first request, then
    /// the script goes on (see [`Step::UsageLimit`]).
    pub fn usage_limit(resets_in: Duration) -> Script {
        Script::from_step(Step::UsageLimit(resets_in))
    }

    /// Answer with this error.
    pub fn error_reply(reply: ErrorReply) -> Script {
        Script::from_step(Step::Error(reply))
    }

    /// Drop the connection in the middle of the stream.
    pub fn drop_mid_stream() -> Script {
        Script::from_step(Step::DropMidStream)
    }

    /// Never answer.
    pub fn hang() -> Script {
        Script::from_step(Step::Hang)
    }

    /// Appends a step.
    pub fn then(mut self, step: Step) -> Script {
        self.steps.push(step);
        self
    }

    /// Appends a text answer.
    pub fn then_text(self, text: impl Into<String>) -> Script {
        self.then(Step::Text(text.into()))
    }

    /// Appends an answer quoting the last tool result (see [`Step::QuoteToolResult`]).
    pub fn then_quote_tool_result(self) -> Script {
        self.then(Step::QuoteToolResult)
    }

    /// Appends a tool call.
    pub fn then_tool_call(self, name: impl Into<String>, input: Value) -> Script {
        self.then(Step::ToolCall {
            name: name.into(),
            input,
            preamble: None,
        })
    }

    /// Appends a shell call.
    pub fn then_shell(self, command: impl Into<String>) -> Script {
        self.then(Step::Shell {
            command: command.into(),
            preamble: None,
        })
    }

    /// Appends an MCP tool call.
    pub fn then_mcp_tool_call(
        self,
        server: impl Into<String>,
        tool: impl Into<String>,
        input: Value,
    ) -> Script {
        self.then(Step::McpToolCall {
            server: server.into(),
            tool: tool.into(),
            input,
        })
    }

    /// Appends an HTTP error.
    pub fn then_error(self, status: u16) -> Script {
        self.then(Step::Error(ErrorReply::status(status)))
    }

    /// Gives the last step (a tool or shell call) a text the model says first.
    pub fn with_preamble(mut self, text: impl Into<String>) -> Script {
        if let Some(Step::ToolCall { preamble, .. } | Step::Shell { preamble, .. }) =
            self.steps.last_mut()
        {
            *preamble = Some(text.into());
        }
        self
    }

    /// Makes the last step use the user's answer (see [`Step::WithAnswer`]):
    /// `Script::text("x").then_shell("echo {answer} >> f").with_answer()`.
    pub fn with_answer(mut self) -> Script {
        if let Some(last) = self.steps.pop() {
            self.steps.push(Step::WithAnswer(Box::new(last)));
        }
        self
    }

    /// Reports these token counts on every answer instead of [`Usage::default_for`].
    pub fn with_usage(mut self, usage: Usage) -> Script {
        self.usage = Some(usage);
        self
    }

    /// Waits this long before each SSE event (default: none), to make streams slow.
    pub fn with_event_delay(mut self, delay: Duration) -> Script {
        self.event_delay = delay;
        self
    }

    /// What the Gemini model router (`:generateContent` on the classifier model) answers
    /// as `model_choice`: `"flash"` (default) or `"pro"`.
    pub fn with_router_choice(mut self, choice: impl Into<String>) -> Script {
        self.router_choice = choice.into();
        self
    }

    /// The script without its first `n` steps (at least its last step stays): what is
    /// left of it for a fake that starts where another one left off.
    pub fn skipping(mut self, n: usize) -> Script {
        let n = n.min(self.steps.len().saturating_sub(1));
        self.steps.drain(..n);
        self
    }

    /// The steps, in order.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The token counts for `vendor`.
    pub fn usage_for(&self, vendor: Vendor) -> Usage {
        self.usage.unwrap_or_else(|| Usage::default_for(vendor))
    }

    /// Delay before each SSE event.
    pub fn event_delay(&self) -> Duration {
        self.event_delay
    }

    /// The router's `model_choice`.
    pub fn router_choice(&self) -> &str {
        &self.router_choice
    }

    /// The step for request number `cursor` (0-based): past the end the last step repeats;
    /// an empty script answers [`Step::DefaultText`].
    pub(crate) fn step_at(&self, cursor: usize) -> (usize, Step) {
        match self.steps.len() {
            0 => (0, Step::DefaultText),
            n => {
                let i = cursor.min(n - 1);
                (i, self.steps[i].clone())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn last_step_repeats_and_empty_is_default_text() {
        let s = Script::shell("echo hi").then_text("done");
        assert_eq!(s.step_at(0).0, 0);
        assert_eq!(s.step_at(1), (1, Step::Text("done".into())));
        assert_eq!(s.step_at(7), (1, Step::Text("done".into())));
        assert_eq!(Script::new().step_at(3), (0, Step::DefaultText));
    }

    #[test]
    fn preamble_applies_to_the_last_call() {
        let s = Script::tool_call("Bash", json!({"command": "echo hi"}))
            .with_preamble("I will run echo.");
        assert_eq!(
            s.steps()[0],
            Step::ToolCall {
                name: "Bash".into(),
                input: json!({"command": "echo hi"}),
                preamble: Some("I will run echo.".into()),
            }
        );
    }

    #[test]
    fn a_step_with_the_answer_takes_it_from_the_latest_message_quoted_for_the_shell() {
        let s = Script::shell("echo greeting: {answer} >> f")
            .with_answer()
            .then_text("You said {answer}.")
            .with_answer();
        let body = json!({"messages": [
            {"role": "user", "content": "You asked the user: Q\n\nThe user answered: old\n\nGo on."},
            {"role": "user", "content": [{"type": "text", "text": "You asked the user: Q\n\nThe user answered: it's me\n\nContinue the task with this answer."}]}
        ]});
        assert_eq!(
            s.steps()[0].answered(&body),
            Step::Shell {
                command: "echo greeting: 'it'\\''s me' >> f".into(),
                preamble: None
            }
        );
        assert_eq!(
            s.steps()[1].answered(&body),
            Step::Text("You said it's me.".into())
        );
        assert_eq!(
            s.steps()[1].answered(&json!({"messages": []})),
            Step::Text("You said (no answer in the request).".into())
        );
        assert_eq!(Step::Hang.answered(&body), Step::Hang);
    }

    #[test]
    fn error_statuses_per_vendor() {
        assert_eq!(
            ErrorReply::invalid_api_key().http_status(Vendor::Gemini),
            400
        );
        assert_eq!(
            ErrorReply::invalid_api_key().http_status(Vendor::OpenAi),
            401
        );
        assert_eq!(ErrorReply::status(529).http_status(Vendor::Anthropic), 529);
        let r = ErrorReply::status(429).with_retry_after(Duration::from_millis(1500));
        assert_eq!(r.retry_after_secs(), Some(2));
    }
}
