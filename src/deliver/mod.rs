//! Delivering the work: what a task's runs wrote becomes commits on the task's branch,
//! through git, never by copying files.
//!
//! | module | owns |
//! |---|---|
//! | `commit` | one commit per attempt, with its provenance in trailers; what is left out, and why |
//! | `diff` | what a task's branch holds over its base: its figures, and the diff for `aicli diff` |
//! | `discard` | what removing a task's worktree and branch would lose |
//! | `land` | a task's (or a batch's) commits into the target branch: merge, squash or rebase, nothing half-done |
//! | `resolve` | a land's conflict handed back to the agent: the merge made ready, the prompt, the check |
//! | `overlaps` | tasks whose work touches the same files, with each other or the target, by trial merge |

pub(crate) mod commit;
pub(crate) mod diff;
pub(crate) mod discard;
pub(crate) mod land;
pub(crate) mod overlaps;
pub(crate) mod resolve;
