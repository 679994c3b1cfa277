//! An image on every node of a swarm (`aicli image build --swarm`): built on the manager,
//! then loaded, as `docker save | docker load` would, into each other node's engine that
//! `engine.docker.hosts` names. Without a registry, a node is only reached through its
//! own engine; a node no configured engine answers for is named, not skipped silently.

use std::collections::HashMap;

use futures_util::StreamExt;

use super::super::DockerError;
use super::super::hosts::Host;

/// What [`spread`] did on one node.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnNode {
    /// The manager: the image was built there.
    Built,
    /// The node's engine had this very image already.
    Present,
    /// Loaded from the manager into the node's engine.
    Loaded,
    /// No configured engine is this node: the image is not on it.
    NoEngine,
}

/// One node's outcome.
#[derive(Debug, Clone, serde::Serialize)]
pub struct NodeImage {
    /// The swarm's node id.
    pub node: String,
    /// Its description ([`super::nodes::describe`]).
    pub about: String,
    /// The engine of `engine.docker.hosts` that is this node, if one is.
    pub host: Option<String>,
    /// What was done.
    pub done: OnNode,
}

/// Puts `image` (on the manager, `hosts[0]`) on every node of its swarm whose engine is
/// one of `hosts`; `progress` hears of each load. Every node is in the answer: those no
/// engine of `hosts` answers for as [`OnNode::NoEngine`].
pub async fn spread(
    hosts: &[std::sync::Arc<Host>],
    image: &str,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Vec<NodeImage>, DockerError> {
    let manager = hosts
        .first()
        .ok_or_else(|| DockerError::NoEngine("no engine is configured".into()))?;
    let api = |what: String| {
        move |e: bollard::errors::Error| DockerError::Api {
            what,
            message: e.to_string(),
        }
    };
    let want = manager
        .docker
        .inspect_image(image)
        .await
        .map_err(api(format!("inspecting {image} on {}", manager.name)))?
        .id;
    // Which configured engine is which node (an engine in another swarm, or in none, is
    // no node of this one).
    let mut engine_of: HashMap<String, &std::sync::Arc<Host>> = HashMap::new();
    let mut manager_node = String::new();
    for (i, h) in hosts.iter().enumerate() {
        let info = h
            .docker
            .info()
            .await
            .map_err(api(format!("asking {} which swarm node it is", h.name)))?;
        if let Some(id) = info.swarm.and_then(|s| s.node_id).filter(|id| !id.is_empty()) {
            if i == 0 {
                manager_node = id.clone();
            }
            engine_of.entry(id).or_insert(h);
        }
    }
    let mut out = Vec::new();
    for node in super::nodes::usable(&manager.docker).await? {
        let id = node.id.unwrap_or_default();
        let about = super::nodes::describe(&manager.docker, &id).await;
        let host = engine_of.get(&id).copied();
        let done = if id == manager_node {
            OnNode::Built
        } else if let Some(h) = host {
            let there = h.docker.inspect_image(image).await.ok().and_then(|i| i.id);
            if there.is_some() && there == want {
                OnNode::Present
            } else {
                progress(&format!("loading {image} into {} ({about})", h.name));
                let export = manager.docker.export_image(image);
                let mut load = h.docker.import_image_stream(
                    bollard::query_parameters::ImportImageOptions::default(),
                    export,
                    None,
                );
                while let Some(r) = load.next().await {
                    r.map_err(api(format!("loading {image} into {}", h.name)))?;
                }
                let loaded = h.docker.inspect_image(image).await.ok().and_then(|i| i.id);
                if loaded != want {
                    return Err(DockerError::Work(format!(
                        "{image} was loaded into {} but its id there is {loaded:?}, not the manager's {want:?}",
                        h.name
                    )));
                }
                OnNode::Loaded
            }
        } else {
            OnNode::NoEngine
        };
        out.push(NodeImage {
            node: id,
            about,
            host: host.map(|h| h.name.clone()),
            done,
        });
    }
    Ok(out)
}
