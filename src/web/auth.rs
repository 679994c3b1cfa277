//! Who may use the web view: a browser that exchanged the one-time URL token for a
//! session cookie (HttpOnly, SameSite=Strict; `Secure` and `__Host-` under TLS), or a
//! client with the server's API token as `Authorization: Bearer` (the scheme in any
//! case). State-changing requests with the cookie also need the session's CSRF token in
//! `X-CSRF-Token`. Tokens are 32 random bytes in hex, compared in constant time, and
//! never logged whole.

use std::sync::Mutex;

use axum::http::{HeaderMap, Method, header};
use subtle::ConstantTimeEq;

/// The cookie's name over plain HTTP.
pub(crate) const COOKIE: &str = "aicli_session";
/// The cookie's name under TLS: the `__Host-` prefix makes the browser keep it only
/// when it is `Secure`, has `Path=/` and no `Domain` (so no other host sets or reads it).
pub(crate) const COOKIE_TLS: &str = "__Host-aicli_session";
/// The header a cookie-authenticated POST carries its CSRF token in.
pub(crate) const CSRF_HEADER: &str = "x-csrf-token";
/// Browser sessions at most; the oldest goes when one more logs in.
const MAX_SESSIONS: usize = 64;
/// Unused login tokens at most (the one printed at start and those minted since, by
/// `aicli web --link` or `POST /api/login-links`); the oldest goes when one more is made.
const MAX_LOGIN_TOKENS: usize = 16;
/// How long a minted login token is good for (the one printed at start has no limit:
/// it is the server's own, shown once).
pub(crate) const LOGIN_TOKEN_TTL: std::time::Duration = std::time::Duration::from_secs(600);

/// 32 random bytes, hex.
pub(crate) fn new_token() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

fn same(a: &str, b: &str) -> bool {
    bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// A browser session.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    id: String,
    /// Its CSRF token.
    pub csrf: String,
}

/// How a request was let in.
#[derive(Debug, Clone)]
pub(crate) enum Caller {
    /// With the session cookie.
    Browser(Session),
    /// With the API token.
    Api,
}

/// The server's credentials.
#[derive(Debug)]
pub(crate) struct Auth {
    /// Unused one-time login tokens, with when each expires (`None`: never).
    login: Mutex<Vec<(String, Option<std::time::Instant>)>>,
    api: String,
    sessions: Mutex<Vec<Session>>,
    /// Served over TLS: the cookie is `Secure` and `__Host-`.
    tls: bool,
}

/// Why a request is refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// No valid credential: 401.
    Unauthenticated,
    /// A cookie-authenticated state change without its CSRF token: 403.
    NoCsrf,
}

impl Auth {
    /// New credentials: a one-time login token and an API token; `tls` when the
    /// server speaks HTTPS.
    pub(crate) fn new(tls: bool) -> Auth {
        Auth {
            login: Mutex::new(vec![(new_token(), None)]),
            api: new_token(),
            sessions: Mutex::new(Vec::new()),
            tls,
        }
    }

    fn cookie_name(&self) -> &'static str {
        if self.tls { COOKIE_TLS } else { COOKIE }
    }

    /// The one-time login token printed at start, while unused.
    pub(crate) fn login_token(&self) -> Option<String> {
        let login = self.login.lock().unwrap_or_else(|e| e.into_inner());
        login
            .iter()
            .find(|(_, expires)| expires.is_none())
            .map(|(t, _)| t.clone())
    }

    /// A new one-time login token, good for [`LOGIN_TOKEN_TTL`]: a fresh link for
    /// another browser or device while the server runs.
    pub(crate) fn mint_login_token(&self) -> String {
        let t = new_token();
        let mut login = self.login.lock().unwrap_or_else(|e| e.into_inner());
        let now = std::time::Instant::now();
        login.retain(|(_, e)| e.is_none_or(|e| e > now));
        if login.len() >= MAX_LOGIN_TOKENS {
            login.remove(0);
        }
        login.push((t.clone(), Some(now + LOGIN_TOKEN_TTL)));
        t
    }

    /// The API token.
    pub(crate) fn api_token(&self) -> &str {
        &self.api
    }

    /// Exchanges an unused, unexpired login token for a new session (once: the token is
    /// spent).
    pub(crate) fn log_in(&self, token: &str) -> Option<Session> {
        {
            let mut login = self.login.lock().unwrap_or_else(|e| e.into_inner());
            let now = std::time::Instant::now();
            // Every token is compared (in constant time), whichever matches.
            let mut found = None;
            for (i, (t, expires)) in login.iter().enumerate() {
                if same(t, token) && expires.is_none_or(|e| e > now) {
                    found = Some(i);
                }
            }
            login.remove(found?);
        }
        let s = Session {
            id: new_token(),
            csrf: new_token(),
        };
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if sessions.len() >= MAX_SESSIONS {
            sessions.remove(0);
        }
        sessions.push(s.clone());
        Some(s)
    }

    /// The cookie that carries `s`. It has no `Domain`: the browser sends it to the
    /// host that set it only (the web view's own name, see [`super::WebServer`]).
    pub(crate) fn cookie(&self, s: &Session) -> String {
        let secure = if self.tls { "; Secure" } else { "" };
        format!(
            "{}={}; HttpOnly; SameSite=Strict; Path=/{secure}",
            self.cookie_name(),
            s.id
        )
    }

    /// Who sends a request with `headers`, or why it is refused.
    pub(crate) fn check(&self, method: &Method, headers: &HeaderMap) -> Result<Caller, Refusal> {
        if let Some(t) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer)
        {
            return if same(t.trim(), &self.api) {
                Ok(Caller::Api)
            } else {
                Err(Refusal::Unauthenticated)
            };
        }
        let sid = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|kv| kv.trim().split_once('='))
            .find(|(k, _)| *k == self.cookie_name())
            .map(|(_, v)| v.to_owned())
            .ok_or(Refusal::Unauthenticated)?;
        let session = {
            let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
            let mut found = None;
            for s in sessions.iter() {
                if same(&s.id, &sid) {
                    found = Some(s.clone());
                }
            }
            found.ok_or(Refusal::Unauthenticated)?
        };
        let safe = matches!(*method, Method::GET | Method::HEAD);
        if !safe {
            let csrf = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
            if !csrf.is_some_and(|c| same(c, &session.csrf)) {
                return Err(Refusal::NoCsrf);
            }
        }
        Ok(Caller::Browser(session))
    }
}

/// The credentials of an `Authorization` value with the `Bearer` scheme, which is
/// case-insensitive (RFC 9110, 11.1).
fn bearer(v: &str) -> Option<&str> {
    let (scheme, rest) = v.trim_start().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_login_tokens_each_work_once_and_the_first_stays_usable() {
        let a = Auth::new(false);
        let first = a.login_token().unwrap();
        let phone = a.mint_login_token();
        let desktop = a.mint_login_token();
        assert!(a.log_in(&phone).is_some());
        assert!(a.log_in(&phone).is_none(), "a minted token works once");
        assert!(a.log_in(&desktop).is_some());
        assert_eq!(a.login_token().as_deref(), Some(first.as_str()));
        assert!(a.log_in(&first).is_some());
        assert!(a.log_in("0").is_none());
        for _ in 0..MAX_LOGIN_TOKENS + 3 {
            a.mint_login_token();
        }
        assert_eq!(a.login.lock().unwrap().len(), MAX_LOGIN_TOKENS);
    }

    #[test]
    fn the_login_token_works_once_and_a_post_needs_the_csrf_token() {
        let a = Auth::new(false);
        let t = a.login_token().unwrap();
        assert!(a.log_in("0").is_none());
        let s = a.log_in(&t).unwrap();
        assert!(a.log_in(&t).is_none(), "spent");
        assert!(a.login_token().is_none());
        let mut h = HeaderMap::new();
        assert_eq!(a.check(&Method::GET, &h).unwrap_err(), Refusal::Unauthenticated);
        h.insert(header::COOKIE, format!("x=1; {COOKIE}={}", s.id).parse().unwrap());
        assert!(matches!(a.check(&Method::GET, &h), Ok(Caller::Browser(_))));
        assert_eq!(a.check(&Method::POST, &h).unwrap_err(), Refusal::NoCsrf);
        h.insert(CSRF_HEADER, s.csrf.parse().unwrap());
        assert!(a.check(&Method::POST, &h).is_ok());
        let mut b = HeaderMap::new();
        b.insert(header::AUTHORIZATION, format!("Bearer {}", a.api_token()).parse().unwrap());
        assert!(matches!(a.check(&Method::POST, &b), Ok(Caller::Api)));
        b.insert(header::AUTHORIZATION, "Bearer nope".parse().unwrap());
        assert_eq!(a.check(&Method::GET, &b).unwrap_err(), Refusal::Unauthenticated);
        for scheme in ["bearer", "BEARER", "bEaReR"] {
            let v = format!("{scheme} {}", a.api_token());
            b.insert(header::AUTHORIZATION, v.parse().unwrap());
            assert!(matches!(a.check(&Method::GET, &b), Ok(Caller::Api)), "{scheme}");
        }
        b.insert(header::AUTHORIZATION, format!("Basic {}", a.api_token()).parse().unwrap());
        assert_eq!(a.check(&Method::GET, &b).unwrap_err(), Refusal::Unauthenticated);
    }

    #[test]
    fn under_tls_the_cookie_is_secure_and_host_only() {
        let a = Auth::new(true);
        let s = a.log_in(&a.login_token().unwrap()).unwrap();
        let c = a.cookie(&s);
        assert!(c.starts_with("__Host-aicli_session=") && c.contains("; Secure"), "{c}");
        assert!(!c.contains("Domain"), "{c}");
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, format!("{COOKIE}={}", s.id).parse().unwrap());
        assert!(a.check(&Method::GET, &h).is_err(), "the plain name is not read under TLS");
        h.insert(header::COOKIE, format!("{COOKIE_TLS}={}", s.id).parse().unwrap());
        assert!(a.check(&Method::GET, &h).is_ok());
        let plain = Auth::new(false);
        let s = plain.log_in(&plain.login_token().unwrap()).unwrap();
        assert!(!plain.cookie(&s).contains("Secure"));
    }
}
