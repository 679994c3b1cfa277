//! `aicli image build` and the image part of `aicli doctor`, through the binary, on the
//! real engine.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use aicli::providers::AiCliConfig;

use super::support;

fn aicli(config: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_aicli"))
        .arg("--config")
        .arg(config)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("aicli runs")
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `aicli image build gemini --base IMAGE` on a base named by the user that already has
/// node, git and a user 1000 (as `node:22-slim` has): the image holds the pinned CLI
/// (its `--version` inside), labelled with the CLI and the base; built again, it is
/// kept as it is. `aicli doctor --json` then reports every provider's image on the
/// engine with the version inside, and a missing one as a problem under `--strict`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_build_on_a_named_base_and_doctor_reports_the_cli_inside() {
    let Some(docker) = support::local_engine("image_build_on_a_named_base").await else {
        return;
    };
    let builtin = AiCliConfig::builtin().unwrap();
    for p in ["claude", "codex"] {
        support::provider_image(&docker, &builtin, p).await;
    }
    // A base that is not local/base: the runtime layer (node, git, user aicli) itself.
    let base = support::runtime_image(&docker).await;
    let tag = format!(
        "aicli-test/gemini-on-named-base:{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("aicli.json");
    let write_config = |gemini_image: &str| {
        let c = serde_json::json!({"engine": {"runner": "docker", "docker": {
            "hosts": [{"name": "local", "url": "unix:///var/run/docker.sock"}],
            "images": {"gemini": gemini_image}
        }}});
        std::fs::write(&config, c.to_string()).unwrap();
    };
    write_config(&tag);
    let pinned = builtin.providers["gemini"].version.clone().unwrap();
    let out = aicli(&config, &["image", "build", "gemini", "--base", &base]);
    let removed = scopeguard(&docker, &tag);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("gemini: {tag} on local ({pinned})"),
        "{}",
        text(&out)
    );
    let labels = docker
        .inspect_image(&tag)
        .await
        .unwrap()
        .config
        .and_then(|c| c.labels)
        .unwrap_or_default();
    assert_eq!(
        labels.get("dev.aicli.image.cli").map(String::as_str),
        Some(format!("@google/gemini-cli@{pinned}").as_str())
    );
    assert_eq!(
        labels.get("dev.aicli.image.base").map(String::as_str),
        Some(base.as_str())
    );
    // Again: it already holds the pinned CLI on that base.
    let again = aicli(&config, &["image", "build", "gemini", "--base", &base]);
    assert!(again.status.success(), "{}", text(&again));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already holds"),
        "{}",
        text(&again)
    );

    let out = aicli(&config, &["doctor", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("doctor's JSON");
    for p in ["claude", "codex", "gemini"] {
        let row = rows
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["provider"] == p)
            .unwrap_or_else(|| panic!("{p} in {rows:#}"));
        let images = row["images"].as_array().unwrap();
        assert_eq!(images.len(), 1, "{p}: {row:#}");
        let want_image = if p == "gemini" {
            tag.clone()
        } else {
            builtin.engine.docker.image_for(p, &builtin.providers[p])
        };
        assert_eq!(images[0]["image"], want_image.as_str(), "{p}");
        assert_eq!(images[0]["host"], "local", "{p}");
        let version = builtin.providers[p].version.clone().unwrap();
        let inside = images[0]["version_inside"].as_str().unwrap_or_default();
        assert!(inside.contains(&version), "{p}: {inside:?} in {row:#}");
    }
    drop(removed);

    // An image that is not there: doctor says so, and --strict fails on it.
    write_config("aicli-test/no-such-image:0");
    let out = aicli(&config, &["doctor", "--json", "--strict"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let gemini = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["provider"] == "gemini")
        .unwrap();
    assert!(
        gemini["images"][0]["problem"]
            .as_str()
            .is_some_and(|p| p.contains("not there")),
        "{gemini:#}"
    );
    assert!(
        gemini["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap_or_default().contains("no-such-image")),
        "{gemini:#}"
    );
}

/// Issue 37 item 12: the entries of one npm package share one image, and `run` builds a
/// missing one on first use, with its progress. `aicli image build gemini` makes the
/// image gemini-acp runs in too (it says so); with the image gone, `aicli run --runner
/// docker -p gemini` builds it before the run and the run succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_image_per_package_built_on_first_use() {
    let Some(docker) = support::local_engine("one_image_per_package").await else {
        return;
    };
    let builtin = AiCliConfig::builtin().unwrap();
    let pinned = builtin.providers["gemini"].version.clone().unwrap();
    // A repository of the test's own: its tags are no other test's.
    let repository = format!(
        "aicli-test-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let tag = format!("{repository}/google-gemini-cli:{pinned}");
    let removed = scopeguard(&docker, &tag);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("aicli.json");
    let c = serde_json::json!({"engine": {"docker": {
        "hosts": [{"name": "local", "url": "unix:///var/run/docker.sock"}],
        "image_repository": repository
    }}});
    std::fs::write(&config, c.to_string()).unwrap();
    let repo = crate::suite::support::git_repo();
    let run = |provider: &str| {
        Command::new(env!("CARGO_BIN_EXE_aicli"))
            .arg("--config")
            .arg(&config)
            .args(["run", "--runner", "docker", "--fake-api", "--json", "-p"])
            .args([provider, "Say hello"])
            .current_dir(repo.path())
            .env_remove("DOCKER_HOST")
            .stdin(Stdio::null())
            .output()
            .expect("aicli runs")
    };
    let building = "is not on docker host 'local': building it now";

    let out = aicli(&config, &["image", "build", "gemini"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("gemini, gemini-acp: {tag} on local ({pinned})"),
        "{}",
        text(&out)
    );
    let out = run("gemini-acp");
    assert!(
        out.status.success(),
        "gemini-acp in gemini's image: {}",
        text(&out)
    );
    assert!(!text(&out).contains(building), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Hello from the fake Gemini API."),
        "{}",
        text(&out)
    );

    docker
        .remove_image(
            &tag,
            None::<bollard::query_parameters::RemoveImageOptions>,
            None,
        )
        .await
        .expect("the image goes");
    let out = run("gemini");
    assert!(out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("aicli: image {tag} (for gemini) {building}")),
        "{}",
        text(&out)
    );
    assert!(
        err.contains(&format!("aicli: built {tag} on local ({pinned})")),
        "{err}"
    );
    assert!(
        err.lines().any(|l| l.starts_with("[local] ")),
        "the build's progress: {err}"
    );
    let labels = docker
        .inspect_image(&tag)
        .await
        .expect("built on first use")
        .config
        .and_then(|c| c.labels)
        .unwrap_or_default();
    assert_eq!(
        labels.get("dev.aicli.image.cli"),
        Some(&format!("@google/gemini-cli@{pinned}"))
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Hello from the fake Gemini API."),
        "{}",
        text(&out)
    );
    support::assert_no_container_for_repo(&docker, repo.path()).await;
    drop(removed);
}

/// Removes the image `tag` when dropped (the test's image, whatever happens).
struct RemoveImage(bollard::Docker, String);

impl Drop for RemoveImage {
    fn drop(&mut self) {
        let (docker, tag) = (self.0.clone(), self.1.clone());
        let _ = std::thread::spawn(move || {
            tokio::runtime::Runtime::new()
                .unwrap()
                .block_on(async move {
                    let _ = docker
                        .remove_image(
                            &tag,
                            None::<bollard::query_parameters::RemoveImageOptions>,
                            None,
                        )
                        .await;
                })
        })
        .join();
    }
}

fn scopeguard(docker: &bollard::Docker, tag: &str) -> RemoveImage {
    RemoveImage(docker.clone(), tag.to_owned())
}
