//! The container: its creation request (with the CLI's command as the container sees
//! it), its creation and its start.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use aicli_providers::CommandSpec;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::CreateContainerOptions;

use super::super::DockerError;
use super::super::handle::{Container, Warm};
use super::super::hosts::HOST_ALIAS;
use super::super::launch;
use super::super::paths::WORKSPACE;
use super::super::remote;
use super::{DockerPlacement, stdin_of};
use crate::runner::RunnerError;

/// The scratch `/tmp` of a local container (its root filesystem is read-only).
/// `exec`: the engine's default is `noexec`, which would break what agents build and run
/// from there (`go test`, say).
const TMPFS_OPTIONS: &str = "rw,exec,nosuid,nodev,size=1g,mode=1777";

impl DockerPlacement {
    /// The CLI's directory, argv and environment in the container: `cmd` with its paths
    /// mapped (under the remote packing wrapper on a remote engine; with the proxy's
    /// variables behind the egress allowlist).
    #[allow(clippy::type_complexity)]
    pub(super) fn in_container(
        &self,
        cmd: &CommandSpec,
    ) -> Result<(String, Vec<String>, Vec<(String, String)>), DockerError> {
        let s = &self.spec;
        let cwd = self.map.container_path(&cmd.cwd).ok_or_else(|| {
            DockerError::Work(format!(
                "the run's directory {} is not inside its workspace {}",
                cmd.cwd.display(),
                s.workspace.display()
            ))
        })?;
        let mut argv: Vec<String> = Vec::new();
        if s.host.remote || s.swarm.is_some() {
            argv.extend(["/bin/sh".to_owned(), remote::RUN_SCRIPT.to_owned()]);
        }
        argv.push(self.map.rewrite(&cmd.program.display().to_string()));
        argv.extend(cmd.args.iter().map(|a| self.map.rewrite(a)));
        let mut env: Vec<(String, String)> = cmd
            .env
            .iter()
            .filter(|(k, _)| !cmd.env_remove.contains(k))
            .map(|(k, v)| (k.clone(), self.map.rewrite(v)))
            .collect();
        if let Some(e) = &self.egress {
            let proxy_env = e.env();
            env.retain(|(k, _)| !proxy_env.iter().any(|(e, _)| e == k));
            env.extend(proxy_env);
        }
        Ok((cwd.display().to_string(), argv, env))
    }

    /// The container's creation request: a local engine's waits for its go (see the
    /// module docs) and binds `dirs`; a remote engine's runs `cmd` under the packing
    /// wrapper, its files uploaded.
    pub(super) fn body(
        &self,
        cmd: Option<&CommandSpec>,
        dirs: &[(PathBuf, String)],
    ) -> Result<ContainerCreateBody, DockerError> {
        let s = &self.spec;
        let (working_dir, argv, env, stdin) = match cmd {
            Some(cmd) => {
                let (cwd, argv, env) = self.in_container(cmd)?;
                let env = env.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
                (cwd, argv, env, stdin_of(cmd).attached())
            }
            // Behind the egress forwarder, which so starts with the container.
            None => {
                let first = launch::first_process();
                let first = match &self.egress {
                    Some(e) => e.wrap(first),
                    None => first,
                };
                (WORKSPACE.to_owned(), first, Vec::new(), true)
            }
        };
        let l = &s.limits;
        let mut network_mode = l.network_mode.clone();
        let mut extra_hosts = Some(vec![format!("{HOST_ALIAS}:{}", s.host.alias_target)]);
        if self.egress.is_some() {
            network_mode = "none".to_owned();
            extra_hosts = None;
        }
        let mut host_config = HostConfig {
            init: Some(true),
            network_mode: Some(network_mode),
            // The engine's default seccomp profile stays; no capability at all (the CLIs
            // run as an unprivileged user and were measured to need none).
            security_opt: Some(vec!["no-new-privileges".to_owned()]),
            cap_drop: Some(vec!["ALL".to_owned()]),
            extra_hosts,
            ..HostConfig::default()
        };
        let r = &s.resources;
        if r.memory_mb > 0 {
            let bytes = (r.memory_mb * 1024 * 1024) as i64;
            host_config.memory = Some(bytes);
            // No swap beyond the limit: a run over its memory is killed (exit 137).
            host_config.memory_swap = Some(bytes);
        }
        if r.cpus > 0.0 {
            host_config.nano_cpus = Some((r.cpus * 1e9) as i64);
        }
        if l.pids_limit > 0 {
            host_config.pids_limit = Some(l.pids_limit);
        }
        if !s.host.remote {
            let binds = dirs
                .iter()
                .map(|(h, c)| format!("{}:{c}", h.display()))
                .collect();
            host_config.binds = Some(binds);
            // Nothing but the binds and a scratch /tmp is writable (the remote upload
            // needs a writable root: it unpacks into it).
            host_config.readonly_rootfs = Some(true);
            host_config.tmpfs = Some(HashMap::from([(
                "/tmp".to_owned(),
                TMPFS_OPTIONS.to_owned(),
            )]));
        }
        Ok(ContainerCreateBody {
            image: Some(s.image.clone()),
            cmd: Some(argv),
            entrypoint: Some(Vec::new()),
            env: Some(env),
            working_dir: Some(working_dir),
            user: Some(format!("{}:{}", s.user.0, s.user.1)),
            labels: Some(s.labels.to_map()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            attach_stdin: Some(stdin),
            open_stdin: Some(stdin),
            // The CLI sees EOF when aicli closes its side (after the prompt, or at the
            // end of a two-way run).
            stdin_once: Some(stdin),
            tty: Some(false),
            host_config: Some(host_config),
            ..ContainerCreateBody::default()
        })
    }

    /// Creates the container of the run (from `body`), named `name`; from then on it is
    /// the placement's to remove.
    pub(super) async fn create(
        &mut self,
        name: &str,
        body: ContainerCreateBody,
    ) -> Result<Arc<Container>, RunnerError> {
        let host = self.spec.host.clone();
        let create_started = std::time::Instant::now();
        let created = host
            .docker
            .create_container(
                Some(CreateContainerOptions {
                    name: Some(name.to_owned()),
                    ..Default::default()
                }),
                body,
            )
            .await
            .map_err(|e| {
                self.err(DockerError::Api {
                    what: format!("creating container {name} on {}", host.name),
                    message: e.to_string(),
                })
            })?;
        self.spec.steps.push("create container", create_started);
        for w in &created.warnings {
            tracing::warn!(container = %name, warning = %w, "docker");
        }
        let container = Arc::new(Container {
            docker: host.docker.clone(),
            id: created.id,
            host: host.name.clone(),
        });
        self.container = Some(container.clone());
        Ok(container)
    }

    /// The container's name: batch, task, attempt and a random end.
    pub(super) fn name(&self) -> String {
        format!(
            "aicli-{}-{}-{}-{}",
            self.spec.labels.batch_id,
            self.spec.labels.task_id,
            self.spec.labels.attempt,
            &uuid::Uuid::new_v4().simple().to_string()[..6]
        )
    }

    /// Attaches to `container` (named `name`; its stdin too, with `stdin`) and starts
    /// it, timing both ([`Warm::start`]).
    pub(super) async fn start_container(
        &mut self,
        container: Arc<Container>,
        name: &str,
        stdin: bool,
        peer: Option<std::net::IpAddr>,
    ) -> Result<Warm, RunnerError> {
        Warm::start(container, stdin, peer, &mut self.spec.steps)
            .await
            .map_err(|message| {
                self.err(DockerError::Api {
                    what: format!("starting container {name} on {}", self.spec.host.name),
                    message,
                })
            })
    }
}
