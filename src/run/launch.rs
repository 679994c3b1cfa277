//! The run's command: which binary, the provider's argv, files and links, and the CLI's
//! environment, assembled from nothing but what the run is given (the placement's
//! environment and binary, the task, the MCP endpoint). Building it has no effect but
//! finding the binary and the provider's quick credentials check.

use std::collections::BTreeMap;
use std::path::PathBuf;

use aicli_providers::{BinaryLocation, CommandSpec, ErrorKind, LaunchContext, McpEndpoint};

use super::guards::RunGuards;
use super::{NotStarted, RunSpec};
use crate::proc::spawn::OutputOptions;
use crate::record::files;

/// A run's command and what it was built from (the decoder of a two-way run is
/// connected with the same context).
#[derive(Debug)]
pub(crate) struct Launch {
    /// The command to start.
    pub cmd: CommandSpec,
    /// The CLI's `HOME` (its IDE lockfile goes under it).
    pub home: PathBuf,
    env: BTreeMap<String, String>,
    binary: BinaryLocation,
    search_path: Option<String>,
    is_root: bool,
    in_container: bool,
    /// The working directory as the CLI sees it (`/workspace/…` in a container).
    visible_workdir: PathBuf,
    mcp: Option<McpEndpoint>,
    budget_cap: Option<f64>,
}

impl Launch {
    /// The context the command was built with, its working directory as the CLI sees
    /// it (what a two-way decoder tells the agent: ACP's `cwd`).
    pub(crate) fn context<'a>(&'a self, spec: &'a RunSpec) -> LaunchContext<'a> {
        LaunchContext {
            env: &self.env,
            task: &spec.task,
            binary: &self.binary,
            workdir: &self.visible_workdir,
            private_dir: &spec.place.private_dir,
            mcp: self.mcp.as_ref(),
            budget_remaining_usd: self.budget_cap,
            is_root: self.is_root,
            search_path: self.search_path.as_deref(),
            in_container: self.in_container,
        }
    }
}

/// Builds the run's command for its placement (see the module docs). Errors are the
/// provider's (a task it cannot run, a binary that is not installed) or the
/// credentials check's.
pub(super) async fn build(spec: &RunSpec, guards: &mut RunGuards) -> Result<Launch, NotStarted> {
    let provider = &spec.provider;
    let placement = guards.placement()?;
    // Where the run happens decides the environment it starts from and where its
    // binary is (a container image's; else the one on the PATH it will run with, then
    // in aicli's cache (`aicli install`); an engine's explicit search path is taken as
    // it is).
    let env = placement.env(&spec.base_env);
    let (binary, search_path) = match placement.binary() {
        Some(b) => (b, None),
        None => {
            let path = match &spec.search_path {
                Some(p) => p.clone(),
                None => crate::cache::search_path_with_cache(
                    &env.get("PATH")
                        .cloned()
                        .or_else(|| std::env::var("PATH").ok())
                        .unwrap_or_default(),
                ),
            };
            let b = provider
                .binary_path(Some(&path))
                .map_err(|e| NotStarted::new(e.kind(), e.to_string()))?;
            (b, Some(path))
        }
    };
    let is_root = placement.runs_as_root();
    let in_container = placement.agent_reach().is_some();
    let mcp = guards.mcp().map(|(e, _)| e.clone());
    let ctx = LaunchContext {
        env: &env,
        task: &spec.task,
        binary: &binary,
        workdir: &spec.place.workdir,
        private_dir: &spec.place.private_dir,
        mcp: mcp.as_ref(),
        budget_remaining_usd: spec.budget_cap,
        is_root,
        search_path: search_path.as_deref(),
        in_container,
    };
    let mut cmd = provider
        .command(&ctx)
        .map_err(|e| NotStarted::new(e.kind(), e.to_string()))?;
    // A clean, explicit environment: the placement's (for a local run the base one,
    // picked from aicli's, see `crate::env`; in a container what of it may go in) minus
    // what the provider removes, then the provider's and the task's variables (which
    // `command` put in `cmd.env`). Nothing else of aicli's process.
    let mut full_env = env.clone();
    for k in &cmd.env_remove {
        full_env.remove(k);
    }
    full_env.append(&mut cmd.env);
    cmd.env = full_env;
    cmd.env_clear = true;
    let home = cmd
        .env
        .get("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"));
    let launch = Launch {
        cmd,
        home,
        env,
        binary,
        search_path,
        is_root,
        in_container,
        visible_workdir: placement.visible_path(&spec.place.workdir),
        mcp,
        budget_cap: spec.budget_cap,
    };
    if spec.auth_precheck {
        precheck(spec, &launch).await?;
    }
    Ok(launch)
}

/// The provider's quick credentials check (a few file reads: off the async threads).
async fn precheck(spec: &RunSpec, launch: &Launch) -> Result<(), NotStarted> {
    let (p, env, dir, args) = (
        spec.provider.clone(),
        launch.cmd.env.clone(),
        launch.home.clone(),
        launch.cmd.args.clone(),
    );
    let found = tokio::task::spawn_blocking(move || p.auth_precheck(&env, &dir, &args))
        .await
        .ok()
        .flatten();
    match found {
        Some(msg) => Err(NotStarted::new(ErrorKind::Auth, msg)),
        None => Ok(()),
    }
}

/// How the run's output is read and recorded: the limits, and, when the task has a
/// record, its stdout and stderr appended there (`stderr.log` made on its first byte;
/// 0600: a CLI's stream can hold what its tools returned, a credential say) and its
/// processes named in the batch's journal while they live, so that a later `aicli
/// resume` can kill what is left if aicli dies.
pub(super) fn output_options(spec: &RunSpec) -> Result<OutputOptions, NotStarted> {
    let mut out = OutputOptions {
        line_cap: spec.limits.line_cap,
        stderr_tail: spec.limits.stderr_tail,
        pids: spec.place.pids.clone(),
        ..OutputOptions::default()
    };
    if let Some(dir) = &spec.place.record_dir {
        let open = |name: &str| {
            crate::util::open_private_append(&dir.join(name)).map_err(|e| {
                NotStarted::new(
                    ErrorKind::Unknown,
                    format!("cannot open the run record in {}: {e}", dir.display()),
                )
            })
        };
        out.stdout_tee = Some(open(files::EVENTS)?);
        out.stderr_tee = Some(dir.join(files::STDERR));
    }
    Ok(out)
}
