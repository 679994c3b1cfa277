//! The Docker runner against a real engine (`.ci/docker-engine.sh`
//! starts one; without it these tests say why and skip, unless `AICLI_REQUIRE_DOCKER`
//! is set, as in CI).
//!
//! `local.rs`: the fake CLI in containers on the local engine (workspace, scaffolding,
//! cancel, timeout, leftovers); `remote.rs`: a second, strictly remote engine;
//! `ssh.rs`: that engine behind a real sshd, as an `ssh://` engine;
//! `clis.rs`: the three real CLIs in containers against the fake model APIs;
//! `confined.rs`: what those CLIs can do from inside their containers (user,
//! capabilities, writable places, the engine's socket, who owns their files);
//! `mcp.rs`: tokens and addresses from inside containers; `prompt.rs`: the prompt on
//! stdin and the environment a container gets; `images.rs`: `aicli image build` and
//! `aicli doctor` on the engine; `tools.rs`: task-scoped MCP tools called from a
//! container; `budget.rs`: the batch budget with runs in containers; `acp.rs`: the real
//! ACP agents in containers, stdin open both ways; `egress.rs`: the egress allowlist
//! from inside each real CLI's container; `warm.rs`: containers made ahead of their
//! tasks' turns; `swarm.rs`: the swarm runner on a real single-node swarm (the three
//! real CLIs, MCP, nothing left, nothing secret in what the engine shows).

mod acp;
pub mod budget;
pub mod clis;
mod confined;
mod egress;
mod fake_api;
mod images;
mod local;
mod mcp;
mod prompt;
mod remote;
pub mod remote_engine;
mod ssh;
pub mod sshd;
pub mod support;
pub mod swarm;
mod swarm_faults;
mod swarm_nodes;
mod tools;
mod warm;
