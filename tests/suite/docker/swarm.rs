//! The swarm runner (`runner: swarm`) on a real single-node swarm: each test makes the
//! local engine a manager with `docker swarm init` (unless it already is one) and leaves
//! the swarm afterwards. The tests hold one lock, so one runs at a time.
//!
//! The jobs fetch their workspace from aicli over HTTP, read their orders from a Swarm
//! secret, stream their output back and post their work as a git bundle: the same
//! contract checks as `suite::e2e` for the three real CLIs, an MCP call, and nothing
//! left (service, secret, config, container); the prompt and the credential are in no
//! `docker service inspect` and in no container's env or args.

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::time::Duration;

use aicli::BatchOptions;
use aicli::providers::{RunnerKind, SessionStatus, TaskSpec};
use aicli::runner::docker::{labels, swarm::JOB_LABEL};
use bollard::Docker;
use tokio_util::sync::CancellationToken;

use super::support::{self, DockerSetup, docker_config, local_host};
use crate::suite::e2e::{
    Cli, Setup, builtin_tool_with, mcp_workspace_files_with, plain_answer_with,
    question_then_answer_with,
};
use crate::suite::support::{git, git_repo};

/// One swarm test at a time: the swarm is made and left around each.
pub static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Runs `body` with the local engine a swarm manager (made and left around it when the
/// engine was in no swarm); skipped without an engine.
pub(super) async fn on_swarm<F, Fut>(test: &str, body: F)
where
    F: FnOnce(Docker) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let Some(docker) = support::local_engine(test).await else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().await;
    let made = if docker.inspect_swarm().await.is_ok() {
        false
    } else {
        docker
            .init_swarm(bollard::models::SwarmInitRequest {
                listen_addr: Some("127.0.0.1:2377".to_owned()),
                advertise_addr: Some("127.0.0.1".to_owned()),
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("{test}: docker swarm init: {e}"));
        true
    };
    let ran = tokio::spawn(body(docker.clone())).await;
    if made {
        docker
            .leave_swarm(Some(bollard::query_parameters::LeaveSwarmOptions {
                force: true,
            }))
            .await
            .unwrap_or_else(|e| panic!("{test}: docker swarm leave: {e}"));
    }
    if let Err(e) = ran {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// A swarm object's labels.
type Labels = HashMap<String, String>;

/// What aicli made on the swarm for the tasks of `repo` and left: services, secrets,
/// configs, and the containers of its jobs.
pub async fn jobs_left(docker: &Docker, repo: &Path) -> Vec<String> {
    let managed = HashMap::from([("label", vec![labels::MANAGED])]);
    let mine = |l: Option<&HashMap<String, String>>| {
        l.and_then(|l| l.get(labels::WORKSPACE))
            .is_some_and(|w| Path::new(w).starts_with(repo))
    };
    // (kind, name, labels) of every aicli service, secret and config.
    let mut objects: Vec<(&str, Option<String>, Option<Labels>)> = Vec::new();
    let services = docker
        .list_services(Some(
            bollard::query_parameters::ListServicesOptionsBuilder::default()
                .filters(&managed)
                .build(),
        ))
        .await
        .expect("list services");
    for spec in services.into_iter().map(|s| s.spec.unwrap_or_default()) {
        objects.push(("service", spec.name, spec.labels));
    }
    let secrets = docker
        .list_secrets(Some(
            bollard::query_parameters::ListSecretsOptionsBuilder::default()
                .filters(&managed)
                .build(),
        ))
        .await
        .expect("list secrets");
    for spec in secrets.into_iter().map(|s| s.spec.unwrap_or_default()) {
        objects.push(("secret", spec.name, spec.labels));
    }
    let configs = docker
        .list_configs(Some(
            bollard::query_parameters::ListConfigsOptionsBuilder::default()
                .filters(&managed)
                .build(),
        ))
        .await
        .expect("list configs");
    for spec in configs.into_iter().map(|c| c.spec.unwrap_or_default()) {
        objects.push(("config", spec.name, spec.labels));
    }
    let mut left: Vec<String> = objects
        .into_iter()
        .filter(|(_, _, l)| mine(l.as_ref()))
        .map(|(kind, name, _)| format!("{kind} {}", name.unwrap_or_default()))
        .collect();
    for c in support::labelled(docker, JOB_LABEL).await {
        left.push(format!(
            "container {}",
            c.names.unwrap_or_default().join(",")
        ));
    }
    left
}

/// Fails when aicli left anything on the swarm for the tasks of `repo`.
pub async fn assert_no_job_for_repo(docker: &Docker, repo: &Path) {
    let left = jobs_left(docker, repo).await;
    assert!(
        left.is_empty(),
        "left on the swarm for {}: {left:?}",
        repo.display()
    );
}

macro_rules! contract {
    ($($name:ident: $check:ident($cli:expr);)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            on_swarm(stringify!($name), |docker| async move {
                $check($cli, Setup::in_docker(DockerSetup::swarm(docker).await)).await;
            })
            .await;
        }
    )*};
}

contract! {
    claude_on_swarm_plain_answer: plain_answer_with(Cli::Claude);
    claude_on_swarm_bash_tool_commits_on_the_branch: builtin_tool_with(Cli::Claude);
    claude_on_swarm_mcp_get_workspace_files: mcp_workspace_files_with(Cli::Claude);
    claude_on_swarm_question_answer_resumes_the_session_in_a_new_job: question_then_answer_with(Cli::Claude);
    codex_on_swarm_plain_answer: plain_answer_with(Cli::Codex);
    codex_on_swarm_shell_tool_commits_on_the_branch: builtin_tool_with(Cli::Codex);
    gemini_on_swarm_plain_answer: plain_answer_with(Cli::Gemini);
    gemini_on_swarm_shell_tool_commits_on_the_branch: builtin_tool_with(Cli::Gemini);
}

/// Everything the engine shows of `repo`'s running job, as JSON text: its service (`docker
/// service inspect`) and its container (`docker inspect`: env, args, labels), as soon as
/// the container exists.
async fn inspect_running_job(
    docker: &Docker,
    repo: &Path,
    deadline: tokio::time::Instant,
) -> (String, String) {
    let managed = HashMap::from([("label", vec![labels::MANAGED])]);
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no running swarm job of {} seen",
            repo.display()
        );
        let services = docker
            .list_services(Some(
                bollard::query_parameters::ListServicesOptionsBuilder::default()
                    .filters(&managed)
                    .build(),
            ))
            .await
            .expect("list services");
        let service = services.into_iter().find(|s| {
            s.spec
                .as_ref()
                .and_then(|s| s.labels.as_ref())
                .and_then(|l| l.get(labels::WORKSPACE))
                .is_some_and(|w| Path::new(w).starts_with(repo))
        });
        if let Some(s) = service {
            let name = s
                .spec
                .as_ref()
                .and_then(|s| s.name.clone())
                .unwrap_or_default();
            let container = support::labelled(docker, &format!("{JOB_LABEL}={name}"))
                .await
                .into_iter()
                .find_map(|c| c.id);
            if let Some(id) = container {
                let inspected = docker
                    .inspect_container(
                        &id,
                        None::<bollard::query_parameters::InspectContainerOptions>,
                    )
                    .await
                    .expect("inspect container");
                let service = docker
                    .inspect_service(
                        &name,
                        None::<bollard::query_parameters::InspectServiceOptions>,
                    )
                    .await
                    .expect("inspect service");
                return (
                    serde_json::to_string(&service).expect("json"),
                    serde_json::to_string(&inspected).expect("json"),
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The Claude adapter's command running the fake CLI as a swarm job: the prompt reaches
/// the CLI's stdin and the provider's credential its environment, yet neither is in what
/// the engine shows of the service or its container; the CLI's file comes back as aicli's
/// commit on the task's branch; nothing is left on the swarm afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prompt_and_the_credential_stay_out_of_the_service_and_nothing_is_left() {
    on_swarm(
        "the_prompt_and_the_credential_stay_out",
        |docker| async move {
            let image = support::fake_cli_image(&docker).await;
            let repo = git_repo();
            let mut config = docker_config(vec![local_host()], &image);
            config.engine.runner = RunnerKind::Swarm;
            const PROMPT: &str = "the swarm prompt 7f3e9c, never in an inspect";
            const SECRET: &str = "sk-swarm-credential-5b1d0a77";
            let mut p = support::adapter_fake(&mut config, "claude", "text", &[]);
            p.env
                .insert("FAKE_API_KEY_FOR_THE_TEST".into(), SECRET.into());
            config.providers.insert("fake".into(), p);
            let engine = support::config_engine(config);
            let task = TaskSpec {
                id: "t1".into(),
                prompt: PROMPT.into(),
                extra_args: vec![
                    "--record-stdin".into(),
                    "stdin.txt".into(),
                    "--probe".into(),
                    "probe.json".into(),
                    "--line-delay-ms".into(),
                    "1500".into(),
                ],
                ..TaskSpec::default()
            };
            let mut opts = BatchOptions::new(repo.path());
            opts.provider = Some("fake".into());
            let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
            let (batch, (service, container)) = tokio::join!(
                support::run_batch_within(
                    &engine,
                    vec![task],
                    opts,
                    Duration::from_secs(180),
                    CancellationToken::new()
                ),
                inspect_running_job(&docker, repo.path(), deadline),
            );
            for (what, text) in [("service", &service), ("container", &container)] {
                assert!(
                    !text.contains("7f3e9c"),
                    "the prompt is in the {what}'s inspect: {text}"
                );
                assert!(
                    !text.contains(SECRET),
                    "the credential is in the {what}'s inspect: {text}"
                );
            }
            assert_eq!(batch.n_succeeded, 1, "{:#?}", batch.tasks);
            let r = &batch.tasks[0];
            assert_eq!(r.status, SessionStatus::Succeeded);
            assert!(r.response.contains("Hello"), "{r:#?}");
            let wt = r.worktree.clone().expect("the worktree keeps the work");
            let branch = r.branch.clone().expect("branch");
            // The CLI read its prompt on stdin and had its credential, in the job.
            assert_eq!(git(&wt, &["show", &format!("{branch}:stdin.txt")]), PROMPT);
            let probe = git(&wt, &["show", &format!("{branch}:probe.json")]);
            assert!(
                probe.contains("FAKE_API_KEY_FOR_THE_TEST") && probe.contains(SECRET),
                "{probe}"
            );
            assert_eq!(
                git(&wt, &["status", "--porcelain", "--untracked-files=all"]),
                ""
            );
            assert_eq!(
                crate::support::git::aicli_commit(&wt, &branch).1,
                vec!["probe.json".to_owned(), "stdin.txt".to_owned()]
            );
            let rec = engine
                .store(repo.path(), None)
                .open_batch(&batch.batch_id)
                .unwrap();
            let place = rec.task("t1").unwrap().attempts[0].place.clone().unwrap();
            assert!(place.starts_with("swarm "), "{place}");
            assert_no_job_for_repo(&docker, repo.path()).await;
        },
    )
    .await;
}

/// A task of the fake provider with these extra arguments.
fn fake_task(id: &str, args: &[&str]) -> TaskSpec {
    TaskSpec {
        id: id.into(),
        prompt: format!("prompt of {id}"),
        extra_args: args.iter().map(|a| (*a).to_owned()).collect(),
        ..TaskSpec::default()
    }
}

/// Failure, timeout and cancel of swarm jobs: each run ends as it should, what the
/// stopped CLI wrote comes back into the worktree (its runner packs it on SIGTERM), and
/// no service, secret, config or container is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_end_of_a_job_removes_it_and_keeps_the_work() {
    on_swarm("every_end_of_a_job", |docker| async move {
        let image = support::fake_cli_image(&docker).await;
        let repo = git_repo();
        let mut config = docker_config(vec![local_host()], &image);
        config.engine.runner = RunnerKind::Swarm;
        support::adapter_fake(&mut config, "claude", "text", &[]);
        let engine = support::config_engine(config);
        let run = |tasks: Vec<TaskSpec>, cancel: CancellationToken| {
            let mut opts = BatchOptions::new(repo.path());
            opts.provider = Some("fake".into());
            support::run_batch_within(&engine, tasks, opts, Duration::from_secs(150), cancel)
        };

        // Failure: the CLI reports it cannot reach the API and exits 1.
        let badkey = format!("{}/claude/badkey.ndjson", support::FIXTURES_IN_IMAGE);
        let b = run(
            vec![fake_task("fails", &["--replay", &badkey, "--exit", "1"])],
            CancellationToken::new(),
        )
        .await;
        let r = &b.tasks[0];
        assert_eq!(r.status, SessionStatus::Failed, "{r:#?}");
        assert_eq!(r.error_kind, Some(aicli::providers::ErrorKind::Network));
        assert_eq!(r.exit_code, Some(1));
        assert_no_job_for_repo(&docker, repo.path()).await;

        // Timeout: it hangs after its first line; the wall-clock limit ends it.
        let mut t = fake_task(
            "hangs",
            &["--touch", "made-before-timeout.txt", "--hang-after", "1"],
        );
        t.timeout_secs = Some(4);
        let started = std::time::Instant::now();
        let b = run(vec![t], CancellationToken::new()).await;
        let r = &b.tasks[0];
        assert_eq!(
            r.error_kind,
            Some(aicli::providers::ErrorKind::Timeout),
            "{r:#?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{:?}",
            started.elapsed()
        );
        let wt = r
            .worktree
            .clone()
            .expect("the timed-out task keeps its work");
        assert!(
            wt.join("made-before-timeout.txt").is_file(),
            "the work did not come back"
        );
        assert_no_job_for_repo(&docker, repo.path()).await;

        // Cancel: once the CLI has printed, the batch is cancelled.
        let cancel = CancellationToken::new();
        let c2 = cancel.clone();
        let wait_for_job = {
            let docker = docker.clone();
            async move {
                let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
                while support::labelled(&docker, JOB_LABEL).await.is_empty() {
                    assert!(tokio::time::Instant::now() < deadline, "no job started");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                tokio::time::sleep(Duration::from_secs(3)).await;
                c2.cancel();
            }
        };
        let (b, ()) = tokio::join!(
            run(
                vec![fake_task(
                    "cancelled",
                    &["--touch", "made-before-cancel.txt", "--hang-after", "1"]
                )],
                cancel,
            ),
            wait_for_job
        );
        let r = &b.tasks[0];
        assert_eq!(r.status, SessionStatus::Interrupted, "{r:#?}");
        let wt = r
            .worktree
            .clone()
            .expect("the cancelled task keeps its work");
        assert!(
            wt.join("made-before-cancel.txt").is_file(),
            "the work did not come back"
        );
        assert_no_job_for_repo(&docker, repo.path()).await;
    })
    .await;
}

/// `aicli batch --runner swarm` killed with SIGKILL while its job runs: the service, its
/// secret and config stay (their owner gone) and `aicli containers` lists the job;
/// `aicli containers prune` removes them and the job's container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_removes_the_jobs_of_a_killed_aicli() {
    use crate::suite::support::{
        aicli_with, batch_id, kill_9, spawn_batch, task_printed, wait_for_batch,
    };
    on_swarm("prune_removes_the_jobs_of_a_killed_aicli", |docker| async move {
        let image = support::fake_cli_image(&docker).await;
        let repo = git_repo();
        let dir = tempfile::tempdir().unwrap();
        let cfg = support::image_fake_config(dir.path(), &image, &[local_host()]);
        let tasks = serde_json::json!({"runner": "swarm", "tasks": [
            {"id": "slow", "prompt": "s", "extra_args": ["--touch", "slow.txt", "--line-delay-ms", "5000"]}
        ]});
        let mut child = spawn_batch(&cfg, &tasks, &["--repo", repo.path().to_str().unwrap()]);
        let runs = repo.path().join(".aicli/runs");
        let batch_dir = wait_for_batch(
            &runs,
            Duration::from_secs(90),
            Duration::from_millis(100),
            "the run never printed",
            |b| task_printed(b, "slow"),
        );
        let batch = batch_id(&batch_dir);
        kill_9(&mut child);
        let left = jobs_left(&docker, repo.path()).await;
        assert!(left.iter().any(|l| l.starts_with("service ")), "{left:?}");
        assert!(left.iter().any(|l| l.starts_with("secret ")), "{left:?}");
        // `aicli containers` lists the job with its task.
        let out = aicli_with(&cfg, &["containers"]).output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            said.lines().any(|l| l.starts_with("swarm job aicli-") && l.contains(&format!("task {batch}/slow"))),
            "{said}"
        );
        let out = aicli_with(&cfg, &["containers", "prune"]).output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
        assert!(said.contains("removed swarm service"), "{said}");
        assert_no_job_for_repo(&docker, repo.path()).await;
    })
    .await;
}

/// A task run in the repository itself (no worktree) whose checkout has uncommitted
/// changes: the job's workspace holds them as uncommitted changes on the start commit (a
/// modified file, a new one, a deleted one: the bundle's carry), and the CLI's work comes
/// back beside them, the user's changes untouched and still uncommitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_uncommitted_carry_reaches_the_job_and_stays_uncommitted() {
    on_swarm("the_uncommitted_carry", |docker| async move {
        let image = support::fake_cli_image(&docker).await;
        let repo = git_repo();
        let root = repo.path();
        std::fs::write(root.join("data.txt"), "v1\n").unwrap();
        std::fs::write(root.join("gone.txt"), "x\n").unwrap();
        git(root, &["add", "data.txt", "gone.txt"]);
        git(root, &["commit", "-q", "-m", "data"]);
        let head = git(root, &["rev-parse", "HEAD"]);
        std::fs::write(root.join("data.txt"), "v2 uncommitted\n").unwrap();
        std::fs::write(root.join("new.txt"), "untracked\n").unwrap();
        std::fs::remove_file(root.join("gone.txt")).unwrap();
        let mut config = docker_config(vec![local_host()], &image);
        config.engine.runner = RunnerKind::Swarm;
        support::adapter_fake(&mut config, "claude", "text", &[]);
        let engine = support::config_engine(config);
        // The CLI sees the carry: it fails unless new.txt is there and gone.txt is not
        // (--require-file), and copies what it read of data.txt to its own file.
        let task = fake_task(
            "carry",
            &[
                "--require-file",
                "/workspace/new.txt",
                "--probe",
                "probe.json",
            ],
        );
        let mut opts = BatchOptions::new(root);
        opts.provider = Some("fake".into());
        opts.worktrees = false;
        let b = support::run_batch_within(
            &engine,
            vec![task],
            opts,
            Duration::from_secs(150),
            CancellationToken::new(),
        )
        .await;
        let r = &b.tasks[0];
        assert_eq!(r.status, SessionStatus::Succeeded, "{r:#?}");
        // HEAD did not move; the user's changes and the CLI's file are uncommitted.
        assert_eq!(git(root, &["rev-parse", "HEAD"]), head);
        assert_eq!(
            std::fs::read_to_string(root.join("data.txt")).unwrap(),
            "v2 uncommitted\n"
        );
        assert!(!root.join("gone.txt").exists());
        assert_eq!(
            git(root, &["diff", "--name-status"]),
            "M\tdata.txt\nD\tgone.txt"
        );
        assert_eq!(git(root, &["diff", "--cached", "--name-status"]), "");
        let untracked = git(root, &["ls-files", "--others", "--", ":!.aicli"]);
        assert_eq!(untracked, "new.txt\nprobe.json");
        assert_no_job_for_repo(&docker, root).await;
    })
    .await;
}
