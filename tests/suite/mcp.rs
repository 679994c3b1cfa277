//! MCP server tests (in progress).
