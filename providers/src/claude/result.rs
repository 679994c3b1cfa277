//! The `result` lines folded as they pass, and the run's [`SessionResult`] at the end.

use std::collections::BTreeMap;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::classify::{Outcome, ROOT_BYPASS, SANDBOX_UNAVAILABLE, UNKNOWN_SESSION, verdict};
use super::decode::{ClaudeDecoder, Priced};
use super::wire::{InitVerbatim, ModelUsage, ResultLine, ResultUsage, ResultVerbatim};
use crate::decode::Events;
use crate::decode::ExitStatus;
use crate::error::ErrorKind;
use crate::event::EventKind;
use crate::result::{SessionResult, SessionTotals};
use crate::usage::{CanonicalUsage, Cost};
use crate::wire::{Str, value_of};

fn model_usage(u: &ModelUsage) -> CanonicalUsage {
    CanonicalUsage {
        input_tokens: u.input_tokens.0,
        output_tokens: u.output_tokens.0,
        cache_read: u.cache_read_input_tokens.0,
        cache_write: u.cache_creation_input_tokens.0,
        reasoning_tokens: u.thinking_tokens.0,
        request_count: 0,
    }
}

fn result_usage(u: &ResultUsage) -> CanonicalUsage {
    CanonicalUsage {
        input_tokens: u.input_tokens.0,
        output_tokens: u.output_tokens.0,
        cache_read: u.cache_read_input_tokens.0,
        cache_write: u.cache_creation_input_tokens.0,
        reasoning_tokens: u.output_tokens_details.thinking_tokens.0,
        request_count: 0,
    }
}

/// A `modelUsage` map, canonical (its names moved, not copied).
fn priced(m: BTreeMap<String, ModelUsage>) -> BTreeMap<String, Priced> {
    m.into_iter()
        .map(|(k, u)| {
            (
                k,
                Priced {
                    usage: model_usage(&u),
                    cost: u.cost_usd,
                },
            )
        })
        .collect()
}

fn sum(m: &BTreeMap<String, Priced>) -> CanonicalUsage {
    m.values()
        .fold(CanonicalUsage::default(), |a, p| a + p.usage)
}

/// The sum of the models' costs, when every model has one (a fold from +0.0: `f64`'s
/// `Sum` starts at -0.0, which would print as "-0.0").
fn cost_of(m: &BTreeMap<String, Priced>) -> Option<f64> {
    m.values().try_fold(0.0, |acc, p| p.cost.map(|c| acc + c))
}

/// `errors[]` as one message.
fn errors_text(errors: Option<&Value>) -> Option<String> {
    let parts: Vec<String> = errors?
        .as_array()?
        .iter()
        .map(|e| match e {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .filter(|s| !s.trim().is_empty())
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// The run's figures so far: per-run usage by model (when the CLI splits it) and in all.
pub(super) struct Accounting {
    pub by_model: BTreeMap<String, CanonicalUsage>,
    pub usage: CanonicalUsage,
    pub cost: Cost,
    pub totals: Option<SessionTotals>,
}

impl ClaudeDecoder {
    /// Folds a `result` line; pushes its events (the Usage increments that bring the
    /// live usage up to what the CLI billed so far, and the final event).
    pub(super) fn result_line(&mut self, r: ResultLine<'_>, text: &str, out: &mut Events<'_>) {
        let res = &mut self.results;
        res.count += 1;
        res.line.clear();
        res.line.push_str(text);
        let outcome = Outcome {
            subtype: r.subtype.map(Str::into_string),
            is_error: r.is_error,
            terminal_reason: r.terminal_reason.map(Str::into_string),
            result: r.result,
            errors: errors_text(r.errors.as_ref()),
            api_error_status: r.api_error_status,
            api_error_type: r.api_error_type.map(Str::into_string),
            api_error: r.api_error.map(Str::into_string),
        };
        if let Some(n) = r.num_turns {
            res.turns = Some(res.turns.unwrap_or(0) + n);
        }
        if let Some(ms) = r.duration_ms {
            res.duration_ms = Some(res.duration_ms.unwrap_or(0) + ms);
        }
        let line_usage = r.usage.as_ref().map(result_usage);
        if let Some(u) = line_usage {
            res.main_usage = Some(res.main_usage.unwrap_or_default() + u);
        }
        let since = r.model_usage_since_last_result.map(priced);
        let line_cost = since.as_ref().and_then(cost_of);
        if let Some(s) = since {
            res.since_costed = (res.since.is_none() || res.since_costed) && line_cost.is_some();
            let acc = res.since.get_or_insert_with(BTreeMap::new);
            for (m, p) in s {
                let e = acc.entry(m).or_default();
                e.usage += p.usage;
                e.cost = match (e.cost, p.cost) {
                    (Some(a), Some(b)) => Some(a + b),
                    (None, c) | (c, None) => c,
                };
            }
        }
        if let Some(m) = r.model_usage {
            res.cumulative = Some(priced(m));
        }
        let total = r.total_cost_usd;
        if total.is_some() {
            res.total_cost = total;
        }
        if let Some(id) = r.session_id {
            res.session_id = Some(id.into_string());
        }
        // The partial answer of a later turn starts afresh.
        self.blocks.clear();
        self.deltas.clear();
        let v = verdict(&outcome, self.api_error.as_ref(), "");
        let text = outcome.result.clone();
        res.last = Some(outcome);
        let (error_kind, error) = match v {
            Ok(()) => (None, None),
            Err((k, m)) => (Some(k), Some(m)),
        };
        let acc = self.accounting();
        self.tally.catch_up(&acc.by_model, &acc.usage, out);
        out.push(EventKind::Final {
            success: error_kind.is_none(),
            text,
            error_kind,
            error,
            usage: line_usage,
            cost_usd: line_cost.or(total),
            num_turns: r.num_turns,
            duration_ms: r.duration_ms,
        });
    }

    /// Per-run usage, cost and session totals (see the module docs for the rules).
    pub(super) fn accounting(&self) -> Accounting {
        let res = &self.results;
        let prior = self.ctx.prior.as_ref();
        let requests: u64 = self.requests.values().sum();
        let with_requests = |mut by: BTreeMap<String, CanonicalUsage>| {
            for (m, n) in &self.requests {
                if let Some(u) = by.get_mut(m) {
                    u.request_count = *n;
                }
            }
            by
        };
        let estimate = |by: &BTreeMap<String, CanonicalUsage>| {
            Cost::estimated(
                self.provider
                    .config
                    .prices
                    .estimate(by.iter().map(|(m, u)| (m.as_str(), u))),
            )
        };
        let (by_model, mut usage, cost) = if let Some(since) = &res.since {
            let by: BTreeMap<String, CanonicalUsage> =
                since.iter().map(|(m, p)| (m.clone(), p.usage)).collect();
            let usage = sum(since);
            let cost = match cost_of(since).filter(|_| res.since_costed) {
                Some(c) => Cost::reported(c),
                None => self.total_cost(prior).unwrap_or_else(|| estimate(&by)),
            };
            (with_requests(by), usage, cost)
        } else if let Some(cum) = &res.cumulative {
            let total = sum(cum);
            let usage = match prior {
                Some(p) => total.saturating_sub(&p.usage),
                None => total,
            };
            let by: BTreeMap<String, CanonicalUsage> = match prior {
                None => cum.iter().map(|(m, p)| (m.clone(), p.usage)).collect(),
                // Only one model can be told apart from the prior session totals.
                Some(_) if cum.len() == 1 => cum.keys().map(|m| (m.clone(), usage)).collect(),
                Some(_) => BTreeMap::new(),
            };
            let cost = self.total_cost(prior).unwrap_or_else(|| estimate(&by));
            (with_requests(by), usage, cost)
        } else if let Some(main) = res.main_usage {
            let by: BTreeMap<String, CanonicalUsage> =
                self.model_name().map(|m| (m, main)).into_iter().collect();
            let cost = self.total_cost(prior).unwrap_or_else(|| estimate(&by));
            (with_requests(by), main, cost)
        } else if res.count > 0 {
            let cost = self.total_cost(prior).unwrap_or_else(Cost::unknown);
            (BTreeMap::new(), CanonicalUsage::default(), cost)
        } else {
            // No result line: what the stream showed, estimated at the config's prices.
            let by: BTreeMap<String, CanonicalUsage> = self
                .streamed
                .iter()
                .filter(|(m, _)| !m.is_empty())
                .map(|(m, u)| (m.clone(), *u))
                .collect();
            let usage = self
                .streamed
                .values()
                .fold(CanonicalUsage::default(), |a, u| a + *u);
            let cost = if self.streamed.is_empty() {
                Cost::unknown()
            } else {
                let named: BTreeMap<String, CanonicalUsage> = self
                    .streamed
                    .iter()
                    .map(|(m, u)| {
                        let name = if m.is_empty() {
                            self.model_name().unwrap_or_default()
                        } else {
                            m.clone()
                        };
                        (name, *u)
                    })
                    .collect();
                estimate(&named)
            };
            (by, usage, cost)
        };
        usage.request_count = requests;
        let totals = res.cumulative.as_ref().map(|m| {
            let mut u = sum(m);
            u.request_count = prior.map_or(0, |p| p.usage.request_count) + requests;
            SessionTotals {
                usage: u,
                cost_usd: res.total_cost,
            }
        });
        Accounting {
            by_model,
            usage,
            cost,
            totals,
        }
    }

    /// The per-run cost from the session-cumulative `total_cost_usd`.
    fn total_cost(&self, prior: Option<&SessionTotals>) -> Option<Cost> {
        let total = self.results.total_cost?;
        Some(match prior.and_then(|p| p.cost_usd) {
            // A prior above the session total cannot be this session's: keep the total.
            Some(before) if total >= before => Cost::reported(total - before),
            Some(_) | None => Cost::reported(total),
        })
    }

    /// The model: from `system/init`, else the last result's `modelUsage`, else as asked.
    pub(super) fn model_name(&self) -> Option<String> {
        self.tally
            .model
            .clone()
            .or_else(|| {
                self.results
                    .cumulative
                    .as_ref()
                    .and_then(|m| m.keys().next().cloned())
            })
            .or_else(|| self.ctx.model.clone())
    }
}

/// The run's result.
pub(super) fn finish(d: ClaudeDecoder, stderr: &str, exit: ExitStatus) -> SessionResult {
    let mut r = d.tally.result(&d.provider.name);
    r.exit_code = exit.code();
    r.model = d.model_name();
    if r.session_id.is_none() {
        r.session_id = d.results.session_id.clone();
    }
    let acc = d.accounting();
    r.canonical_usage = acc.usage;
    r.usage_by_model = acc.by_model;
    r.set_cost(acc.cost);
    r.session_totals = acc.totals;
    r.provider_data = provider_data(&d);

    if let Some(last) = &d.results.last {
        r.num_turns = d.results.turns;
        r.duration_ms = d.results.duration_ms.unwrap_or(0);
        match verdict(last, d.api_error.as_ref(), stderr) {
            Ok(()) => {
                r.succeed();
                r.response = last.result.clone().unwrap_or_default();
            }
            Err((kind, message)) => {
                // An API error's text is the CLI's, not the agent's answer (2.0.x says so
                // only in the text: `API Error: ...`).
                let api_error = last.terminal_reason.as_deref() == Some("api_error")
                    || d.api_error.is_some()
                    || last
                        .result
                        .as_deref()
                        .is_some_and(|t| t.starts_with("API Error"));
                if !api_error {
                    r.response = last.result.clone().unwrap_or_default();
                }
                let (kind, message) = match kind {
                    ErrorKind::Auth => (kind, d.provider.auth_message(&message)),
                    _ if message.to_lowercase().contains(SANDBOX_UNAVAILABLE) => (
                        ErrorKind::NotInstalled,
                        format!(
                            "{message} (permission mode sandbox runs commands in Claude \
                             Code's sandbox, which needs bubblewrap and socat on Linux; or \
                             run with --runner docker, or choose --permission-mode \
                             accept_edits or bypass)"
                        ),
                    ),
                    _ => (kind, message),
                };
                if kind == ErrorKind::InvalidResume {
                    // The id names no session: do not offer it for a later resume.
                    r.session_id = d.tally.session_id.clone();
                    r.session_totals = None;
                }
                r.fail(kind, message);
            }
        }
        return r;
    }

    // No result line.
    r.response = if d.blocks.is_empty() {
        d.deltas.clone()
    } else {
        d.blocks.clone()
    };
    if d.tally.looks_foreign() {
        r.fail(
            ErrorKind::Protocol,
            format!(
                "the stream is not Claude Code stream-json: {} JSON lines of types claude does \
                 not print ({}); was it recorded from another CLI?",
                d.tally.foreign.0,
                d.tally.foreign.1.join(", ")
            ),
        );
        return r;
    }
    let auth = d
        .api_error
        .as_ref()
        .filter(|a| a.classify() == ErrorKind::Auth)
        .map(|a| d.provider.auth_message(&a.text))
        .or_else(|| super::detect_auth_error_in(&d.provider, stderr));
    if auth.is_none()
        && let Some(line) = stderr
            .lines()
            .map(str::trim)
            .find(|l| l.contains(ROOT_BYPASS))
    {
        r.fail(
            ErrorKind::Permission,
            format!(
                "{line} (claude refuses to bypass permissions as root unless IS_SANDBOX=1 \
                 is set; aicli sets it for root runs in bypass mode: run as a normal user, \
                 inside a container, or with another permission mode)"
            ),
        );
        return r;
    }
    if auth.is_none()
        && let Some(line) = stderr
            .lines()
            .map(str::trim)
            .find(|l| l.contains(UNKNOWN_SESSION))
    {
        r.fail(ErrorKind::InvalidResume, line.to_owned());
        return r;
    }
    let (kind, message) = d
        .tally
        .classify_without_final("Claude Code", stderr, exit, auth);
    r.fail(kind, message);
    r
}

/// Inserts the fields that are there and not null.
fn put_verbatim<const N: usize>(
    m: &mut Map<String, Value>,
    fields: [(&str, Option<&RawValue>); N],
) {
    for (k, v) in fields {
        let v = v.map_or(Value::Null, value_of);
        if !v.is_null() {
            m.insert(k.to_owned(), v);
        }
    }
}

/// Vendor facts with no neutral field, under the vendor's own key names; absent and null
/// facts are left out.
fn provider_data(d: &ClaudeDecoder) -> Value {
    let mut m: Map<String, Value> = Map::new();
    if let Some(o) = &d.results.last {
        let s = |v: &Option<String>| v.clone().map(Value::String);
        for (k, v) in [
            ("subtype", s(&o.subtype)),
            ("terminal_reason", s(&o.terminal_reason)),
            ("is_error", o.is_error.map(Value::Bool)),
            ("api_error_status", o.api_error_status.map(Value::from)),
            ("api_error_type", s(&o.api_error_type)),
            ("api_error", s(&o.api_error)),
        ] {
            if let Some(v) = v {
                m.insert(k.to_owned(), v);
            }
        }
    }
    if d.results.count > 0
        && let Some(v) =
            crate::wire::verbatim::<ResultVerbatim<'_>>(&mut m, "result", &d.results.line)
    {
        put_verbatim(
            &mut m,
            [
                ("stop_reason", v.stop_reason),
                ("errors", v.errors),
                ("permission_denials", v.permission_denials),
                ("total_cost_usd", v.total_cost_usd),
                ("duration_api_ms", v.duration_api_ms),
                ("modelUsage", v.model_usage),
                (
                    "model_usage_since_last_result",
                    v.model_usage_since_last_result,
                ),
            ],
        );
    }
    if let Some(word) = d.api_error.as_ref().and_then(|a| a.error_word.clone()) {
        m.insert("assistant_error".to_owned(), Value::String(word));
    }
    if let Some((line, servers)) = &d.init
        && let Some(v) = crate::wire::verbatim::<InitVerbatim<'_>>(&mut m, "init", line)
    {
        put_verbatim(
            &mut m,
            [
                ("permissionMode", v.permission_mode),
                ("apiKeySource", v.api_key_source),
                ("mcp_servers", v.mcp_servers.filter(|_| *servers)),
            ],
        );
    }
    if d.tally.retries > 0 {
        m.insert("api_retries".to_owned(), Value::from(d.tally.retries));
    }
    if m.is_empty() {
        Value::Null
    } else {
        Value::Object(m)
    }
}
