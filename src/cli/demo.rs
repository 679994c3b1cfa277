//! `aicli demo`: aicli's main job, offline, in one command. The installed CLIs run in
//! parallel in a scratch repository against the embedded fake model APIs, with the live
//! display; each one answers, writes a file with its shell tool, lists its worktree
//! through aicli's MCP server (`getWorkspaceFiles`) and asks a question (`ask_user`),
//! which the demo answers (or lets you answer, with an option's number or any text); the
//! same CLI session then resumes, writes the answer into its file and finishes. It ends with the results table, where the records are, and what to try
//! next.

use std::io::IsTerminal;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cli::fake_api::FakeApis;
use crate::mcp::{McpServer, McpServerOptions};
use crate::providers::{AiCliConfig, PermissionMode, SessionStatus, TaskSpec};
use crate::record::RunStore;
use crate::{BatchOptions, BatchResult, Engine};
use aicli_testkit::{ANSWER_PLACEHOLDER, FakeApi, Script, Vendor};
use anyhow::{Context, bail};
use clap::Args;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::common::{batch_code, ctrl_c_cancels};
use super::fake::{MCP_SERVER, home_of};
use super::progress::{DisplayOptions, run as display};
use super::{load_config, output, registry};

/// `aicli demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Print the batch result as JSON (one line) on stdout; everything else goes to stderr.
    #[arg(long)]
    pub json: bool,
    /// The scratch repository (default: <aicli cache>/demo, made anew on each run).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Answer the agents' questions with their first option, without asking (the default
    /// when stdin is not a terminal, or with --json).
    #[arg(long)]
    pub yes: bool,
}

/// The question every CLI asks, and its options (the first is the default answer).
const QUESTION: &str = "Which greeting should the demo file end with?";
const OPTIONS: [&str; 3] = ["Hello, world", "Bonjour", "Hallo"];

/// Marks a directory as the demo's, so a later run may replace it.
const MARKER: &str = ".aicli-demo";

/// Where to put the CLIs' output lines in the demo's scratch files.
fn file_of(cli: &str) -> String {
    format!("demo-{cli}.txt")
}

/// What the fake model of `vendor` does, request by request. After the answer it
/// writes the answer into the CLI's file with the shell tool, and says it.
fn script(vendor: Vendor) -> Script {
    let cli = vendor.cli_name();
    let file = file_of(cli);
    Script::shell(format!(
        "echo 'written by {cli} with its shell tool' > {file}"
    ))
    .with_preamble(format!(
        "Hello from the fake {vendor} model! I will write a file with my shell tool, list the workspace through aicli, and ask you one question."
    ))
    .then_mcp_tool_call(MCP_SERVER, "getWorkspaceFiles", json!({}))
    .then_mcp_tool_call(
        MCP_SERVER,
        "askUser",
        json!({"question": QUESTION, "options": OPTIONS}),
    )
    .then_text("I asked the user; I will go on when the answer comes.")
    .then_shell(format!(
        "printf 'greeting: %s\\n' {ANSWER_PLACEHOLDER} >> {file}"
    ))
    .with_answer()
    .then_text(format!(
        "Thanks for the answer. {file} now ends with \"greeting: {ANSWER_PLACEHOLDER}\", and the task is done."
    ))
    .with_answer()
}

/// The demo task of `provider` (`cli` is its CLI's name), in the default permission mode
/// (`sandbox`: commands run confined to the worktree), or, where `confined` is false (no
/// working bubblewrap, which Claude Code's sandbox and aicli's confinement of Gemini
/// need), in `bypass`, which the demo says it does.
fn task(provider: &str, vendor: Vendor, confined: bool) -> TaskSpec {
    let cli = vendor.cli_name();
    let mut t = TaskSpec {
        id: format!("{provider}-demo"),
        provider: Some(provider.to_owned()),
        prompt: format!(
            "aicli demo: write {} with your shell tool, list the workspace with aicli's getWorkspaceFiles, then ask the user which greeting to use.",
            file_of(cli)
        ),
        ..TaskSpec::default()
    };
    // Codex's sandbox brings its own bubblewrap.
    if !confined && vendor != Vendor::OpenAi {
        t.permission_mode = Some(PermissionMode::Bypass);
    }
    t
}

/// Makes `dir` a fresh git repository with one commit (replacing an earlier demo's).
fn scratch_repo(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        let empty = std::fs::read_dir(dir)
            .with_context(|| format!("cannot read {}", dir.display()))?
            .next()
            .is_none();
        if !empty && !dir.join(MARKER).is_file() {
            bail!(
                "{} exists and is not an aicli demo directory; pick another with --dir",
                dir.display()
            );
        }
        std::fs::remove_dir_all(dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::write(
        dir.join(MARKER),
        "made by `aicli demo`; replaced by the next one\n",
    )?;
    std::fs::write(
        dir.join("README.md"),
        "# aicli demo\n\nA scratch repository: each task ran in its own worktree under .aicli/worktrees.\n",
    )?;
    std::fs::write(
        dir.join("tasks.json"),
        serde_json::to_string_pretty(&json!({
            "max_parallel": 3,
            "tasks": [
                {"id": "hello-claude", "provider": "claude", "prompt": "Say hello"},
                {"id": "hello-codex", "provider": "codex", "prompt": "Say hello"},
                {"id": "hello-gemini", "provider": "gemini", "prompt": "Say hello"}
            ]
        }))? + "\n",
    )?;
    let git = |args: &[&str]| -> anyhow::Result<()> {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args([
                "-c",
                "user.name=aicli demo",
                "-c",
                "user.email=demo@aicli.invalid",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .context("cannot run git (is it installed?)")?;
        if !out.status.success() {
            bail!(
                "git {} in {}: {}",
                args.join(" "),
                dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    };
    git(&["init", "-q", "-b", "main"])?;
    git(&["add", "-A"])?;
    git(&["commit", "-q", "-m", "aicli demo: a scratch repository"])?;
    Ok(())
}

/// The answer to `question`: typed by the user (an option's number or any text; Enter
/// takes the first option), or the first option when not asking.
async fn answer_of(task: &str, question: &crate::providers::PendingQuestion, ask: bool) -> String {
    let default = question
        .options
        .first()
        .cloned()
        .unwrap_or_else(|| "yes".to_owned());
    if !ask {
        eprintln!(
            "  {task} asks: {} -> answering \"{default}\"",
            question.question
        );
        return default;
    }
    eprint!(
        "\n{task} asks: {}\n{}",
        question.question,
        prompt(&question.options, &default)
    );
    let line = tokio::task::spawn_blocking(|| {
        let mut s = String::new();
        std::io::stdin().read_line(&mut s).map(|_| s)
    })
    .await
    .ok()
    .and_then(Result::ok)
    .unwrap_or_default();
    let answer = chosen(&line, &question.options, &default);
    eprintln!("  -> answering \"{answer}\"");
    answer
}

/// What the demo asks: the numbered options, and that a number or text will do.
fn prompt(options: &[String], default: &str) -> String {
    if options.is_empty() {
        return format!("  your answer, as text (Enter = \"{default}\"): ");
    }
    let numbered: Vec<String> = options
        .iter()
        .enumerate()
        .map(|(i, o)| format!("{}) {o}", i + 1))
        .collect();
    format!(
        "  options: {}\n  your answer, a number or text (Enter = 1, \"{default}\"): ",
        numbered.join("  ")
    )
}

/// The answer a typed line stands for: an option's number is that option, an empty line
/// the default, anything else itself.
fn chosen(line: &str, options: &[String], default: &str) -> String {
    let line = line.trim();
    if line.is_empty() {
        return default.to_owned();
    }
    match line.parse::<usize>() {
        Ok(n) if (1..=options.len()).contains(&n) => options[n - 1].clone(),
        _ => line.to_owned(),
    }
}

/// One provider per installed CLI: the entry named after it; the missing ones are said.
fn installed_clis(config: &AiCliConfig) -> anyhow::Result<Vec<(String, Vendor)>> {
    let path = crate::cache::search_path_with_cache(&std::env::var("PATH").unwrap_or_default());
    let reg = registry(config)?;
    let mut chosen: Vec<(String, Vendor)> = Vec::new();
    for vendor in Vendor::ALL {
        let name = vendor.cli_name();
        let Ok(p) = reg.get(name) else { continue };
        match p.binary_path(Some(&path)) {
            Ok(_) => chosen.push((name.to_owned(), vendor)),
            Err(_) => eprintln!(
                "aicli demo: {name} is not installed, so the demo runs without it (`aicli install` installs the pinned {name} into aicli's cache)"
            ),
        }
    }
    if chosen.is_empty() {
        bail!(
            "no CLI to run: claude, codex and gemini are all missing. Install them with `aicli install` (needs Node.js 22 or later, with npm), then run `aicli demo` again"
        );
    }
    Ok(chosen)
}

/// What the demo runs on: the fake model APIs (the CLIs wired to them, their HOME in
/// the scratch repository) and aicli's MCP server, both stopped by [`Setup::stop`].
struct Setup {
    engine: Engine,
    apis: FakeApis,
    server: Arc<McpServer>,
}

impl Setup {
    async fn start(
        mut config: AiCliConfig,
        dir: &Path,
        vendors: &[Vendor],
        cancel: &CancellationToken,
    ) -> anyhow::Result<Setup> {
        let apis = FakeApis::start(IpAddr::from([127, 0, 0, 1]), vendors, script).await?;
        let wiring = apis.wire(&mut config, FakeApi::base_url);
        let home = home_of(dir);
        wiring.write_home(&home)?;
        let inherited: std::collections::BTreeMap<String, String> = std::env::vars().collect();
        let env = wiring.env(&home, &inherited);
        let server = Arc::new(
            McpServer::start(
                McpServerOptions::from_config(&config, dir),
                cancel.child_token(),
            )
            .await?,
        );
        let reg = registry(&config)?;
        let engine = Engine::new(config, reg)
            .with_env(env)
            .with_agent_server(server.clone());
        Ok(Setup {
            engine,
            apis,
            server,
        })
    }

    fn stop(self) {
        self.server.cancellation_token().cancel();
        drop(self.apis);
    }
}

pub(super) async fn demo(config_path: Option<&Path>, a: DemoArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let config = load_config(config_path)?;
    let dir = a
        .dir
        .clone()
        .unwrap_or_else(|| crate::cache::cache_dir().join("demo"));
    let chosen = installed_clis(&config)?;
    scratch_repo(&dir)?;
    let dir = dir.canonicalize().unwrap_or(dir);
    eprintln!(
        "aicli demo: {} against aicli's built-in fake model APIs on 127.0.0.1 (no key, no network), in a scratch repository at {}",
        chosen
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        dir.display()
    );
    let vendors: Vec<Vendor> = chosen.iter().map(|(_, v)| *v).collect();
    let cancel = CancellationToken::new();
    let setup = Setup::start(config, &dir, &vendors, &cancel).await?;
    let engine = &setup.engine;
    ctrl_c_cancels(cancel.clone(), false);

    // 1. The batch: every CLI at once, until each asks its question.
    let first = first_batch(engine, &chosen, &dir, &cancel).await?;
    let batch_id = first.batch_id.clone();
    let store = engine.store(&dir, None);
    // 2. The questions: answered (by you, on a terminal), each resuming its session.
    if !cancel.is_cancelled() {
        let ask =
            !a.yes && !a.json && std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
        answer_questions(engine, &store, &first, ask, &cancel).await;
    }
    // 3. The batch as its records now say (every answer settled), for the whole demo.
    let tx = crate::LiveSender::new(crate::live::DEFAULT_QUEUE_BYTES);
    let mut result: BatchResult = engine
        .resume_batch(&store, &batch_id, tx, cancel.clone())
        .await?;
    result.wall_clock_ms = started.elapsed().as_millis() as u64;
    if let Ok(rec) = store.open_batch(&batch_id)
        && let Err(e) = rec.write_result(&result)
    {
        tracing::warn!(error = %e, "cannot rewrite the batch result");
    }
    setup.stop();
    cancel.cancel();

    if a.json {
        outln!("{}", serde_json::to_string(&result)?);
        eprint!("{}", report(&result, &dir));
    } else {
        outln!("{}", report(&result, &dir).trim_start_matches('\n'));
    }
    Ok(ExitCode::from(batch_code(&result)))
}

/// Runs the demo's tasks, one per CLI, at once with the live display, until each has
/// asked its question (or ended).
async fn first_batch(
    engine: &Engine,
    chosen: &[(String, Vendor)],
    dir: &Path,
    cancel: &CancellationToken,
) -> anyhow::Result<BatchResult> {
    let confined = crate::providers::shared::confine::bubblewrap(None).is_some();
    if !confined {
        eprintln!(
            "aicli demo: no working bubblewrap (bwrap) here, so claude and gemini cannot run \
             commands confined (permission mode sandbox); the demo runs them in permission \
             mode bypass, unconfined, in its scratch repository. apt install bubblewrap \
             socat makes sandbox work."
        );
    }
    let tasks: Vec<TaskSpec> = chosen.iter().map(|(n, v)| task(n, *v, confined)).collect();
    let mut opts = BatchOptions::new(dir);
    opts.max_parallel = Some(tasks.len());
    opts.timeout = Some(Duration::from_secs(180));
    opts.idle_timeout = Some(Duration::from_secs(90));
    let providers: Vec<String> = chosen.iter().map(|(n, _)| n.clone()).collect();
    let (tx, rx) = crate::live::channel(crate::live::DEFAULT_QUEUE_BYTES);
    let shown = tokio::spawn(display(rx, DisplayOptions::new(&providers, cancel.clone())));
    let first = engine.run_batch(tasks, opts, tx, cancel.clone()).await;
    let _ = shown.await;
    Ok(first?)
}

/// Answers every blocked task of `first` (asking on a terminal when `ask`), all at once,
/// each resuming its CLI session with the live display.
async fn answer_questions(
    engine: &Engine,
    store: &RunStore,
    first: &BatchResult,
    ask: bool,
    cancel: &CancellationToken,
) {
    let blocked: Vec<_> = first
        .tasks
        .iter()
        .filter(|t| t.status == SessionStatus::Blocked)
        .filter_map(|t| t.question.clone().map(|q| (t, q)))
        .collect();
    if blocked.is_empty() {
        return;
    }
    let mut answers = Vec::new();
    for (t, q) in &blocked {
        answers.push((t.task_id.clone(), answer_of(&t.task_id, q, ask).await));
    }
    let answering: Vec<String> = blocked.iter().map(|(t, _)| t.provider.clone()).collect();
    let (tx, rx) = crate::live::channel(crate::live::DEFAULT_QUEUE_BYTES);
    let shown = tokio::spawn(display(rx, DisplayOptions::new(&answering, cancel.clone())));
    let mut runs = tokio::task::JoinSet::new();
    for (task_id, text) in answers {
        let task_ref = format!("{}/{task_id}", first.batch_id);
        let (engine, store, tx, cancel) =
            (engine.clone(), store.clone(), tx.clone(), cancel.clone());
        runs.spawn(async move { engine.answer(&store, &task_ref, &text, tx, cancel).await });
    }
    drop(tx);
    while let Some(r) = runs.join_next().await {
        match r {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => eprintln!("aicli demo: an answer did not run: {e}"),
            Err(e) => eprintln!("aicli demo: an answer did not finish: {e}"),
        }
    }
    let _ = shown.await;
}

/// The demo's closing text: what each CLI said last, the table, the worktrees and what
/// to try next.
fn report(result: &BatchResult, dir: &Path) -> String {
    let mut text = String::new();
    text.push_str("\nWhat each CLI said last:\n");
    for t in &result.tasks {
        let said = t.response.lines().next().unwrap_or_default();
        text.push_str(&format!("  {}: {said}\n", t.task_id));
    }
    text.push_str(&format!("\n{}\n", output::batch_table(result)));
    let worktrees: Vec<String> = result
        .tasks
        .iter()
        .filter_map(|t| {
            t.worktree
                .as_ref()
                .map(|w| format!("  {}: {}", t.task_id, w.display()))
        })
        .collect();
    if !worktrees.is_empty() {
        text.push_str(&format!(
            "worktrees (each with the file its CLI wrote, ending with your answer):\n{}\n",
            worktrees.join("\n")
        ));
    }
    let repo = shell_word(&dir.display().to_string());
    let batch_id = &result.batch_id;
    text.push_str(&format!(
        "\nTry next:\n  aicli runs show {batch_id} --repo {repo}      # every attempt, the question and its answer\n  aicli batch {repo}/tasks.json --fake-api --repo {repo}      # a tasks file of your own, still offline\n  aicli run \"Add a unit test for the parser\" --provider claude   # for real, in your repository (see `aicli status`)\n"
    ));
    text
}

/// `s` quoted for a POSIX shell when it needs it.
fn shell_word(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+:@".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_option_s_number_is_that_option_and_the_prompt_says_so() {
        let options: Vec<String> = OPTIONS.iter().map(|o| (*o).to_owned()).collect();
        assert_eq!(chosen("3\n", &options, "Hello, world"), "Hallo");
        assert_eq!(chosen("  \n", &options, "Hello, world"), "Hello, world");
        assert_eq!(chosen("4", &options, "Hello, world"), "4");
        assert_eq!(chosen("0", &options, "Hello, world"), "0");
        assert_eq!(chosen("Salut", &options, "Hello, world"), "Salut");
        let p = prompt(&options, "Hello, world");
        assert!(p.contains("1) Hello, world  2) Bonjour  3) Hallo"), "{p}");
        assert!(p.contains("a number or text"), "{p}");
    }
}
