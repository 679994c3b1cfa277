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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_constraints_send_tasks_to_their_node_and_ten_spread_each_on_its_branch() {
    let test = "two_nodes";
    let Some(docker) = support::local_engine(test).await else {
        return;
    };
    let _one = super::swarm::ONE_AT_A_TIME.lock().await;
    // The script makes the engine a manager and leaves the swarm afterwards: never over
    // a swarm that was there before.
    if docker.inspect_swarm().await.is_ok() {
        eprintln!("skipped {test}: the engine is in a swarm already (leave it to run this test)");
        return;
    }
    let config = AiCliConfig::builtin().unwrap();
    let image = support::provider_image(&docker, &config, "claude").await;
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

    // The image onto every node: loaded into the worker, then found there.
    let out = aicli(
        repo.path(),
        &cfg,
        &["image", "build", "claude", "--swarm", "--json"],
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

    // Ten tasks: one pinned to each node, eight placed by the swarm; and two that no
    // node can take.
    let mut tasks = vec![
        serde_json::json!({"id": "t0", "prompt": "work", "constraints": ["node.labels.role==worker"]}),
        serde_json::json!({"id": "t1", "prompt": "work", "constraints": ["node.role==manager"]}),
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
    assert_eq!(recs.len(), 12, "{}", stdout(&out));
    let mut on_worker = 0;
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
        if place.contains(WORKER_ADDR) {
            on_worker += 1;
        } else {
            assert!(place.contains(MANAGER_ADDR), "{id}: {place}");
        }
        if id == "t0" {
            assert!(
                place.contains(WORKER_ADDR),
                "t0 was pinned to the worker: {place}"
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
        (2..=8).contains(&on_worker),
        "the swarm spread the ten over both nodes: {on_worker} on the worker"
    );
    super::swarm::assert_no_job_for_repo(&docker, repo.path()).await;
    let left = support::labelled(&nodes.worker, aicli::runner::docker::swarm::JOB_LABEL).await;
    assert!(
        left.is_empty(),
        "job containers left on the worker: {left:?}"
    );
}
