//! What goes into a container besides the workspace: the prompt, on the container's stdin
//! only (never in its command or environment, which `docker inspect` shows anyone who can
//! reach the engine), and an environment that is the run's base one minus this machine's
//! paths.
//!
//! The CLIs are the real Claude, Codex and Gemini adapters (their argv, their stdin)
//! running the fake CLI, which records what it read on stdin and its environment into
//! the worktree.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use aicli::providers::{ProviderRegistry, SessionStatus, TaskSpec};
use aicli::runner::docker::{image, labels, paths};
use aicli::{BatchOptions, Engine};
use bollard::Docker;
use tokio_util::sync::CancellationToken;

use super::support::{self, FIXTURES_IN_IMAGE, local_host};
use crate::suite::support::{collect_events, git_repo, test_config};

const VENDORS: [&str; 3] = ["claude", "codex", "gemini"];

/// The inspected containers of the tasks of `repo`, by task id, as JSON: each as soon as
/// it exists, until `want` are seen or `deadline`.
async fn inspect_while_running(
    docker: &Docker,
    repo: &std::path::Path,
    want: usize,
    deadline: tokio::time::Instant,
) -> BTreeMap<String, serde_json::Value> {
    let filters = HashMap::from([("label".to_owned(), vec![labels::MANAGED.to_owned()])]);
    let mut seen = BTreeMap::new();
    while seen.len() < want && tokio::time::Instant::now() < deadline {
        let list = docker
            .list_containers(Some(bollard::query_parameters::ListContainersOptions {
                all: true,
                filters: Some(filters.clone()),
                ..Default::default()
            }))
            .await
            .expect("list containers");
        for c in list {
            let l = c.labels.clone().unwrap_or_default();
            let mine = l
                .get(labels::WORKSPACE)
                .is_some_and(|w| std::path::Path::new(w).starts_with(repo));
            let (Some(task), Some(id), true) = (l.get(labels::TASK), c.id, mine) else {
                continue;
            };
            if seen.contains_key(task) {
                continue;
            }
            if let Ok(i) = docker
                .inspect_container(
                    &id,
                    None::<bollard::query_parameters::InspectContainerOptions>,
                )
                .await
            {
                seen.insert(task.clone(), serde_json::to_value(&i).expect("json"));
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    seen
}

/// Three tasks, one per real adapter, each in its own container: a 64 KiB prompt with
/// newlines and non-ASCII text arrives whole on the CLI's stdin, which is then closed
/// (the CLI reads to its end); no part of it is in what the engine shows of the
/// container (command, environment, labels: the whole `docker inspect`); the CLI's
/// environment holds the base variables and its provider's own, not this machine's
/// paths and not what no list names; the config's limits are on the container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prompt_goes_in_on_stdin_and_the_env_is_the_base_minus_host_paths() {
    let Some(docker) = support::local_engine("the_prompt_goes_in_on_stdin").await else {
        return;
    };
    let fake_image = support::fake_cli_image(&docker).await;
    let repo = git_repo();
    let home = tempfile::tempdir().unwrap();
    let mut config = test_config();
    config.engine.auth_precheck = false;
    config.engine.docker.hosts = vec![local_host()];
    // Limits other than the defaults, to see them on the containers.
    config.engine.docker.memory_mb = 768;
    config.engine.docker.cpus = 1.5;
    config.engine.docker.pids_limit = 300;
    for v in VENDORS {
        config
            .engine
            .docker
            .images
            .insert(v.to_owned(), fake_image.clone());
        let p = config.providers.get_mut(v).unwrap();
        p.binary_name = "aicli-fake-cli".to_owned();
        let fx = format!("{FIXTURES_IN_IMAGE}/{v}/text");
        p.extra_args = [
            "--replay",
            &format!("{fx}.ndjson"),
            "--stderr-file",
            &format!("{fx}.stderr"),
            "--exit-file",
            &format!("{fx}.exit"),
            "--record-stdin",
            "stdin.txt",
            "--dump-env",
            "env.txt",
            "--linger-ms",
            "2500",
        ]
        .map(String::from)
        .to_vec();
    }
    // aicli's environment: what the base list and the providers' lists name, this
    // machine's paths, and a secret no list names.
    let env: BTreeMap<String, String> = [
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("HOME", home.path().display().to_string()),
        ("TZ", "America/Aicli_Test".to_owned()),
        ("LANG", "C.UTF-8".to_owned()),
        ("TMPDIR", "/host/only/tmp".to_owned()),
        ("XDG_CONFIG_HOME", "/host/only/config".to_owned()),
        ("SSL_CERT_FILE", "/host/only/ca.pem".to_owned()),
        ("USER", "host-user".to_owned()),
        ("ANTHROPIC_AICLI_TEST", "claude's own".to_owned()),
        ("GEMINI_AICLI_TEST", "gemini's own".to_owned()),
        ("AICLI_TEST_UNLISTED_SECRET", "must not leak".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let registry = ProviderRegistry::from_config(&config).unwrap();
    let image_path = image::path_in(&docker.inspect_image(&fake_image).await.unwrap());
    let engine = Engine::new(config, registry).with_env(env);
    let marker = format!("secret-prompt-{}", uuid::Uuid::new_v4().simple());
    let prompt = |v: &str| {
        let mut p = format!("{marker} for {v}\nsecond line: ünïcödé ✓\n");
        while p.len() < 64 * 1024 {
            p.push_str("filler line of a long prompt\n");
        }
        p
    };
    let tasks: Vec<TaskSpec> = VENDORS
        .iter()
        .map(|v| {
            let mut t = TaskSpec::new(prompt(v));
            t.id = (*v).to_owned();
            t.provider = Some((*v).to_owned());
            t
        })
        .collect();
    let mut opts = BatchOptions::new(repo.path());
    opts.runner = Some(aicli::providers::RunnerKind::Docker);
    opts.max_parallel = Some(3);
    let (tx, events) = collect_events();
    let run = tokio::spawn(async move {
        engine
            .run_batch(tasks, opts, tx, CancellationToken::new())
            .await
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let inspected = inspect_while_running(&docker, repo.path(), VENDORS.len(), deadline).await;
    let batch = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the batch ends")
        .unwrap()
        .expect("batch");
    let _ = events.await;
    assert_eq!(
        inspected.keys().map(String::as_str).collect::<Vec<_>>(),
        VENDORS.to_vec(),
        "every task's container was seen"
    );
    for (task, i) in &inspected {
        // The container is made before the command is known: its first process waits
        // for its go, then runs the launch script the run's private directory holds.
        let cmd = i["Config"]["Cmd"].to_string();
        assert!(cmd.contains("read -r go"), "{task}: {cmd}");
        assert!(
            !cmd.contains("stream-json") && !cmd.contains("--json"),
            "{task}: the adapter's argv is not in what the engine shows: {cmd}"
        );
        let hc = &i["HostConfig"];
        assert_eq!(hc["Memory"], 768 * 1024 * 1024, "{task}: {hc:#}");
        assert_eq!(
            hc["MemorySwap"],
            768 * 1024 * 1024,
            "{task}: no swap beyond"
        );
        assert_eq!(hc["NanoCpus"], 1_500_000_000_i64, "{task}");
        assert_eq!(hc["PidsLimit"], 300, "{task}");
        // The egress allowlist: no network; aicli's proxy and MCP server through the
        // run's sockets, the CLI started behind their forwarder.
        assert_eq!(hc["NetworkMode"], "none", "{task}");
        assert!(hc["ExtraHosts"].is_null(), "{task}: {hc:#}");
        assert!(
            hc["Binds"].as_array().is_some_and(|b| b
                .iter()
                .any(|b| b.as_str().is_some_and(|b| b.ends_with(":/aicli-egress:ro")))),
            "{task}: {hc:#}"
        );
        assert_eq!(i["Config"]["Cmd"][0], "/bin/sh", "{task}: {cmd}");
        assert_eq!(hc["Init"], true, "{task}");
        assert_eq!(hc["SecurityOpt"], serde_json::json!(["no-new-privileges"]));
        assert_eq!(i["Config"]["OpenStdin"], true, "{task}");
        assert_eq!(i["Config"]["StdinOnce"], true, "{task}");
        let whole = i.to_string();
        assert!(
            !whole.contains(&marker) && !whole.contains("filler line"),
            "{task}: the prompt is visible in docker inspect (Cmd starts {:.300})",
            cmd
        );
        // Nor the CLI's environment (it is in the launch script).
        for own in ["claude's own", "gemini's own", "America/Aicli_Test"] {
            assert!(!whole.contains(own), "{task}: {own} in docker inspect");
        }
    }
    for r in &batch.tasks {
        let v = r.task_id.as_str();
        assert_eq!(r.status, SessionStatus::Succeeded, "{r:#?}");
        let wt = r.worktree.clone().expect("the worktree holds the records");
        assert_eq!(
            std::fs::read_to_string(wt.join("stdin.txt")).unwrap(),
            prompt(v),
            "{v}: the prompt as the CLI read it"
        );
        let dumped = std::fs::read_to_string(wt.join("env.txt")).unwrap();
        let got: BTreeMap<&str, &str> = dumped.lines().filter_map(|l| l.split_once('=')).collect();
        assert!(!dumped.contains(&marker), "{v}: the prompt in the env");
        assert_eq!(got.get("TZ"), Some(&"America/Aicli_Test"), "{v}: {dumped}");
        assert_eq!(got.get("LANG"), Some(&"C.UTF-8"), "{v}");
        assert_eq!(got.get("HOME"), Some(&paths::HOME), "{v}");
        assert_eq!(
            got.get("PATH"),
            Some(&image_path.as_str()),
            "{v}: the image's PATH"
        );
        for gone in [
            "TMPDIR",
            "XDG_CONFIG_HOME",
            "SSL_CERT_FILE",
            "USER",
            "AICLI_TEST_UNLISTED_SECRET",
        ] {
            assert!(!got.contains_key(gone), "{v}: {gone} went in: {dumped}");
        }
        assert_eq!(
            got.contains_key("ANTHROPIC_AICLI_TEST"),
            v == "claude",
            "{v}: only claude's own variables reach claude"
        );
        assert_eq!(
            got.contains_key("GEMINI_AICLI_TEST"),
            v == "gemini",
            "{v}: only gemini's own variables reach gemini"
        );
    }
    support::assert_no_container(&docker, &batch.batch_id).await;
}
