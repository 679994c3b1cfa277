//! The config's `engine.commit` ([`CommitConfig`]): whether aicli commits each attempt's
//! work on the task's branch, the largest file it commits, and whose name it signs.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How each attempt's work reaches the task's branch. Written as `"auto"` or `"off"`
/// alone, or as an object with any of its fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(from = "CommitConfigForm", into = "CommitConfigFull")]
pub struct CommitConfig {
    /// `auto`: every attempt that changed its worktree ends with a commit on the task's
    /// branch; `off`: the work stays uncommitted in the worktree.
    pub mode: CommitMode,
    /// Files larger than this (bytes) are left uncommitted in the worktree, and listed.
    pub max_file_bytes: u64,
    /// The commits' author when the repository has no identity of its own (`user.name`
    /// and `user.email`); aicli's own when neither is set.
    pub author: Option<CommitAuthor>,
}

/// See [`CommitConfig::mode`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CommitMode {
    /// Commit each attempt's work.
    #[default]
    Auto,
    /// Leave the work uncommitted.
    Off,
}

/// A git identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommitAuthor {
    /// The name.
    pub name: String,
    /// The email address.
    pub email: String,
}

/// The default [`CommitConfig::max_file_bytes`]: 10 MiB.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;

impl Default for CommitConfig {
    fn default() -> CommitConfig {
        CommitConfig {
            mode: CommitMode::Auto,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            author: None,
        }
    }
}

/// What `engine.commit` may be written as: a mode alone, or the whole object.
#[derive(Deserialize, JsonSchema)]
#[serde(untagged)]
enum CommitConfigForm {
    /// `"auto"` or `"off"`.
    Mode(CommitMode),
    /// The settings.
    Full(CommitConfigFull),
}

/// `engine.commit` as an object.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
struct CommitConfigFull {
    /// `auto` (each attempt's work committed on the task's branch) or `off`.
    mode: CommitMode,
    /// Files larger than this (bytes) are left uncommitted in the worktree, and listed.
    max_file_bytes: u64,
    /// The commits' author when the repository has no identity of its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    author: Option<CommitAuthor>,
}

impl Default for CommitConfigFull {
    fn default() -> CommitConfigFull {
        CommitConfig::default().into()
    }
}

impl From<CommitConfigForm> for CommitConfig {
    fn from(f: CommitConfigForm) -> CommitConfig {
        match f {
            CommitConfigForm::Mode(mode) => CommitConfig {
                mode,
                ..CommitConfig::default()
            },
            CommitConfigForm::Full(c) => CommitConfig {
                mode: c.mode,
                max_file_bytes: c.max_file_bytes,
                author: c.author,
            },
        }
    }
}

impl From<CommitConfig> for CommitConfigFull {
    fn from(c: CommitConfig) -> CommitConfigFull {
        CommitConfigFull {
            mode: c.mode,
            max_file_bytes: c.max_file_bytes,
            author: c.author,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mode_alone_or_an_object() {
        let off: CommitConfig = serde_json::from_str(r#""off""#).unwrap();
        assert_eq!(off.mode, CommitMode::Off);
        assert_eq!(off.max_file_bytes, DEFAULT_MAX_FILE_BYTES);
        let c: CommitConfig = serde_json::from_str(
            r#"{"max_file_bytes": 5, "author": {"name": "A", "email": "a@b"}}"#,
        )
        .unwrap();
        assert_eq!(c.mode, CommitMode::Auto);
        assert_eq!(c.max_file_bytes, 5);
        assert_eq!(c.author.as_ref().unwrap().name, "A");
        assert!(serde_json::from_str::<CommitConfig>(r#""sometimes""#).is_err());
        assert!(serde_json::from_str::<CommitConfig>(r#"{"mode": "auto", "x": 1}"#).is_err());
        let back = serde_json::to_value(&c).unwrap();
        assert_eq!(back["max_file_bytes"], 5);
    }
}
