//! The prompt is never in a CLI's argv (any user of the machine can read
//! `/proc/PID/cmdline`): the real Claude, Codex and Gemini adapters put it on stdin. The
//! CLI here is the fake one, started by the engine with the command each adapter builds;
//! the test reads the running process's command line, and what it got on stdin.

use std::collections::BTreeMap;
use std::time::Duration;

use aicli::providers::{ProviderRegistry, TaskSpec};
use aicli::{BatchOptions, Engine};
use tokio_util::sync::CancellationToken;

use super::support::{collect_events, fake_cli, git_repo, test_config};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prompt_is_on_stdin_never_in_the_command_line() {
    for vendor in ["claude", "codex", "gemini"] {
        let repo = git_repo();
        let tmp = tempfile::tempdir().unwrap();
        let (stdin_file, pid_file, home) = (
            tmp.path().join("stdin"),
            tmp.path().join("pid"),
            tmp.path().join("home"),
        );
        std::fs::create_dir_all(&home).unwrap();
        let mut config = test_config();
        config.engine.auth_precheck = false;
        config.engine.mcp.enabled = false;
        let p = config.providers.get_mut(vendor).unwrap();
        p.binary_path = Some(fake_cli());
        // The fake CLI writes its pid and stdin under the test's temporary directory,
        // outside the worktree: `sandbox` (gemini's in bubblewrap) would refuse that.
        p.permission_mode = aicli::providers::PermissionMode::AcceptEdits;
        p.extra_args = [
            "--record-stdin",
            &stdin_file.display().to_string(),
            "--pid-file",
            &pid_file.display().to_string(),
            "--linger-ms",
            "1500",
        ]
        .map(String::from)
        .to_vec();
        let registry = ProviderRegistry::from_config(&config).unwrap();
        let env: BTreeMap<String, String> = [
            ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
            ("HOME".to_owned(), home.display().to_string()),
        ]
        .into();
        let engine = Engine::new(config, registry).with_env(env);
        let prompt = format!("--secret-{vendor}-prompt 7f3a9c: do the thing");
        let mut task = TaskSpec::new(prompt.clone());
        task.provider = Some(vendor.to_owned());
        let (tx, _ev) = collect_events();
        let run = tokio::spawn(async move {
            engine
                .run_batch(
                    vec![task],
                    BatchOptions::new(repo.path()),
                    tx,
                    CancellationToken::new(),
                )
                .await
                .unwrap()
        });
        // While the CLI runs: its command line as the kernel shows it to everyone.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let pid: u32 = loop {
            if let Some(pid) = std::fs::read_to_string(&pid_file)
                .ok()
                .and_then(|t| t.lines().next().and_then(|l| l.trim().parse().ok()))
            {
                break pid;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{vendor}: the CLI never started"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        assert!(
            cmdline.contains("stream-json") || cmdline.contains("--json"),
            "{vendor}: {cmdline}"
        );
        assert!(
            !cmdline.contains("7f3a9c"),
            "{vendor}: the prompt is in argv: {cmdline}"
        );
        let batch = run.await.unwrap();
        assert_eq!(batch.tasks.len(), 1);
        assert_eq!(
            std::fs::read_to_string(&stdin_file).unwrap(),
            prompt,
            "{vendor}"
        );
    }
}
