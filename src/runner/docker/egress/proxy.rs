//! The proxy a run's container reaches through its socket: `CONNECT host:port` tunnels
//! and absolute-form `http://` requests to allowed hosts; anything else is answered 403
//! and recorded.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::allow::Allowlist;
use crate::http::listener::{Activity, Tracked};
use crate::record::EgressDenial;

/// Most connections a run's CLI may hold open through the proxy at once.
const MAX_CONNECTIONS: usize = 256;
/// Most distinct refused hosts a run's record keeps (each with its count).
const MAX_DENIALS: usize = 100;
/// How long a request's head may take to arrive.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a connection to an allowed host may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection or tunnel that moves no byte this long is closed (a model's stream
/// sends far more often; every connection also ends with its run).
const IDLE_TIMEOUT: Duration = Duration::from_secs(600);

type Body = BoxBody<Bytes, hyper::Error>;

/// Whether `ip` is this machine's own (loopback, no address, link-local), directly or
/// as an IPv4-mapped IPv6 address: never reached through the proxy by a name.
pub(crate) fn is_local(ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    match ip {
        IpAddr::V4(v4) => v4.is_loopback() || v4.is_unspecified() || v4.is_link_local(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.is_unspecified() || (v6.segments()[0] & 0xffc0) == 0xfe80
        }
    }
}

/// Why a connection to an allowed host was not made.
enum Unreached {
    /// The host is this machine's own address: refused, as if not on the list.
    Local,
    /// It could not be reached.
    Failed(String),
}

/// What every connection of a run's proxy shares.
#[derive(Debug)]
pub struct Shared {
    /// What may be reached.
    pub allow: Allowlist,
    /// Names this machine resolves itself (`host.docker.internal`: the bridge gateway).
    pub aliases: Vec<(String, IpAddr)>,
    /// What was refused.
    pub denials: Mutex<Vec<EgressDenial>>,
}

impl Shared {
    fn deny(&self, host: &str, port: u16, method: &str) {
        let now = crate::util::now_rfc3339();
        // A host name has at most 253 bytes; a longer one is kept cut.
        let host = crate::providers::shared::text::truncate_chars(host, 253);
        let host = host.as_str();
        let Ok(mut d) = self.denials.lock() else {
            return;
        };
        if let Some(e) = d.iter_mut().find(|e| e.host == host && e.port == port) {
            e.count += 1;
            e.last_at = now;
            return;
        }
        if d.len() < MAX_DENIALS {
            tracing::warn!(%host, port, %method, "egress refused: not on the run's allowlist");
            d.push(EgressDenial {
                host: host.to_owned(),
                port,
                method: method.to_owned(),
                first_at: now.clone(),
                last_at: now,
                count: 1,
            });
        }
    }

    /// A connection to `host:port` (an alias, an IP literal or a name to resolve; as
    /// [`super::allow::normalise`] gives it). A host that is, or resolves to, this
    /// machine's own address is not connected to (an alias names what it names).
    async fn connect(&self, host: &str, port: u16) -> Result<TcpStream, Unreached> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> =
            if let Some((_, ip)) = self.aliases.iter().find(|(n, _)| n == host) {
                vec![SocketAddr::new(*ip, port)]
            } else {
                let found: Vec<SocketAddr> = if let Ok(ip) = bare.parse::<IpAddr>() {
                    vec![SocketAddr::new(ip, port)]
                } else {
                    tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host((bare, port)))
                        .await
                        .map_err(|_| Unreached::Failed(format!("resolving {host} timed out")))?
                        .map_err(|e| Unreached::Failed(format!("cannot resolve {host}: {e}")))?
                        .collect()
                };
                if found.iter().any(|a| is_local(a.ip())) {
                    return Err(Unreached::Local);
                }
                found
            };
        let mut last = format!("{host} has no address");
        for a in addrs {
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(a)).await {
                Ok(Ok(s)) => {
                    let _ = s.set_nodelay(true);
                    return Ok(s);
                }
                Ok(Err(e)) => last = format!("cannot connect to {a}: {e}"),
                Err(_) => last = format!("connecting to {a} timed out"),
            }
        }
        Err(Unreached::Failed(last))
    }
}

/// Serves `listener` until `stop`.
pub async fn serve(listener: UnixListener, shared: Arc<Shared>, stop: CancellationToken) {
    let places = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let stream = tokio::select! {
            a = listener.accept() => match a {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of descriptors, say: wait rather than spin.
                    tracing::debug!(error = %e, "egress proxy accept");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = stop.cancelled() => return,
        };
        let Ok(permit) = places.clone().try_acquire_owned() else {
            tracing::debug!(
                "egress proxy: {MAX_CONNECTIONS} connections already open; one more refused"
            );
            continue;
        };
        let shared = shared.clone();
        let stop = stop.clone();
        let places = places.clone();
        tokio::spawn(async move {
            connection(stream, shared, places, stop).await;
            drop(permit);
        });
    }
}

async fn connection(
    stream: UnixStream,
    shared: Arc<Shared>,
    places: Arc<Semaphore>,
    stop: CancellationToken,
) {
    let activity = Arc::new(Activity::new());
    let io = Tracked {
        inner: stream,
        activity: activity.clone(),
    };
    let service = {
        let (activity, stop) = (activity.clone(), stop.clone());
        hyper::service::service_fn(move |req| {
            handle(
                req,
                shared.clone(),
                places.clone(),
                activity.clone(),
                stop.clone(),
            )
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .keep_alive(true);
    let conn = builder
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    tokio::select! {
        r = conn => if let Err(e) = r {
            tracing::debug!(error = %e, "egress proxy connection ended");
        },
        () = activity.idle_for(IDLE_TIMEOUT) => {}
        () = stop.cancelled() => {}
    }
}

fn text(status: StatusCode, message: String) -> Response<Body> {
    let mut r = Response::new(
        Full::new(Bytes::from(message + "\n"))
            .map_err(|never: Infallible| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r
}

/// Headers of one hop that a proxy does not pass on.
const HOP_HEADERS: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "proxy-connection",
    "te",
    "upgrade",
];

async fn handle(
    req: Request<Incoming>,
    shared: Arc<Shared>,
    places: Arc<Semaphore>,
    activity: Arc<Activity>,
    stop: CancellationToken,
) -> Result<Response<Body>, Infallible> {
    let is_connect = req.method() == Method::CONNECT;
    let target = req.uri().authority().cloned().filter(|_| {
        is_connect || req.uri().scheme() == Some(&hyper::http::uri::Scheme::HTTP)
    });
    let Some(target) = target else {
        return Ok(text(
            StatusCode::BAD_REQUEST,
            "aicli's egress proxy takes CONNECT tunnels and http:// requests in absolute form only"
                .to_owned(),
        ));
    };
    // One form of the host for the check, the connection and the Host header.
    let host = super::allow::normalise(target.host());
    let port = target
        .port_u16()
        .unwrap_or(if is_connect { 443 } else { 80 });
    let refused = |shared: &Shared, method: &str| {
        shared.deny(&host, port, method);
        text(
            StatusCode::FORBIDDEN,
            format!(
                "aicli's egress proxy: {host}:{port} is not on this task's allowlist (engine.docker.egress.allow widens it)"
            ),
        )
    };
    if !shared.allow.allows(&host, port) {
        return Ok(refused(&shared, req.method().as_str()));
    }
    let upstream = match shared.connect(&host, port).await {
        Ok(s) => s,
        Err(Unreached::Local) => return Ok(refused(&shared, req.method().as_str())),
        Err(Unreached::Failed(e)) => {
            return Ok(text(
                StatusCode::BAD_GATEWAY,
                format!("aicli's egress proxy: {e}"),
            ));
        }
    };
    if is_connect {
        // A tunnel outlives its connection's place: it holds one of its own.
        let Ok(place) = places.try_acquire_owned() else {
            return Ok(text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("aicli's egress proxy: {MAX_CONNECTIONS} connections already open"),
            ));
        };
        tokio::spawn(async move {
            let _place = place;
            let upgraded = match hyper::upgrade::on(req).await {
                Ok(u) => u,
                Err(e) => {
                    tracing::debug!(error = %e, "egress tunnel: no upgrade");
                    return;
                }
            };
            let mut client = TokioIo::new(upgraded);
            let mut upstream = upstream;
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
                () = activity.idle_for(IDLE_TIMEOUT) => {}
                () = stop.cancelled() => {}
            }
        });
        return Ok(Response::new(
            Full::new(Bytes::new())
                .map_err(|never: Infallible| match never {})
                .boxed(),
        ));
    }
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await
    {
        Ok(c) => c,
        Err(e) => {
            return Ok(text(
                StatusCode::BAD_GATEWAY,
                format!("aicli's egress proxy: {host}:{port}: {e}"),
            ));
        }
    };
    tokio::spawn(async move {
        tokio::select! {
            _ = conn => {}
            () = stop.cancelled() => {}
        }
    });
    let (mut parts, body) = req.into_parts();
    // The headers the client named as this hop's go too.
    let named: Vec<String> = parts
        .headers
        .get_all(hyper::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|h| h.trim().to_ascii_lowercase())
        .filter(|h| !h.is_empty())
        .collect();
    for h in &named {
        parts.headers.remove(h.as_str());
    }
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .parse()
        .unwrap_or_else(|_| hyper::Uri::from_static("/"));
    parts.uri = path;
    for h in HOP_HEADERS {
        parts.headers.remove(h);
    }
    // The host asked for is the host reached: never another name behind the same
    // address (a reverse proxy's virtual host).
    let authority = match target.port_u16() {
        Some(p) => format!("{host}:{p}"),
        None => host.clone(),
    };
    match authority.parse() {
        Ok(v) => {
            parts.headers.insert(hyper::header::HOST, v);
        }
        Err(_) => {
            return Ok(text(
                StatusCode::BAD_REQUEST,
                format!("aicli's egress proxy: {authority} is not a host"),
            ));
        }
    }
    match sender.send_request(Request::from_parts(parts, body)).await {
        Ok(resp) => Ok(resp.map(BodyExt::boxed)),
        Err(e) => Ok(text(
            StatusCode::BAD_GATEWAY,
            format!("aicli's egress proxy: {host}:{port}: {e}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Sends `request` through a proxy serving `patterns` (with `host.docker.internal`
    /// naming loopback); returns the status line and the denials.
    async fn ask(patterns: &[&str], request: String) -> (String, Vec<EgressDenial>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("proxy.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let patterns: Vec<String> = patterns.iter().map(|s| (*s).to_owned()).collect();
        let cmd = aicli_providers::CommandSpec::new(
            &aicli_providers::BinaryLocation::Path("cli".into()),
            std::path::Path::new("/w"),
        );
        let shared = Arc::new(Shared {
            allow: Allowlist::new(&patterns, &cmd, &[]),
            aliases: vec![(
                "host.docker.internal".to_owned(),
                IpAddr::from([127, 0, 0, 1]),
            )],
            denials: Mutex::new(Vec::new()),
        });
        let stop = CancellationToken::new();
        tokio::spawn(serve(listener, shared.clone(), stop.clone()));
        let mut s = UnixStream::connect(&path).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = s.read(&mut buf).await.unwrap();
        let head = String::from_utf8_lossy(&buf[..n]);
        stop.cancel();
        let denied = shared.denials.lock().unwrap().clone();
        (head.lines().next().unwrap_or_default().to_owned(), denied)
    }

    #[tokio::test]
    async fn this_machine_is_never_reached_by_a_name_or_a_shorthand() {
        for host in ["127.1", "0", "localhost.", "[::ffff:127.0.0.1]", "2130706433"] {
            let (status, denied) = ask(
                &[&format!("{host}:*")],
                format!("GET http://{host}:9/ HTTP/1.1\r\nHost: {host}:9\r\n\r\n"),
            )
            .await;
            assert!(status.contains(" 403 "), "{host}: {status}");
            assert_eq!(denied.len(), 1, "{host}: {denied:?}");
            assert_eq!(denied[0].port, 9);
        }
        assert!(is_local(IpAddr::from([169, 254, 1, 1])));
        assert!(is_local("fe80::1".parse().unwrap()));
        assert!(!is_local(IpAddr::from([172, 17, 0, 1])));
    }

    #[tokio::test]
    async fn the_host_asked_for_is_the_host_sent() {
        // The alias names loopback here: the upstream records the Host it got.
        let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = upstream.local_addr().unwrap().port();
        let got = tokio::spawn(async move {
            let (mut c, _) = upstream.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let n = c.read(&mut buf).await.unwrap();
            c.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await
                .unwrap();
            String::from_utf8_lossy(&buf[..n]).into_owned()
        });
        let (status, denied) = ask(
            &[&format!("host.docker.internal:{port}")],
            format!(
                "GET http://host.docker.internal:{port}/v1?x=1 HTTP/1.1\r\nHost: evil.example\r\nConnection: close, x-secret\r\nX-Secret: 1\r\nProxy-Authorization: Basic eDp5\r\n\r\n"
            ),
        )
        .await;
        assert!(status.contains(" 200 "), "{status}");
        assert!(denied.is_empty());
        let head = got.await.unwrap().to_ascii_lowercase();
        assert!(head.starts_with("get /v1?x=1 http/1.1\r\n"), "{head}");
        assert!(head.contains(&format!("host: host.docker.internal:{port}\r\n")), "{head}");
        for gone in ["evil.example", "x-secret", "proxy-authorization"] {
            assert!(!head.contains(gone), "{gone} was passed on: {head}");
        }
    }
}
