//! Bearer tokens: mint (32 random bytes, hex), constant-time lookup, restrict, revoke.
//!
//! A token is compared in constant time ([`subtle`]) against the live tokens that share
//! its first 8 hex characters, the only part of a token that is ever logged.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use axum::http::{HeaderMap, header};
use rand::RngCore;
use subtle::ConstantTimeEq;

use crate::mcp::TaskContext;

/// Bytes of randomness in a token (64 hex characters).
const TOKEN_BYTES: usize = 32;
/// Bytes of a token that may appear in logs and index the table (8 hex characters).
const PREFIX_BYTES: usize = 4;

/// The first 8 characters of a token: all that is ever logged.
pub(crate) fn token_prefix(token: &str) -> &str {
    let end = token
        .char_indices()
        .nth(2 * PREFIX_BYTES)
        .map_or(token.len(), |(i, _)| i);
    &token[..end]
}

/// The authenticated caller of one request.
#[derive(Clone, Debug)]
pub(crate) struct Caller {
    /// Internal id of the token (sessions are bound to it).
    pub token_id: u64,
    /// The token's 8-character prefix, for logs.
    pub prefix: Arc<str>,
    /// The task the token was minted for.
    pub ctx: Arc<TaskContext>,
    /// Where requests with this token may come from.
    pub peer: PeerRule,
    /// Cancelled when the token is revoked (its task run ended) or the server stops:
    /// what its tool calls are still running is killed then.
    pub cancel: tokio_util::sync::CancellationToken,
}

/// Where requests with a token may come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerRule {
    /// Anywhere that reaches the server.
    Any,
    /// One address, not known yet (the run is starting): requests wait for it.
    Pending,
    /// Only this address.
    Only(IpAddr),
}

/// How long a request with a [`PeerRule::Pending`] token waits for its address.
pub(crate) const PENDING_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// One live token.
pub(super) struct Entry {
    /// Internal id (sessions are bound to it).
    pub(super) id: u64,
    secret: [u8; TOKEN_BYTES],
    caller: Caller,
}

/// The table behind [`Tokens`] (the session fields are kept by `session`).
#[derive(Default)]
pub(super) struct Inner {
    /// Live tokens by their first bytes (almost always one per bucket).
    pub(super) by_prefix: HashMap<[u8; PREFIX_BYTES], Vec<Entry>>,
    /// Session id -> the token id that created it.
    pub(super) sessions: HashMap<String, u64>,
    /// Token id -> its sessions, to close them on revoke.
    pub(super) sessions_by_token: HashMap<u64, HashSet<String>>,
    /// Token id -> requests without a session in flight (each may open one).
    pub(super) pending: HashMap<u64, usize>,
    next_id: u64,
}

/// Live tokens and session bindings.
#[derive(Default)]
pub(crate) struct Tokens {
    inner: RwLock<Inner>,
}

/// Why a request was refused with 401.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AuthFailure {
    /// No `Authorization` header, or not the Bearer scheme.
    Missing,
    /// A Bearer token that is not 64 lower-case hex characters.
    Malformed,
    /// A well-formed token that is not live (never minted, or revoked).
    Unknown,
}

impl AuthFailure {
    /// The sentence in a 401's body.
    pub(super) fn describe(self) -> &'static str {
        match self {
            AuthFailure::Missing => "missing bearer token: send 'Authorization: Bearer <token>'",
            AuthFailure::Malformed => "malformed bearer token",
            AuthFailure::Unknown => "unknown or revoked bearer token",
        }
    }

    /// The short name logged with a refusal.
    pub(super) fn reason(self) -> &'static str {
        match self {
            AuthFailure::Missing => "missing",
            AuthFailure::Malformed => "malformed",
            AuthFailure::Unknown => "unknown_or_revoked",
        }
    }
}

impl Tokens {
    pub(super) fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// A fresh token for `ctx` (32 random bytes, hex) usable from where `peer` says.
    /// `cancel` is the token's own cancellation (a child of the server's), cancelled
    /// when it is revoked.
    pub(crate) fn mint_with(
        &self,
        ctx: TaskContext,
        peer: PeerRule,
        cancel: tokio_util::sync::CancellationToken,
    ) -> String {
        let mut secret = [0u8; TOKEN_BYTES];
        rand::rng().fill_bytes(&mut secret);
        let token = hex::encode(secret);
        let prefix = bucket_key(&secret);
        let mut inner = self.write();
        inner.next_id += 1;
        let id = inner.next_id;
        let caller = Caller {
            token_id: id,
            prefix: Arc::from(token_prefix(&token)),
            ctx: Arc::new(ctx),
            peer,
            cancel,
        };
        tracing::debug!(token = %caller.prefix, task_id = %caller.ctx.task_id, batch_id = %caller.ctx.batch_id, "minted MCP token");
        inner
            .by_prefix
            .entry(prefix)
            .or_default()
            .push(Entry { id, secret, caller });
        token
    }

    /// The caller of a live `token`, if it is one.
    pub(crate) fn caller_of(&self, token: &str) -> Option<Caller> {
        let secret = parse_token(token).ok()?;
        let prefix = bucket_key(&secret);
        let inner = self.read();
        inner
            .by_prefix
            .get(&prefix)?
            .iter()
            .find(|e| bool::from(e.secret.ct_eq(&secret)))
            .map(|e| e.caller.clone())
    }

    /// Every live token's caller.
    pub(crate) fn callers(&self) -> Vec<Caller> {
        self.read()
            .by_prefix
            .values()
            .flatten()
            .map(|e| e.caller.clone())
            .collect()
    }

    /// Drops `token` (cancelling its calls); returns its sessions (now unbound) for the
    /// caller to close.
    pub(crate) fn revoke(&self, token: &str) -> Vec<String> {
        let Ok(secret) = parse_token(token) else {
            return Vec::new();
        };
        let mut inner = self.write();
        let prefix = bucket_key(&secret);
        let mut removed = None;
        if let Some(bucket) = inner.by_prefix.get_mut(&prefix) {
            if let Some(pos) = bucket
                .iter()
                .position(|e| bool::from(e.secret.ct_eq(&secret)))
            {
                removed = Some(bucket.swap_remove(pos));
            }
            if bucket.is_empty() {
                inner.by_prefix.remove(&prefix);
            }
        }
        let Some(entry) = removed else {
            return Vec::new();
        };
        entry.caller.cancel.cancel();
        inner.pending.remove(&entry.id);
        let sessions: Vec<String> = inner
            .sessions_by_token
            .remove(&entry.id)
            .map(|s| s.into_iter().collect())
            .unwrap_or_default();
        for s in &sessions {
            inner.sessions.remove(s);
        }
        tracing::debug!(token = %entry.caller.prefix, task_id = %entry.caller.ctx.task_id, sessions = sessions.len(), "revoked MCP token");
        sessions
    }

    /// Restricts `token` to requests from `peer`; false when it is not live.
    pub(crate) fn restrict(&self, token: &str, peer: IpAddr) -> bool {
        let Ok(secret) = parse_token(token) else {
            return false;
        };
        let prefix = bucket_key(&secret);
        let mut inner = self.write();
        let Some(bucket) = inner.by_prefix.get_mut(&prefix) else {
            return false;
        };
        for e in bucket.iter_mut() {
            if bool::from(e.secret.ct_eq(&secret)) {
                e.caller.peer = PeerRule::Only(peer);
                tracing::debug!(token = %e.caller.prefix, task_id = %e.caller.ctx.task_id, %peer, "MCP token restricted to one address");
                return true;
            }
        }
        false
    }

    /// The caller named by the request's `Authorization` header.
    pub(crate) fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, AuthFailure> {
        let value = headers
            .get(header::AUTHORIZATION)
            .ok_or(AuthFailure::Missing)?
            .to_str()
            .map_err(|_| AuthFailure::Malformed)?;
        // RFC 9110 §5.5: whitespace around a field value is not part of it (hyper strips
        // it; so does this, whatever carried the header).
        let value = value.trim_matches([' ', '\t']);
        // RFC 9110 §11.4 (and RFC 6750 §2.1): `auth-scheme 1*SP token68`, the scheme in
        // any case; between them one or more spaces, never a tab.
        let (scheme, rest) = value.split_once(' ').ok_or(AuthFailure::Missing)?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(AuthFailure::Missing);
        }
        let secret =
            parse_token(rest.trim_start_matches(' ')).map_err(|()| AuthFailure::Malformed)?;
        let prefix = bucket_key(&secret);
        let inner = self.read();
        let bucket = inner.by_prefix.get(&prefix).ok_or(AuthFailure::Unknown)?;
        // Constant-time over the whole secret; the bucket key is the loggable prefix.
        let mut found = None;
        for e in bucket {
            if bool::from(e.secret.ct_eq(&secret)) {
                found = Some(e.caller.clone());
            }
        }
        found.ok_or(AuthFailure::Unknown)
    }

    /// Number of live tokens.
    pub(crate) fn live(&self) -> usize {
        self.read().by_prefix.values().map(Vec::len).sum()
    }
}

/// The table key of a secret: its first bytes (the loggable prefix).
fn bucket_key(secret: &[u8; TOKEN_BYTES]) -> [u8; PREFIX_BYTES] {
    let mut prefix = [0u8; PREFIX_BYTES];
    prefix.copy_from_slice(&secret[..PREFIX_BYTES]);
    prefix
}

/// Decodes a token spelled as minted: exactly 64 lower-case hex characters. The same
/// bytes in upper-case hex are another spelling, refused: a token has one. (What is
/// checked here is the presented string's shape; the secret itself is compared in
/// constant time after.)
fn parse_token(token: &str) -> Result<[u8; TOKEN_BYTES], ()> {
    let mut out = [0u8; TOKEN_BYTES];
    if token.len() != 2 * TOKEN_BYTES
        || !token
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return Err(());
    }
    hex::decode_to_slice(token, &mut out).map_err(|_| ())?;
    Ok(out)
}
