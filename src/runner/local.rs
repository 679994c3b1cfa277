//! Runs CLIs as local processes, each in its own process group and, where one can be
//! made, its own cgroup (see [`crate::proc::tree`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use aicli_providers::{BinaryLocation, CommandSpec};
use async_trait::async_trait;

use super::{AgentReach, PlaceRequest, Placement, RunHandle, Runner, RunnerError};
use crate::proc::cgroup::CgroupMode;
use crate::proc::lines::{LineReceiver, StderrTail};
use crate::proc::spawn::{LocalProcess, OutputOptions};
use crate::proc::stdin::StdinWriter;

/// Runs CLIs as child processes of aicli.
#[derive(Debug, Clone, Default)]
pub struct LocalRunner {
    /// Whether runs get cgroups (`engine.cgroups`).
    cgroups: CgroupMode,
}

impl LocalRunner {
    /// A runner whose runs get cgroups as `cgroups` allows.
    pub fn new(cgroups: CgroupMode) -> LocalRunner {
        LocalRunner { cgroups }
    }
}

#[async_trait]
impl Runner for LocalRunner {
    fn name(&self) -> &str {
        "local"
    }

    async fn place(&self, _req: &PlaceRequest<'_>) -> Result<Box<dyn Placement>, RunnerError> {
        Ok(Box::new(LocalPlacement {
            cgroups: self.cgroups,
        }))
    }
}

/// A local run: this machine's paths, environment and binaries, as they are.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalPlacement {
    /// Whether the run gets a cgroup.
    cgroups: CgroupMode,
}

#[async_trait]
impl Placement for LocalPlacement {
    fn describe(&self) -> String {
        "local".to_owned()
    }

    fn agent_reach(&self) -> Option<&AgentReach> {
        None
    }

    fn env(&self, inherited: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        inherited.clone()
    }

    fn binary(&self) -> Option<BinaryLocation> {
        None
    }

    fn runs_as_root(&self) -> bool {
        nix::unistd::geteuid().is_root()
    }

    fn visible_path(&self, path: &Path) -> PathBuf {
        path.to_path_buf()
    }

    async fn start(
        &mut self,
        cmd: &CommandSpec,
        out: OutputOptions,
    ) -> Result<Box<dyn RunHandle>, RunnerError> {
        Ok(Box::new(LocalHandle(LocalProcess::spawn_in(
            cmd,
            out,
            self.cgroups,
        )?)))
    }

    async fn finish(&mut self) -> Result<(), RunnerError> {
        Ok(())
    }
}

#[derive(Debug)]
struct LocalHandle(LocalProcess);

#[async_trait]
impl RunHandle for LocalHandle {
    fn take_lines(&mut self) -> LineReceiver {
        std::mem::replace(&mut self.0.lines, LineReceiver::closed())
    }
    fn stderr(&self) -> StderrTail {
        self.0.stderr.clone()
    }
    fn pid(&self) -> Option<u32> {
        Some(self.0.pid())
    }
    async fn wait(&mut self) -> Option<i32> {
        self.0.wait().await
    }
    async fn shutdown(&mut self, grace: Duration) -> Option<i32> {
        self.0.shutdown(grace).await
    }
    async fn drain(&mut self) {
        self.0.drain().await
    }
    fn take_stdin(&mut self) -> Option<StdinWriter> {
        self.0.stdin_writer.take()
    }
}
