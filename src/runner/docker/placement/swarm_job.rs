//! A run as a swarm job ([`super::super::swarm`]): its start staged, its orders a
//! secret, the job made; afterwards its work and home brought in and the job removed.

use std::path::Path;
use std::sync::Arc;

use aicli_providers::CommandSpec;

use super::super::{DockerError, remote, swarm};
use super::{DockerPlacement, SwarmRun};
use crate::proc::spawn::OutputOptions;
use crate::runner::{RunHandle, RunnerError};

impl DockerPlacement {
    /// A swarm run: its start bundle and files staged for the job to fetch, its orders a
    /// secret, the job made (see [`swarm`]).
    pub(super) async fn start_swarm(
        &mut self,
        proto: Arc<swarm::Protocol>,
        cmd: &CommandSpec,
        out: OutputOptions,
    ) -> Result<Box<dyn RunHandle>, RunnerError> {
        if cmd.stdin_open {
            return Err(self.err(DockerError::Work(
                "the swarm runner cannot keep a CLI's stdin open for a two-way run (an ACP agent); run it with --runner docker".to_owned(),
            )));
        }
        let (cwd, argv, env) = self.in_container(cmd).map_err(|e| self.err(e))?;
        let l = &self.spec.labels;
        let key = swarm::key_of(&l.batch_id, &l.task_id, l.attempt);
        let scratch = self.spec.scratch.clone();
        let files_started = std::time::Instant::now();
        let staged = self.stage_swarm(&scratch).await.map_err(|e| self.err(e))?;
        self.spec.steps.push("bundle the start, pack the files", files_started);
        let token = hex::encode(rand::random::<[u8; 32]>());
        let (senders, receivers) = swarm::handle::streams();
        let slot = Arc::new(swarm::Slot::new(
            token.clone(),
            &staged,
            scratch,
            senders.0,
            senders.1,
        ));
        proto.open(&key, slot.clone());
        let orders = swarm::Orders {
            url: proto.url_of(&key),
            token: &token,
            argv: &argv,
            cwd: &cwd,
            env: env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect(),
            stdin: cmd.stdin.as_deref(),
            base: &staged.base,
            branch: self.spec.labels.branch.as_deref(),
            carry: staged.carry,
        };
        let orders = serde_json::to_vec(&orders)
            .map_err(|e| self.err(DockerError::Work(e.to_string())))?;
        let mut job = swarm::Job::new(&self.spec.host.docker, &self.spec.host.name, key.clone());
        job.nodes = proto.nodes().to_vec();
        if orders.len() > swarm::MAX_ORDERS {
            self.job = Some(SwarmRun { job, key, slot });
            return Err(self.err(DockerError::Work(format!(
                "the run's prompt and environment take {} bytes; a swarm secret holds at most {}",
                orders.len(),
                swarm::MAX_ORDERS
            ))));
        }
        let spec = swarm::JobSpec {
            key: &key,
            image: &self.spec.image,
            user: self.spec.user,
            labels: self.spec.labels.to_map(),
            limits: &self.spec.limits,
            resources: self.spec.resources,
            constraints: &self.spec.constraints,
            stop_grace: swarm::STOP_GRACE,
        };
        let create_started = std::time::Instant::now();
        let made = job.create(&spec, &orders, proto.hosts_entry()).await;
        self.spec.steps.push("create job", create_started);
        self.job = Some(SwarmRun {
            job: job.clone(),
            key,
            slot: slot.clone(),
        });
        made.map_err(|e| self.err(e))?;
        Ok(Box::new(swarm::handle::JobHandle::new(
            job,
            slot,
            receivers,
            out,
            swarm::STOP_GRACE,
        )))
    }

    /// The attempt's start bundle and files, in `scratch` ([`swarm::up`]).
    async fn stage_swarm(&self, scratch: &Path) -> Result<swarm::up::Staged, DockerError> {
        // remote::stage makes `scratch`, the owner's only.
        let up = remote::Upload {
            workspace: self.spec.workspace.clone(),
            private_dir: self.spec.private_dir.clone(),
            task_home: self.spec.task_home.clone(),
            uid: u64::from(self.spec.user.0),
            gid: u64::from(self.spec.user.1),
        };
        swarm::up::stage(&up, scratch).await
    }

    /// After a swarm run: its work and home, as its runner posted them, brought in; the
    /// job removed.
    pub(super) async fn finish_swarm(&mut self) -> Result<(), RunnerError> {
        let Some(SwarmRun { mut job, key, slot }) = self.job.take() else {
            return Ok(());
        };
        let mut result = Ok(());
        let scratch = self.spec.scratch.clone();
        let bundle = scratch.join("work.bundle");
        let back_started = std::time::Instant::now();
        if bundle.is_file() {
            let tag = format!(
                "{}-{}-{}",
                self.spec.labels.batch_id, self.spec.labels.task_id, self.spec.labels.attempt
            );
            if let Err(e) = remote::apply_bundle(&self.spec.workspace, &bundle, &tag).await {
                result = Err(self.err(e));
            }
        } else if job.service.is_some() && slot.start_fetched() {
            tracing::warn!(job = %key, "the swarm job sent no work back: its work since the start is not brought back");
        }
        if let Err(e) = swarm::apply_home(&scratch, &self.spec.task_home)
            && result.is_ok()
        {
            result = Err(self.err(e));
        }
        self.spec.steps.push("bring back", back_started);
        if let Some(p) = &self.spec.swarm {
            p.close(&key);
        }
        let remove_started = std::time::Instant::now();
        let removed = job.remove().await;
        self.spec.steps.push("remove job", remove_started);
        if let Err(e) = removed {
            tracing::warn!(error = %e, "removing the swarm job");
            if result.is_ok() {
                result = Err(self.err(e));
            }
        }
        if result.is_ok() {
            let _ = std::fs::remove_dir_all(&scratch);
        }
        result
    }
}
