//! A minimal MCP server (rmcp, streamable HTTP) with one tool, `echo`, that answers
//! `echo: <text>` (text content) and `{"result": "echo: <text>"}` (structured content),
//! like the server behind the reference transcripts. It records each call.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::serve::ListenerExt;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{schemars, tool, tool_router};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

#[derive(Clone)]
struct Echo {
    calls: Arc<Mutex<Vec<String>>>,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct EchoArgs {
    /// The text to echo back.
    text: String,
}

#[tool_router(server_handler)]
impl Echo {
    #[tool(name = "echo", description = "Echo the given text back.")]
    fn echo(&self, Parameters(EchoArgs { text }): Parameters<EchoArgs>) -> CallToolResult {
        self.calls.lock().unwrap().push(text.clone());
        let answer = format!("echo: {text}");
        let mut result = CallToolResult::success(vec![ContentBlock::text(answer.clone())]);
        result.structured_content = Some(serde_json::json!({"result": answer}));
        result
    }
}

/// A running echo server; stops on drop.
pub struct EchoServer {
    pub url: String,
    calls: Arc<Mutex<Vec<String>>>,
    cancel: CancellationToken,
}

impl EchoServer {
    pub async fn start() -> EchoServer {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let cancel = CancellationToken::new();
        let factory_calls = Arc::clone(&calls);
        // No SSE priming events (`data:` empty, `id: 0/0`, `retry: 3000`), which rmcp sends
        // by default both from the service config and from the session manager: Gemini
        // CLI 0.61's MCP client runs JSON.parse("") on them, fails, and drops the server
        // ("MCP issues detected"). Claude and Codex ignore them.
        let mut sessions = LocalSessionManager::default();
        sessions.session_config.sse_retry = None;
        let service = StreamableHttpService::new(
            move || {
                Ok(Echo {
                    calls: Arc::clone(&factory_calls),
                })
            },
            sessions.into(),
            StreamableHttpServerConfig::default()
                .with_sse_retry(None)
                .with_cancellation_token(cancel.child_token()),
        );
        let app = Router::new().nest_service("/mcp", service);
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let shutdown = cancel.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(shutdown.cancelled_owned())
                .await;
        });
        EchoServer {
            url: format!("http://{addr}/mcp"),
            calls,
            cancel,
        }
    }

    /// The texts the `echo` tool was called with.
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}
