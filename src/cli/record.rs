//! `aicli record`: run a real CLI and write its transcript as a fixture.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use aicli::providers::replay;
use aicli::providers::{ParseContext, TaskSpec};
use aicli::store::{RunStore, read_range};
use aicli::{BatchEvent, BatchOptions, Engine};
use anyhow::{Context, bail};
use clap::Args;
use serde_json::json;
use tokio::sync::broadcast;
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
    /// `text:TEXT`, `shell:COMMAND`, `mcp:SERVER/TOOL`, `error:STATUS`, `drop`.
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

pub(super) fn fake_script(spec: &str) -> anyhow::Result<aicli_testkit::Script> {
    use aicli_testkit::Script;
    let (kind, arg) = match spec.split_once(':') {
        Some((k, a)) => (k, Some(a)),
        None => (spec, None),
    };
    Ok(match (kind, arg) {
        ("text", None) => Script::default_text(),
        ("text", Some(t)) => Script::text(t),
        ("shell", Some(c)) => Script::shell(c).then_quote_tool_result(),
        ("mcp", Some(st)) => {
            let (server, tool) = st.split_once('/').context("--fake mcp:SERVER/TOOL")?;
            Script::mcp_tool_call(server, tool, json!({})).then_quote_tool_result()
        }
        ("error", Some(s)) => Script::error(s.parse().context("--fake error:STATUS")?),
        ("drop", None) => Script::drop_mid_stream(),
        _ => bail!(
            "--fake '{spec}': expected text, text:TEXT, shell:COMMAND, mcp:SERVER/TOOL, error:STATUS or drop"
        ),
    })
}

pub(super) async fn record(config_path: Option<&Path>, a: RecordArgs) -> anyhow::Result<ExitCode> {
    let config = load_config(config_path)?;
    let reg = registry(&config)?;
    let provider = reg.get(&a.provider)?;
    let version = installed_version(&provider).await.with_context(|| {
        format!(
            "{} is not installed or does not print a version",
            provider.binary_name()
        )
    })?;
    let scratch = tempfile::tempdir()?;
    let work = scratch.path().join("work");
    std::fs::create_dir_all(&work)?;
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
    let mut engine = Engine::new(config.clone(), reg.clone());
    let mut fake = None;
    let mut source = format!(
        "aicli record: real {} {version} against its real API",
        provider.binary_name()
    );
    if let Some(spec) = &a.fake {
        let vendor = aicli_testkit::Vendor::parse(provider.config().adapter_name(provider.name()))
            .with_context(|| format!("no fake API for provider {}", provider.name()))?;
        let api = aicli_testkit::FakeApi::start(vendor, fake_script(spec)?).await?;
        let mut options = aicli_testkit::WiringOptions::default();
        if let Some(m) = &a.model {
            options = options.with_model(m.clone());
        }
        let mut wiring = api.wiring_with(&options);
        // A model the wiring pins goes through the task, so the run records it (and its
        // cost can be estimated) and the adapter passes it on.
        if task.model.is_none()
            && let Some(i) = wiring.args.iter().position(|a| a == "-m")
            && i + 1 < wiring.args.len()
        {
            task.model = Some(wiring.args[i + 1].clone());
            wiring.args.drain(i..i + 2);
        }
        let dirs = aicli_testkit::RunDirs::new_in(scratch.path())?;
        wiring.write_files(&dirs.home)?;
        task.extra_args.extend(wiring.args.clone());
        engine = engine.with_env(dirs.env_with(&wiring));
        source = format!(
            "aicli record: real {} {version} against the aicli-testkit fake {vendor} API on loopback (script: {spec})",
            provider.binary_name()
        );
        fake = Some((api, dirs));
    }
    task.extra_args.extend(a.extra.iter().cloned());
    let mut opts = BatchOptions::new(&work);
    opts.provider = Some(provider.name().to_owned());
    opts.worktrees = false;
    opts.runs_dir = Some(scratch.path().join("runs"));
    let (tx, _rx) = broadcast::channel::<BatchEvent>(1024);
    let cancel = CancellationToken::new();
    ctrl_c_cancels(cancel.clone());
    let batch = engine.run_batch(vec![task], opts, tx, cancel).await?;
    drop(fake);
    let store = RunStore::new(scratch.path().join("runs"));
    let rec = store
        .open_batch(&batch.batch_id)
        .map_err(anyhow::Error::msg)?;
    let dir = rec.task_dir(&a.scenario);
    let trec = rec.task(&a.scenario).map_err(anyhow::Error::msg)?;
    let attempt = trec.attempts.last().context("the run made no attempt")?;
    if attempt.argv.is_empty() {
        let why = attempt
            .result
            .as_ref()
            .and_then(|r| r.error.clone())
            .unwrap_or_default();
        bail!("the CLI was not started, so there is nothing to record: {why}");
    }
    let stdout = read_range(
        &dir.join("events.ndjson"),
        attempt.events_start,
        attempt.events_end,
    )
    .unwrap_or_default();
    let stderr = read_range(
        &dir.join("stderr.log"),
        attempt.stderr_start,
        attempt.stderr_end,
    )
    .unwrap_or_default();
    let exit = attempt.result.as_ref().and_then(|r| r.exit_code);
    let ctx = ParseContext {
        model: attempt.model.clone(),
        prior: attempt.prior,
    };
    let (_, result) = replay::replay(
        provider.as_ref(),
        &stdout,
        &String::from_utf8_lossy(&stderr),
        exit,
        &ctx,
    );
    let out_dir = a.out.join(provider.name());
    std::fs::create_dir_all(&out_dir)?;
    let path = |ext: &str| out_dir.join(format!("{}.{ext}", a.scenario));
    std::fs::write(path("ndjson"), &stdout)?;
    std::fs::write(path("stderr"), &stderr)?;
    std::fs::write(
        path("exit"),
        match exit {
            Some(c) => format!("{c}\n"),
            None => "signal\n".to_owned(),
        },
    )?;
    let meta = json!({
        "cli_version": version,
        "source": source,
        "cmd": attempt.argv.join(" "),
        "context": ctx,
    });
    std::fs::write(
        path("meta.json"),
        serde_json::to_string_pretty(&meta)? + "\n",
    )?;
    std::fs::write(
        path("result.json"),
        serde_json::to_string_pretty(&result)? + "\n",
    )?;
    println!(
        "recorded {} ({} bytes of stdout, exit {}) with {} {version}: {}",
        path("ndjson").display(),
        stdout.len(),
        exit.map(|c| c.to_string())
            .unwrap_or_else(|| "signal".into()),
        provider.binary_name(),
        output::summary(&result).lines().next().unwrap_or_default()
    );
    Ok(ExitCode::SUCCESS)
}
