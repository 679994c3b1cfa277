//! `aicli record`: run a real CLI and write its transcript as a fixture.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use crate::mcp::{McpServer, McpServerOptions};
use crate::providers::replay;
use crate::providers::{ParseContext, TaskSpec};
use crate::record::{RunStore, read_range};
use crate::{BatchOptions, Engine};
use anyhow::{Context, bail};
use clap::Args;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::common::{ctrl_c_cancels, installed_version};
use super::{load_config, output, registry};

/// `aicli record`.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// The prompt.
    pub prompt: String,
    /// The provider whose CLI to run.
    #[arg(long, short)]
    pub provider: String,
    /// The fixture's name (`fixtures/<provider>/<scenario>.*`).
    #[arg(long)]
    pub scenario: String,
    /// Run against a fake model API on loopback instead of the real one: `text`,
    /// `text:TEXT`, `shell:COMMAND`, `mcp:SERVER/TOOL` (`aicli` is aicli's own server),
    /// `ask:QUESTION|OPTION|OPTION`, `tool:NAME:JSON`, `error:STATUS`, `drop` (`;delay=MS`
    /// paces it).
    #[arg(long, value_name = "SCRIPT")]
    pub fake: Option<String>,
    /// The model.
    #[arg(long, short)]
    pub model: Option<String>,
    /// Permission mode (plan, default, accept_edits, bypass).
    #[arg(long)]
    pub permission_mode: Option<String>,
    /// Tools allowed without asking (repeatable).
    #[arg(long = "allow-tool", value_name = "TOOL")]
    pub allowed_tools: Vec<String>,
    /// Where fixtures go.
    #[arg(long, default_value = "fixtures", value_name = "DIR")]
    pub out: PathBuf,
    /// Wall-clock limit, seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
    /// Extra arguments for the CLI (after `--`).
    #[arg(last = true)]
    pub extra: Vec<String>,
}

pub(super) async fn record(config_path: Option<&Path>, a: RecordArgs) -> anyhow::Result<ExitCode> {
    let config = load_config(config_path)?;
    let reg = registry(&config)?;
    let provider = reg.get(&a.provider)?;
    let version = installed_version(&provider).await.with_context(|| {
        format!(
            "{} is not installed or does not print a version (`aicli install {}` installs the pinned one)",
            provider.binary_name(),
            provider.name()
        )
    })?;
    let scratch = tempfile::tempdir()?;
    let work = scratch.path().join("work");
    std::fs::create_dir_all(&work)?;
    let mut task = task_of(&a)?;
    // aicli's MCP server, as in every run: a script that calls `mcp:aicli/TOOL` reaches
    // it (the fixture then shows what the CLI does with aicli's tools).
    let cancel = CancellationToken::new();
    let server = Arc::new(
        McpServer::start(
            McpServerOptions::from_config(&config, &work),
            cancel.child_token(),
        )
        .await?,
    );
    let mut engine = Engine::new(config.clone(), reg.clone()).with_agent_server(server.clone());
    let mut source = format!(
        "aicli record: real {} {version} against its real API",
        provider.binary_name()
    );
    let fake = match &a.fake {
        Some(spec) => {
            let f = wire_fake(&provider, spec, &a, &mut task, scratch.path()).await?;
            engine = engine.with_env(f.dirs.base_env());
            source = format!(
                "aicli record: real {} {version} against the aicli-testkit fake {} API on loopback (script: {spec})",
                provider.binary_name(),
                f.api.vendor()
            );
            Some(f)
        }
        None => None,
    };
    task.extra_args.extend(a.extra.iter().cloned());
    let mut opts = BatchOptions::new(&work);
    opts.provider = Some(provider.name().to_owned());
    opts.worktrees = false;
    opts.runs_dir = Some(scratch.path().join("runs"));
    let tx = crate::LiveSender::new(crate::live::DEFAULT_QUEUE_BYTES);
    ctrl_c_cancels(cancel.clone(), true);
    let batch = engine.run_batch(vec![task], opts, tx, cancel).await?;
    drop(fake);
    let run = Recorded::read(&scratch.path().join("runs"), &batch.batch_id, &a.scenario)?;
    let (events, mut result) = replay::replay_events(
        provider.as_ref(),
        &run.stdout,
        &String::from_utf8_lossy(&run.stderr),
        crate::providers::ExitStatus::of_wait(run.exit),
        &run.ctx,
    );
    server.cancellation_token().cancel();
    // The engine's verdict (a question makes the run blocked), over the stream's.
    if let Some(v) = &run.verdict {
        super::parse::with_engine_verdict(&mut result, v);
    }
    let meta = json!({
        "cli_version": version,
        "source": source,
        "cmd": run.argv.join(" "),
        "context": run.ctx,
    });
    let written = write_fixture(
        &a.out.join(provider.name()),
        &a.scenario,
        &run,
        &meta,
        &result,
    )?;
    outln!(
        "recorded {} ({} bytes of stdout, exit {}) with {} {version}: {}",
        written.display(),
        run.stdout.len(),
        run.exit
            .map(|c| c.to_string())
            .unwrap_or_else(|| "signal".into()),
        provider.binary_name(),
        headline(&events, &result)
    );
    Ok(ExitCode::SUCCESS)
}

/// The task of the recording.
fn task_of(a: &RecordArgs) -> anyhow::Result<TaskSpec> {
    let mut task = TaskSpec {
        id: a.scenario.clone(),
        prompt: a.prompt.clone(),
        model: a.model.clone(),
        allowed_tools: a.allowed_tools.clone(),
        timeout_secs: Some(a.timeout),
        ..TaskSpec::default()
    };
    if let Some(m) = &a.permission_mode {
        task.permission_mode = Some(
            serde_json::from_value(json!(m)).with_context(|| format!("--permission-mode {m}"))?,
        );
    }
    Ok(task)
}

/// A fake model API of the recording and the run directories its CLI runs in.
struct Fake {
    api: aicli_testkit::FakeApi,
    dirs: aicli_testkit::RunDirs,
}

/// Starts the fake API `spec` scripts for `provider` and wires `task` to it (its
/// arguments, its variables, its model), with a HOME of its own under `scratch`.
async fn wire_fake(
    provider: &crate::providers::SharedProvider,
    spec: &str,
    a: &RecordArgs,
    task: &mut TaskSpec,
    scratch: &Path,
) -> anyhow::Result<Fake> {
    let vendor = crate::cli::fake_api::vendor_of(provider.name(), provider.config()).with_context(|| {
        format!(
            "no fake API for provider {} (an ACP entry names the API its agent calls in acp.model_api)",
            provider.name()
        )
    })?;
    let api = aicli_testkit::FakeApi::start(vendor, super::fake::script(spec)?).await?;
    let mut options = aicli_testkit::WiringOptions::default();
    if let Some(m) = &a.model {
        options = options.with_model(m.clone());
    }
    let acp = provider.config().adapter_name(provider.name()) == "acp";
    let mut wiring = if acp {
        // An ACP agent takes no arguments of the wiring; its model is the task's.
        if task.model.is_none() {
            task.model = provider
                .config()
                .default_model
                .clone()
                .or(crate::cli::fake_api::default_model(vendor).map(str::to_owned));
        }
        aicli_testkit::CliWiring::for_acp_fake(vendor, &api.base_url(), &options)
    } else {
        api.wiring_with(&options)
    };
    // A model the wiring pins goes through the task, so the run records it (and its
    // cost can be estimated) and the adapter passes it on.
    if task.model.is_none()
        && let Some(i) = wiring.args.iter().position(|a| a == "-m")
        && i + 1 < wiring.args.len()
    {
        task.model = Some(wiring.args[i + 1].clone());
        wiring.args.drain(i..i + 2);
    }
    let dirs = aicli_testkit::RunDirs::new_in(scratch)?;
    wiring.write_files(&dirs.home)?;
    task.extra_args.extend(wiring.args.clone());
    // The wiring's variables (the fake's URL and key, telemetry off) go through the
    // task: a CLI gets nothing else of the environment it is given.
    task.env.extend(wiring.env.clone());
    Ok(Fake { api, dirs })
}

/// What the recorded attempt left in its run record.
struct Recorded {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    exit: Option<i32>,
    argv: Vec<String>,
    ctx: ParseContext,
    verdict: Option<crate::providers::SessionResult>,
}

impl Recorded {
    /// The last attempt of task `scenario` of batch `batch_id` under `runs`.
    fn read(runs: &Path, batch_id: &str, scenario: &str) -> anyhow::Result<Recorded> {
        let store = RunStore::new(runs);
        let rec = store.open_batch(batch_id).map_err(anyhow::Error::msg)?;
        let dir = rec.task_dir(scenario);
        let trec = rec.task(scenario).map_err(anyhow::Error::msg)?;
        let attempt = trec.attempts.last().context("the run made no attempt")?;
        if attempt.argv.is_empty() {
            let why = attempt
                .result
                .as_ref()
                .and_then(|r| r.error.clone())
                .unwrap_or_default();
            bail!("the CLI was not started, so there is nothing to record: {why}");
        }
        Ok(Recorded {
            stdout: read_range(
                &dir.join("events.ndjson"),
                attempt.events_start,
                attempt.events_end,
            )
            .unwrap_or_default(),
            stderr: read_range(
                &dir.join("stderr.log"),
                attempt.stderr_start,
                attempt.stderr_end,
            )
            .unwrap_or_default(),
            exit: attempt.result.as_ref().and_then(|r| r.exit_code),
            argv: attempt.argv.clone(),
            ctx: ParseContext {
                model: attempt.model.clone(),
                prior: attempt.prior,
                answered: None,
            },
            verdict: attempt.result.clone(),
        })
    }
}

/// Writes the fixture `<dir>/<scenario>.{ndjson,stderr,exit,meta.json,result.json}`;
/// returns the path of its transcript.
fn write_fixture(
    dir: &Path,
    scenario: &str,
    run: &Recorded,
    meta: &serde_json::Value,
    result: &crate::providers::SessionResult,
) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = |ext: &str| dir.join(format!("{scenario}.{ext}"));
    std::fs::write(path("ndjson"), &run.stdout)?;
    std::fs::write(path("stderr"), &run.stderr)?;
    std::fs::write(
        path("exit"),
        match run.exit {
            Some(c) => format!("{c}\n"),
            None => "signal\n".to_owned(),
        },
    )?;
    std::fs::write(
        path("meta.json"),
        serde_json::to_string_pretty(meta)? + "\n",
    )?;
    std::fs::write(
        path("result.json"),
        serde_json::to_string_pretty(result)? + "\n",
    )?;
    Ok(path("ndjson"))
}

/// The summary's headline, unless a tool call failed: that is said, not hidden behind
/// the run's success.
fn headline(
    events: &[crate::providers::AgentEvent],
    result: &crate::providers::SessionResult,
) -> String {
    let mut calls = std::collections::HashMap::new();
    let mut failed_tools: Vec<String> = Vec::new();
    for e in events {
        if let crate::providers::EventKind::ToolCall { id, name, .. } = &e.kind {
            calls.insert(id.clone(), name.clone());
        } else if let crate::providers::EventKind::ToolResult {
            is_error: true,
            id,
            name,
            output,
            ..
        } = &e.kind
        {
            failed_tools.push(format!(
                "{}: {}",
                name.clone()
                    .or_else(|| calls.get(id).cloned())
                    .unwrap_or_else(|| "a tool".to_owned()),
                output.lines().next().unwrap_or_default()
            ));
        }
    }
    if failed_tools.is_empty() {
        output::summary(result, None, None)
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned()
    } else {
        format!("✘ a tool call failed ({})", failed_tools.join("; "))
    }
}
