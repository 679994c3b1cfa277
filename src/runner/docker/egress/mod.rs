//! A container's only ways out: aicli's MCP server and aicli's egress proxy.
//!
//! With `engine.docker.egress.enabled` (the default) a local engine's container runs
//! with `--network none`: it has loopback and nothing else. For each run aicli binds two
//! unix sockets in a directory of its own and bind-mounts that directory into the
//! container:
//!
//! - `proxy.sock`: an HTTP proxy ([`proxy`]) that lets through the run's allowlist
//!   ([`allow`]) and records every refusal in the attempt's record;
//! - `mcp.sock`: spliced to aicli's MCP server on loopback, from a loopback address of
//!   the run's own (`127.x.y.z`), which the run's MCP token is restricted to: a container
//!   holding another task's token cannot use it.
//!
//! In the container a small forwarder (`forward.js`, run by the image's `node`) listens
//! on `127.0.0.1:3128` and on the MCP server's port and carries each connection to its
//! socket. It starts with the container, before the container's first process waits for
//! its go (see [`super::launch`]), so a container made ahead has it listening already; the
//! CLI gets `HTTP(S)_PROXY` naming the first and its MCP URL the second. A connection
//! that bypasses the proxy has nowhere to go.
//!
//! A remote engine cannot mount this machine's sockets: its containers keep
//! `network_mode` (see the docs).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use aicli_providers::CommandSpec;
use tokio::net::{TcpStream, UnixListener};
use tokio_util::sync::CancellationToken;

use crate::record::EgressDenial;

pub mod allow;
mod proxy;

/// Where the sockets' directory is in the container.
pub const MOUNT: &str = "/aicli-egress";
/// The proxy's port on the container's loopback.
pub const PROXY_PORT: u16 = 3128;
/// Most connections a run's CLI may hold open to the MCP server at once.
const MAX_MCP_CONNECTIONS: usize = 64;
/// The file the forwarder creates once it listens (the container's `/tmp` is its own).
const READY: &str = "/tmp/.aicli-egress-ready";
/// Where the runs' socket directories are made (short: a unix socket's path has at
/// most 107 bytes), and their names' start.
const BASE: &str = "/tmp";
const PREFIX: &str = "aicli-egress-";
/// The file in a socket directory naming the aicli process it belongs to.
const OWNER_FILE: &str = "owner";
/// The forwarder.
const FORWARD_JS: &str = include_str!("forward.js");
/// What runs first in the container: the forwarder in the background, then, once it
/// listens, the CLI (`exec`, so the CLI is the process the engine signals).
const WRAPPER: &str = r#"js=$1; shift
fwd=
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do fwd="$fwd $1"; shift; done
shift
command -v node >/dev/null 2>&1 || { echo "aicli: the image has no node on its PATH, which the egress forwarder needs (or set engine.docker.egress.enabled to false)" >&2; exit 127; }
node -e "$js" $fwd </dev/null >/dev/null &
fwd_pid=$!
i=0
while [ ! -e /tmp/.aicli-egress-ready ]; do
  kill -0 "$fwd_pid" 2>/dev/null || { echo "aicli: the egress forwarder exited before it listened" >&2; exit 125; }
  i=$((i+1))
  [ "$i" -gt 1000 ] && { echo "aicli: the egress forwarder did not listen within 10 s" >&2; exit 125; }
  sleep 0.01 2>/dev/null || { sleep 1; i=$((i+99)); }
done
exec "$@"
"#;

/// What a placement's proxy allows, decided when the run is placed.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The provider's `egress_hosts` and the config's `egress.allow`.
    pub patterns: Vec<String>,
    /// Names resolved here (`host.docker.internal` and the bridge gateway it names).
    pub aliases: Vec<(String, IpAddr)>,
    /// The texts of the CLI's config files in the user's own home (never the task's
    /// copies, which the container can write), whose URLs are allowed too: a model
    /// provider of its own (codex's `config.toml`).
    pub config_texts: Vec<String>,
}

/// Most bytes of one config file read for its URLs.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The texts of the `files` (relative to `home`) that are regular files, up to
/// [`MAX_CONFIG_BYTES`] each (a FIFO or a device is skipped, not waited on).
pub fn config_texts(home: &Path, files: &[String]) -> Vec<String> {
    files
        .iter()
        .filter_map(|f| {
            let path = home.join(f);
            std::fs::metadata(&path)
                .ok()?
                .is_file()
                .then(|| read_capped(&path, MAX_CONFIG_BYTES))?
        })
        .collect()
}

/// The first `max` bytes of the file at `path`, as text.
fn read_capped(path: &Path, max: u64) -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(max)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// A run's proxy and MCP socket: bound first ([`Egress::bind`], when the container is
/// made, which mounts their directory), served once the run's command is known
/// ([`Egress::serve`]), live until [`Egress::stop`] (or drop).
#[derive(Debug)]
pub struct Egress {
    dir: tempfile::TempDir,
    shared: Option<Arc<proxy::Shared>>,
    /// The sockets (the proxy's, MCP's), bound and not yet served.
    listeners: Option<(UnixListener, Option<UnixListener>)>,
    stop: CancellationToken,
    mcp_port: Option<u16>,
    peer: IpAddr,
}

/// A loopback address no other run of this process has (127.1.0.1 and on; the whole of
/// 127/8 is this machine's loopback).
fn next_peer() -> IpAddr {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed) % (0xff_ffff - 0x1_0000);
    IpAddr::V4(Ipv4Addr::from(0x7f01_0001 + n))
}

impl Egress {
    /// Binds the run's sockets in a directory of their own: the proxy's, and MCP's when
    /// the run will have a token on aicli's MCP server at `127.0.0.1:mcp_port`. `user`:
    /// the container's, which alone (with this process's) may use them. Nothing is
    /// served until [`Egress::serve`]: a connection before waits in the socket's queue.
    pub fn bind(user: (u32, u32), mcp_port: Option<u16>) -> std::io::Result<Egress> {
        let dir = tempfile::Builder::new()
            .prefix(PREFIX)
            .tempdir_in(base())?;
        // Whose it is: `aicli containers prune` removes those of a killed aicli.
        std::fs::write(
            dir.path().join(OWNER_FILE),
            super::labels::this_owner(),
        )?;
        // Only the container's user (and this process) may use the sockets: as root the
        // directory and sockets are given to that user; as that user already, they are
        // this process's own; only a third user (a configured `engine.docker.user`) needs
        // them open to all local users.
        let euid = nix::unistd::geteuid();
        let give = |path: &Path| -> std::io::Result<()> {
            if euid.is_root() && user.0 != 0 {
                std::os::unix::fs::chown(path, Some(user.0), Some(user.1))?;
            }
            Ok(())
        };
        let shared_with_all = !euid.is_root() && euid.as_raw() != user.0;
        let (dir_mode, sock_mode) = if shared_with_all {
            (0o711, 0o666)
        } else {
            (0o700, 0o600)
        };
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(dir_mode))?;
        give(dir.path())?;
        let bind = |name: &str| -> std::io::Result<UnixListener> {
            let path = dir.path().join(name);
            let l = UnixListener::bind(&path)?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(sock_mode))?;
            give(&path)?;
            Ok(l)
        };
        let proxy = bind("proxy.sock")?;
        let mcp = mcp_port.map(|_| bind("mcp.sock")).transpose()?;
        Ok(Egress {
            dir,
            shared: None,
            listeners: Some((proxy, mcp)),
            stop: CancellationToken::new(),
            mcp_port,
            peer: next_peer(),
        })
    }

    /// The MCP server's port it was bound for.
    pub fn mcp_port(&self) -> Option<u16> {
        self.mcp_port
    }

    /// Serves the sockets: the proxy with `plan` and the URLs of `cmd`, MCP spliced to
    /// the server's port. Once.
    pub fn serve(&mut self, plan: &Plan, cmd: &CommandSpec) {
        let Some((proxy_listener, mcp_listener)) = self.listeners.take() else {
            return;
        };
        let shared = Arc::new(proxy::Shared {
            allow: allow::Allowlist::new(&plan.patterns, cmd, &plan.config_texts),
            aliases: plan.aliases.clone(),
            denials: Mutex::new(Vec::new()),
        });
        tokio::spawn(proxy::serve(proxy_listener, shared.clone(), self.stop.clone()));
        if let (Some(l), Some(port)) = (mcp_listener, self.mcp_port) {
            tokio::spawn(splice(l, self.peer, port, self.stop.clone()));
        }
        self.shared = Some(shared);
    }

    /// The address the run's MCP requests come from.
    pub fn peer(&self) -> IpAddr {
        self.peer
    }

    /// The directory to bind-mount, read-only (a socket is used, not written): (this
    /// machine's, the container's).
    pub fn mount(&self) -> (PathBuf, String) {
        (self.dir.path().to_path_buf(), format!("{MOUNT}:ro"))
    }

    /// The proxy's port on the container's loopback (3128, or 3129 should the MCP
    /// server's port be 3128).
    fn proxy_port(&self) -> u16 {
        if self.mcp_port == Some(PROXY_PORT) {
            PROXY_PORT + 1
        } else {
            PROXY_PORT
        }
    }

    /// `argv` behind the forwarder: it starts once the forwarder listens (a local
    /// container's first process, so that the forwarder's start is made ahead with it).
    pub fn wrap(&self, argv: Vec<String>) -> Vec<String> {
        let mut out = vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            WRAPPER.to_owned(),
            "aicli-egress".to_owned(),
            FORWARD_JS.to_owned(),
            READY.to_owned(),
            self.proxy_port().to_string(),
            format!("{MOUNT}/proxy.sock"),
        ];
        if let Some(port) = self.mcp_port {
            out.extend([port.to_string(), format!("{MOUNT}/mcp.sock")]);
        }
        out.push("--".to_owned());
        out.extend(argv);
        out
    }

    /// The variables that send the CLI's requests (and its tools': curl, git, npm, pip)
    /// through the proxy, and loopback (its MCP server) around it.
    pub fn env(&self) -> Vec<(String, String)> {
        let proxy = format!("http://127.0.0.1:{}", self.proxy_port());
        let local = "127.0.0.1,localhost,::1".to_owned();
        let mut v = Vec::new();
        for k in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ] {
            v.push((k.to_owned(), proxy.clone()));
        }
        for k in ["NO_PROXY", "no_proxy"] {
            v.push((k.to_owned(), local.clone()));
        }
        // Node's own fetch (the CLIs' model requests) reads the variables only when told.
        v.push(("NODE_USE_ENV_PROXY".to_owned(), "1".to_owned()));
        v
    }

    /// Stops serving; returns what was refused.
    pub fn stop(&mut self) -> Vec<EgressDenial> {
        self.stop.cancel();
        self.shared
            .as_ref()
            .and_then(|s| s.denials.lock().ok().map(|mut d| std::mem::take(&mut *d)))
            .unwrap_or_default()
    }
}

impl Drop for Egress {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn base() -> PathBuf {
    let b = Path::new(BASE);
    if b.is_dir() {
        b.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// One run's egress sockets, for `aicli containers`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProxyInfo {
    /// The sockets' directory.
    pub dir: PathBuf,
    /// The aicli process it belongs to (`host:pid:start`), when it says.
    pub owner: Option<String>,
    /// Whether that aicli is alive.
    pub owner_alive: bool,
    /// When it was made (Unix seconds).
    pub created: i64,
}

/// The runs' egress sockets on this machine (live runs', and those a killed aicli left).
pub fn list() -> Vec<ProxyInfo> {
    let Ok(entries) = std::fs::read_dir(base()) else {
        return Vec::new();
    };
    let mut out: Vec<ProxyInfo> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(PREFIX))
        .filter(|e| is_ours(&e.path()))
        .map(|e| {
            let dir = e.path();
            let owner = read_owner(&dir);
            let created = std::fs::metadata(&dir)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs() as i64);
            ProxyInfo {
                owner_alive: owner.as_deref().is_some_and(super::labels::owner_alive),
                owner,
                created,
                dir,
            }
        })
        .collect();
    out.sort_by_key(|p| p.created);
    out
}

/// Whether `dir` is a socket directory as aicli makes them: a directory (not a link),
/// this process's user's or, as root, the container user's it was given to.
fn is_ours(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(dir).is_ok_and(|m| {
        m.is_dir() && {
            let euid = nix::unistd::geteuid();
            euid.is_root() || m.uid() == euid.as_raw()
        }
    })
}

/// The owner named in `dir` (a regular file of at most 512 bytes; anything else, a
/// link or a FIFO put there, names nobody).
fn read_owner(dir: &Path) -> Option<String> {
    let path = dir.join(OWNER_FILE);
    std::fs::symlink_metadata(&path)
        .ok()?
        .is_file()
        .then(|| read_capped(&path, 512))?
        .map(|t| t.trim().to_owned())
}

/// Removes the socket directories whose aicli is gone (killed before its runs ended);
/// returns how many.
pub fn sweep() -> usize {
    sweep_in(&base())
}

fn sweep_in(base: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(base) else {
        return 0;
    };
    let mut n = 0;
    for e in entries.flatten() {
        if !e.file_name().to_string_lossy().starts_with(PREFIX) {
            continue;
        }
        let dir = e.path();
        if !is_ours(&dir) {
            continue;
        }
        if super::labels::left_behind(&dir, read_owner(&dir).as_deref())
            && std::fs::remove_dir_all(&dir).is_ok()
        {
            n += 1;
        }
    }
    n
}

/// Carries each connection of `listener` to aicli's MCP server on `127.0.0.1:port`, from
/// `peer`.
async fn splice(listener: UnixListener, peer: IpAddr, port: u16, stop: CancellationToken) {
    let places = Arc::new(tokio::sync::Semaphore::new(MAX_MCP_CONNECTIONS));
    loop {
        let mut conn = tokio::select! {
            a = listener.accept() => match a {
                Ok((s, _)) => s,
                Err(_) => {
                    // Out of descriptors, say: wait rather than spin.
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = stop.cancelled() => return,
        };
        let Ok(place) = places.clone().try_acquire_owned() else {
            continue;
        };
        let stop = stop.clone();
        tokio::spawn(async move {
            let _place = place;
            let server = async {
                let s = tokio::net::TcpSocket::new_v4()?;
                s.bind(SocketAddr::new(peer, 0))?;
                s.connect(SocketAddr::from(([127, 0, 0, 1], port))).await
            };
            let mut server: TcpStream = match server.await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, %peer, port, "egress: cannot reach aicli's MCP server");
                    return;
                }
            };
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut conn, &mut server) => {}
                () = stop.cancelled() => {}
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_removes_the_directories_of_a_gone_aicli_only() {
        let base = tempfile::tempdir().unwrap();
        let mk = |name: &str, owner: Option<&str>| {
            let d = base.path().join(name);
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("proxy.sock"), "").unwrap();
            if let Some(o) = owner {
                std::fs::write(d.join(OWNER_FILE), o).unwrap();
            }
            d
        };
        let host = super::super::labels::hostname();
        let gone = mk("aicli-egress-gone", Some(&format!("{host}:999999999:1")));
        let mine = mk(
            "aicli-egress-mine",
            Some(&super::super::labels::this_owner()),
        );
        let fresh = mk("aicli-egress-fresh", None);
        let other = mk("not-ours", Some(&format!("{host}:999999999:1")));
        assert_eq!(sweep_in(base.path()), 1);
        assert!(!gone.exists());
        assert!(mine.exists() && fresh.exists() && other.exists());
    }
}
