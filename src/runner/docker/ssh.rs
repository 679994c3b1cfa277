//! `ssh://` engines through the system's `ssh`, as the docker CLI reaches them: each
//! connection is one `ssh … docker system dial-stdio`, whose stdin and stdout carry the
//! engine's HTTP API. hyper keeps connections alive and reuses them, so a busy runner
//! holds a few ssh processes, not one per request.
//!
//! Unlike bollard's own ssh transport, the options come from the host's config
//! ([`DockerSsh`]: an identity, a known-hosts file, an ssh config), never a prompt
//! (`BatchMode=yes`), and each `ssh` is a child in its own process group that dies with
//! its connection.

use std::future::Future;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::Arc;
use std::task::{Context, Poll};

use aicli_providers::DockerSsh;
use bollard::{BollardRequest, Docker};
use hyper::Uri;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// A client of the engine at `url` (`ssh://[user@]host[:port]`).
pub(super) fn client(url: &str, ssh: Option<&DockerSsh>, timeout: u64) -> Result<Docker, String> {
    let connector = SshConnector {
        argv: Arc::new(ssh_argv(url, ssh)?),
    };
    let client = Arc::new(Client::builder(TokioExecutor::new()).build(connector));
    let transport = move |req: BollardRequest| {
        let client = client.clone();
        async move { client.request(req).await.map_err(bollard::errors::Error::from) }
    };
    // The host part is a placeholder: every connection goes through `ssh`.
    Docker::connect_with_custom_transport(
        transport,
        Some("http://docker-over-ssh"),
        timeout,
        bollard::API_DEFAULT_VERSION,
    )
    .map_err(|e| e.to_string())
}

/// `ssh`'s arguments up to the remote command.
fn ssh_argv(url: &str, ssh: Option<&DockerSsh>) -> Result<Vec<String>, String> {
    let rest = url
        .strip_prefix("ssh://")
        .ok_or_else(|| format!("'{url}' is not ssh://"))?
        .trim_end_matches('/');
    let (user, hostport) = match rest.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, rest),
    };
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => {
            let port: u16 = p
                .parse()
                .map_err(|_| format!("'{url}': '{p}' is not a port"))?;
            (h, Some(port))
        }
        _ => (hostport, None),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let word_ok = |w: &str| {
        !w.is_empty()
            && !w.starts_with('-')
            && w.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'))
    };
    if !word_ok(host) || user.is_some_and(|u| !word_ok(u)) {
        return Err(format!("'{url}': expected ssh://[user@]host[:port]"));
    }
    let mut argv: Vec<String> = ["-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]
        .map(str::to_owned)
        .to_vec();
    argv.extend(["-o".to_owned(), "ServerAliveInterval=30".to_owned()]);
    if let Some(o) = ssh {
        if let Some(c) = &o.config {
            argv.extend(["-F".to_owned(), c.display().to_string()]);
        }
        if let Some(i) = &o.identity_file {
            argv.extend([
                "-i".to_owned(),
                i.display().to_string(),
                "-o".to_owned(),
                "IdentitiesOnly=yes".to_owned(),
            ]);
        }
        if let Some(k) = &o.known_hosts {
            argv.extend([
                "-o".to_owned(),
                format!("UserKnownHostsFile={}", k.display()),
                "-o".to_owned(),
                "StrictHostKeyChecking=yes".to_owned(),
            ]);
        }
    }
    if let Some(p) = port {
        argv.extend(["-p".to_owned(), p.to_string()]);
    }
    if let Some(u) = user {
        argv.extend(["-l".to_owned(), u.to_owned()]);
    }
    argv.extend(["--".to_owned(), host.to_owned()]);
    Ok(argv)
}

/// Opens a connection: a new `ssh … docker system dial-stdio`.
#[derive(Debug, Clone)]
struct SshConnector {
    argv: Arc<Vec<String>>,
}

impl tower_service::Service<Uri> for SshConnector {
    type Response = SshStream;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<SshStream, std::io::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let argv = self.argv.clone();
        Box::pin(async move {
            let mut child = Command::new("ssh")
                .args(argv.iter())
                .args(["docker", "system", "dial-stdio"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .process_group(0)
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| std::io::Error::new(e.kind(), format!("ssh: {e}")))?;
            let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                return Err(std::io::Error::other("ssh: no pipes"));
            };
            // What ssh or the remote docker CLI says (a refused key, an unknown host, no
            // docker there) goes to the log: the connection itself only sees an EOF.
            if let Some(stderr) = child.stderr.take() {
                let dest = argv.last().cloned().unwrap_or_default();
                tokio::spawn(async move {
                    let mut lines = tokio::io::BufReader::new(stderr).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        tracing::warn!(host = %dest, "ssh: {line}");
                    }
                });
            }
            Ok(SshStream {
                read: TokioIo::new(stdout),
                write: Some(TokioIo::new(stdin)),
                _child: child,
            })
        })
    }
}

/// One connection: the `ssh` child's stdout (read) and stdin (write); the child is
/// killed when the connection is dropped.
struct SshStream {
    read: TokioIo<ChildStdout>,
    /// Closed at shutdown: a pipe's `poll_shutdown` does nothing, and the end of a
    /// container's stdin (an attach's half-close) is the pipe's close.
    write: Option<TokioIo<ChildStdin>>,
    _child: Child,
}

impl SshStream {
    fn write(&mut self) -> std::io::Result<Pin<&mut TokioIo<ChildStdin>>> {
        self.write
            .as_mut()
            .map(Pin::new)
            .ok_or_else(|| std::io::ErrorKind::BrokenPipe.into())
    }
}

impl Connection for SshStream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl hyper::rt::Read for SshStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.read).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for SshStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        hyper::rt::Write::poll_write(self.write()?, cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.write.as_mut() {
            Some(w) => hyper::rt::Write::poll_flush(Pin::new(w), cx),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        if let Some(w) = self.write.as_mut() {
            std::task::ready!(hyper::rt::Write::poll_flush(Pin::new(w), cx))?;
        }
        self.write = None;
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_become_ssh_arguments_and_bad_ones_are_refused() {
        let opts = DockerSsh {
            identity_file: Some("/k/id".into()),
            known_hosts: Some("/k/known".into()),
            config: None,
        };
        let argv = ssh_argv("ssh://deploy@build-1.example:2222", Some(&opts)).unwrap_or_default();
        let s = argv.join(" ");
        assert!(s.starts_with("-T -o BatchMode=yes"), "{s}");
        assert!(
            s.ends_with("-i /k/id -o IdentitiesOnly=yes -o UserKnownHostsFile=/k/known -o StrictHostKeyChecking=yes -p 2222 -l deploy -- build-1.example"),
            "{s}"
        );
        let argv = ssh_argv("ssh://host", None).unwrap_or_default();
        assert!(argv.ends_with(&["--".to_owned(), "host".to_owned()]), "{argv:?}");
        for bad in ["ssh://-oProxyCommand=x", "ssh://a@-b", "ssh://h:port", "ssh://", "tcp://h"] {
            assert!(ssh_argv(bad, None).is_err(), "{bad}");
        }
    }
}
