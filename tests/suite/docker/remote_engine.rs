//! A second `dockerd` the tests start and treat strictly as a remote engine: its own
//! data root, exec root, pid file, bridge and a TCP socket on loopback that takes only
//! mutual TLS (a CA, server and client certificates made for each start with `openssl`),
//! no filesystem shared with aicli (the runner uploads and bundles). Stopped when the
//! guard drops, whether the test passed or panicked.
//!
//! The data root lives under `/var/tmp/aicli-test-remote/<slot>` (locked while in use)
//! so that images loaded once stay for the next run; containers left in it are removed
//! at start.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aicli::providers::{DockerHostConfig, DockerTls};
use bollard::Docker;

/// A running second engine.
pub struct RemoteEngine {
    /// Its client.
    pub docker: Docker,
    /// `tcp://127.0.0.1:PORT`.
    pub url: String,
    /// The bridge's address on this machine (what its containers reach aicli under).
    pub gateway: IpAddr,
    /// The client's TLS material.
    pub tls: DockerTls,
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
        let (server, tls) = make_certs(&dir.join("tls"))?;
        let mut cmd = Command::new("dockerd");
        cmd.args(["--data-root"])
            .arg(dir.join("data"))
            .arg("--exec-root")
            .arg(&exec_root)
            .arg("--pidfile")
            .arg(dir.join("dockerd.pid"))
            .args(["-H", &url, "--bridge", &bridge, "--tlsverify"])
            .arg("--tlscacert")
            .arg(&tls.ca)
            .arg("--tlscert")
            .arg(&server.cert)
            .arg("--tlskey")
            .arg(&server.key)
            .args(["--iptables=false", "--ip-masq=false", "--ip6tables=false"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start dockerd: {e}"))?;
        let mut engine = RemoteEngine {
            docker: Docker::connect_with_ssl(
                &url,
                &tls.key,
                &tls.cert,
                &tls.ca,
                600,
                bollard::API_DEFAULT_VERSION,
            )
            .map_err(|e| e.to_string())?,
            url,
            gateway: IpAddr::V4(gateway),
            tls,
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
        // Only mutual TLS gets in: a plain client is refused.
        let plain = Docker::connect_with_http(&engine.url, 10, bollard::API_DEFAULT_VERSION)
            .map_err(|e| e.to_string())?;
        if plain.ping().await.is_ok() {
            return Err("the second dockerd answers without TLS".to_owned());
        }
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

    /// The engine as a host entry: remote, over mutual TLS, reached at its bridge gateway.
    pub fn host(&self, name: &str) -> DockerHostConfig {
        DockerHostConfig {
            name: name.into(),
            url: self.url.clone(),
            tls: Some(self.tls.clone()),
            ssh: None,
            remote: Some(true),
            max_containers: None,
            mcp_address: Some(self.gateway.to_string()),
            mcp_bind: None,
        }
    }

    /// Makes `tag` (an image of the local engine `local`) available here: loaded
    /// through the Engine API unless an image of the same id is there.
    pub async fn load_from(&self, local: &Docker, tag: &str) {
        super::support::load_image(local, &self.docker, tag).await;
    }
}

/// A fresh CA under `dir`, and a server certificate for 127.0.0.1 and a client one signed
/// by it: (the server's, the client's with the CA).
fn make_certs(dir: &std::path::Path) -> Result<(DockerTls, DockerTls), String> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let p = |f: &str| dir.join(f).display().to_string();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509", "-days", "2", "-subj", "/CN=aicli-test-ca"];
    ca.extend(ec);
    let (ca_key, ca_pem) = (p("ca-key.pem"), p("ca.pem"));
    ca.extend(["-keyout", &ca_key, "-out", &ca_pem]);
    run("openssl", &ca)?;
    for (who, cn, ext) in [
        (
            "server",
            "127.0.0.1",
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth",
        ),
        ("client", "aicli-test-client", "extendedKeyUsage=clientAuth"),
    ] {
        let (key, csr, cert, extfile) = (
            p(&format!("{who}-key.pem")),
            p(&format!("{who}.csr")),
            p(&format!("{who}-cert.pem")),
            p(&format!("{who}.ext")),
        );
        std::fs::write(&extfile, ext).map_err(|e| e.to_string())?;
        let subj = format!("/CN={cn}");
        let mut req = vec!["req", "-subj", &subj, "-keyout", &key, "-out", &csr];
        req.extend(ec);
        run("openssl", &req)?;
        run(
            "openssl",
            &[
                "x509",
                "-req",
                "-days",
                "2",
                "-in",
                &csr,
                "-CA",
                &ca_pem,
                "-CAkey",
                &ca_key,
                "-CAcreateserial",
                "-extfile",
                &extfile,
                "-out",
                &cert,
            ],
        )?;
    }
    let tls = |who: &str| DockerTls {
        ca: dir.join("ca.pem"),
        cert: dir.join(format!("{who}-cert.pem")),
        key: dir.join(format!("{who}-key.pem")),
    };
    Ok((tls("server"), tls("client")))
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
