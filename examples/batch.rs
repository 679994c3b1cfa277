//! aicli as a library: a batch of two tasks, each in its own git worktree, with the
//! batch's live events printed as they come.
//!
//! - Task `greet` runs on `shout`, a vendor aicli has never heard of: an
//!   [`AiCliProvider`] written here (its CLI is `/bin/sh` reading the prompt on stdin and
//!   printing JSON lines), registered in code next to the built-in adapters.
//! - Task `recorded` runs on the built-in Claude adapter, selected from a config like any
//!   user's: its binary is a stand-in script that prints a recorded Claude transcript
//!   (this repository's `fixtures/claude/text.ndjson`), so the example needs no login
//!   and no network.
//!
//! ```text
//! cargo run --example batch
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use aicli::providers::decode::SimpleDecoder;
use aicli::providers::{
    AiCliConfig, AiCliProvider, CanonicalUsage, CommandSpec, Decoder, EventKind, LaunchContext,
    ParseContext, ProviderConfig, ProviderError, ProviderRegistry, TaskSpec,
};
use aicli::{BatchEvent, BatchOptions, CancellationToken, Engine, RecvError, live_channel};

/// The `shout` CLI: `sh -c SCRIPT` reads the prompt on stdin and answers in upper case,
/// as `{"say": ...}` then `{"done": {"in": N, "out": M}}` lines.
#[derive(Debug)]
struct Shout {
    name: String,
    config: ProviderConfig,
}

const SHOUT: &str = r#"read -r prompt
printf '{"say":"%s"}\n' "$(printf '%s' "$prompt" | tr a-z A-Z)"
printf '{"done":{"in":%d,"out":%d}}\n' "${#prompt}" "${#prompt}""#;

impl AiCliProvider for Shout {
    fn name(&self) -> &str {
        &self.name
    }
    fn config(&self) -> &ProviderConfig {
        &self.config
    }
    fn command(&self, ctx: &LaunchContext<'_>) -> Result<CommandSpec, ProviderError> {
        let mut c = CommandSpec::new(ctx.binary, ctx.workdir);
        c.args(["-c", SHOUT]);
        // The prompt goes on stdin, never into argv (which every user can read).
        c.stdin = Some(format!("{}\n", ctx.task.prompt));
        Ok(c)
    }
    fn decoder(&self, ctx: &ParseContext) -> Box<dyn Decoder> {
        Box::new(SimpleDecoder::new(
            &self.name,
            &self.config,
            ctx.model.clone(),
            shout_line,
            |_stderr| None,
        ))
    }
}

/// One line of `shout`'s stream as normalized events.
fn shout_line(line: &str) -> Result<Vec<EventKind>, String> {
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
    if let Some(text) = v["say"].as_str() {
        return Ok(vec![EventKind::AssistantText {
            text: text.to_owned(),
            delta: false,
        }]);
    }
    let tokens = |k: &str| v["done"][k].as_u64().unwrap_or(0);
    Ok(vec![EventKind::Final {
        success: true,
        text: None,
        error_kind: None,
        error: None,
        usage: Some(CanonicalUsage {
            input_tokens: tokens("in"),
            output_tokens: tokens("out"),
            request_count: 1,
            ..CanonicalUsage::default()
        }),
        cost_usd: None,
        num_turns: None,
        duration_ms: None,
    }])
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let repo = git_repo(&dir.path().join("repo"))?;

    // The config, as a user would write it: `shout` on the adapter registered below,
    // and `claude` (the built-in adapter) on the stand-in binary.
    let stand_in = dir.path().join("claude");
    let transcript = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/claude/text.ndjson");
    std::fs::write(
        &stand_in,
        format!(
            "#!/bin/sh\ncat >/dev/null\ncat '{}'\n",
            transcript.display()
        ),
    )?;
    std::fs::set_permissions(
        &stand_in,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )?;
    let config_file = dir.path().join("aicli.json");
    std::fs::write(
        &config_file,
        serde_json::json!({
            "providers": {
                "shout": {"adapter": "shout", "package": "shout", "binary_name": "sh",
                          "binary_path": "/bin/sh",
                          "prices": {"shout-1": {"input": 1.0, "cached_input": 0.1, "output": 2.0}}},
                "claude": {"binary_path": stand_in}
            },
            // The stand-in has no login to check.
            "engine": {"auth_precheck": false}
        })
        .to_string(),
    )?;
    let config = AiCliConfig::load(Some(&config_file), |_| None)?.config;
    let mut registry = ProviderRegistry::with_builtin_adapters();
    registry.register_adapter("shout", |name, cfg| {
        Arc::new(Shout {
            name: name.to_owned(),
            config: cfg.clone(),
        })
    });
    registry.configure(&config)?;
    let engine = Engine::new(config, registry);

    let tasks = vec![
        TaskSpec {
            id: "greet".into(),
            provider: Some("shout".into()),
            model: Some("shout-1".into()),
            ..TaskSpec::new("hello from the library")
        },
        TaskSpec {
            id: "recorded".into(),
            provider: Some("claude".into()),
            ..TaskSpec::new("Say hello")
        },
    ];
    let mut options = BatchOptions::new(&repo);
    options.max_parallel = Some(2);
    options.runs_dir = Some(dir.path().join("runs"));

    // The live loop: every event of every task, as it happens.
    let (tx, mut rx) = live_channel(1 << 20);
    let printer = tokio::spawn(async move {
        loop {
            match rx.recv().await {
                Ok(BatchEvent::TaskStarted {
                    task_id, provider, ..
                }) => println!("[{task_id}] started on {provider}"),
                Ok(BatchEvent::Agent { task_id, event }) => {
                    if let EventKind::AssistantText { text, .. } = &event.kind {
                        println!("[{task_id}] says: {}", text.trim());
                    }
                }
                Ok(BatchEvent::TaskFinished { task_id, result }) => {
                    println!("[{task_id}] {:?}", result.status)
                }
                Ok(_) => {}
                Err(RecvError::Lagged(n)) => println!("({n} events dropped: a slow reader)"),
                Err(RecvError::Closed) => break,
            }
        }
    });
    let result = engine
        .run_batch(tasks, options, tx, CancellationToken::new())
        .await?;
    printer.await?;

    for t in &result.tasks {
        println!(
            "{:<9} {:<7} {:?} {:>6} tokens in, {:>4} out, ${:.6} ({:?}): {}",
            t.task_id,
            t.provider,
            t.status,
            t.canonical_usage.input_tokens,
            t.canonical_usage.output_tokens,
            t.cost_usd.unwrap_or(0.0),
            t.cost_source,
            t.response.trim()
        );
    }
    println!(
        "{} of {} succeeded, ${:.6} in all",
        result.n_succeeded, result.n_tasks, result.total_cost_usd
    );
    if result.n_succeeded != result.n_tasks {
        return Err("a task failed".into());
    }
    Ok(())
}

/// A git repository with one commit, for the tasks' worktrees.
fn git_repo(dir: &Path) -> Result<PathBuf, Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("README.md"), "example\n")?;
    for args in [
        &["init", "--quiet", "-b", "main"][..],
        &["add", "."],
        &[
            "-c",
            "user.name=example",
            "-c",
            "user.email=example@localhost",
            "commit",
            "--quiet",
            "-m",
            "start",
        ],
    ] {
        let ok = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .status()?
            .success();
        if !ok {
            return Err(format!("git {} failed", args.join(" ")).into());
        }
    }
    Ok(dir.to_path_buf())
}
