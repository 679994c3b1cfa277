//! A raw streamable HTTP MCP client for the benches: initialize -> `Mcp-Session-Id` ->
//! `tools/call` POSTs answered as JSON or SSE, DELETE. The same client drives every
//! server a bench compares, through the same load loop ([`measure`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use serde_json::Value;

/// The protocol version the client asks for.
pub const PROTOCOL: &str = "2025-06-18";

/// A raw streamable HTTP MCP client (one `reqwest` pool, sessions by id).
pub struct Client {
    /// The HTTP client.
    pub http: reqwest::Client,
    /// The MCP endpoint.
    pub url: String,
    auth: String,
}

impl Client {
    /// A client of the server at `url` with bearer `token`.
    pub fn new(url: &str, token: &str) -> Result<Client> {
        Ok(Client {
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(256)
                .tcp_nodelay(true)
                .build()?,
            url: url.to_owned(),
            auth: format!("Bearer {token}"),
        })
    }

    fn request(&self, method: reqwest::Method, sid: Option<&str>) -> reqwest::RequestBuilder {
        let mut b = self
            .http
            .request(method, &self.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("authorization", &self.auth);
        if let Some(s) = sid {
            b = b
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", PROTOCOL);
        }
        b
    }

    /// initialize + notifications/initialized: the session id.
    pub async fn initialize(&self) -> Result<String> {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{PROTOCOL}","capabilities":{{}},"clientInfo":{{"name":"mcp_load","version":"0"}}}}}}"#
        );
        let resp = self
            .request(reqwest::Method::POST, None)
            .body(body)
            .send()
            .await?;
        if !resp.status().is_success() {
            bail!("initialize: HTTP {}", resp.status());
        }
        let sid = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| anyhow!("initialize: no Mcp-Session-Id"))?
            .to_owned();
        read_message(resp, 0).await?;
        let resp = self
            .request(reqwest::Method::POST, Some(&sid))
            .body(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .send()
            .await?;
        if resp.status() != 202 {
            bail!("initialized: HTTP {}", resp.status());
        }
        Ok(sid)
    }

    /// `tools/call` of `name` with `arguments` (JSON text) in session `sid`; the
    /// result, or an error for an HTTP, protocol or tool failure.
    pub async fn call(&self, sid: &str, id: u64, name: &str, arguments: &str) -> Result<Value> {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":{},"arguments":{arguments}}}}}"#,
            Value::from(name)
        );
        let resp = self
            .request(reqwest::Method::POST, Some(sid))
            .body(body)
            .send()
            .await?;
        if resp.status() != 200 {
            bail!("tools/call: HTTP {}", resp.status());
        }
        let msg = read_message(resp, id).await?;
        if msg["result"]["isError"] == true || msg.get("error").is_some() {
            bail!("tools/call failed: {msg}");
        }
        Ok(msg["result"].clone())
    }

    /// Ends session `sid`.
    pub async fn delete(&self, sid: &str) {
        let _ = self
            .request(reqwest::Method::DELETE, Some(sid))
            .send()
            .await;
    }
}

/// Reads a JSON or SSE response to its end and returns the JSON-RPC message `id`.
async fn read_message(mut resp: reqwest::Response, id: u64) -> Result<Value> {
    let is_json = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let mut body = Vec::new();
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(30), resp.chunk())
        .await
        .map_err(|_| anyhow!("response stalled"))??
    {
        body.extend_from_slice(&chunk);
    }
    let text = String::from_utf8_lossy(&body);
    if is_json {
        return Ok(serde_json::from_str(&text)?);
    }
    for line in text.lines() {
        if let Some(data) = line.strip_prefix("data:")
            && let Ok(v) = serde_json::from_str::<Value>(data.trim())
            && v["id"] == id
        {
            return Ok(v);
        }
    }
    bail!("no message {id} in the SSE response: {text}")
}

/// What one load level measured: the calls after the warm-up.
pub struct Load {
    /// Calls that succeeded.
    pub calls: usize,
    /// Calls that failed.
    pub errors: usize,
    /// Successful calls per second.
    pub per_sec: f64,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 99th percentile latency, ms.
    pub p99_ms: f64,
}

/// Runs `op(worker, call id)` in a loop from `concurrency` workers for `warmup`, then
/// for `measure`, timing the calls of the measured part (ids start at `worker << 32`).
pub async fn measure<F, Fut>(concurrency: usize, warmup: Duration, measure: Duration, op: F) -> Load
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let op = Arc::new(op);
    let warm_until = Instant::now() + warmup;
    let until = warm_until + measure;
    let mut workers = Vec::new();
    for w in 0..concurrency {
        let op = op.clone();
        workers.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0usize;
            let mut id = (w as u64) << 32;
            loop {
                let t0 = Instant::now();
                if t0 >= until {
                    break;
                }
                id += 1;
                let ok = op(w, id).await.is_ok();
                if t0 >= warm_until {
                    if ok {
                        lat.push(t0.elapsed());
                    } else {
                        errors += 1;
                    }
                }
            }
            (lat, errors)
        }));
    }
    let mut lat = Vec::new();
    let mut errors = 0;
    for w in workers {
        if let Ok((l, e)) = w.await {
            lat.extend(l);
            errors += e;
        }
    }
    lat.sort();
    let pct = |p: f64| -> f64 {
        if lat.is_empty() {
            return 0.0;
        }
        let i = ((lat.len() as f64 - 1.0) * p).round() as usize;
        lat[i.min(lat.len() - 1)].as_secs_f64() * 1e3
    };
    Load {
        calls: lat.len(),
        errors,
        per_sec: lat.len() as f64 / measure.as_secs_f64(),
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
    }
}
