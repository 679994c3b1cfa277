//! Upstream MCP servers (`mcp_upstreams` in the config) behind aicli's auth: aicli is
//! their client (rmcp's client side), and its own server offers their tools as
//! `<upstream>__<tool>` to the tasks granted them, forwarding each call.
//!
//! * **Lazy and shared.** An upstream starts the first time a task of a batch that was
//!   granted it needs it (the run about to start, its `tools/list`, a call); one
//!   instance serves every task of that batch granted it, and stops when the batch ends
//!   ([`Upstreams::end_batch`]) or the server shuts down.
//! * **Credentials stay here.** A stdio server gets its `env` (and its
//!   `env_passthrough` from aicli's environment); an HTTP one gets its `headers`. None of
//!   it is in a CLI's environment, MCP config or argv: a CLI only ever holds its own
//!   aicli token.
//! * **Supervised.** A stdio server is a [`LocalProcess`] like a CLI (own process group,
//!   cgroup, subreaper, parent-death signal), killed with its whole tree when it stops.
//! * **Restarted once.** An upstream that dies (its process exits, its connection
//!   closes) is restarted once; if it dies again, or a start fails, it is reported (a
//!   log event in each live task granted it, and a warning) and its tools disappear.
//!   Every change of its tools sends `notifications/tools/list_changed` to the sessions
//!   granted it, and to no one else.
//!
//! | module | owns |
//! |---|---|
//! | this one | [`Upstreams`]: the configured upstreams and the instances of each batch |
//! | `instance` | [`Instance`]: one upstream for one batch; start, death and restart, stop |
//! | `call` | forwarding a call to an instance, its timeout and size limit |
//! | `stdio` | starting a stdio upstream as a supervised process; its line cap |
//! | `http` | connecting to an HTTP upstream with its headers |

mod call;
mod http;
mod instance;
mod stdio;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use aicli_providers::McpUpstreamConfig;

use super::command::ToolEnv;

pub(crate) use instance::Instance;

/// What an upstream tells the server: its tools changed (`reason: None`), or it failed.
pub(crate) type OnChange = Arc<dyn Fn(&str, &str, Option<&str>) + Send + Sync>;

/// Every configured upstream, and the instances running for batches.
pub(crate) struct Upstreams {
    configs: BTreeMap<String, McpUpstreamConfig>,
    env: Arc<ToolEnv>,
    instances: Mutex<HashMap<(String, String), Arc<Instance>>>,
    on_change: OnChange,
}

impl std::fmt::Debug for Upstreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstreams")
            .field("configured", &self.configs.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Upstreams {
    /// The configured upstreams; `on_change(batch, upstream, failure)` is called when an
    /// instance's tools change or it fails.
    pub(crate) fn new(
        configs: BTreeMap<String, McpUpstreamConfig>,
        env: Arc<ToolEnv>,
        on_change: OnChange,
    ) -> Upstreams {
        Upstreams {
            configs,
            env,
            instances: Mutex::new(HashMap::new()),
            on_change,
        }
    }

    /// Whether `name` is a configured upstream.
    pub(crate) fn is_configured(&self, name: &str) -> bool {
        self.configs.contains_key(name)
    }

    /// The instance of `name` for `batch` (made, not started, on first use).
    pub(crate) fn instance(
        &self,
        batch: &str,
        name: &str,
        batch_dir: Option<PathBuf>,
    ) -> Option<Arc<Instance>> {
        let config = self.configs.get(name)?;
        let mut map = self.instances.lock().unwrap_or_else(|e| e.into_inner());
        let inst = map
            .entry((batch.to_owned(), name.to_owned()))
            .or_insert_with(|| {
                Instance::new(
                    batch,
                    name,
                    config.clone(),
                    self.env.clone(),
                    self.on_change.clone(),
                    batch_dir.map(|d| d.join(format!("pid.upstream-{name}"))),
                )
            });
        Some(inst.clone())
    }

    /// Stops every instance of `batch`.
    pub(crate) async fn end_batch(&self, batch: &str) {
        let ended: Vec<Arc<Instance>> = {
            let mut map = self.instances.lock().unwrap_or_else(|e| e.into_inner());
            let keys: Vec<_> = map.keys().filter(|(b, _)| b == batch).cloned().collect();
            keys.iter().filter_map(|k| map.remove(k)).collect()
        };
        for i in ended {
            i.stop().await;
        }
    }

    /// Stops every instance.
    pub(crate) async fn stop_all(&self) {
        let all: Vec<Arc<Instance>> = {
            let mut map = self.instances.lock().unwrap_or_else(|e| e.into_inner());
            map.drain().map(|(_, v)| v).collect()
        };
        for i in all {
            i.stop().await;
        }
    }

    /// Live instances (for tests and logs).
    pub(crate) fn running(&self) -> usize {
        self.instances
            .lock()
            .map(|m| m.values().filter(|i| !i.tools_now().is_empty()).count())
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests;
