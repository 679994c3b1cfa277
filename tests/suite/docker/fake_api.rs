//! `--fake-api` with `--runner docker`: the real CLIs in their containers against the
//! embedded fake model APIs, served on the bridge gateway: offline, no API key.

use aicli::providers::AiCliConfig;

use super::support;
use crate::suite::cli::{aicli_bin, assert_code, stdout};
use crate::suite::support::git_repo;

fn json_lines(out: &std::process::Output) -> Vec<serde_json::Value> {
    stdout(out)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn places(repo: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for b in std::fs::read_dir(repo.join(".aicli/runs"))
        .unwrap()
        .flatten()
    {
        for t in std::fs::read_dir(b.path().join("tasks")).unwrap().flatten() {
            let v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(t.path().join("task.json")).unwrap())
                    .unwrap();
            for a in v["attempts"].as_array().unwrap() {
                out.push(a["place"].as_str().unwrap_or("-").to_owned());
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_runner_docker_fake_api_works_offline_for_all_three_clis() {
    let Some(docker) = support::local_engine("run_runner_docker_fake_api").await else {
        return;
    };
    let config = AiCliConfig::builtin().unwrap();
    for p in ["claude", "codex", "gemini"] {
        support::provider_image(&docker, &config, p).await;
    }
    let repo = git_repo();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("aicli.json");
    std::fs::write(&cfg, "{}").unwrap();
    let aicli = |args: &[&str]| {
        std::process::Command::new(aicli_bin())
            .arg("--config")
            .arg(&cfg)
            .args(args)
            .current_dir(repo.path())
            .env_remove("DOCKER_HOST")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    for (p, answer) in [
        ("claude", "Hello from the fake Anthropic API."),
        ("codex", "Hello from the fake OpenAI Responses API."),
        ("gemini", "Hello from the fake Gemini API."),
    ] {
        let out = aicli(&[
            "run",
            "--runner",
            "docker",
            "--fake-api",
            "--provider",
            p,
            "--json",
            "Say hello",
        ]);
        assert_code(&out, 0, p);
        let last = json_lines(&out).pop().unwrap();
        assert_eq!(last["status"], "succeeded", "{p}: {last}");
        assert_eq!(last["response"], answer, "{p}: {last}");
    }
    // A question blocks the run; the answer resumes the session in a new container.
    let out = aicli(&[
        "run",
        "--runner",
        "docker",
        "--provider",
        "codex",
        "--fake-api=ask:Which colour?|red|blue",
        "Paint the shed",
    ]);
    assert_code(&out, 3, "a blocked run");
    let text = stdout(&out);
    let task_ref = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("answer with: aicli answer "))
        .and_then(|h| h.split_whitespace().next())
        .unwrap_or_else(|| panic!("no hint in {text}"))
        .to_owned();
    let out = aicli(&["answer", &task_ref, "red", "--fake-api", "--json"]);
    assert_code(&out, 0, "the answer");
    let r = json_lines(&out).pop().unwrap();
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(r["continuation"]["mode"], "resume", "{r}");
    // The web view shows the container runs: their rows say where they ran, and the
    // blocked one's transcript holds its question, the answer, and both runs.
    let mut cmd = std::process::Command::new(aicli_bin());
    cmd.arg("--config")
        .arg(&cfg)
        .args(["web", "--json"])
        .current_dir(repo.path())
        .env_remove("DOCKER_HOST");
    let web = crate::suite::web::Web::spawn(cmd);
    let (batch, task) = task_ref.split_once('/').expect("BATCH/TASK");
    let rows = web.get(&format!("/api/batches/{batch}/rows")).await;
    assert_eq!(rows[0]["id"], task, "{rows}");
    assert!(
        rows[0]["runner"].as_str().unwrap().starts_with("docker "),
        "{rows}"
    );
    assert_eq!(rows[0]["status"], "succeeded", "{rows}");
    assert_eq!(rows[0]["state"], "succeeded", "{rows}");
    let finals = |evs: &[(String, serde_json::Value)]| {
        evs.iter().filter(|(_, v)| v["type"] == "final").count()
    };
    let events = web.transcript_until(batch, task, |e| finals(e) == 2).await;
    let question = events
        .iter()
        .position(|(_, v)| v["type"] == "question" && v["question"] == "Which colour?");
    let answer = events.iter().position(|(_, v)| v["answer"] == "red");
    assert!(
        question.is_some() && answer > question,
        "the question, then the answer: {events:?}"
    );
    drop(web);
    let places = places(repo.path());
    assert_eq!(places.len(), 5, "{places:?}");
    assert!(
        places.iter().all(|p| p.starts_with("docker ")),
        "{places:?}"
    );
    support::assert_no_container_for_repo(&docker, repo.path()).await;
}
