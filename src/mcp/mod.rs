//! The agent MCP server (in progress).
