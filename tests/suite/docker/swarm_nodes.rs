//! The swarm runner on two nodes: the local engine as the manager, and a second `dockerd`
//! in a network namespace of the test's, joined as a worker labelled `role=worker`
//! (`tests/tools/swarm-two-nodes.sh`, taken down when the test ends, passed or not).
//!
//! Through the binary, as a user runs it: `aicli image build --swarm` loads the image
//! into the worker through its engine; a batch of the real claude CLI (against the fake
//! Anthropic API, served where both nodes reach aicli) spreads over the two nodes, a
//! constraint sends a task to the worker and another to the manager, and tasks no node
//! can place (a constraint no node meets, a reservation no node holds) wait, say why,
//! and end as `timeout` when their timeout passes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use aicli::providers::AiCliConfig;
use bollard::Docker;

use super::support;
use crate::suite::cli::{aicli_bin, assert_code, stdout};
use crate::suite::support::{git, git_repo};

/// The project's copy of the two-node script.
fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tools/swarm-two-nodes.sh")
}

/// The worker's engine socket (the script's default).
const WORKER_SOCK: &str = "/var/tmp/aicli-sw1/docker.sock";
/// The manager's and the worker's addresses on their link (the script's defaults).
const MANAGER_ADDR: &str = "10.88.0.1";
const WORKER_ADDR: &str = "10.88.0.2";

/// The two-node swarm, taken down on drop.
struct TwoNodes {
    worker: Docker,
}

impl TwoNodes {
    fn up() -> TwoNodes {
        let out = Command::new("bash")
            .arg(script())
            .arg("up")
            .stdin(Stdio::null())
            .output()
            .expect("run swarm-two-nodes.sh");
        let guard = TwoNodes {
            worker: Docker::connect_with_unix(WORKER_SOCK, 300, bollard::API_DEFAULT_VERSION)
                .expect("the worker's socket"),
        };
        assert!(
            out.status.success(),
            "swarm-two-nodes.sh up: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        guard
    }
}

impl Drop for TwoNodes {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(script())
            .arg("down")
            .stdin(Stdio::null())
            .output();
    }
}

fn aicli(repo: &Path, cfg: &Path, args: &[&str]) -> Output {
    Command::new(aicli_bin())
        .arg("--config")
        .arg(cfg)
        .args(args)
        .current_dir(repo)
        .env_remove("DOCKER_HOST")
        .stdin(Stdio::null())
        .output()
        .expect("run aicli")
}

/// Each task's record: (id, its `task.json`, its aicli events as text).
fn tasks_of(repo: &Path) -> Vec<(String, serde_json::Value, String)> {
    let mut out = Vec::new();
    for b in std::fs::read_dir(repo.join(".aicli/runs"))
        .unwrap()
        .flatten()
    {
        for t in std::fs::read_dir(b.path().join("tasks")).unwrap().flatten() {
            let rec: serde_json::Value =
                serde_json::from_slice(&std::fs::read(t.path().join("task.json")).unwrap())
                    .unwrap();
            let events =
                std::fs::read_to_string(t.path().join("aicli-events.ndjson")).unwrap_or_default();
            out.push((t.file_name().to_string_lossy().into_owned(), rec, events));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The local engine and the swarm tests' lock, when the engine is in no swarm: the
/// script makes it a manager and leaves the swarm afterwards, so never over a swarm that
/// was there before. `None` (said) when the test is skipped.
async fn engine_in_no_swarm(test: &str) -> Option<(Docker, tokio::sync::MutexGuard<'static, ()>)> {
    let docker = support::local_engine(test).await?;
    let one = super::swarm::ONE_AT_A_TIME.lock().await;
    if docker.inspect_swarm().await.is_ok() {
        eprintln!("skipped {test}: the engine is in a swarm already (leave it to run this test)");
        return None;
    }
    Some((docker, one))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_constraints_send_tasks_to_their_node_and_ten_spread_each_on_its_branch() {
    let Some((docker, _one)) = engine_in_no_swarm("two_nodes").await else {
        return;
    };
    let config = AiCliConfig::builtin().unwrap();
    let image = support::provider_image(&docker, &config, "claude").await;
    for cli in ["codex", "gemini"] {
        support::provider_image(&docker, &config, cli).await;
    }
    let nodes = TwoNodes::up();
    // The worker's engine starts empty: the image is not there.
    assert!(
        nodes.worker.inspect_image(&image).await.is_err(),
        "{image} on a fresh worker"
    );

    let repo = git_repo();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("aicli.json");
    std::fs::write(
        &cfg,
        serde_json::json!({"engine": {"docker": {"hosts": [
            {"name": "manager", "url": "unix:///var/run/docker.sock"},
            {"name": "worker", "url": format!("unix://{WORKER_SOCK}")},
        ]}}})
        .to_string(),
    )
    .unwrap();

    // The images onto every node: loaded into the worker, then found there.
    let out = aicli(
        repo.path(),
        &cfg,
        &[
            "image", "build", "claude", "codex", "gemini", "--swarm", "--json",
        ],
    );
    assert_code(&out, 0, "aicli image build --swarm");
    let built: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("--json");
    let on_nodes = |v: &serde_json::Value| -> Vec<(String, String)> {
        v["swarm"][0]["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .map(|n| {
                (
                    n["host"].as_str().unwrap_or("-").to_owned(),
                    n["done"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect::<Vec<_>>()
    };
    let mut done = on_nodes(&built);
    done.sort();
    assert_eq!(
        done,
        [
            ("manager".into(), "built".into()),
            ("worker".into(), "loaded".into())
        ],
        "{built}"
    );
    assert_eq!(
        nodes
            .worker
            .inspect_image(&image)
            .await
            .ok()
            .and_then(|i| i.id),
        docker.inspect_image(&image).await.ok().and_then(|i| i.id),
        "the worker holds the manager's very image"
    );
    let again = aicli(
        repo.path(),
        &cfg,
        &["image", "build", "claude", "--swarm", "--json"],
    );
    assert_code(&again, 0, "aicli image build --swarm, again");
    let again: serde_json::Value = serde_json::from_str(&stdout(&again)).unwrap();
    assert!(
        on_nodes(&again).contains(&("worker".into(), "present".into())),
        "{again}"
    );

    // Ten claude tasks: one pinned to each node, eight placed by the swarm; codex and
    // gemini pinned to the worker; and two that no node can take.
    let worker = "node.labels.role==worker";
    let mut tasks = vec![
        serde_json::json!({"id": "t0", "prompt": "work", "constraints": [worker]}),
        serde_json::json!({"id": "t1", "prompt": "work", "constraints": ["node.role==manager"]}),
        serde_json::json!({"id": "c0", "prompt": "work", "provider": "codex", "constraints": [worker]}),
        serde_json::json!({"id": "g0", "prompt": "work", "provider": "gemini", "constraints": [worker]}),
    ];
    for i in 2..10 {
        tasks.push(serde_json::json!({"id": format!("t{i}"), "prompt": "work"}));
    }
    tasks.push(
        serde_json::json!({"id": "gpu", "prompt": "work", "timeout_secs": 8,
        "constraints": ["node.labels.gpu==true"]}),
    );
    tasks.push(
        serde_json::json!({"id": "huge", "prompt": "work", "timeout_secs": 8,
        "resources": {"memory_mb": 0, "reserve_memory_mb": 4_000_000}}),
    );
    let file = dir.path().join("tasks.json");
    std::fs::write(
        &file,
        serde_json::json!({"provider": "claude", "tasks": tasks}).to_string(),
    )
    .unwrap();
    let out = aicli(
        repo.path(),
        &cfg,
        &[
            "batch",
            file.to_str().unwrap(),
            "--runner",
            "swarm",
            "--fake-api=shell:pwd > where.txt",
        ],
    );
    // Two tasks time out: a batch with failed tasks exits 4.
    assert_code(&out, 4, "aicli batch --runner swarm");
    let recs = tasks_of(repo.path());
    assert_eq!(recs.len(), 14, "{}", stdout(&out));
    let mut free_on_worker = 0;
    for (id, rec, events) in &recs {
        let place = rec["attempts"][0]["place"].as_str().unwrap_or_default();
        if id == "gpu" || id == "huge" {
            assert_eq!(rec["state"], "failed", "{id}: {rec}");
            assert_eq!(
                rec["attempts"][0]["result"]["error_kind"], "timeout",
                "{id}: {rec}"
            );
            let why = if id == "gpu" {
                "scheduling constraints not satisfied"
            } else {
                "insufficient resources"
            };
            assert!(
                events.contains("waiting for a swarm node to take the job") && events.contains(why),
                "{id} said why it waited: {events}"
            );
            continue;
        }
        assert_eq!(rec["state"], "succeeded", "{id}: {rec}");
        // The node it ran on is in its record.
        assert!(place.contains(" on node "), "{id}: {place}");
        let pinned = ["t0", "t1", "c0", "g0"].contains(&id.as_str());
        if place.contains(WORKER_ADDR) {
            free_on_worker += usize::from(!pinned);
        } else {
            assert!(place.contains(MANAGER_ADDR), "{id}: {place}");
        }
        if id == "c0" || id == "g0" {
            assert!(
                place.contains(WORKER_ADDR),
                "{id} was pinned to the worker: {place}"
            );
        }
        if id == "t0" {
            assert!(
                place.contains(WORKER_ADDR),
                "t0 was pinned to the worker: {place}"
            );
            // From the worker, the CLI reached aicli's MCP server (its init line says
            // so), at the manager's address on the link.
            let stream: String = std::fs::read_dir(repo.path().join(".aicli/runs"))
                .unwrap()
                .flatten()
                .filter_map(|b| {
                    std::fs::read_to_string(b.path().join("tasks/t0/events.ndjson")).ok()
                })
                .collect();
            assert!(
                stream.contains(r#"{"name":"aicli","status":"connected""#),
                "t0's CLI did not reach aicli's MCP server from the worker: {stream}"
            );
        }
        if id == "t1" {
            assert!(
                place.contains(MANAGER_ADDR),
                "t1 was pinned to the manager: {place}"
            );
        }
        // Its work is on its own branch, one commit over the start, with its name.
        let branch = rec["branch"].as_str().expect("branch");
        let log = git(
            repo.path(),
            &["log", "--format=%s", &format!("HEAD..{branch}")],
        );
        let subjects: Vec<&str> = log.lines().collect();
        assert_eq!(subjects.len(), 1, "{id}: {log}");
        assert!(subjects[0].starts_with(&format!("{id}:")), "{id}: {log}");
        let file = git(repo.path(), &["show", &format!("{branch}:where.txt")]);
        assert_eq!(file.trim(), "/workspace", "{id}");
    }
    assert!(
        (1..=7).contains(&free_on_worker),
        "the swarm spread the eight free tasks over both nodes: {free_on_worker} on the worker"
    );
    super::swarm::assert_no_job_for_repo(&docker, repo.path()).await;
    let left = support::labelled(&nodes.worker, aicli::runner::docker::swarm::JOB_LABEL).await;
    assert!(
        left.is_empty(),
        "job containers left on the worker: {left:?}"
    );
}

/// The worker dies mid-run, as when its machine goes: its link cut, its engine's
/// processes (dockerd, containerd, the shims) and every process of the job's container
/// killed with SIGKILL. Once the manager says the node is down, the run ends
/// `interrupted` (error `crashed`, naming the node) with what the CLI streamed before
/// kept, nothing is left on the manager, and `aicli resume` runs the task again on the
/// manager, where it succeeds with its work on its branch. (The fake CLI, whose stream
/// is paced: a real CLI against the fake API may end before the node does.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_dies_mid_run_interrupts_the_task_and_resume_reruns_it_on_the_manager() {
    use crate::suite::support::{batch_id, kill_9, task_printed, wait_for_batch};
    let Some((docker, _one)) = engine_in_no_swarm("worker_dies").await else {
        return;
    };
    let image = support::fake_cli_image(&docker).await;
    let nodes = TwoNodes::up();
    support::load_image(&docker, &nodes.worker, &image).await;
    let repo = git_repo();
    let dir = tempfile::tempdir().unwrap();
    let hosts: Vec<aicli::providers::DockerHostConfig> =
        serde_json::from_value(serde_json::json!([
            {"name": "manager", "url": "unix:///var/run/docker.sock"},
            {"name": "worker", "url": format!("unix://{WORKER_SOCK}")},
        ]))
        .unwrap();
    // First on the worker (the provider's constraint); the resume runs without it.
    let anywhere = support::image_fake_config(dir.path(), &image, &hosts);
    let mut with_constraint: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&anywhere).unwrap()).unwrap();
    with_constraint["engine"]["docker"]["constraints"] =
        serde_json::json!({"fake": ["node.labels.role==worker"]});
    let on_worker = dir.path().join("on-worker.json");
    std::fs::write(&on_worker, with_constraint.to_string()).unwrap();
    let file = dir.path().join("tasks.json");
    std::fs::write(
        &file,
        serde_json::json!({"tasks": [{"id": "long", "prompt": "work",
            "extra_args": ["--touch", "long.txt", "--line-delay-ms", "8000"]}]})
        .to_string(),
    )
    .unwrap();
    let mut child = Command::new(aicli_bin())
        .arg("--config")
        .arg(&on_worker)
        .args(["batch", file.to_str().unwrap(), "--runner", "swarm"])
        .current_dir(repo.path())
        .env_remove("DOCKER_HOST")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let runs = repo.path().join(".aicli/runs");
    let batch_dir = wait_for_batch(
        &runs,
        Duration::from_secs(120),
        Duration::from_millis(200),
        "the job on the worker never printed",
        |b| task_printed(b, "long"),
    );
    let batch = batch_id(&batch_dir);
    let running = support::labelled(&nodes.worker, aicli::runner::docker::swarm::JOB_LABEL).await;
    assert_eq!(running.len(), 1, "the job runs on the worker: {running:?}");
    let container = running[0].id.clone().expect("the container's id");
    let link = Command::new("ip")
        .args(["link", "set", "vh-aicli-sw1", "down"])
        .status()
        .unwrap();
    assert!(link.success(), "ip link set vh-aicli-sw1 down");
    let engine_pids = Command::new("ip")
        .args(["netns", "pids", "aicli-sw1"])
        .output()
        .unwrap();
    let mut doomed: Vec<i32> = String::from_utf8_lossy(&engine_pids.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    assert!(!doomed.is_empty(), "the worker's engine processes");
    doomed.extend(processes_in_cgroup_of(&container));
    for p in doomed {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(p),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    // The manager notices (its heartbeat), aicli ends the run within its grace.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let (status, stdout, stderr) = loop {
        if let Some(status) = child.try_wait().unwrap() {
            use std::io::Read;
            let (mut out, mut err) = (String::new(), String::new());
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut out)
                .unwrap();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            break (status, out, err);
        }
        if std::time::Instant::now() > deadline {
            kill_9(&mut child);
            panic!("aicli did not end the run of the dead worker within 120 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let events = std::fs::read_to_string(batch_dir.join("tasks/long/events.ndjson")).unwrap();
    // Exit 5: interrupted, for `aicli resume`.
    assert_eq!(
        status.code(),
        Some(5),
        "{stdout}\n{stderr}\nevents: {events}"
    );
    let recs = tasks_of(repo.path());
    let (_, rec, _) = &recs[0];
    assert_eq!(rec["state"], "interrupted", "{rec}");
    let first = &rec["attempts"][0];
    assert_eq!(first["result"]["error_kind"], "crashed", "{rec}");
    let error = first["result"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("went down mid-run") && error.contains(WORKER_ADDR),
        "{error}"
    );
    assert!(
        first["place"]
            .as_str()
            .unwrap_or_default()
            .contains(WORKER_ADDR),
        "{rec}"
    );
    // What the CLI streamed is kept: its first line, not its last.
    assert!(events.contains(r#""subtype":"init""#), "{events}");
    assert!(!events.contains(r#""type":"result""#), "{events}");
    super::swarm::assert_no_job_for_repo(&docker, repo.path()).await;

    // The resume runs it again: the worker is down, the manager takes it.
    let out = aicli(repo.path(), &anywhere, &["resume", &batch, "--json"]);
    assert_code(&out, 0, "aicli resume");
    let recs = tasks_of(repo.path());
    let (_, rec, _) = &recs[0];
    assert_eq!(rec["state"], "succeeded", "{rec}");
    let second = &rec["attempts"][1];
    assert!(
        second["place"]
            .as_str()
            .unwrap_or_default()
            .contains(MANAGER_ADDR),
        "{rec}"
    );
    let branch = rec["branch"].as_str().expect("branch");
    let files = git(repo.path(), &["ls-tree", "--name-only", branch]);
    assert!(files.lines().any(|f| f == "long.txt"), "{files}");
    super::swarm::assert_no_job_for_repo(&docker, repo.path()).await;
}

/// The processes whose cgroup path names container `id` (its CLI, the runner, its init).
fn processes_in_cgroup_of(id: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|c| c.contains(id))
        })
        .collect()
}
