//! What `aicli providers`, `status` and `doctor` find out about each CLI: where its
//! binary is (config, PATH or aicli's cache), its version, its login state. Every
//! provider is probed at once, each probe with a short timeout, and a slow one is named.
//! A probe runs with the environment a run of its provider gets ([`crate::env::cli_env`]:
//! the base set, the provider's variables, its `env`), so what it says holds for runs.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::cache::search_path_with_cache;
use crate::cli::npm::BinarySource;
use crate::providers::{AuthStatus, BinaryLocation, CommandSpec, SharedProvider};

/// How long one probe (`--version`, `auth status`) may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(8);

/// A probe slower than this is named in the output.
pub const SLOW: Duration = Duration::from_secs(2);

/// What was found about one provider.
#[derive(Debug)]
pub struct Probe {
    /// The provider.
    pub provider: SharedProvider,
    /// Its binary, or why there is none.
    pub binary: Result<BinaryLocation, String>,
    /// Where the binary was found.
    pub source: Option<BinarySource>,
    /// The version it prints.
    pub version: Option<String>,
    /// Its login state.
    pub auth: Option<AuthStatus>,
    /// Probes that were slow or timed out, in words.
    pub slow: Vec<String>,
}

/// Where binaries are looked for: PATH, then aicli's cache.
pub fn search_path() -> String {
    search_path_with_cache(&std::env::var("PATH").unwrap_or_default())
}

/// Runs `argv` of `bin`, timing it; notes a slow or timed-out probe in `slow`.
async fn timed(
    what: &str,
    bin: &BinaryLocation,
    argv: Vec<String>,
    env: &BTreeMap<String, String>,
    slow: &mut Vec<String>,
) -> Option<crate::proc::capture::Captured> {
    let mut c = CommandSpec::new(bin, &std::env::temp_dir());
    c.args(argv);
    c.env = env.clone();
    c.env_clear = true;
    let started = Instant::now();
    let out = crate::proc::capture::run_capture(&c, PROBE_TIMEOUT)
        .await
        .ok();
    let took = started.elapsed();
    match &out {
        Some(o) if o.timed_out => slow.push(format!(
            "{what} timed out after {:.0}s",
            PROBE_TIMEOUT.as_secs_f64()
        )),
        Some(_) | None if took >= SLOW => {
            slow.push(format!("{what} took {:.1}s", took.as_secs_f64()))
        }
        Some(_) | None => {}
    }
    out.filter(|o| !o.timed_out)
}

/// The login state: the CLI's status command; for an ACP agent that wraps a CLI
/// (`acp.env_executables`, e.g. claude-agent-acp runs `claude`), that CLI's status
/// command, run with the agent's environment (which is the one the wrapped CLI gets);
/// else the engine's credentials pre-check over the environment a run would get.
async fn auth_status(
    p: &SharedProvider,
    bin: &BinaryLocation,
    wrapped: Option<&SharedProvider>,
    env: &BTreeMap<String, String>,
    slow: &mut Vec<String>,
) -> AuthStatus {
    if p.auth_status_argv().is_some() {
        return status_of(p, bin, env, slow).await;
    }
    if let Some(w) = wrapped
        && let Ok(wbin) = w.binary_path(Some(&search_path()))
    {
        return status_of(w, &wbin, env, slow).await;
    }
    let home = PathBuf::from(env.get("HOME").cloned().unwrap_or_default());
    match p.auth_precheck(env, &home, &p.config().extra_args) {
        Some(msg) => AuthStatus::LoggedOut { hint: msg },
        None => AuthStatus::Unknown {
            detail: "the CLI has no status command; credentials seem present".into(),
        },
    }
}

/// `p`'s status command (it has one), run and understood.
async fn status_of(
    p: &SharedProvider,
    bin: &BinaryLocation,
    env: &BTreeMap<String, String>,
    slow: &mut Vec<String>,
) -> AuthStatus {
    let argv = p.auth_status_argv().unwrap_or_default();
    let what = format!("`{} {}`", p.binary_name(), argv.join(" "));
    match timed(&what, bin, argv, env, slow).await {
        Some(o) => p.parse_auth_status(&o.stdout, &o.stderr, o.exit_code),
        None => AuthStatus::Unknown {
            detail: format!("{what} did not answer in time"),
        },
    }
}

/// The provider among `all` whose CLI the ACP agent `p` runs (`acp.env_executables`)
/// and that has a status command.
fn wrapped_cli(p: &SharedProvider, all: &[SharedProvider]) -> Option<SharedProvider> {
    let acp = p.config().acp.as_ref()?;
    acp.env_executables.values().find_map(|binary| {
        all.iter()
            .find(|w| w.binary_name() == binary && w.auth_status_argv().is_some())
            .cloned()
    })
}

/// Probes one provider: binary, then (as asked) version and login state at once, with
/// the environment a run of it gets (`base` is `engine.env_passthrough`).
pub async fn probe(
    p: SharedProvider,
    wrapped: Option<SharedProvider>,
    base: &[String],
    version: bool,
    auth: bool,
) -> Probe {
    let env = crate::env::cli_env(&crate::env::process_env(), base, p.config(), None);
    let binary = p
        .binary_path(Some(&search_path()))
        .map_err(|e| e.to_string());
    let source = binary
        .as_ref()
        .ok()
        .map(|b| BinarySource::of(p.config(), b));
    let mut out = Probe {
        provider: p.clone(),
        binary,
        source,
        version: None,
        auth: None,
        slow: Vec::new(),
    };
    let Ok(bin) = out.binary.clone() else {
        return out;
    };
    let mut slow_v = Vec::new();
    let mut slow_a = Vec::new();
    let version_fut = async {
        if !version {
            return None;
        }
        let what = format!(
            "`{} {}`",
            p.binary_name(),
            p.config().version_argv.join(" ")
        );
        let o = timed(
            &what,
            &bin,
            p.config().version_argv.clone(),
            &env,
            &mut slow_v,
        )
        .await?;
        p.parse_version(&o.stdout)
    };
    let auth_fut = async {
        if !auth {
            return None;
        }
        Some(auth_status(&p, &bin, wrapped.as_ref(), &env, &mut slow_a).await)
    };
    let (v, a) = tokio::join!(version_fut, auth_fut);
    out.version = v;
    out.auth = a;
    out.slow.extend(slow_v);
    out.slow.extend(slow_a);
    out
}

/// Probes every provider at once, in registry order (`base`: `engine.env_passthrough`).
pub async fn probe_all(
    providers: Vec<SharedProvider>,
    base: &[String],
    version: bool,
    auth: bool,
) -> Vec<Probe> {
    let handles: Vec<_> = providers
        .iter()
        .map(|p| {
            let base = base.to_vec();
            let (p, wrapped) = (p.clone(), wrapped_cli(p, &providers));
            tokio::spawn(async move { probe(p, wrapped, &base, version, auth).await })
        })
        .collect();
    let mut out = Vec::new();
    for h in handles {
        if let Ok(p) = h.await {
            out.push(p);
        }
    }
    out
}

/// `logged in`, `NOT logged in (hint)`, `auth unknown (detail)`.
pub fn auth_words(a: &AuthStatus) -> String {
    match serde_json::to_value(a) {
        Ok(v) => match v["state"].as_str() {
            Some("logged_in") => "logged in".to_owned(),
            Some("logged_out") => {
                format!("NOT logged in ({})", v["hint"].as_str().unwrap_or_default())
            }
            Some(_) | None => format!(
                "auth unknown ({})",
                v["detail"].as_str().unwrap_or_default()
            ),
        },
        Err(_) => "auth unknown".to_owned(),
    }
}
