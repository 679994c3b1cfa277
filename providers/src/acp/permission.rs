//! What aicli answers an agent's `session/request_permission`, by the task's permission
//! mode (never by the options' order):
//!
//! | mode | reads (`read`, `search`, `think`, `fetch`) | edits (`edit`, `delete`, `move`) | anything else (`execute`, `switch_mode`, `other`) |
//! |---|---|---|---|
//! | `bypass` | allow | allow | allow |
//! | `accept_edits` | allow | allow | ask a human |
//! | `default` | ask a human | ask a human | ask a human |
//! | `plan` | allow | reject | reject |
//!
//! A tool of aicli's own MCP server (`askUser`, `getWorkspaceFiles`, ...) is allowed in
//! every mode, as the native adapters allow it.
//!
//! "Allow" picks an `allow_once` option (else `allow_always`), "reject" a `reject_once`
//! (else `reject_always`; with neither, the request is answered `cancelled`). "Ask a
//! human" turns the request into the run's question: aicli cancels the turn, the task
//! ends blocked, and `aicli answer` continues the session; when the continued run's
//! agent asks the same thing again, the human's answer picks the option (by its name or
//! id, or yes/no words; any other answer rejects it, and the prompt carries the words).

use agent_client_protocol::v1::schema::{PermissionOption, PermissionOptionKind, ToolKind};

use crate::result::AnsweredQuestion;
use crate::task::PermissionMode;

/// aicli's answer to one permission request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Select this option.
    Select {
        /// The option's id.
        option_id: String,
        /// Whether it allows the call.
        allow: bool,
        /// Why, in words (kept in the event and the answer's `_meta`).
        why: String,
    },
    /// No option fits (a reject without a reject option): answer `cancelled`.
    Refuse {
        /// Why.
        why: String,
    },
    /// A human decides: the run ends blocked on this question.
    Ask {
        /// The question.
        question: String,
        /// The options' names, in the agent's order.
        options: Vec<String>,
    },
}

/// What a tool kind is, for the table above.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Read,
    Edit,
    Other,
}

fn class(kind: Option<&ToolKind>) -> Class {
    match kind {
        Some(ToolKind::Read | ToolKind::Search | ToolKind::Think | ToolKind::Fetch) => Class::Read,
        Some(ToolKind::Edit | ToolKind::Delete | ToolKind::Move) => Class::Edit,
        // Unknown kinds (the enum is non-exhaustive) count as the riskiest.
        Some(_) | None => Class::Other,
    }
}

/// The words of `kind` in a question.
fn doing(kind: Option<&ToolKind>) -> &'static str {
    match kind {
        Some(ToolKind::Read) => "read",
        Some(ToolKind::Edit) => "edit",
        Some(ToolKind::Delete) => "delete",
        Some(ToolKind::Move) => "move",
        Some(ToolKind::Search) => "search",
        Some(ToolKind::Execute) => "run",
        Some(ToolKind::Think) => "think",
        Some(ToolKind::Fetch) => "fetch",
        Some(ToolKind::SwitchMode) => "switch its mode",
        Some(_) | None => "use a tool",
    }
}

/// The question a request becomes: `"<agent> asks permission to run: touch x"`.
pub fn question(agent: &str, kind: Option<&ToolKind>, title: &str) -> String {
    format!("{agent} asks permission to {}: {title}", doing(kind))
}

fn pick(options: &[PermissionOption], kinds: &[PermissionOptionKind]) -> Option<String> {
    kinds.iter().find_map(|k| {
        options
            .iter()
            .find(|o| o.kind == *k)
            .map(|o| o.option_id.0.to_string())
    })
}

fn allow(options: &[PermissionOption], why: String) -> Decision {
    match pick(
        options,
        &[
            PermissionOptionKind::AllowOnce,
            PermissionOptionKind::AllowAlways,
        ],
    ) {
        Some(option_id) => Decision::Select {
            option_id,
            allow: true,
            why,
        },
        None => Decision::Refuse {
            why: format!("{why}, but the agent offered no option that allows it"),
        },
    }
}

fn reject(options: &[PermissionOption], why: String) -> Decision {
    match pick(
        options,
        &[
            PermissionOptionKind::RejectOnce,
            PermissionOptionKind::RejectAlways,
        ],
    ) {
        Some(option_id) => Decision::Select {
            option_id,
            allow: false,
            why,
        },
        None => Decision::Refuse { why },
    }
}

fn is_allow(kind: PermissionOptionKind) -> bool {
    matches!(
        kind,
        PermissionOptionKind::AllowOnce | PermissionOptionKind::AllowAlways
    )
}

/// The decision for a request of `kind` titled `title` with `options`, in `mode`;
/// `answered` is the human's answer to the question the previous run ended on.
pub fn decide(
    agent: &str,
    mode: PermissionMode,
    kind: Option<&ToolKind>,
    title: &str,
    options: &[PermissionOption],
    answered: Option<&AnsweredQuestion>,
    own_mcp: bool,
) -> Decision {
    if own_mcp {
        return allow(options, "a tool of aicli's own MCP server".to_owned());
    }
    let class = class(kind);
    let ask = || {
        let q = question(agent, kind, title);
        match answered.filter(|a| a.question == q) {
            Some(a) => by_answer(options, &a.answer),
            None => Decision::Ask {
                question: q,
                options: options.iter().map(|o| o.name.clone()).collect(),
            },
        }
    };
    match (mode, class) {
        (PermissionMode::Bypass, _) => allow(options, "permission mode bypass".to_owned()),
        (
            PermissionMode::Plan | PermissionMode::AcceptEdits | PermissionMode::Sandbox,
            Class::Read,
        ) => allow(
            options,
            format!("permission mode {}: a read", mode.as_str()),
        ),
        (PermissionMode::Plan, Class::Edit | Class::Other) => reject(
            options,
            "permission mode plan: nothing may change".to_owned(),
        ),
        (PermissionMode::AcceptEdits | PermissionMode::Sandbox, Class::Edit) => allow(
            options,
            format!("permission mode {}: an edit", mode.as_str()),
        ),
        // In `sandbox` the agent's own mode confines what it runs; what it still asks
        // about goes to a human, as in `accept_edits`.
        (PermissionMode::AcceptEdits | PermissionMode::Sandbox, Class::Other)
        | (PermissionMode::Default, _) => ask(),
    }
}

/// The option a human's `answer` names: an option's name or id (any case), else yes/no
/// words; anything else rejects.
fn by_answer(options: &[PermissionOption], answer: &str) -> Decision {
    let a = answer.trim().to_lowercase();
    let why = format!("the human answered: {}", answer.trim());
    if let Some(o) = options
        .iter()
        .find(|o| o.name.to_lowercase() == a || o.option_id.0.to_lowercase() == a)
    {
        return Decision::Select {
            option_id: o.option_id.0.to_string(),
            allow: is_allow(o.kind),
            why,
        };
    }
    let first = a.split(|c: char| !c.is_alphanumeric()).next().unwrap_or("");
    match first {
        "yes" | "y" | "allow" | "ok" | "okay" | "approve" | "approved" | "sure" | "go" => {
            allow(options, why)
        }
        _ => reject(options, why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> Vec<PermissionOption> {
        vec![
            PermissionOption::new(
                "proceed_always",
                "Allow for this session",
                PermissionOptionKind::AllowAlways,
            ),
            PermissionOption::new("proceed_once", "Allow", PermissionOptionKind::AllowOnce),
            PermissionOption::new("cancel", "Reject", PermissionOptionKind::RejectOnce),
        ]
    }

    fn chosen(d: &Decision) -> Option<(&str, bool)> {
        match d {
            Decision::Select {
                option_id, allow, ..
            } => Some((option_id.as_str(), *allow)),
            Decision::Refuse { .. } | Decision::Ask { .. } => None,
        }
    }

    #[test]
    fn each_mode_decides_by_kind_never_by_position() {
        let o = options();
        let exec = Some(&ToolKind::Execute);
        let edit = Some(&ToolKind::Edit);
        let read = Some(&ToolKind::Read);
        let d = |m, k| decide("gemini-acp", m, k, "touch x", &o, None, false);
        assert_eq!(
            chosen(&d(PermissionMode::Bypass, exec)),
            Some(("proceed_once", true))
        );
        assert_eq!(
            chosen(&d(PermissionMode::Plan, edit)),
            Some(("cancel", false))
        );
        assert_eq!(
            chosen(&d(PermissionMode::Plan, exec)),
            Some(("cancel", false))
        );
        assert_eq!(
            chosen(&d(PermissionMode::Plan, read)),
            Some(("proceed_once", true))
        );
        assert_eq!(
            chosen(&d(PermissionMode::AcceptEdits, edit)),
            Some(("proceed_once", true))
        );
        assert_eq!(
            d(PermissionMode::AcceptEdits, exec),
            Decision::Ask {
                question: "gemini-acp asks permission to run: touch x".into(),
                options: vec![
                    "Allow for this session".into(),
                    "Allow".into(),
                    "Reject".into()
                ],
            }
        );
        assert!(matches!(
            d(PermissionMode::Default, read),
            Decision::Ask { .. }
        ));
        // No reject option: the request is answered cancelled.
        let only_allow = &o[..2];
        assert!(matches!(
            decide(
                "a",
                PermissionMode::Plan,
                edit,
                "t",
                only_allow,
                None,
                false
            ),
            Decision::Refuse { .. }
        ));
    }

    #[test]
    fn the_humans_answer_picks_the_option_of_the_same_question() {
        let o = options();
        let exec = Some(&ToolKind::Execute);
        let q = question("gemini-acp", exec, "touch x");
        let answered = |a: &str| AnsweredQuestion {
            question: q.clone(),
            answer: a.into(),
        };
        let d = |a: &str| {
            decide(
                "gemini-acp",
                PermissionMode::Default,
                exec,
                "touch x",
                &o,
                Some(&answered(a)),
                false,
            )
        };
        assert_eq!(
            chosen(&d("Allow for this session")),
            Some(("proceed_always", true))
        );
        assert_eq!(chosen(&d("allow")), Some(("proceed_once", true)));
        assert_eq!(chosen(&d("Yes, go ahead")), Some(("proceed_once", true)));
        assert_eq!(chosen(&d("reject")), Some(("cancel", false)));
        assert_eq!(chosen(&d("use git instead")), Some(("cancel", false)));
        // Another question is asked anew.
        let other = decide(
            "gemini-acp",
            PermissionMode::Default,
            exec,
            "rm -rf x",
            &o,
            Some(&answered("allow")),
            false,
        );
        // aicli's own MCP tool is allowed even in plan mode.
        assert_eq!(
            chosen(&decide(
                "gemini-acp",
                PermissionMode::Plan,
                exec,
                "askUser (aicli MCP Server)",
                &o,
                None,
                true
            )),
            Some(("proceed_once", true))
        );
        assert!(matches!(other, Decision::Ask { .. }));
    }
}
