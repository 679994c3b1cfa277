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
        let Ok(mut d) = self.denials.lock() else {
            return;
        };
        if let Some(e) = d.iter_mut().find(|e| e.host == host && e.port == port) {
            e.count += 1;
            e.last_at = now;
            return;
        }
        tracing::warn!(%host, port, %method, "egress refused: not on the run's allowlist");
        if d.len() < MAX_DENIALS {
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

    /// A connection to `host:port` (an alias, an IP literal or a name to resolve).
    async fn connect(&self, host: &str, port: u16) -> Result<TcpStream, String> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = if let Some((_, ip)) =
            self.aliases.iter().find(|(n, _)| n.eq_ignore_ascii_case(host))
        {
            vec![SocketAddr::new(*ip, port)]
        } else if let Ok(ip) = bare.parse::<IpAddr>() {
            vec![SocketAddr::new(ip, port)]
        } else {
            tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host((bare, port)))
                .await
                .map_err(|_| format!("resolving {host} timed out"))?
                .map_err(|e| format!("cannot resolve {host}: {e}"))?
                .collect()
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
        Err(last)
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
                    tracing::debug!(error = %e, "egress proxy accept");
                    continue;
                }
            },
            () = stop.cancelled() => return,
        };
        let Ok(permit) = places.clone().try_acquire_owned() else {
            tracing::warn!(
                "egress proxy: {MAX_CONNECTIONS} connections already open; one more refused"
            );
            continue;
        };
        let shared = shared.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            connection(stream, shared, stop).await;
            drop(permit);
        });
    }
}

async fn connection(stream: UnixStream, shared: Arc<Shared>, stop: CancellationToken) {
    let activity = Arc::new(Activity::new());
    let io = Tracked {
        inner: stream,
        activity: activity.clone(),
    };
    let service = {
        let (activity, stop) = (activity.clone(), stop.clone());
        hyper::service::service_fn(move |req| {
            handle(req, shared.clone(), activity.clone(), stop.clone())
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
    let host = target.host().to_ascii_lowercase();
    let port = target
        .port_u16()
        .unwrap_or(if is_connect { 443 } else { 80 });
    if !shared.allow.allows(&host, port) {
        shared.deny(&host, port, req.method().as_str());
        return Ok(text(
            StatusCode::FORBIDDEN,
            format!(
                "aicli's egress proxy: {host}:{port} is not on this task's allowlist (engine.docker.egress.allow widens it)"
            ),
        ));
    }
    let upstream = match shared.connect(&host, port).await {
        Ok(s) => s,
        Err(e) => return Ok(text(StatusCode::BAD_GATEWAY, format!("aicli's egress proxy: {e}"))),
    };
    if is_connect {
        tokio::spawn(async move {
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
    if !parts.headers.contains_key(hyper::header::HOST)
        && let Ok(v) = target.as_str().parse()
    {
        parts.headers.insert(hyper::header::HOST, v);
    }
    match sender.send_request(Request::from_parts(parts, body)).await {
        Ok(resp) => Ok(resp.map(BodyExt::boxed)),
        Err(e) => Ok(text(
            StatusCode::BAD_GATEWAY,
            format!("aicli's egress proxy: {host}:{port}: {e}"),
        )),
    }
}
