//! End-to-end contract tests of the ACP entries against the REAL agents from npm:
//! `gemini --acp` (0.61.0), `@agentclientprotocol/claude-agent-acp` (0.101.0, on aicli's
//! pinned `claude`) and `@agentclientprotocol/codex-acp` (2.6.0, on aicli's pinned
//! `codex`), each installed by `aicli install` (`.ci/install-clis.sh`) and run through
//! the whole engine (worktrees, MCP server, run records) against the testkit's fake
//! model API of the vendor it calls, with the real wire format.
//!
//! The harness is [`E2e::start_agent`]: the same fake, directories, environment and
//! engine as the native contract tests, with the agent's entry from the built-in config
//! (its `acp` section untouched) and the ACP wiring ([`CliWiring::for_acp_fake`]: no
//! arguments; codex-acp's provider in `CODEX_CONFIG`).
//!
//! Expected figures are computed from what the fake serves ([`Cli::served`]) read the
//! way each agent reports them over ACP (see [`Agent::expected_usage`]).
//!
//! [`CliWiring::for_acp_fake`]: aicli_testkit::CliWiring::for_acp_fake

pub mod claude;
pub mod codex;
pub mod gemini;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use aicli::providers::{
    AiCliConfig, CanonicalUsage, ContinuationMode, CostSource, ErrorKind, EventKind,
    PermissionMode, SessionStatus, TaskSpec,
};
use aicli::{BatchEvent, BatchResult};
use aicli_testkit::{RequestKind, Script};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{
    BATCH_LIMIT, Cli, E2e, MCP_SERVER, Ran, Setup, assert_cost, assert_same_parse, body_mentions,
    builtin_cost, describe, kept_worktree, timed_events,
};

/// One of the three ACP entries of the built-in config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agent {
    /// `gemini-acp`: `gemini --acp`.
    Gemini,
    /// `claude-acp`: claude-agent-acp.
    Claude,
    /// `codex-acp`: codex-acp.
    Codex,
}

impl Agent {
    /// The CLI whose model API (and fake) the agent uses.
    pub fn cli(self) -> Cli {
        match self {
            Agent::Gemini => Cli::Gemini,
            Agent::Claude => Cli::Claude,
            Agent::Codex => Cli::Codex,
        }
    }

    /// The entry's name.
    pub fn provider(self) -> &'static str {
        match self {
            Agent::Gemini => "gemini-acp",
            Agent::Claude => "claude-acp",
            Agent::Codex => "codex-acp",
        }
    }

    /// The installed agent, or a panic that says how to install it.
    pub fn binary(self) -> PathBuf {
        let config = AiCliConfig::builtin().expect("built-in config");
        let name = &config.providers[self.provider()].binary_name;
        aicli_testkit::installed_binary(name).unwrap_or_else(|e| {
            panic!("the ACP contract tests need the real agents: {e}");
        })
    }

    /// The version the built-in config pins.
    pub fn pinned_version(self) -> String {
        let config = AiCliConfig::builtin().expect("built-in config");
        config.providers[self.provider()]
            .version
            .clone()
            .expect("a pinned version")
    }

    /// The canonical usage of `requests` model answers as the agent reports them over
    /// ACP: claude-agent-acp and codex-acp give the vendor's figures split the canonical
    /// way (input without cache; codex's reasoning inside its output) but no request
    /// count; gemini gives only `input_tokens` (the prompt count, cache included) and
    /// `output_tokens` (the candidates, thinking left out).
    pub fn expected_usage(self, requests: u64) -> CanonicalUsage {
        let native = self.cli().expected_usage(requests);
        match self {
            Agent::Claude | Agent::Codex => CanonicalUsage {
                request_count: 0,
                ..native
            },
            Agent::Gemini => {
                let u = self.cli().served();
                CanonicalUsage {
                    input_tokens: u.input * requests,
                    output_tokens: u.output * requests,
                    ..CanonicalUsage::default()
                }
            }
        }
    }

    /// Where the cost comes from: claude-agent-acp reports it (`usage_update.cost`), the
    /// others are estimated from the entry's prices.
    pub fn cost_source(self) -> CostSource {
        // The same split as the CLIs': only Claude's side reports a cost.
        self.cli().cost_source()
    }

    /// The cost of `usage` on the model the agent reports, by the entry's price table.
    pub fn expected_cost(self, usage: &CanonicalUsage) -> f64 {
        builtin_cost(self.provider(), self.cli().reported_model(), usage)
    }

    /// The session mode the entry sets for `mode` (`in_container`: under the Docker
    /// runner).
    pub fn mode_for(self, mode: PermissionMode, in_container: bool) -> String {
        let config = AiCliConfig::builtin().expect("built-in config");
        config.providers[self.provider()]
            .acp
            .as_ref()
            .and_then(|a| a.modes.get(mode))
            .and_then(|m| m.mode_id(in_container).map(str::to_owned))
            .unwrap_or_else(|| panic!("{} has no mode for {}", self.provider(), mode.as_str()))
    }
}

/// An agent and where its runs happen: on this machine, or in containers
/// (`suite::docker::acp`).
#[derive(Debug, Clone)]
pub struct At {
    /// The agent.
    pub agent: Agent,
    /// The engines its containers run on; `None`: local processes.
    pub docker: Option<crate::suite::docker::support::DockerSetup>,
}

impl From<Agent> for At {
    fn from(agent: Agent) -> At {
        At {
            agent,
            docker: None,
        }
    }
}

impl At {
    /// The agent's setup. The idle watchdog allows a minute: an agent is silent until
    /// it has answered `initialize`, which took gemini and OpenCode over 30 s with the
    /// whole suite on this 2-core machine.
    pub fn setup(&self) -> Setup {
        Setup {
            idle_timeout: Duration::from_secs(60),
            timeout: Duration::from_secs(90),
            docker: self.docker.clone(),
            ..Setup::default()
        }
    }
}

/// A fresh engine over the agent's entry, where `at` says.
pub async fn start(at: impl Into<At>, script: Script) -> E2e {
    let at = at.into();
    E2e::start_agent(at.agent, script, at.setup(), |_| {}).await
}

/// The run record's stdout of attempt `index`, as text.
pub fn recorded(t: &E2e, batch: &str, task: &str, index: usize) -> String {
    String::from_utf8_lossy(&t.attempt_stdout(batch, task, index)).into_owned()
}

/// The messages aicli sent (the `aicli_stdin` lines of a record), in order.
pub fn sent(record: &str) -> Vec<Value> {
    record
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v.get(aicli::providers::STDIN_RECORD_KEY).cloned())
        .collect()
}

/// The methods of the requests and notifications aicli sent.
pub fn sent_methods(record: &str) -> Vec<String> {
    sent(record)
        .iter()
        .filter_map(|m| m.get("method").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

/// The agent's own lines (everything but aicli's), parsed.
pub fn agent_lines(record: &str) -> Vec<Value> {
    record
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get(aicli::providers::STDIN_RECORD_KEY).is_none())
        .collect()
}

/// The `session/request_permission` requests the agent sent.
pub fn permission_requests(record: &str) -> Vec<Value> {
    agent_lines(record)
        .into_iter()
        .filter(|v| v.get("method").and_then(Value::as_str) == Some("session/request_permission"))
        .collect()
}

/// The agent events of the live stream.
pub fn live_kinds(ran: &Ran) -> Vec<EventKind> {
    ran.events
        .iter()
        .filter_map(|(_, e)| match e {
            BatchEvent::Agent { event, .. } => Some(event.kind.clone()),
            _ => None,
        })
        .collect()
}

/// A task in permission mode `mode`.
pub fn task_in(t: &E2e, id: &str, prompt: &str, mode: PermissionMode) -> TaskSpec {
    let mut task = t.task(id, prompt);
    task.permission_mode = Some(mode);
    task
}

/// Every bearer header aicli recorded is redacted, and the session got aicli's MCP
/// server over HTTP.
pub fn assert_mcp_wired_and_redacted(record: &str) {
    let new = sent(record)
        .into_iter()
        .find(|m| {
            matches!(
                m.get("method").and_then(Value::as_str),
                Some("session/new" | "session/load" | "session/resume")
            )
        })
        .expect("a session request");
    let server = &new["params"]["mcpServers"][0];
    assert_eq!(server["type"], "http", "{new}");
    assert_eq!(server["name"], MCP_SERVER);
    assert_eq!(
        server["headers"][0],
        json!({"name": "Authorization", "value": "Bearer [redacted]"})
    );
    assert_eq!(
        record.matches("Bearer ").count(),
        record.matches("Bearer [redacted]").count(),
        "a bearer token reached the record"
    );
}

// ---------------------------------------------------------------------------------
// The contract every ACP entry goes through.
// ---------------------------------------------------------------------------------

/// A plain answer: the exact text, the agent's session id, usage and cost of one
/// answer; the record holds both directions (aicli's messages marked) and replays to the
/// same result.
pub async fn plain_answer(at: impl Into<At>) {
    let at = at.into();
    let agent = at.agent;
    let in_container = at.docker.is_some();
    const ANSWER: &str = "The plain answer, over ACP.";
    let t = start(at, Script::text(ANSWER)).await;
    // Under 10 characters: claude-agent-acp titles a session from a longer first prompt
    // (a side call the fake answers outside the script).
    let ran = t.run_one(t.task("plain", "Say hi")).await;
    let r = ran.only();
    assert_eq!(r.status, SessionStatus::Succeeded, "{}", describe(r));
    assert_eq!(r.response, ANSWER);
    let printed = t.printed_session_id(&ran.batch.batch_id, "plain", 0);
    assert_eq!(r.session_id.as_deref(), Some(printed.as_str()));
    assert_eq!(r.model.as_deref(), Some(agent.cli().reported_model()));
    assert_eq!(
        r.cli_version.as_deref(),
        Some(agent.pinned_version().as_str())
    );
    let requests = t.model_requests(1).await;
    assert_eq!(requests.len(), 1, "{}", t.log());
    let usage = agent.expected_usage(1);
    assert_eq!(r.canonical_usage, usage);
    assert_eq!(r.cost_source, agent.cost_source());
    assert_cost(r.cost_usd, agent.expected_cost(&usage), "plain answer");
    assert_eq!(r.tool_calls, 0);
    assert_eq!(r.provider_data["acp"]["stop_reason"], "end_turn");
    assert_eq!(r.provider_data["acp"]["mcp_http"], true);

    let record = recorded(&t, &ran.batch.batch_id, "plain", 0);
    let mut expected = vec!["initialize", "session/new", "session/set_mode"];
    if agent == Agent::Codex {
        // Its model goes through the session's `model` config option.
        expected.push("session/set_config_option");
    }
    expected.push("session/prompt");
    assert_eq!(sent_methods(&record), expected);
    assert_eq!(
        sent(&record)[2]["params"]["modeId"],
        agent.mode_for(PermissionMode::AcceptEdits, in_container)
    );
    assert_mcp_wired_and_redacted(&record);
    assert!(
        agent_lines(&record)
            .iter()
            .any(|v| v.pointer("/result/stopReason") == Some(&json!("end_turn"))),
        "no end_turn from the agent"
    );
    t.assert_replays(r, &ran.batch.batch_id, "plain");
    t.assert_only_model_traffic();
    t.finish().await;
}

/// A tool call in the worktree (permission mode `bypass`: no request): the file is made
/// in the task's worktree, the call and its result are events.
pub async fn tool_in_worktree(at: impl Into<At>) {
    let at = at.into();
    let agent = at.agent;
    let in_container = at.docker.is_some();
    const FILE: &str = "made_over_acp.txt";
    let t = start(
        at,
        Script::shell(format!("touch {FILE}")).then_quote_tool_result(),
    )
    .await;
    let ran = t
        .run_one(task_in(&t, "tool", "Touch it", PermissionMode::Bypass))
        .await;
    let r = ran.only();
    assert_eq!(r.status, SessionStatus::Succeeded, "{}", describe(r));
    let wt = kept_worktree(r);
    assert!(wt.join(FILE).is_file(), "{FILE} is not in {}", wt.display());
    assert!(
        !t.repo.path().join(FILE).exists(),
        "ran in the main checkout"
    );
    assert!(r.tool_calls >= 1, "{}", describe(r));
    let kinds = live_kinds(&ran);
    assert!(
        kinds.iter().any(|k| matches!(
            k,
            EventKind::ToolResult {
                is_error: false,
                ..
            }
        )),
        "no successful tool result: {kinds:?}"
    );
    let record = recorded(&t, &ran.batch.batch_id, "tool", 0);
    assert!(
        permission_requests(&record).is_empty(),
        "a request in bypass mode"
    );
    assert_eq!(
        sent(&record)[2]["params"]["modeId"],
        agent.mode_for(PermissionMode::Bypass, in_container)
    );
    let requests = t.model_requests(2).await;
    assert_eq!(requests.len(), 2, "{}", t.log());
    assert_eq!(r.canonical_usage, agent.expected_usage(2));
    t.assert_replays(r, &ran.batch.batch_id, "tool");
    t.assert_only_model_traffic();
    t.finish().await;
}

/// An MCP call into aicli (`getWorkspaceFiles`): the agent reaches aicli's server over
/// HTTP with the bearer header, the call is allowed whatever the mode (aicli's own
/// tool), and its result reaches the model.
pub async fn mcp_call(at: impl Into<At>) {
    let t = start(
        at,
        Script::mcp_tool_call(MCP_SERVER, "getWorkspaceFiles", json!({})).then_quote_tool_result(),
    )
    .await;
    let ran = t
        .run_one(task_in(&t, "mcp", "List", PermissionMode::Default))
        .await;
    let r = ran.only();
    assert_eq!(r.status, SessionStatus::Succeeded, "{}", describe(r));
    let calls = t.server.calls_for("mcp");
    let tools: Vec<(&str, bool)> = calls.iter().map(|c| (c.tool.as_str(), c.ok)).collect();
    assert_eq!(tools, [("getWorkspaceFiles", true)], "{}", t.log());
    assert!(
        r.response.contains("README.md"),
        "the answer quoting the tool result: {}",
        describe(r)
    );
    let kinds = live_kinds(&ran);
    assert!(
        kinds.iter().any(
            |k| matches!(k, EventKind::ToolCall { name, mcp_server: Some(s), .. }
            if name == "getWorkspaceFiles" && s == MCP_SERVER)
        ),
        "no MCP tool call event: {kinds:?}"
    );
    let record = recorded(&t, &ran.batch.batch_id, "mcp", 0);
    assert_mcp_wired_and_redacted(&record);
    // A permission request for aicli's own tool (gemini and claude ask even for
    // these) was allowed, never turned into a question.
    for req in permission_requests(&record) {
        let id = &req["id"];
        let answer = sent(&record)
            .into_iter()
            .find(|m| m.get("id") == Some(id) && m.get("result").is_some())
            .unwrap_or_else(|| panic!("no answer to {req}"));
        assert_eq!(
            answer["result"]["outcome"]["outcome"], "selected",
            "{answer}"
        );
    }
    assert!(r.question.is_none());
    t.assert_replays(r, &ran.batch.batch_id, "mcp");
    t.assert_only_model_traffic();
    t.finish().await;
}

/// `askUser` over ACP, twice: blocked with the question and the session id; the answer
/// continues the same session (`session/resume`, or gemini's `session/load` a minute
/// apart), which sees the first prompt, the question and the answer, and asks again;
/// the second answer continues it again and the task ends.
pub async fn question_then_answer(at: impl Into<At>) {
    let at = at.into();
    let agent = at.agent;
    const QUESTION: &str = "Which database should the service use?";
    const SECOND: &str = "Which port should it listen on?";
    const PROMPT: &str = "Set up DB";
    const ANSWER: &str = "Postgres, version 17";
    let ask = |q: &str| {
        Script::mcp_tool_call(
            MCP_SERVER,
            "askUser",
            json!({"question": q, "options": ["one", "two"]}),
        )
        .then_text("I asked the user and am waiting for the answer.")
    };
    // Under a world-writable directory, as a checkout under /tmp is (gemini reads no
    // settings file there that aicli could put in the run's record).
    let setup = Setup {
        world_writable_base: true,
        ..at.setup()
    };
    let t = E2e::start_agent(agent, ask(QUESTION), setup, |_| {}).await;
    let ran = t.run_one(t.task("ask", PROMPT)).await;
    let batch_id = ran.batch.batch_id.clone();
    let r = ran.only();
    assert_eq!(r.status, SessionStatus::Blocked, "{}", describe(r));
    let q = r.question.as_ref().expect("question");
    assert_eq!(q.question, QUESTION);
    assert_eq!(q.options, ["one", "two"]);
    let printed = t.printed_session_id(&batch_id, "ask", 0);
    assert_eq!(r.session_id.as_deref(), Some(printed.as_str()));
    let how = match agent {
        Agent::Gemini => "session/load",
        Agent::Claude | Agent::Codex => "session/resume",
    };

    for (round, (answer, next)) in [(ANSWER, Some(SECOND)), ("Port 5432", None)]
        .into_iter()
        .enumerate()
    {
        let before = t.fake.model_requests().len();
        t.set_script(match next {
            Some(q) => ask(q),
            None => Script::text("Going with Postgres on 5432."),
        });
        let r2 = t.answer("ask", answer).await;
        let attempt = round + 1;
        match next {
            Some(q) => {
                assert_eq!(r2.status, SessionStatus::Blocked, "{}", describe(&r2));
                assert_eq!(r2.question.as_ref().map(|x| x.question.as_str()), Some(q));
            }
            None => {
                assert_eq!(r2.status, SessionStatus::Succeeded, "{}", describe(&r2));
                assert_eq!(
                    r2.response, "Going with Postgres on 5432.",
                    "no replayed history in the answer"
                );
            }
        }
        assert_eq!(
            r2.session_id.as_deref(),
            Some(printed.as_str()),
            "same session"
        );
        let c = r2.continuation.as_ref().expect("continuation");
        assert_eq!(c.mode, ContinuationMode::Resume);
        let record = recorded(&t, &batch_id, "ask", attempt);
        let cont = sent(&record)
            .into_iter()
            .find(|m| m.get("method").and_then(Value::as_str) == Some(how))
            .unwrap_or_else(|| panic!("no {how} in {:?}", sent_methods(&record)));
        assert_eq!(cont["params"]["sessionId"], printed.as_str());
        if agent == Agent::Gemini {
            // gemini loads in a later minute than the session began (gemini-cli#28775):
            // after the end of the run that began it.
            let rec = t.record(&batch_id, "ask");
            let ended = humantime::parse_rfc3339_weak(
                rec.attempts[0].finished_at.as_deref().expect("finished"),
            )
            .expect("time");
            let started =
                humantime::parse_rfc3339_weak(&rec.attempts[attempt].started_at).expect("time");
            let minute = |t: std::time::SystemTime| {
                t.duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs() / 60)
                    .unwrap_or(0)
            };
            assert!(
                minute(started) > minute(ended),
                "the load ran in the minute the session began"
            );
        }
        let requests = t.model_requests(before + 1).await;
        let first = &requests[before];
        for needle in [answer, PROMPT, QUESTION] {
            assert!(
                body_mentions(first, needle),
                "the continued request lacks {needle:?}: {}",
                t.log()
            );
        }
        let model_requests = t.fake.model_requests().len() - before;
        assert_eq!(
            r2.canonical_usage,
            agent.expected_usage(model_requests as u64),
            "per-run usage of answer run {attempt}"
        );
    }
    t.assert_answered(&batch_id, "ask", 3, 2);
    t.assert_only_model_traffic();
    t.finish().await;
}

/// The model API answers HTTP `status`: the run fails as `kind` (structured codes first),
/// back-off kinds are retried by the pool, every attempt replays to the same result.
pub async fn api_error(at: impl Into<At>, status: u16, kind: ErrorKind) {
    let at = at.into();
    let t = start(at, Script::error(status)).await;
    let ran = t.run_one(t.task("err", "Say hi")).await;
    let r = ran.only().clone();
    t.assert_failed_as(&r, kind);
    assert!(r.error.as_deref().is_some_and(|e| !e.is_empty()));
    let rec = t.record(&ran.batch.batch_id, "err");
    let attempts = if kind.is_backoff() { 2 } else { 1 };
    assert_eq!(
        rec.attempts.len(),
        attempts,
        "attempts of a task failing with {kind}"
    );
    assert_eq!(ran.backoffs().len(), attempts - 1);
    for i in 0..rec.attempts.len() {
        let (a, replayed) = t.replay(&ran.batch.batch_id, "err", i);
        assert_same_parse(&a.result.clone().expect("attempt result"), &replayed);
    }
    assert_eq!(
        t.fake.model_requests().len(),
        attempts,
        "one model request per attempt: {}",
        t.log()
    );
    t.assert_only_model_traffic();
    t.finish().await;
}

/// Cancel while the model hangs: aicli sends `session/cancel`, the agent ends its turn
/// `cancelled` within the kill grace, the task is interrupted, and no process of the
/// run is left.
pub async fn cancel(at: impl Into<At>) {
    let at = at.into();
    let agent = at.agent;
    let t = start(at, Script::hang()).await;
    let cancel = CancellationToken::new();
    let (tx, collector) = timed_events();
    let mut opts = aicli::BatchOptions::new(t.repo.path());
    opts.provider = Some(agent.provider().to_owned());
    opts.timeout = Some(Duration::from_secs(90));
    opts.idle_timeout = Some(Duration::from_secs(60));
    let engine = t.engine.clone();
    let task = t.task("stop", "Say hi");
    let c = cancel.clone();
    let run = tokio::spawn(async move { engine.run_batch(vec![task], opts, tx, c).await });
    // The agent's start-up under load can take longer than the usual request wait.
    t.fake
        .wait_for_requests(1, Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let cancelled_at = Instant::now();
    cancel.cancel();
    let batch: BatchResult = tokio::time::timeout(BATCH_LIMIT, run)
        .await
        .expect("the batch ends")
        .expect("join")
        .expect("batch");
    let took = cancelled_at.elapsed();
    let _ = collector.await;
    let r = &batch.tasks[0];
    assert_eq!(r.status, SessionStatus::Interrupted, "{}", describe(r));
    assert_eq!(r.error_kind, Some(ErrorKind::Cancelled), "{}", describe(r));
    let record = recorded(&t, &batch.batch_id, "stop", 0);
    let cancel_msg = sent(&record)
        .into_iter()
        .find(|m| m.get("method").and_then(Value::as_str) == Some("session/cancel"))
        .unwrap_or_else(|| panic!("no session/cancel in {:?}", sent_methods(&record)));
    assert_eq!(
        cancel_msg["params"]["sessionId"],
        r.session_id.clone().unwrap_or_default()
    );
    assert!(
        agent_lines(&record)
            .iter()
            .any(|v| v.pointer("/result/stopReason") == Some(&json!("cancelled"))),
        "the agent did not end its turn as cancelled before the kill"
    );
    assert_eq!(r.provider_data["acp"]["stop_reason"], "cancelled");
    assert!(took < Duration::from_secs(10), "the cancel took {took:?}");
    t.finish().await;
}

/// A task that resumes a session by id: the same session, its history in the next
/// request, the usage and cost of the run alone.
pub async fn resume(at: impl Into<At>) {
    let at = at.into();
    let agent = at.agent;
    const FIRST: &str = "Word: jam";
    let t = start(at, Script::text("Remembered.")).await;
    let first = t.run_one(t.task("first", FIRST)).await;
    let r1 = first.only().clone();
    assert!(r1.success, "{}", describe(&r1));
    let sid = r1.session_id.clone().expect("session id");
    t.set_script(Script::text("The word was jam."));
    let mut task = t.task("second", "Which?");
    task.resume_session_id = Some(sid.clone());
    let second = t.run_one(task).await;
    let r2 = second.only();
    assert_eq!(r2.status, SessionStatus::Succeeded, "{}", describe(r2));
    assert_eq!(r2.response, "The word was jam.");
    assert_eq!(r2.session_id.as_deref(), Some(sid.as_str()));
    let requests = t.model_requests(2).await;
    assert_eq!(requests.len(), 2, "{}", t.log());
    assert!(
        body_mentions(&requests[1], FIRST),
        "the resumed request lacks the first prompt"
    );
    assert_eq!(r2.canonical_usage, agent.expected_usage(1));
    assert_cost(
        r2.cost_usd,
        agent.expected_cost(&agent.expected_usage(1)),
        "resumed run",
    );
    t.assert_replays(r2, &second.batch.batch_id, "second");
    // No session title asked (the prompt is short); Codex's background guardian scoring
    // (a `*-luna` side call) may come or not, at its own moments.
    let titles = t
        .fake
        .requests()
        .iter()
        .filter(|r| r.kind == RequestKind::Side)
        .filter(|r| !r.model().is_some_and(|m| m.ends_with("-luna")))
        .count();
    assert_eq!(titles, 0, "{}", t.log());
    t.assert_only_model_traffic();
    t.finish().await;
}

/// One run of a task in `mode` against `script`, on a fresh fake script.
pub async fn run_in(t: &E2e, id: &str, mode: PermissionMode, script: Script) -> Ran {
    t.set_script(script);
    t.run_one(task_in(t, id, "Run it", mode)).await
}

/// The task's worktree holds `file`.
pub fn made(r: &aicli::providers::SessionResult, file: &str) -> bool {
    r.worktree.as_ref().is_some_and(|w| w.join(file).exists())
}

/// A permission request turned into a question (permission mode `default`, or an
/// execute in `accept_edits`): blocked on "<agent> asks permission to run: <command>",
/// the options the agent offered; the answer "Allow" continues the session, and the
/// same request, asked again, is allowed: the command runs.
pub async fn permission_answered(
    t: &E2e,
    agent: Agent,
    id: &str,
    mode: PermissionMode,
    script: Script,
    file: &str,
) {
    let ran = run_in(t, id, mode, script.clone()).await;
    let r = ran.only();
    assert_eq!(r.status, SessionStatus::Blocked, "{}", describe(r));
    let q = r.question.clone().expect("question");
    assert!(
        q.question
            .starts_with(&format!("{} asks permission to run: ", agent.provider())),
        "{q:?}"
    );
    assert!(q.question.contains(file), "{q:?}");
    assert!(q.options.len() >= 2, "{q:?}");
    assert!(!made(r, file), "the command ran before the answer");
    let record = recorded(t, &ran.batch.batch_id, id, 0);
    assert_eq!(permission_requests(&record).len(), 1);
    // The turn was cancelled to ask: the answer was `cancelled`, never a reject.
    assert!(sent_methods(&record).contains(&"session/cancel".to_owned()));
    t.set_script(script);
    let r2 = t.answer(id, "Allow").await;
    assert_eq!(r2.status, SessionStatus::Succeeded, "{}", describe(&r2));
    assert!(
        made(&r2, file),
        "the allowed command did not run: {}",
        describe(&r2)
    );
    assert_eq!(r2.session_id, r.session_id, "same session");
}
