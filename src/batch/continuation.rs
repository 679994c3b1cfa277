//! How a task's next attempt continues what came before — a first run, a retry, a
//! human's answer, a recovery after aicli stopped, a task that resumes a session — and
//! the prompts that carry it, spelled once.

use aicli_providers::{
    Continuation, ContinuationMode, PendingQuestion, SessionResult, SessionTotals, SharedProvider,
};

use crate::record::{AttemptKind, RunStore, SessionRun, TaskRecord};

/// A CLI session to resume, and its totals at the end of its last run.
#[derive(Debug, Clone)]
pub(crate) struct Resume {
    pub session_id: String,
    /// Subtracted from the session-cumulative figures of the next run (Claude's cost,
    /// Codex's usage).
    pub prior: Option<SessionTotals>,
}

/// How the next attempt of a task runs.
#[derive(Debug, Clone)]
pub(crate) struct Next {
    /// Why it is made.
    pub kind: AttemptKind,
    /// The session it resumes.
    pub resume: Option<Resume>,
    /// The prompt it runs with instead of the task's.
    pub prompt: Option<String>,
    /// How it continues an earlier run (recorded in its result), if it does.
    pub continuation: Option<Continuation>,
}

/// Why a continuation is made.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Why<'a> {
    /// A human answered `question` with `answer`.
    Answer {
        question: &'a PendingQuestion,
        answer: &'a str,
    },
    /// aicli stopped while the task ran.
    Recover,
    /// Landing the task's work conflicts: `prompt` says where (its worktree holds the
    /// target's changes merged, with conflict markers).
    Resolve { prompt: &'a str },
    /// The provider's usage limit stopped the last run, and has reset.
    UsageLimit,
}

impl Next {
    /// A first run that continues nothing.
    pub(crate) fn plain() -> Next {
        Next {
            kind: AttemptKind::Run,
            resume: None,
            prompt: None,
            continuation: None,
        }
    }

    /// A first run; a task that names a session to resume continues it when the run
    /// records know the session's last run (`origin`).
    pub(crate) fn first(store: &RunStore, rec: &TaskRecord) -> (Next, Option<SessionRun>) {
        let origin = rec
            .task
            .resume_session_id
            .as_deref()
            .and_then(|sid| store.last_run_of_session(&rec.provider, sid));
        let (resume, continuation) = match (&origin, &rec.task.resume_session_id) {
            (Some(o), Some(sid)) => (
                Some(Resume {
                    session_id: sid.clone(),
                    prior: o.result.session_totals,
                }),
                Some(Continuation {
                    mode: ContinuationMode::Resume,
                    session_id: Some(sid.clone()),
                    reason: format!(
                        "the task resumes session {sid}, last run by task {}/{}",
                        o.batch_id, o.task.task.id
                    ),
                }),
            ),
            _ => (None, None),
        };
        let next = Next {
            kind: AttemptKind::Run,
            resume,
            prompt: None,
            continuation,
        };
        (next, origin)
    }

    /// A continuation of `rec` for `why`: the session of its `last` run resumed with a
    /// prompt that says why, when the provider can resume it; else a new run whose
    /// prompt carries the task and what happened.
    pub(crate) fn continuing(
        rec: &TaskRecord,
        last: Option<&SessionResult>,
        provider: &SharedProvider,
        why: Why<'_>,
    ) -> Next {
        let session = session_of(rec, last);
        let resumable = match last {
            Some(l) => provider.resumable(l),
            None => provider.supports(aicli_providers::Feature::Resume),
        };
        let kind = match why {
            Why::Answer { .. } => AttemptKind::Answer,
            Why::Recover => AttemptKind::Recover,
            Why::Resolve { .. } => AttemptKind::Resolve,
            Why::UsageLimit => AttemptKind::Unpark,
        };
        match (session, resumable) {
            (Some(resume), true) => Next {
                kind,
                prompt: Some(resumed_prompt(rec, why)),
                continuation: Some(Continuation {
                    mode: ContinuationMode::Resume,
                    session_id: Some(resume.session_id.clone()),
                    reason: reason(why).to_owned(),
                }),
                resume: Some(resume),
            },
            (session, supports) => Next {
                kind,
                prompt: new_run_prompt(rec, why),
                continuation: Some(Continuation {
                    mode: ContinuationMode::NewRun,
                    session_id: None,
                    reason: new_run_reason(why, provider, supports, session.is_some()),
                }),
                resume: None,
            },
        }
    }
}

impl Next {
    /// After a continuation's run could not resume its session (the CLI said
    /// `invalid_resume`: an unknown id, a recording that holds nothing yet): the same
    /// continuation as a new run whose prompt carries what it would have said. `None`
    /// for anything but a first resuming answer or recovery.
    pub(crate) fn without_the_session(&self, rec: &TaskRecord, error: &str) -> Option<Next> {
        self.resume.as_ref()?;
        let question;
        let why = match (self.kind, rec.answers.last()) {
            (AttemptKind::Answer, Some(a)) => {
                question = PendingQuestion {
                    question: a.question.clone(),
                    options: Vec::new(),
                    asked_at: a.answered_at.clone(),
                };
                Why::Answer {
                    question: &question,
                    answer: &a.answer,
                }
            }
            (AttemptKind::Recover, _) => Why::Recover,
            (AttemptKind::Unpark, _) => Why::UsageLimit,
            _ => return None,
        };
        Some(Next {
            kind: self.kind,
            resume: None,
            prompt: new_run_prompt(rec, why),
            continuation: Some(Continuation {
                mode: ContinuationMode::NewRun,
                session_id: None,
                reason: format!(
                    "{}; the session could not be resumed ({error}), so a new run carries the task",
                    reason(why)
                ),
            }),
        })
    }
}

/// The session the task's last run was in, with its totals at that run's end: `last`'s,
/// else the latest earlier attempt's that had one (an attempt killed before it printed
/// anything hands on the session it was resuming).
fn session_of(rec: &TaskRecord, last: Option<&SessionResult>) -> Option<Resume> {
    if let Some(sid) = last.and_then(|l| l.session_id.clone()) {
        return Some(Resume {
            session_id: sid,
            prior: last.and_then(|l| l.session_totals),
        });
    }
    rec.attempts.iter().rev().find_map(|a| {
        let r = a.result.as_ref()?;
        let sid = r.session_id.clone().or_else(|| a.resumed_session.clone())?;
        let prior = if r.session_id.is_some() {
            r.session_totals
        } else {
            a.prior
        };
        Some(Resume {
            session_id: sid,
            prior,
        })
    })
}

fn reason(why: Why<'_>) -> &'static str {
    match why {
        Why::Answer { .. } => "answer to a question",
        Why::Recover => "recovery after aicli was interrupted",
        Why::Resolve { .. } => "resolving a conflict between its work and the branch it lands into",
        Why::UsageLimit => "the provider's usage limit reset",
    }
}

fn resumed_prompt(rec: &TaskRecord, why: Why<'_>) -> String {
    match why {
        Why::Answer { question, answer } => format!(
            "You asked the user: {}\n\nThe user answered: {answer}\n\nContinue the task with this answer.",
            question.question
        ),
        Why::Recover => format!(
            "Your previous run was interrupted before it finished (the tool running you stopped). Continue the task where you left off. The task was:\n\n{}",
            rec.task.prompt
        ),
        Why::Resolve { prompt } => prompt.to_owned(),
        Why::UsageLimit => format!(
            "Your previous run stopped at the provider's usage limit, which has now reset. Continue the task where you left off. The task was:\n\n{}",
            rec.task.prompt
        ),
    }
}

/// A new run's prompt: the task's own after a recovery (nothing else is known), the task
/// with the question and its answer after an answer.
fn new_run_prompt(rec: &TaskRecord, why: Why<'_>) -> Option<String> {
    match why {
        Why::Answer { question, answer } => Some(format!(
            "{}\n\n---\nWhile working on this task you asked the user: {}\nThe user answered: {answer}\n\nContinue the task with this answer.",
            rec.task.prompt, question.question
        )),
        Why::Recover | Why::UsageLimit => None,
        Why::Resolve { prompt } => Some(format!(
            "{}\n\n---\nYou did this task before, and your work is in this directory's history. {prompt}",
            rec.task.prompt
        )),
    }
}

fn new_run_reason(
    why: Why<'_>,
    provider: &SharedProvider,
    supports: bool,
    had_session: bool,
) -> String {
    let name = provider.name();
    match (why, supports, had_session) {
        (Why::Answer { .. }, false, _) => format!(
            "answer to a question; provider {name} cannot resume a session, so a new run carries the task, the question and the answer"
        ),
        (Why::Answer { .. }, true, false) => "answer to a question; no session id was recorded, so a new run carries the task, the question and the answer".to_owned(),
        (Why::Recover, false, _) => {
            format!("recovery after aicli was interrupted; provider {name} cannot resume")
        }
        (Why::Recover, true, false) => {
            "recovery after aicli was interrupted; no session id had been recorded".to_owned()
        }
        (Why::Resolve { .. }, false, _) => format!(
            "resolving a conflict to land; provider {name} cannot resume a session, so a new run carries the task and the conflict"
        ),
        (Why::Resolve { .. }, true, false) => "resolving a conflict to land; no session id was recorded, so a new run carries the task and the conflict".to_owned(),
        (Why::UsageLimit, false, _) if provider.supports(aicli_providers::Feature::Resume) => {
            format!("the provider's usage limit reset; {name} saved no turn of the session it stopped (its only request met the limit), so a new run carries the task")
        }
        (Why::UsageLimit, false, _) => {
            format!("the provider's usage limit reset; provider {name} cannot resume a session, so a new run carries the task")
        }
        (Why::UsageLimit, true, false) => "the provider's usage limit reset; no session id was recorded, so a new run carries the task".to_owned(),
        (why, true, true) => reason(why).to_owned(),
    }
}
