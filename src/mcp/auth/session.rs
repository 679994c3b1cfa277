//! Sessions bound to the token that created them, and the places a token holds for
//! sessions it may still open (`mcp.limits.max_sessions_per_token`).

use std::collections::HashSet;

use super::token::Tokens;

impl Tokens {
    /// The token id that created `session`, if any.
    pub(crate) fn session_owner(&self, session: &str) -> Option<u64> {
        self.read().sessions.get(session).copied()
    }

    /// Binds a new session to a token; false when the token was revoked meanwhile.
    pub(crate) fn bind_session(&self, session: &str, token_id: u64) -> bool {
        let mut inner = self.write();
        let live = inner
            .by_prefix
            .values()
            .any(|b| b.iter().any(|e| e.id == token_id));
        if !live {
            return false;
        }
        inner.sessions.insert(session.to_owned(), token_id);
        inner
            .sessions_by_token
            .entry(token_id)
            .or_default()
            .insert(session.to_owned());
        true
    }

    /// Holds a place for a session `token_id` may open, if it holds fewer than `limit`
    /// (counting the places already held); `false` when it may not open one more.
    pub(crate) fn reserve_session(&self, token_id: u64, limit: usize) -> bool {
        let mut inner = self.write();
        let open = inner
            .sessions_by_token
            .get(&token_id)
            .map_or(0, HashSet::len);
        let pending = inner.pending.get(&token_id).copied().unwrap_or(0);
        if open + pending >= limit {
            return false;
        }
        *inner.pending.entry(token_id).or_default() += 1;
        true
    }

    /// Gives back a place [`Tokens::reserve_session`] held (the session, if one was
    /// opened, is bound by then).
    pub(crate) fn release_session(&self, token_id: u64) {
        let mut inner = self.write();
        if let Some(n) = inner.pending.get_mut(&token_id) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                inner.pending.remove(&token_id);
            }
        }
    }

    /// Forgets a session (closed by the client or expired in rmcp).
    pub(crate) fn unbind_session(&self, session: &str) {
        let mut inner = self.write();
        if let Some(id) = inner.sessions.remove(session)
            && let Some(set) = inner.sessions_by_token.get_mut(&id)
        {
            set.remove(session);
            if set.is_empty() {
                inner.sessions_by_token.remove(&id);
            }
        }
    }

    /// All bound session ids (for the sweep of sessions rmcp expired).
    pub(crate) fn bound_sessions(&self) -> Vec<String> {
        self.read().sessions.keys().cloned().collect()
    }
}
