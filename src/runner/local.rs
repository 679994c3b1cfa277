//! Runs CLIs as local processes, each in its own process group and, where one can be
//! made, its own cgroup (see [`crate::proctree`]).

use std::time::Duration;

use aicli_providers::CommandSpec;
use async_trait::async_trait;

use super::{RunHandle, Runner, RunnerError};
use crate::process::{CgroupMode, LineReceiver, LocalProcess, OutputOptions, StderrTail};

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

    async fn start(
        &self,
        cmd: &CommandSpec,
        out: OutputOptions,
    ) -> Result<Box<dyn RunHandle>, RunnerError> {
        Ok(Box::new(LocalHandle(LocalProcess::spawn_in(
            cmd,
            out,
            self.cgroups,
        )?)))
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
}
