//! What the engine gives a provider for a run ([`LaunchContext`], [`McpEndpoint`]) and
//! the command it gets back ([`CommandSpec`], with its files, links and MCP wiring).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::BinaryLocation;
use crate::task::TaskSpec;

/// aicli's MCP server as one run sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpEndpoint {
    /// The server's name in the CLI's config (`aicli`).
    pub name: String,
    /// The streamable-HTTP URL (`http://127.0.0.1:PORT/mcp`).
    pub url: String,
    /// The run's bearer token.
    pub token: String,
    /// The server's tool names (for allowlists such as Claude's `mcp__aicli__<tool>`).
    pub tools: Vec<String>,
}

/// A file the engine writes before the run (and removes with the run's private dir).
#[derive(Clone, PartialEq, Eq)]
pub struct FileSpec {
    /// Absolute path.
    pub path: PathBuf,
    /// Contents.
    pub contents: String,
    /// Unix mode (0o600 for anything holding a token).
    pub mode: u32,
}

impl std::fmt::Debug for FileSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Contents may hold a bearer token: never print them.
        f.debug_struct("FileSpec")
            .field("path", &self.path)
            .field("bytes", &self.contents.len())
            .field("mode", &format_args!("{:o}", self.mode))
            .finish()
    }
}

/// A symbolic link the engine creates before the run and removes after it (a CLI's
/// per-run home that shares the user's state, for instance).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkSpec {
    /// The link's absolute path, under the run's private directory. Missing parent
    /// directories are created (0700); a link or file already there is replaced, a
    /// directory there is an error.
    pub link: PathBuf,
    /// What the link points to (absolute). It need not exist, unless `create_target_dir`.
    pub target: PathBuf,
    /// Create `target` as a directory (0700, with missing parents) when nothing is there:
    /// for state the CLI writes through the link that must outlive the run.
    pub create_target_dir: bool,
}

/// How an MCP server is wired into one run of a CLI: arguments, environment, files and
/// links.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct McpWiring {
    /// Arguments to add.
    pub args: Vec<String>,
    /// Environment to add.
    pub env: BTreeMap<String, String>,
    /// Files to write first.
    pub files: Vec<FileSpec>,
    /// Links to create first.
    pub links: Vec<LinkSpec>,
}

/// Everything a provider needs to build a run's command. Built by the engine.
#[derive(Debug, Clone)]
pub struct LaunchContext<'a> {
    /// The task.
    pub task: &'a TaskSpec,
    /// The executable.
    pub binary: &'a BinaryLocation,
    /// The directory the CLI runs in: the task's worktree, or its `cwd` subdirectory
    /// (the engine has joined it already).
    pub workdir: &'a Path,
    /// A private directory for this run's config files (0700, outside the worktree).
    pub private_dir: &'a Path,
    /// aicli's MCP server, when it runs.
    pub mcp: Option<&'a McpEndpoint>,
    /// What this run may spend of the batch budget, USD, when the batch has one: the
    /// share the engine reserved for it before it started (the reservations of the runs
    /// in flight together fit in what is left). A CLI with a per-run cap
    /// ([`Feature::MaxBudget`]) gets it as its cap.
    ///
    /// [`Feature::MaxBudget`]: super::Feature::MaxBudget
    pub budget_remaining_usd: Option<f64>,
    /// Whether the CLI runs as root (Claude needs `IS_SANDBOX=1` to bypass permissions).
    pub is_root: bool,
    /// Whether the CLI runs in a container (aicli's Docker runner): the container is its
    /// sandbox, and a CLI's own sandbox that needs kernel namespaces (Codex's bubblewrap)
    /// cannot start there.
    pub in_container: bool,
    /// The environment the CLI inherits before the provider's and the task's (e.g. its
    /// `HOME`).
    pub env: &'a BTreeMap<String, String>,
    /// The `PATH` binaries are found on (the run's `PATH`, then aicli's cache), for a
    /// command that names other executables (an ACP wrapper's `CLAUDE_CODE_EXECUTABLE`).
    pub search_path: Option<&'a str>,
}

/// A command to run: the output of [`AiCliProvider::command`].
///
/// [`AiCliProvider::command`]: super::AiCliProvider::command
#[derive(Clone, PartialEq)]
pub struct CommandSpec {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment set over the inherited one.
    pub env: BTreeMap<String, String>,
    /// Inherited variables to remove.
    pub env_remove: Vec<String>,
    /// Start from an empty environment (then `env`) instead of inheriting aicli's. The
    /// engine sets it with `env` holding the whole, explicit environment of the run.
    pub env_clear: bool,
    /// What to write to stdin (then close it); stdin is null when `None`. The prompt
    /// goes here, never into `args` (which any user of the machine can read).
    pub stdin: Option<String>,
    /// A two-way CLI: stdin stays open after `stdin` (if any) for the messages the
    /// run's decoder makes ([`crate::Decoder::take_stdin`]), and is closed when the
    /// decoder says it is finished.
    pub stdin_open: bool,
    /// The working directory.
    pub cwd: PathBuf,
    /// Files to write before starting.
    pub files: Vec<FileSpec>,
    /// Symbolic links to create before starting (before the files, so a file may go
    /// into a directory made for links); removed with the files after the run.
    pub links: Vec<LinkSpec>,
    /// What the user should know about how the CLI runs (a permission mode that cannot
    /// confine it here, say): the engine shows each as a warning when the run starts.
    pub notices: Vec<String>,
}

impl std::fmt::Debug for CommandSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Env values may be secrets: show names only.
        f.debug_struct("CommandSpec")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("env_remove", &self.env_remove)
            .field("env_clear", &self.env_clear)
            .field("stdin_bytes", &self.stdin.as_ref().map(String::len))
            .field("stdin_open", &self.stdin_open)
            .field("cwd", &self.cwd)
            .field("files", &self.files)
            .field("links", &self.links)
            .finish()
    }
}

impl CommandSpec {
    /// A command running `binary` (with its npx prefix, if any) in `cwd`.
    pub fn new(binary: &BinaryLocation, cwd: &Path) -> CommandSpec {
        let (program, args) = binary.command_prefix();
        CommandSpec {
            program,
            args,
            env: BTreeMap::new(),
            env_remove: Vec::new(),
            env_clear: false,
            stdin: None,
            stdin_open: false,
            cwd: cwd.to_path_buf(),
            files: Vec::new(),
            links: Vec::new(),
            notices: Vec::new(),
        }
    }

    /// Appends arguments.
    pub fn args<I, S>(&mut self, args: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable.
    pub fn env(&mut self, k: impl Into<String>, v: impl Into<String>) -> &mut Self {
        self.env.insert(k.into(), v.into());
        self
    }

    /// Adds an MCP wiring.
    pub fn wire(&mut self, w: McpWiring) -> &mut Self {
        self.args.extend(w.args);
        self.env.extend(w.env);
        self.files.extend(w.files);
        self.links.extend(w.links);
        self
    }
}
