//! One image layer through the Engine API: a container from the image below, files
//! uploaded as a tar, a short root script run once (no network), the container committed;
//! and throwaway probe containers.

use std::collections::HashMap;

use bollard::Docker;
use bollard::models::{ContainerConfig, ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CommitContainerOptions, CreateContainerOptions, LogsOptions, WaitContainerOptions,
};
use futures_util::StreamExt;

use crate::runner::docker::DockerError;
use crate::runner::docker::handle::Container;
use crate::runner::docker::handle::remove_container;
use crate::runner::docker::tarball::{self, TarWriter};

/// Pulls `base` when the engine does not have it (a registry may be reachable).
pub(super) async fn ensure_base(
    docker: &Docker,
    base: &str,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<(), DockerError> {
    if docker.inspect_image(base).await.is_ok() {
        return Ok(());
    }
    progress(&format!("pulling {base}"));
    let mut s = docker.create_image(
        Some(bollard::query_parameters::CreateImageOptions {
            from_image: Some(base.to_owned()),
            ..Default::default()
        }),
        None,
        None,
    );
    while let Some(item) = s.next().await {
        item.map_err(|e| {
            DockerError::MissingImage(format!(
                "base image {base} is not on the engine and cannot be pulled ({e}); build one locally (see setup-docker-engine.sh: local/base) or name another with --base"
            ))
        })?;
    }
    Ok(())
}

/// One layer: from an image, some files, a root script, committed as `tag`.
pub(super) struct Layer {
    pub from: String,
    pub tag: String,
    pub path: String,
    /// Variables the image sets besides `PATH` (`NAME=value`).
    pub env: Vec<String>,
    pub script: String,
    pub labels: HashMap<String, String>,
}

impl Layer {
    fn env(&self) -> Vec<String> {
        let mut env = vec![format!("PATH={}", self.path)];
        env.extend(self.env.iter().cloned());
        env
    }
}

/// Builds `l` with the files `add` writes; returns the image id and the script's output.
pub(super) async fn layer<F>(
    docker: &Docker,
    l: &Layer,
    add: F,
) -> Result<(String, String), DockerError>
where
    F: FnOnce(&mut TarWriter) -> std::io::Result<()> + Send + 'static,
{
    let api = |what: String| {
        move |e: bollard::errors::Error| DockerError::Api {
            what,
            message: e.to_string(),
        }
    };
    let c = helper(
        docker,
        &l.from,
        &l.script,
        "build",
        ContainerCreateBody {
            user: Some("0:0".into()),
            env: Some(l.env()),
            ..ContainerCreateBody::default()
        },
    )
    .await?;
    let result = async {
        tarball::upload(
            docker,
            &c.id,
            (0, 0),
            &format!("the files of {}", l.tag),
            add,
        )
        .await?;
        docker
            .start_container(
                &c.id,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
            .map_err(api(format!("starting the build of {}", l.tag)))?;
        let code = wait_exit(docker, &c.id).await;
        let out = logs(docker, &c.id, Some(200)).await;
        if code != 0 {
            return Err(DockerError::Work(format!(
                "building {} failed (exit {code}):\n{}",
                l.tag,
                out.trim()
            )));
        }
        let (repo, tag) = match l.tag.rsplit_once(':').filter(|(_, t)| !t.contains('/')) {
            Some((r, t)) => (r.to_owned(), t.to_owned()),
            None => (l.tag.clone(), "latest".to_owned()),
        };
        let id = docker
            .commit_container(
                CommitContainerOptions {
                    container: Some(c.id.clone()),
                    repo: Some(repo),
                    tag: Some(tag),
                    pause: false,
                    ..Default::default()
                },
                ContainerConfig {
                    cmd: Some(vec!["/bin/sh".into()]),
                    entrypoint: Some(Vec::new()),
                    env: Some(l.env()),
                    user: Some(String::new()),
                    working_dir: Some("/workspace".into()),
                    labels: Some(l.labels.clone()),
                    ..ContainerConfig::default()
                },
            )
            .await
            .map_err(api(format!("committing {}", l.tag)))?
            .id;
        Ok((id, out))
    }
    .await;
    let _ = remove_container(&c).await;
    result
}

/// Runs `script` in a throwaway container of `image` (no network) and returns stdout.
pub async fn probe(docker: &Docker, image: &str, script: &str) -> Result<String, DockerError> {
    let c = helper(
        docker,
        image,
        script,
        "probe",
        ContainerCreateBody::default(),
    )
    .await?;
    let r = async {
        docker
            .start_container(
                &c.id,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
            .map_err(|e| DockerError::Api {
                what: format!("starting a container of {image}"),
                message: e.to_string(),
            })?;
        let code = wait_exit(docker, &c.id).await;
        let out = logs(docker, &c.id, None).await;
        if code != 0 {
            return Err(DockerError::Work(format!(
                "`{script}` in {image} exited {code}: {}",
                out.trim()
            )));
        }
        Ok(out)
    }
    .await;
    let _ = remove_container(&c).await;
    r
}

/// Creates (does not start) a throwaway container of `image` running `script` with no
/// network, labelled as aicli's `role` (`build`, `probe`) so that leftovers are found;
/// `body` gives what else it needs (user, env).
async fn helper(
    docker: &Docker,
    image: &str,
    script: &str,
    role: &str,
    body: ContainerCreateBody,
) -> Result<Container, DockerError> {
    let created = docker
        .create_container(
            None::<CreateContainerOptions>,
            ContainerCreateBody {
                image: Some(image.to_owned()),
                cmd: Some(vec!["/bin/sh".into(), "-c".into(), script.to_owned()]),
                entrypoint: Some(Vec::new()),
                labels: Some(HashMap::from([(
                    crate::runner::docker::labels::MANAGED.to_owned(),
                    role.to_owned(),
                )])),
                host_config: Some(HostConfig {
                    network_mode: Some("none".into()),
                    ..HostConfig::default()
                }),
                ..body
            },
        )
        .await
        .map_err(|e| DockerError::Api {
            what: format!("creating a {role} container of {image}"),
            message: e.to_string(),
        })?;
    Ok(Container {
        docker: docker.clone(),
        id: created.id,
        host: String::new(),
    })
}

async fn wait_exit(docker: &Docker, id: &str) -> i64 {
    let mut s = docker.wait_container(
        id,
        Some(WaitContainerOptions {
            condition: "not-running".into(),
        }),
    );
    match s.next().await {
        Some(Ok(r)) => r.status_code,
        Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => code,
        Some(Err(_)) | None => -1,
    }
}

/// The container's output: all of it, or the last `tail` lines.
async fn logs(docker: &Docker, id: &str, tail: Option<u32>) -> String {
    let mut s = docker.logs(
        id,
        Some(LogsOptions {
            stdout: true,
            stderr: true,
            tail: tail.map_or_else(|| "all".to_owned(), |n| n.to_string()),
            ..Default::default()
        }),
    );
    let mut out = String::new();
    while let Some(Ok(chunk)) = s.next().await {
        out.push_str(&String::from_utf8_lossy(chunk.as_ref()));
    }
    out
}
