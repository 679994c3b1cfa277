//! Adding a CLI vendor is one trait implementation plus one `register_adapter` call:
//! this file defines a vendor the library has never heard of ("acme"), registers it,
//! selects it through a config file, parses its transcript, and runs it end to end
//! through the engine (a real process replaying the transcript, a real git worktree).

use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;

use aicli::providers::decode::SimpleDecoder;
use aicli::providers::{
    AiCliConfig, AiCliProvider, CanonicalUsage, CommandSpec, Decoder, EventKind, ExitStatus,
    LaunchContext, ParseContext, ProviderConfig, ProviderError, ProviderRegistry, replay,
    tagged_enum,
};
use aicli::{BatchOptions, Engine};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::support::{collect_events, fake_cli, git_repo};

/// The Acme CLI: `acme --json` reads the prompt on stdin and prints `{"kind": "start" |
/// "say" | "tool" | "done", ...}` lines.
#[derive(Debug)]
struct Acme {
    name: String,
    config: ProviderConfig,
}

impl AiCliProvider for Acme {
    fn name(&self) -> &str {
        &self.name
    }
    fn config(&self) -> &ProviderConfig {
        &self.config
    }
    fn command(&self, ctx: &LaunchContext<'_>) -> Result<CommandSpec, ProviderError> {
        let mut c = CommandSpec::new(ctx.binary, ctx.workdir);
        c.args(self.config.extra_args.iter().cloned())
            .args(["--json"]);
        c.stdin = Some(ctx.task.prompt.clone());
        Ok(c)
    }
    fn decoder(&self, ctx: &ParseContext) -> Box<dyn Decoder> {
        let auth = |stderr: &str| {
            stderr
                .contains("ACME_KEY missing")
                .then(|| "set ACME_KEY".into())
        };
        Box::new(SimpleDecoder::new(
            &self.name,
            &self.config,
            ctx.model.clone(),
            acme_line,
            auth,
        ))
    }
}

/// Acme's lines, tagged by `kind`.
#[derive(Deserialize)]
#[serde(remote = "Self")]
enum AcmeLine<'a> {
    #[serde(rename = "start")]
    Start { sid: String, model: String },
    #[serde(rename = "say")]
    Say { text: String },
    #[serde(rename = "tool")]
    Tool {
        id: String,
        name: String,
        args: serde_json::Value,
    },
    #[serde(rename = "done")]
    Done { ok: bool, tokens: Tokens },
    #[serde(rename = "__other")]
    Other(#[serde(borrow)] Cow<'a, str>),
}
tagged_enum!(AcmeLine, "kind");

#[derive(Deserialize)]
struct Tokens {
    #[serde(rename = "in")]
    input: u64,
    cached: u64,
    out: u64,
}

fn acme_line(line: &str) -> Result<Vec<EventKind>, String> {
    Ok(vec![
        match serde_json::from_str(line).map_err(|e| e.to_string())? {
            AcmeLine::Start { sid, model } => EventKind::SessionStarted {
                session_id: sid,
                model: Some(model),
                cwd: None,
                tools: vec![],
                mcp_servers: vec![],
                cli_version: None,
            },
            AcmeLine::Say { text } => EventKind::AssistantText { text, delta: true },
            AcmeLine::Tool { id, name, args } => EventKind::ToolCall {
                id,
                name,
                input: args,
                mcp_server: None,
            },
            AcmeLine::Done { ok, tokens } => EventKind::Final {
                success: ok,
                text: None,
                error_kind: None,
                error: (!ok).then(|| "acme said no".into()),
                usage: Some(CanonicalUsage {
                    input_tokens: tokens.input - tokens.cached,
                    cache_read: tokens.cached,
                    output_tokens: tokens.out,
                    request_count: 1,
                    ..CanonicalUsage::default()
                }),
                cost_usd: None,
                num_turns: None,
                duration_ms: None,
            },
            AcmeLine::Other(t) => EventKind::Unknown {
                vendor_type: Some(t.into_owned()),
            },
        },
    ])
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
    let (events, r) = replay::replay_events(
        acme.as_ref(),
        &stdout,
        "",
        ExitStatus::Code(0),
        &ParseContext::default(),
    );
    // Six lines; the last one's usage is also a Usage event.
    assert_eq!(events.len(), 7);
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
