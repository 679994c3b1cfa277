//! The ACP run's [`SessionResult`], folded from what the decoder saw.

use serde_json::json;

use super::config::AcpContinue;
use super::decode::AcpDecoder;
use crate::decode::ExitStatus;
use crate::error::ErrorKind;
use crate::result::{SessionResult, SessionTotals};
use crate::usage::Cost;

/// The way a later run would continue this run's session: the first of the entry's
/// `continue_with` the agent advertised.
pub(super) fn continue_with(d: &AcpDecoder) -> Option<AcpContinue> {
    let agent = d.agent.as_ref()?;
    d.provider
        .acp
        .continue_with
        .iter()
        .copied()
        .find(|c| match c {
            AcpContinue::Resume => agent.resume,
            AcpContinue::Load => agent.load_session,
        })
}

pub(super) fn finish(d: AcpDecoder, stderr: &str, exit: ExitStatus) -> SessionResult {
    let mut r = d.tally.result(&d.provider.name);
    r.exit_code = exit.code();
    r.session_id = d.session_id.clone().or(r.session_id);
    r.response = d.response.trim_end().to_owned();
    r.canonical_usage = d.tally.usage();
    for (m, u) in &d.tally.reported {
        if let Some(m) = m {
            r.usage_by_model.insert(m.clone(), *u);
        }
    }
    r.model = d.model.clone().or_else(|| {
        (r.usage_by_model.len() == 1)
            .then(|| r.usage_by_model.keys().next().cloned())
            .flatten()
    });
    let usage_known = d.turn.as_ref().is_some_and(|t| t.usage.is_some());
    let cost = match d.run_cost() {
        Some(c) => Cost::reported(c),
        None if usage_known => Cost::estimated(d.provider.config.prices.estimate_run(
            r.model.as_deref(),
            &r.usage_by_model,
            &r.canonical_usage,
        )),
        None => Cost::unknown(),
    };
    r.set_cost(cost);
    if let Some(total) = d.cost {
        let prior = d.ctx.prior.map(|p| p.usage).unwrap_or_default();
        r.session_totals = Some(SessionTotals {
            usage: prior + r.canonical_usage,
            cost_usd: Some(total),
        });
    }
    let agent = d.agent.as_ref();
    r.provider_data = json!({"acp": {
        "agent": agent.map(|a| json!({"name": a.name, "version": a.version})),
        "load_session": agent.map(|a| a.load_session),
        "resume": agent.map(|a| a.resume),
        "mcp_http": agent.map(|a| a.mcp_http),
        // A session whose turn never began (aicli was stopped before the prompt) has
        // nothing to continue, and gemini cannot load one.
        "continue_with": continue_with(&d).filter(|_| d.prompted).map(AcpContinue::method),
        "stop_reason": d.turn.as_ref().and_then(|t| t.stop.as_ref()).and_then(|s| serde_json::to_value(s).ok()),
        "usage_source": d.turn.as_ref().and_then(|t| t.usage.as_ref()).map(|(_, s)| s.as_str()),
        "context": d.context.map(|(used, size)| json!({"used": used, "size": size})),
        "permission_denied": d.denied,
    }});
    if r.cli_version.is_none() {
        r.cli_version = agent.and_then(|a| a.version.clone());
    }
    let broken = d.tally.protocol_errors;
    if let Some(q) = d.asked.clone()
        && d.fatal.is_none()
    {
        r.block(q);
        return r;
    }
    if let Some((kind, message)) = &d.fatal {
        r.fail(*kind, message.clone());
        return r;
    }
    match &d.turn {
        Some(t) if t.success && broken == 0 => r.succeed(),
        Some(t) if t.success => r.fail(
            ErrorKind::Protocol,
            format!(
                "the turn ended, but {broken} message(s) of the agent broke the protocol{}",
                d.protocol_message
                    .as_ref()
                    .map(|m| format!(" (the first: {m})"))
                    .unwrap_or_default()
            ),
        ),
        Some(t) => {
            let (kind, message) = t.error.clone().unwrap_or((
                ErrorKind::Unknown,
                format!("{} ended the turn without success", d.agent_name()),
            ));
            r.fail(kind, message);
        }
        None => {
            let name = d.agent_name();
            let (kind, message) = match &d.protocol_message {
                Some(m) if d.tally.recognized == 0 || broken > 0 => (
                    ErrorKind::Protocol,
                    format!(
                        "{name} ended without finishing the turn after {broken} message(s) that broke the protocol (the first: {m}){}",
                        exit.in_parens()
                    ),
                ),
                Some(_) | None => d.tally.classify_without_final(&name, stderr, exit, None),
            };
            r.fail(kind, message);
        }
    }
    r
}
