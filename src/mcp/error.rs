//! [`McpError`]: why the server could not start.

/// Why [`McpServer::start`](super::McpServer::start) failed.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The bind address is not `host:port`.
    #[error("invalid MCP bind address {bind:?}: {reason}")]
    BadBind {
        /// The address as configured.
        bind: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A command-backed tool cannot be served (its `input_schema` does not compile).
    #[error("MCP tool {name}: {reason}")]
    BadTool {
        /// The tool's name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// Binding (or reading back the bound address) failed.
    #[error("cannot bind the MCP server to {bind}: {source}")]
    Bind {
        /// The address as configured.
        bind: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl McpError {
    /// Whether trying again later might work (an address in use may be freed).
    pub fn is_retryable(&self) -> bool {
        match self {
            McpError::BadBind { .. } | McpError::BadTool { .. } => false,
            McpError::Bind { source, .. } => source.kind() == std::io::ErrorKind::AddrInUse,
        }
    }
}
