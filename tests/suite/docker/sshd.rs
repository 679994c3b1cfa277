//! A real `sshd` (Debian's openssh-server, `.ci/install-ssh.sh`) on a loopback port in
//! front of the second engine: its own host key, an authorized key made for it, and
//! `DOCKER_HOST` (with the engine's TLS material) set for the sessions it starts, so that
//! `docker system dial-stdio` on its side reaches that engine. Stopped when dropped.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aicli::providers::{DockerHostConfig, DockerSsh};

use super::remote_engine::RemoteEngine;

/// A running sshd.
pub struct Sshd {
    /// `ssh://root@127.0.0.1:PORT`.
    pub url: String,
    /// The client's options: its key and the known-hosts file with sshd's key.
    pub ssh: DockerSsh,
    /// What the engine behind it is reached under from its containers.
    gateway: String,
    child: Child,
    _dir: tempfile::TempDir,
}

fn keygen(path: &Path) -> Result<(), String> {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .output()
        .map_err(|e| format!("ssh-keygen: {e}"))?;
    out.status
        .success()
        .then_some(())
        .ok_or_else(|| String::from_utf8_lossy(&out.stderr).into_owned())
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

impl Sshd {
    /// Starts one in front of `engine`, or says why it cannot.
    pub fn start(engine: &RemoteEngine) -> Result<Sshd, String> {
        let sshd = PathBuf::from("/usr/sbin/sshd");
        if !sshd.exists() {
            return Err("no /usr/sbin/sshd: run .ci/install-ssh.sh".into());
        }
        std::fs::create_dir_all("/run/sshd").map_err(|e| format!("/run/sshd: {e}"))?;
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let d = dir.path();
        keygen(&d.join("host_key"))?;
        keygen(&d.join("id"))?;
        std::fs::write(d.join("authorized_keys"), read(&d.join("id.pub"))?)
            .map_err(|e| e.to_string())?;
        // The docker CLI on sshd's side takes the engine's client certificates from a
        // directory under the names it knows.
        let certs = d.join("docker");
        std::fs::create_dir_all(&certs).map_err(|e| e.to_string())?;
        for (from, to) in [
            (&engine.tls.ca, "ca.pem"),
            (&engine.tls.cert, "cert.pem"),
            (&engine.tls.key, "key.pem"),
        ] {
            std::fs::copy(from, certs.join(to)).map_err(|e| format!("{}: {e}", from.display()))?;
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {host}\nAuthorizedKeysFile {keys}\n\
             PermitRootLogin prohibit-password\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPidFile {pid}\n\
             SetEnv DOCKER_HOST={url} DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH={certs}\n",
            host = d.join("host_key").display(),
            keys = d.join("authorized_keys").display(),
            pid = d.join("sshd.pid").display(),
            url = engine.url,
            certs = certs.display(),
        );
        std::fs::write(d.join("sshd_config"), config).map_err(|e| e.to_string())?;
        let host_key = read(&d.join("host_key.pub"))?;
        std::fs::write(
            d.join("known_hosts"),
            format!("[127.0.0.1]:{port} {}", host_key.trim()),
        )
        .map_err(|e| e.to_string())?;
        let mut child = Command::new(&sshd)
            .arg("-D")
            .arg("-e")
            .arg("-f")
            .arg(d.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("sshd: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("sshd exited at start: {status}"));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return Err("sshd did not listen within 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(Sshd {
            url: format!("ssh://root@127.0.0.1:{port}"),
            ssh: DockerSsh {
                identity_file: Some(d.join("id")),
                known_hosts: Some(d.join("known_hosts")),
                config: None,
            },
            gateway: engine.gateway.to_string(),
            child,
            _dir: dir,
        })
    }

    /// The engine behind it as a host entry: remote (no filesystem shared), reached over
    /// ssh.
    pub fn host(&self, name: &str) -> DockerHostConfig {
        DockerHostConfig {
            name: name.into(),
            url: self.url.clone(),
            tls: None,
            ssh: Some(self.ssh.clone()),
            remote: Some(true),
            max_containers: None,
            mcp_address: Some(self.gateway.clone()),
            mcp_bind: None,
        }
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        // sshd and the sessions it forked (their own process groups stay with their
        // connections, which the clients close).
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
    }
}
