//! A second `dockerd` the tests start and treat strictly as a remote engine: its own
//! data root, exec root, pid file, bridge and a TCP socket on loopback, no filesystem
//! shared with aicli (the runner uploads and bundles). Stopped when the guard drops,
//! whether the test passed or panicked.
//!
//! The data root lives under `/var/tmp/aicli-test-remote/<slot>` (locked while in use)
//! so that images loaded once stay for the next run; containers left in it are removed
//! at start.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aicli::providers::DockerHostConfig;
use bollard::Docker;
use futures_util::StreamExt;

/// A running second engine.
pub struct RemoteEngine {
    /// Its client.
    pub docker: Docker,
    /// `tcp://127.0.0.1:PORT`.
    pub url: String,
    /// The bridge's address on this machine (what its containers reach aicli under).
    pub gateway: IpAddr,
    bridge: String,
    exec_root: PathBuf,
    child: Option<Child>,
    _slot: nix::fcntl::Flock<std::fs::File>,
}

fn run(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl RemoteEngine {
    /// Starts one (a few seconds), or says why it cannot.
    pub async fn start() -> Result<RemoteEngine, String> {
        // A slot: a data root no other test process is using.
        let base = PathBuf::from("/var/tmp/aicli-test-remote");
        let (slot, lock) = (0..8)
            .find_map(|i| {
                let dir = base.join(i.to_string());
                std::fs::create_dir_all(&dir).ok()?;
                let f = std::fs::File::create(dir.join("lock")).ok()?;
                nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock)
                    .ok()
                    .map(|l| (i, l))
            })
            .ok_or("no free data-root slot under /var/tmp/aicli-test-remote")?;
        let bridge = format!("aicli-rt{slot}");
        let gateway = Ipv4Addr::new(172, 31, 200 + slot as u8, 1);
        let _ = run("ip", &["link", "del", &bridge]);
        run("ip", &["link", "add", &bridge, "type", "bridge"])?;
        run(
            "ip",
            &["addr", "add", &format!("{gateway}/24"), "dev", &bridge],
        )?;
        run("ip", &["link", "set", &bridge, "up"])?;
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
            l.local_addr().map_err(|e| e.to_string())?.port()
        };
        let dir = base.join(slot.to_string());
        let exec_root = PathBuf::from(format!("/run/aicli-rt-{slot}"));
        let _ = std::fs::remove_dir_all(&exec_root);
        let log = std::fs::File::create(dir.join("dockerd.log")).map_err(|e| e.to_string())?;
        let url = format!("tcp://127.0.0.1:{port}");
        let mut cmd = Command::new("dockerd");
        cmd.args(["--data-root"])
            .arg(dir.join("data"))
            .arg("--exec-root")
            .arg(&exec_root)
            .arg("--pidfile")
            .arg(dir.join("dockerd.pid"))
            .args(["-H", &url, "--bridge", &bridge])
            .args(["--iptables=false", "--ip-masq=false", "--ip6tables=false"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start dockerd: {e}"))?;
        let mut engine = RemoteEngine {
            docker: Docker::connect_with_http(&url, 600, bollard::API_DEFAULT_VERSION)
                .map_err(|e| e.to_string())?,
            url,
            gateway: IpAddr::V4(gateway),
            bridge,
            exec_root,
            child: Some(child),
            _slot: lock,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if engine.docker.ping().await.is_ok() {
                break;
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(dir.join("dockerd.log")).unwrap_or_default();
                return Err(format!("the second dockerd did not answer: {log}"));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        engine.docker = engine
            .docker
            .clone()
            .negotiate_version()
            .await
            .map_err(|e| e.to_string())?;
        // Leftovers of an earlier run of this slot.
        let all = engine
            .docker
            .list_containers(Some(bollard::query_parameters::ListContainersOptions {
                all: true,
                ..Default::default()
            }))
            .await
            .map_err(|e| e.to_string())?;
        for c in all {
            if let Some(id) = c.id {
                let _ = engine
                    .docker
                    .remove_container(
                        &id,
                        Some(bollard::query_parameters::RemoveContainerOptions {
                            force: true,
                            ..Default::default()
                        }),
                    )
                    .await;
            }
        }
        Ok(engine)
    }

    /// The engine as a host entry: remote, reached at its bridge gateway.
    pub fn host(&self, name: &str) -> DockerHostConfig {
        DockerHostConfig {
            name: name.into(),
            url: self.url.clone(),
            tls: None,
            remote: Some(true),
            max_containers: None,
            mcp_address: Some(self.gateway.to_string()),
            mcp_bind: None,
        }
    }

    /// Makes `tag` (an image of the local engine `local`) available here: loaded
    /// through the Engine API unless an image of the same id is there.
    pub async fn load_from(&self, local: &Docker, tag: &str) {
        let want = local
            .inspect_image(tag)
            .await
            .unwrap_or_else(|e| panic!("{tag} on the local engine: {e}"))
            .id;
        if self.docker.inspect_image(tag).await.ok().and_then(|i| i.id) == want {
            return;
        }
        let export = local.export_image(tag);
        let mut load = self.docker.import_image_stream(
            bollard::query_parameters::ImportImageOptions::default(),
            export,
            None,
        );
        while let Some(r) = load.next().await {
            r.unwrap_or_else(|e| panic!("loading {tag} into the remote engine: {e}"));
        }
    }
}

impl std::fmt::Debug for RemoteEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteEngine")
            .field("url", &self.url)
            .field("gateway", &self.gateway)
            .finish_non_exhaustive()
    }
}

impl Drop for RemoteEngine {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if matches!(child.try_wait(), Ok(Some(_))) {
                    break;
                }
                if Instant::now() > deadline {
                    let _ = nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGKILL);
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let _ = run("ip", &["link", "del", &self.bridge]);
        let _ = std::fs::remove_dir_all(&self.exec_root);
    }
}
