mod e2e;
mod engine;
mod human;
mod mcp;
mod new_vendor;
mod process;
mod schemas;
mod support;
