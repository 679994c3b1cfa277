//! What aicli's HTTP servers (the agent MCP server, the web view) share: a listener with
//! a limit on every connection, and the Host/Origin check against DNS rebinding.

pub(crate) mod hosts;
pub(crate) mod listener;
pub(crate) mod tls;

pub(crate) use hosts::AllowedHosts;
