//! `--mcp-call`, `--mcp-list`: a minimal MCP client over streamable HTTP (initialize,
//! initialized, one request): what a real CLI does to read a credential granted to its
//! task.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

/// The server's URL and bearer token: from Claude's `--mcp-config` file, else from
/// AICLI_MCP_URL / AICLI_MCP_TOKEN.
fn endpoint(mcp_config: Option<&str>) -> Result<(String, String), String> {
    if let Some(f) = mcp_config {
        let v: Value =
            serde_json::from_str(&std::fs::read_to_string(f).map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        let s = &v["mcpServers"]["aicli"];
        let url = s["url"].as_str().ok_or("no url in the MCP config")?;
        let auth = s["headers"]["Authorization"]
            .as_str()
            .ok_or("no Authorization header")?;
        let token = auth.strip_prefix("Bearer ").ok_or("not a bearer token")?;
        return Ok((url.to_owned(), token.to_owned()));
    }
    match (
        std::env::var("AICLI_MCP_URL"),
        std::env::var("AICLI_MCP_TOKEN"),
    ) {
        (Ok(u), Ok(t)) => Ok((u, t)),
        _ => Err("no MCP server: neither --mcp-config nor AICLI_MCP_URL".into()),
    }
}

/// The `tools` of `tools/list` as JSON text, or `{"error": ...}`.
pub fn list_tools(mcp_config: Option<&str>) -> String {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    match rt.block_on(request(mcp_config, "tools/list", json!({}))) {
        Ok(v) => v["result"]["tools"].to_string(),
        Err(e) => json!({ "error": e }).to_string(),
    }
}

/// `tool(args)`'s result as JSON text, `{"rpc_error": ...}` for a JSON-RPC error,
/// or `{"error": ...}`.
pub fn call_tool(mcp_config: Option<&str>, tool: &str, args: &str) -> String {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let args: Value = match serde_json::from_str(args) {
        Ok(v) => v,
        Err(e) => return json!({ "error": format!("bad tool arguments: {e}") }).to_string(),
    };
    let params = json!({"name": tool, "arguments": args});
    match rt.block_on(request(mcp_config, "tools/call", params)) {
        Ok(v) if v.get("error").is_some() => json!({"rpc_error": v["error"]}).to_string(),
        Ok(v) => v["result"].to_string(),
        Err(e) => json!({ "error": e }).to_string(),
    }
}

/// One request on a new session: the whole JSON-RPC response.
async fn request(mcp_config: Option<&str>, method: &str, params: Value) -> Result<Value, String> {
    let (url, token) = endpoint(mcp_config)?;
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let post = |sid: Option<String>, body: Value| {
        let mut b = hyper::Request::post(url.as_str())
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(s) = sid {
            b = b
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", "2025-06-18");
        }
        let req = b.body(Full::new(Bytes::from(body.to_string()))).unwrap();
        let client = client.clone();
        async move {
            let resp = client.request(req).await.map_err(|e| e.to_string())?;
            let status = resp.status();
            let sid = resp
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?;
            let text = String::from_utf8_lossy(&body.to_bytes()).into_owned();
            if !status.is_success() {
                return Err(format!("HTTP {status}: {text}"));
            }
            // SSE (`data: {...}` lines) or plain JSON.
            let msg = text
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .find_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
                .or_else(|| serde_json::from_str(&text).ok())
                .unwrap_or(Value::Null);
            Ok::<_, String>((sid, msg))
        }
    };
    let (sid, _) = post(
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "aicli-fake-cli", "version": "0"}}}),
    )
    .await?;
    let sid = sid.ok_or("initialize: no session id")?;
    post(
        Some(sid.clone()),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await?;
    let (_, msg) = post(
        Some(sid),
        json!({"jsonrpc": "2.0", "id": 2, "method": method, "params": params}),
    )
    .await?;
    Ok(msg)
}
