//! Auth: the status probe's outcome ([`AuthStatus`]) and the default look for credentials.

use std::collections::BTreeMap;
use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::ProviderConfig;

/// The outcome of a CLI's auth-status probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum AuthStatus {
    /// Logged in; `method` says how, when the CLI says.
    LoggedIn {
        /// e.g. `api_key`, `oauth`.
        method: Option<String>,
    },
    /// Not logged in; `hint` says what to run.
    LoggedOut {
        /// What to do about it.
        hint: String,
    },
    /// The CLI has no status probe or its answer was not understood.
    Unknown {
        /// Why.
        detail: String,
    },
}

/// The default credentials look (see [`AiCliProvider::auth_precheck`]).
///
/// [`AiCliProvider::auth_precheck`]: super::AiCliProvider::auth_precheck
pub fn default_auth_precheck(
    c: &ProviderConfig,
    env: &BTreeMap<String, String>,
    home: &Path,
) -> Option<String> {
    if c.auth_env_vars.is_empty() && c.auth_files.is_empty() {
        return None;
    }
    if c.auth_env_vars
        .iter()
        .any(|v| env.get(v).is_some_and(|s| !s.is_empty()))
    {
        return None;
    }
    if c.auth_files.iter().any(|f| home.join(f).exists()) {
        return None;
    }
    let fix = if c.login_argv.is_empty() {
        // The variables are named once, in the sentence before.
        format!(
            "set one of them or log in once with `{}` interactively",
            c.binary_name
        )
    } else {
        format!("run: {} {}", c.binary_name, c.login_argv.join(" "))
    };
    Some(format!(
        "not logged in: none of {} is set and no login file ({}) exists under {}; {fix}",
        c.auth_env_vars.join(", "),
        c.auth_files.join(", "),
        home.display(),
    ))
}
