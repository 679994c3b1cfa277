//! The Docker engines a batch's containers are spread over: connecting (unix socket,
//! tcp, TLS, ssh, as `DOCKER_HOST` spells them), each engine's capacity and how its
//! containers reach aicli's machine, and choosing the engine with the most free room.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use aicli_providers::{DockerConfig, DockerHostConfig, DockerSsh, DockerTls};
use bollard::Docker;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::DockerError;
use crate::runner::AgentReach;

/// Longest any single Engine API request may take to answer (its headers: streams such
/// as attach, wait and logs then run as long as the container does).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

/// The name `host.docker.internal`: how a container names aicli's machine.
pub const HOST_ALIAS: &str = "host.docker.internal";

/// One connected engine.
#[derive(Debug)]
pub struct Host {
    /// Its configured name.
    pub name: String,
    /// The client.
    pub docker: Docker,
    /// Whether it shares no filesystem with aicli.
    pub remote: bool,
    /// How its containers reach aicli's MCP server.
    pub reach: AgentReach,
    /// The IP `host.docker.internal` names inside its containers (`host-gateway` for a
    /// local engine).
    pub alias_target: String,
    /// A local engine's bridge gateway (an address of this machine, what
    /// `host.docker.internal` names); `None` for a remote engine.
    pub gateway: Option<IpAddr>,
    /// Most aicli containers at once.
    pub capacity: usize,
    /// Free places (a permit per running container of this process).
    pub slots: Arc<Semaphore>,
    /// The engine's version, for messages.
    pub version: String,
}

impl Host {
    /// Connects to `cfg`'s engine and reads what the runner needs from it.
    pub async fn connect(
        cfg: &DockerHostConfig,
        limits: &DockerConfig,
    ) -> Result<Host, DockerError> {
        let at = |message: String| DockerError::Connect {
            host: cfg.name.clone(),
            url: cfg.url.clone(),
            message,
        };
        let docker = client(&cfg.url, cfg.tls.as_ref(), cfg.ssh.as_ref()).map_err(&at)?;
        let docker = docker
            .negotiate_version()
            .await
            .map_err(|e| at(format!("the engine does not answer: {e}")))?;
        let info = docker
            .info()
            .await
            .map_err(|e| at(format!("cannot read the engine's info: {e}")))?;
        let version = info.server_version.clone().unwrap_or_default();
        let remote = cfg.is_remote();
        let capacity = cfg.max_containers.unwrap_or_else(|| {
            let cpus = info.ncpu.unwrap_or(1).max(1) as usize;
            let by_cpu = cpus * 2;
            let by_mem = match (info.mem_total, limits.memory_mb) {
                (Some(total), mb) if mb > 0 => (total as u64 / (mb * 1024 * 1024)).max(1) as usize,
                _ => by_cpu,
            };
            by_cpu.min(by_mem).max(1)
        });
        let (reach, alias_target, gateway) = if remote {
            let address = cfg.mcp_address.clone().ok_or_else(|| {
                at("a remote engine needs mcp_address (the address its containers reach aicli's machine under)".into())
            })?;
            let bind = cfg
                .mcp_bind
                .as_deref()
                .unwrap_or(&address)
                .parse::<IpAddr>()
                .map_err(|_| {
                    at(format!(
                        "mcp_bind (or mcp_address) '{}' is not an IP address of this machine to listen on",
                        cfg.mcp_bind.as_deref().unwrap_or(&address)
                    ))
                })?;
            let alias = address
                .parse::<IpAddr>()
                .map(|ip| ip.to_string())
                .unwrap_or_else(|_| bind.to_string());
            (
                AgentReach {
                    url_host: address,
                    bind,
                    restrict_to_peer: false,
                },
                alias,
                None,
            )
        } else {
            // With the egress allowlist a container has no network: `host.docker.internal`
            // then means the default bridge's gateway to the proxy.
            let network = if limits.egress.enabled {
                "bridge"
            } else {
                &limits.network_mode
            };
            let gateway = bridge_gateway(&docker, network).await.map_err(&at)?;
            let bind = match &cfg.mcp_bind {
                Some(b) => b
                    .parse::<IpAddr>()
                    .map_err(|_| at(format!("mcp_bind '{b}' is not an IP address")))?,
                None => gateway,
            };
            (
                AgentReach {
                    url_host: cfg
                        .mcp_address
                        .clone()
                        .unwrap_or_else(|| HOST_ALIAS.to_owned()),
                    bind,
                    // On the host's network a container has no address of its own.
                    restrict_to_peer: limits.network_mode != "host",
                },
                "host-gateway".to_owned(),
                Some(gateway),
            )
        };
        tracing::info!(host = %cfg.name, url = %cfg.url, %version, remote, capacity, mcp = %reach.url_host, "docker engine connected");
        Ok(Host {
            name: cfg.name.clone(),
            docker,
            remote,
            reach,
            alias_target,
            gateway,
            capacity,
            slots: Arc::new(Semaphore::new(capacity)),
            version,
        })
    }
}

/// The engines of a config: its `hosts`, or one from `DOCKER_HOST` (read from `env`, the
/// engine's environment) and the local socket otherwise.
pub fn configured_hosts(
    cfg: &DockerConfig,
    env: &BTreeMap<String, String>,
) -> Vec<DockerHostConfig> {
    if !cfg.hosts.is_empty() {
        return cfg.hosts.clone();
    }
    let url = env
        .get("DOCKER_HOST")
        .filter(|h| !h.is_empty())
        .cloned()
        .unwrap_or_else(|| "unix:///var/run/docker.sock".to_owned());
    let tls = env
        .get("DOCKER_TLS_VERIFY")
        .filter(|v| !v.is_empty() && v.as_str() != "0")
        .map(|_| {
            let dir = env
                .get("DOCKER_CERT_PATH")
                .map(PathBuf::from)
                .or_else(|| env.get("HOME").map(|h| Path::new(h).join(".docker")))
                .unwrap_or_else(|| PathBuf::from(".docker"));
            DockerTls {
                ca: dir.join("ca.pem"),
                cert: dir.join("cert.pem"),
                key: dir.join("key.pem"),
            }
        });
    vec![DockerHostConfig {
        name: "default".to_owned(),
        remote: Some(!url.starts_with("unix://")).filter(|r| *r),
        url,
        tls,
        ssh: None,
        max_containers: None,
        mcp_address: None,
        mcp_bind: None,
    }]
}

/// A client for `url` (unix, tcp/http, https or tcp with TLS material, ssh).
fn client(url: &str, tls: Option<&DockerTls>, ssh: Option<&DockerSsh>) -> Result<Docker, String> {
    let v = bollard::API_DEFAULT_VERSION;
    let t = REQUEST_TIMEOUT.as_secs();
    let docker = if let Some(path) = url.strip_prefix("unix://") {
        Docker::connect_with_unix(path, t, v)
    } else if url.starts_with("ssh://") {
        return super::ssh::client(url, ssh, t);
    } else if let Some(tls) =
        tls.filter(|_| url.starts_with("tcp://") || url.starts_with("https://"))
    {
        for (what, p) in [("ca", &tls.ca), ("cert", &tls.cert), ("key", &tls.key)] {
            if !p.is_file() {
                return Err(format!("TLS {what} file {} does not exist", p.display()));
            }
        }
        Docker::connect_with_ssl(url, &tls.key, &tls.cert, &tls.ca, t, v)
    } else if url.starts_with("https://") {
        return Err("https:// needs tls (ca, cert, key) in the host's config".to_owned());
    } else {
        Docker::connect_with_http(url, t, v)
    };
    docker.map_err(|e| e.to_string())
}

/// The gateway of the network containers join (the default bridge: 172.17.0.1 on a
/// stock engine), which is an address of this machine.
async fn bridge_gateway(docker: &Docker, network_mode: &str) -> Result<IpAddr, String> {
    let name = match network_mode {
        "bridge" | "default" => "bridge",
        "host" => return Ok(IpAddr::from([127, 0, 0, 1])),
        "none" => {
            return Err(
                "network_mode none: containers could not reach aicli's MCP server or a model API"
                    .to_owned(),
            );
        }
        other => other,
    };
    let net = docker
        .inspect_network(
            name,
            None::<bollard::query_parameters::InspectNetworkOptions>,
        )
        .await
        .map_err(|e| format!("cannot inspect network {name}: {e}"))?;
    let configs = net.ipam.and_then(|i| i.config).unwrap_or_default();
    if let Some(g) = configs
        .iter()
        .filter_map(|c| c.gateway.as_deref())
        .find_map(|g| g.parse::<IpAddr>().ok())
    {
        return Ok(g);
    }
    // The default bridge of older engines names no gateway: the bridge interface's
    // address, else the subnet's first address (the engine's default).
    let iface = net
        .options
        .as_ref()
        .and_then(|o| o.get("com.docker.network.bridge.name").cloned());
    if let Some(ip) = iface.as_deref().and_then(interface_v4) {
        return Ok(IpAddr::V4(ip));
    }
    configs
        .iter()
        .filter_map(|c| c.subnet.as_deref())
        .find_map(first_host)
        .ok_or_else(|| format!("network {name} has no gateway address"))
}

/// The IPv4 address of a local network interface.
fn interface_v4(name: &str) -> Option<std::net::Ipv4Addr> {
    nix::ifaddrs::getifaddrs().ok()?.find_map(|a| {
        if a.interface_name != name {
            return None;
        }
        a.address
            .as_ref()
            .and_then(|s| s.as_sockaddr_in())
            .map(|sin| sin.ip())
    })
}

/// The first host address of an IPv4 subnet (`172.17.0.0/16` -> `172.17.0.1`).
fn first_host(subnet: &str) -> Option<IpAddr> {
    let (net, _) = subnet.split_once('/')?;
    let net: std::net::Ipv4Addr = net.parse().ok()?;
    Some(IpAddr::V4(std::net::Ipv4Addr::from(u32::from(net) + 1)))
}

/// Takes a place on the host with the most free places (waiting when every host is
/// full). Returns the host's index and the permit that holds the place.
pub async fn acquire(hosts: &[Arc<Host>]) -> Option<(usize, OwnedSemaphorePermit)> {
    loop {
        let mut order: Vec<usize> = (0..hosts.len()).collect();
        // Most free places first; on a tie, the larger free share, then config order.
        order.sort_by(|&a, &b| {
            let fa = hosts[a].slots.available_permits();
            let fb = hosts[b].slots.available_permits();
            fb.cmp(&fa).then_with(|| {
                let sa = fa as f64 / hosts[a].capacity as f64;
                let sb = fb as f64 / hosts[b].capacity as f64;
                sb.partial_cmp(&sa).unwrap_or(std::cmp::Ordering::Equal)
            })
        });
        for &i in &order {
            if let Ok(p) = hosts[i].slots.clone().try_acquire_owned() {
                return Some((i, p));
            }
        }
        // All full: wait for any one place.
        let waits = hosts
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let s = h.slots.clone();
                Box::pin(async move { (i, s.acquire_owned().await) })
            })
            .collect::<Vec<_>>();
        if waits.is_empty() {
            return None;
        }
        let ((i, permit), _, _) = futures_util::future::select_all(waits).await;
        if let Ok(p) = permit {
            return Some((i, p));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_host_from_the_environment() {
        let env = BTreeMap::from([
            ("DOCKER_HOST".to_owned(), "tcp://10.1.2.3:2376".to_owned()),
            ("DOCKER_TLS_VERIFY".to_owned(), "1".to_owned()),
            ("DOCKER_CERT_PATH".to_owned(), "/certs".to_owned()),
        ]);
        let h = configured_hosts(&DockerConfig::default(), &env);
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].url, "tcp://10.1.2.3:2376");
        assert!(h[0].is_remote());
        assert_eq!(
            h[0].tls.as_ref().map(|t| t.key.clone()),
            Some(PathBuf::from("/certs/key.pem"))
        );
        let h = configured_hosts(&DockerConfig::default(), &BTreeMap::new());
        assert_eq!(h[0].url, "unix:///var/run/docker.sock");
        assert!(!h[0].is_remote());
        assert!(h[0].tls.is_none());
    }

    #[test]
    fn bad_client_settings_are_named() {
        let tls = DockerTls {
            ca: "/nonexistent/ca.pem".into(),
            cert: "/nonexistent/cert.pem".into(),
            key: "/nonexistent/key.pem".into(),
        };
        assert_eq!(
            client("tcp://127.0.0.1:1", Some(&tls), None).err(),
            Some("TLS ca file /nonexistent/ca.pem does not exist".to_owned())
        );
        assert!(client("https://127.0.0.1:1", None, None).is_err());
        assert!(client("tcp://127.0.0.1:1", None, None).is_ok());
        assert_eq!(
            first_host("172.17.0.0/16"),
            Some(IpAddr::from([172, 17, 0, 1]))
        );
        assert_eq!(interface_v4("lo"), Some(std::net::Ipv4Addr::LOCALHOST));
    }
}
