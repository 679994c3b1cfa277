//! An HTTP upstream: rmcp's streamable HTTP client, with the configured headers
//! (`${NAME}` expanded from aicli's environment, the values marked sensitive).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use axum::http::{HeaderName, HeaderValue};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};

use super::instance::{Client, Instance};

impl Instance {
    /// Opens its session and shakes hands within `startup`.
    pub(super) async fn start_http(
        &self,
        handler: Client,
        startup: Duration,
    ) -> Result<RunningService<RoleClient, Client>, String> {
        let url = self.config.url.clone().unwrap_or_default();
        let mut headers = HashMap::new();
        for (k, v) in &self.config.headers {
            let value = expand(v, &self.env.source).map_err(|var| {
                format!("header {k}: ${{{var}}} is not set in aicli's environment")
            })?;
            let name = HeaderName::try_from(k.as_str()).map_err(|e| format!("header {k}: {e}"))?;
            let mut value = HeaderValue::try_from(value)
                .map_err(|_| format!("header {k}: the value is not a valid header value"))?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(url).custom_headers(headers),
        );
        match tokio::time::timeout(startup, handler.serve(transport)).await {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no MCP handshake within {} s", startup.as_secs())),
        }
    }
}

/// `${NAME}` in `value` replaced by `NAME` of `env`; `Err(NAME)` for a missing one.
pub(super) fn expand(value: &str, env: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[i..]);
            return Ok(out);
        };
        let name = &after[..end];
        out.push_str(env.get(name).ok_or_else(|| name.to_owned())?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}
