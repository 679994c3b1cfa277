//! Containers made ahead of their tasks' turns: while a batch's places are taken, the
//! next queued tasks get their started containers (see [`super::launch`]), so that each
//! CLI starts at once when its turn comes. A run takes its own ([`DockerRunner::take_warm`],
//! keyed by batch, task and attempt) and then holds a place on that engine as any run
//! does; what no run took is removed when its batch ends, with the private directory and
//! the login copies made for it. A killed aicli's are labelled as every container of
//! aicli's, and stop by themselves once their stdin closes.

use std::path::PathBuf;

use aicli_providers::SharedProvider;

use super::{DockerRunner, forget_logins, placement};
use crate::runner::{PlaceRequest, Placement};

impl DockerRunner {
    /// [`Runner::warm`]: a started container for the run `req`, waiting for its turn
    /// (at most `warm_ahead` at a time, on a local engine).
    pub(super) async fn make_ahead(&self, req: &PlaceRequest<'_>) {
        let key = warm_key(req);
        {
            let made = self.warm.lock().unwrap_or_else(|e| e.into_inner());
            if self.config.warm_ahead == 0
                || made.contains_key(&key)
                || made.len() >= self.config.warm_ahead
            {
                return;
            }
        }
        // A local engine (a remote one gets the run's files uploaded at its start), the
        // one with the most free places; none is taken until the task's turn.
        let Some(idx) = (0..self.hosts.len())
            .filter(|&i| !self.hosts[i].remote)
            .max_by_key(|&i| self.hosts[i].slots.available_permits())
        else {
            return;
        };
        let spec = match self
            .spec_for(req, idx, None, crate::runner::Steps::default())
            .await
        {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(task = %req.task_id, error = %e, "no warm container");
                return;
            }
        };
        let mut p = placement::DockerPlacement::new(spec);
        let task = req.task_id.to_owned();
        let made = tokio::spawn(async move {
            match p.warm_up().await {
                Ok(()) => Some(p),
                Err(e) => {
                    tracing::warn!(%task, error = %e, "the container made ahead failed: the task's start makes one");
                    None
                }
            }
        });
        let entry = WarmEntry {
            made,
            private_dir: req.private_dir.to_path_buf(),
            task_home: req.task_home.to_path_buf(),
            provider: req.provider.clone(),
        };
        self.warm
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, entry);
    }

    /// [`Runner::cool`]: removes the placements made ahead for batch `batch_id` that no
    /// run took.
    pub(super) async fn remove_ahead(&self, batch_id: &str) {
        let left: Vec<WarmEntry> = {
            let mut made = self.warm.lock().unwrap_or_else(|e| e.into_inner());
            let keys: Vec<WarmKey> = made.keys().filter(|k| k.0 == batch_id).cloned().collect();
            keys.iter().filter_map(|k| made.remove(k)).collect()
        };
        let cooled = left.into_iter().map(|e| async move {
            if let Ok(Some(mut p)) = e.made.await
                && let Err(err) = p.finish().await
            {
                tracing::warn!(error = %err, "removing a container made ahead and never used");
            }
            // What it made for a run that never came: the private directory, the login
            // copies in the task's home.
            let _ = std::fs::remove_dir_all(&e.private_dir);
            forget_logins(&e.task_home, e.provider.config());
        });
        futures_util::future::join_all(cooled).await;
    }

    /// The placement made ahead for `req` ([`Runner::warm`]), once it holds a place on its
    /// engine; none when none was made, it failed, or it was made for another workspace.
    pub(super) async fn take_warm(&self, req: &PlaceRequest<'_>) -> Option<placement::DockerPlacement> {
        let entry = self
            .warm
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&warm_key(req))?;
        let mut steps = crate::runner::Steps::default();
        let made = steps.time("wait for the warm container", entry.made).await;
        let mut p = made.ok().flatten()?;
        if !p.is_for(req.workspace, req.private_dir, &Self::image_for(&self.config, req.provider)) {
            let _ = p.finish().await;
            return None;
        }
        let slots = p.host().slots.clone();
        let permit = steps
            .time("wait for an engine", slots.acquire_owned())
            .await
            .ok()?;
        p.hold(permit, steps);
        Some(p)
    }
}

/// A placement made ahead: the task making its started container, and what it made
/// for the run besides (removed should the run never come).
#[derive(Debug)]
pub(super) struct WarmEntry {
    made: tokio::task::JoinHandle<Option<placement::DockerPlacement>>,
    private_dir: PathBuf,
    task_home: PathBuf,
    provider: SharedProvider,
}

/// Which run a warm placement is for: batch, task, attempt.
pub(super) type WarmKey = (String, String, u32);

fn warm_key(req: &PlaceRequest<'_>) -> WarmKey {
    (req.batch_id.to_owned(), req.task_id.to_owned(), req.attempt)
}

