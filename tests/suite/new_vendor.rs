//! Adding a CLI vendor is one trait implementation plus one `register_adapter` call:
//! this file defines a vendor the library has never heard of ("acme"), registers it,
//! selects it through a config file, parses its transcript, and runs it end to end
//! through the engine (a real process replaying the transcript, a real git worktree).

use std::path::Path;
use std::sync::Arc;

use aicli::providers::common::{assistant_text, base_result, basics, json_object};
use aicli::providers::{
    AgentEvent, AiCliConfig, AiCliProvider, CanonicalUsage, CommandSpec, Cost, ErrorKind,
    EventKind, LaunchContext, ParseContext, ProviderConfig, ProviderError, ProviderRegistry,
    SessionResult, replay,
};
use aicli::{BatchOptions, Engine};
use tokio_util::sync::CancellationToken;

use super::support::{collect_events, fake_cli, git_repo};

/// The Acme CLI: `acme --json "PROMPT"` prints `{"kind": "start" | "say" | "tool" |
/// "done", ...}` lines.
#[derive(Debug)]
struct Acme {
    name: String,
    config: ProviderConfig,
}

impl AiCliProvider for Acme {
    fn config(&self) -> &ProviderConfig {
        &self.config
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn headless_argv(&self, ctx: &LaunchContext<'_>) -> Result<CommandSpec, ProviderError> {
        let mut c = CommandSpec::new(ctx.binary, ctx.workdir);
        c.args(self.config.extra_args.iter().cloned());
        c.args(["--json".to_owned(), ctx.task.prompt.clone()]);
        Ok(c)
    }
    fn detect_auth_error(&self, stderr: &str, _: Option<i32>, _: &[AgentEvent]) -> Option<String> {
        stderr
            .contains("ACME_KEY missing")
            .then(|| "set ACME_KEY".to_owned())
    }
    fn parse_event(&self, line: &str) -> Vec<AgentEvent> {
        let raw: Arc<str> = Arc::from(line);
        let m = match json_object(line) {
            Ok(m) => m,
            Err(msg) => return vec![AgentEvent::protocol(msg, raw)],
        };
        let s = |k: &str| {
            m.get(k)
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_owned()
        };
        let kind = match m.get("kind").and_then(|v| v.as_str()) {
            Some("start") => EventKind::SessionStarted {
                session_id: s("sid"),
                model: Some(s("model")),
                cwd: None,
                tools: vec![],
                mcp_servers: vec![],
                cli_version: None,
            },
            Some("say") => EventKind::AssistantText {
                text: s("text"),
                delta: true,
            },
            Some("tool") => EventKind::ToolCall {
                id: s("id"),
                name: s("name"),
                input: m.get("args").cloned().unwrap_or_default(),
                mcp_server: None,
            },
            Some("done") => {
                let t = m.get("tokens").cloned().unwrap_or_default();
                let n = |k: &str| t.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
                let ok = m.get("ok").and_then(|v| v.as_bool()).unwrap_or(false);
                EventKind::Final {
                    success: ok,
                    text: None,
                    error_kind: (!ok).then_some(ErrorKind::Unknown),
                    error: None,
                    usage: Some(CanonicalUsage {
                        input_tokens: n("in") - n("cached"),
                        cache_read: n("cached"),
                        output_tokens: n("out"),
                        request_count: 1,
                        ..CanonicalUsage::default()
                    }),
                    cost_usd: None,
                    num_turns: None,
                    duration_ms: None,
                }
            }
            other => EventKind::Unknown {
                vendor_type: other.map(str::to_owned),
            },
        };
        vec![AgentEvent::new(kind, raw)]
    }
    fn event_to_session_result(
        &self,
        events: &[AgentEvent],
        stderr: &str,
        exit_code: Option<i32>,
        ctx: &ParseContext,
    ) -> SessionResult {
        let b = basics(events);
        let mut r = base_result(&self.name, &b);
        r.exit_code = exit_code;
        r.response = assistant_text(events);
        r.canonical_usage = self.canonical_usage(events, ctx);
        let model = b.model.clone().or(ctx.model.clone()).unwrap_or_default();
        r.set_cost(Cost::estimated(
            self.config
                .prices
                .estimate([(model.as_str(), &r.canonical_usage)]),
        ));
        match events.iter().find_map(|e| match &e.kind {
            EventKind::Final { success, .. } => Some(*success),
            _ => None,
        }) {
            Some(true) => r.succeed(),
            Some(false) => r.fail(ErrorKind::Unknown, "acme said no"),
            None => {
                let (k, m) = aicli::providers::common::classify_without_final(
                    "Acme",
                    &b,
                    stderr,
                    exit_code,
                    self.detect_auth_error(stderr, exit_code, events),
                );
                r.fail(k, m);
            }
        }
        r
    }
    fn canonical_usage(&self, events: &[AgentEvent], _: &ParseContext) -> CanonicalUsage {
        events
            .iter()
            .find_map(|e| match &e.kind {
                EventKind::Final { usage, .. } => *usage,
                _ => None,
            })
            .unwrap_or_default()
    }
}

fn acme_data() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/acme/hello")
}

/// The registry with the Acme adapter, configured from a user config file.
fn registry_from_file(dir: &Path, extra_args: &[String]) -> (AiCliConfig, ProviderRegistry) {
    let cfg_path = dir.join("aicli.json");
    let config_json = serde_json::json!({
        "default_provider": "acme",
        "providers": {
            "acme": {
                "adapter": "acme",
                "package": "@acme/cli",
                "binary_name": "acme",
                "binary_path": fake_cli(),
                "extra_args": extra_args,
                "prices": {"acme-1": {"input": 1.0, "cached_input": 0.5, "output": 2.0}}
            }
        }
    });
    std::fs::write(&cfg_path, config_json.to_string()).unwrap();
    let config = AiCliConfig::load(Some(&cfg_path), |_| None).unwrap().config;
    let mut registry = ProviderRegistry::with_builtin_adapters();
    registry.register_adapter("acme", |name, cfg| {
        Arc::new(Acme {
            name: name.to_owned(),
            config: cfg.clone(),
        })
    });
    registry.configure(&config).unwrap();
    (config, registry)
}

#[test]
fn a_vendor_registered_from_outside_parses_its_transcript() {
    let dir = tempfile::tempdir().unwrap();
    let (_config, registry) = registry_from_file(dir.path(), &[]);
    assert_eq!(registry.default_provider(), Some("acme"));
    let acme = registry.get_or_default(None).unwrap();
    let data = acme_data();
    let stdout = std::fs::read(data.with_extension("ndjson")).unwrap();
    let (events, r) = replay::replay(
        acme.as_ref(),
        &stdout,
        "",
        Some(0),
        &ParseContext::default(),
    );
    assert_eq!(events.len(), 6);
    assert!(
        matches!(&events[4].kind, EventKind::Unknown { vendor_type: Some(t) } if t == "telemetry")
    );
    assert!(r.success);
    assert_eq!(r.provider, "acme");
    assert_eq!(r.session_id.as_deref(), Some("acme-session-42"));
    assert_eq!(r.response, "Hello from Acme.");
    assert_eq!(r.tool_calls, 1);
    assert_eq!(
        r.canonical_usage,
        CanonicalUsage {
            input_tokens: 60,
            cache_read: 40,
            output_tokens: 20,
            request_count: 1,
            ..Default::default()
        }
    );
    // 60 * 1 + 40 * 0.5 + 20 * 2 = 120 per million.
    assert_eq!(r.cost_usd, Some(0.00012));
    assert_eq!(r.cost_source, aicli::providers::CostSource::Estimated);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vendor_registered_from_outside_runs_through_the_engine() {
    let repo = git_repo();
    let data = acme_data();
    let args: Vec<String> = vec![
        "--replay".into(),
        data.with_extension("ndjson").display().to_string(),
    ];
    let (config, registry) = registry_from_file(repo.path(), &args);
    let engine = Engine::new(config, registry);
    let (tx, _ev) = collect_events();
    let r = engine
        .run_batch(
            vec![aicli::providers::TaskSpec::new("say hello")],
            BatchOptions::new(repo.path()),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    let t = &r.tasks[0];
    assert!(t.success, "{t:?}");
    assert_eq!(t.provider, "acme");
    assert_eq!(t.response, "Hello from Acme.");
    assert_eq!(t.task_id, "task-1");
}
