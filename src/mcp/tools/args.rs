//! The built-in tools' parameter structs: no `Option` fields (their schemas stay
//! portable); optional arguments are plain fields with serde defaults, which the schemas
//! advertise.

use schemars::JsonSchema;
use serde::Deserialize;

fn dot() -> String {
    ".".into()
}
fn star() -> String {
    "*".into()
}
fn default_max_bytes() -> u64 {
    1_000_000
}
fn info() -> String {
    "info".into()
}

/// Arguments of `getWorkspaceFiles`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct WorkspaceFilesArgs {
    /// Directory (or a single file) relative to the workspace root. No absolute paths, no '..'.
    #[serde(default = "dot")]
    pub path: String,
    /// Glob over paths relative to `path` ('*' = direct entries, '**/*.rs' = all Rust files below).
    #[serde(default = "star")]
    pub pattern: String,
    /// Return file contents too (UTF-8 text files up to max_bytes).
    #[serde(default)]
    pub read: bool,
    /// Largest file whose contents are returned; bigger files are listed with their size only.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
}

/// Arguments of `getSkill`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct SkillArgs {
    /// The skill's name, as listSkills shows it.
    pub name: String,
}

/// Arguments of `getCredential`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct CredentialArgs {
    /// The credential's name (for example an environment variable name).
    pub name: String,
}

/// Arguments of `broadcastLog`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct LogArgs {
    /// The message (long messages are cut; the answer says so).
    pub message: String,
    /// One of: debug, info, warning, error.
    #[serde(default = "info")]
    pub level: String,
    /// Who is logging (free text, e.g. a step name).
    #[serde(default)]
    pub source: String,
}

/// Arguments of `askUser`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct AskArgs {
    /// The question for the human, self-contained.
    pub question: String,
    /// Suggested answers, if any.
    #[serde(default)]
    pub options: Vec<String>,
}
