use std::net::IpAddr;

use axum::http::{HeaderMap, HeaderValue, header};

use super::token::{AuthFailure, token_prefix};
use super::{PeerRule, Tokens};
use crate::http::AllowedHosts;
use crate::mcp::TaskContext;

fn ctx() -> TaskContext {
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    TaskContext {
        batch_id: "b".into(),
        task_id: "t".into(),
        workspace: "/tmp".into(),
        skills: vec![],
        credentials: vec![],
        tools: vec![],
        record_dir: None,
        attempt: 1,
        events: tx,
    }
}

fn bearer(t: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {t}")).unwrap(),
    );
    h
}

#[test]
fn mint_authenticate_revoke() {
    let tokens = Tokens::default();
    let t = tokens.mint_with(
        ctx(),
        PeerRule::Any,
        tokio_util::sync::CancellationToken::new(),
    );
    assert_eq!(t.len(), 64);
    assert!(t.bytes().all(|b| b.is_ascii_hexdigit()));
    let c = tokens.authenticate(&bearer(&t)).unwrap();
    assert_eq!(c.ctx.task_id, "t");
    assert_eq!(&*c.prefix, &t[..8]);
    assert_eq!(
        tokens.authenticate(&HeaderMap::new()).unwrap_err(),
        AuthFailure::Missing
    );
    assert_eq!(
        tokens.authenticate(&bearer("abc")).unwrap_err(),
        AuthFailure::Malformed
    );
    let mut other = t.clone().into_bytes();
    other[63] = if other[63] == b'0' { b'1' } else { b'0' };
    let other = String::from_utf8(other).unwrap();
    assert_eq!(
        tokens.authenticate(&bearer(&other)).unwrap_err(),
        AuthFailure::Unknown
    );
    assert!(tokens.bind_session("s1", c.token_id));
    assert_eq!(tokens.session_owner("s1"), Some(c.token_id));
    assert_eq!(tokens.revoke(&t), vec!["s1".to_owned()]);
    assert_eq!(tokens.session_owner("s1"), None);
    assert_eq!(
        tokens.authenticate(&bearer(&t)).unwrap_err(),
        AuthFailure::Unknown
    );
    assert!(!tokens.bind_session("s2", c.token_id));
}

#[test]
fn the_scheme_is_any_case_the_token_has_one_spelling() {
    let tokens = Tokens::default();
    let t = tokens.mint_with(
        ctx(),
        PeerRule::Any,
        tokio_util::sync::CancellationToken::new(),
    );
    let auth = |v: &str| {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
        tokens.authenticate(&h).map(|_| ())
    };
    for ok in [
        format!("Bearer {t}"),
        format!("bearer {t}"),
        format!("BEARER {t}"),
        // 1*SP (RFC 9110 §11.4), and whitespace around the field value (§5.5).
        format!("Bearer  {t}"),
        format!(" Bearer {t}\t"),
    ] {
        assert_eq!(auth(&ok), Ok(()), "{ok:?}");
    }
    let upper = t.to_ascii_uppercase();
    // One letter upper-cased (64 hex digits without a letter: odds of 1e-13).
    let at = t.find(|c: char| c.is_ascii_alphabetic()).unwrap();
    let mut mixed = t.clone();
    mixed.replace_range(at..=at, &t[at..=at].to_ascii_uppercase());
    for (bad, why) in [
        (format!("Bearer {upper}"), AuthFailure::Malformed),
        (format!("Bearer {mixed}"), AuthFailure::Malformed),
        (format!("Bearer \t{t}"), AuthFailure::Malformed),
        (format!("Bearer {t} x"), AuthFailure::Malformed),
        (format!("Bearer {t}0"), AuthFailure::Malformed),
        (format!("Bearer\t{t}"), AuthFailure::Missing),
        (format!("Bearer{t}"), AuthFailure::Missing),
        (format!("Token {t}"), AuthFailure::Missing),
    ] {
        assert_eq!(auth(&bad), Err(why), "{bad:?}");
    }
}

#[test]
fn host_checks() {
    let hosts = AllowedHosts::new(["172.17.0.1", "host.docker.internal:8080"]);
    let check = |host: &str, origin: Option<&str>| {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_str(host).unwrap());
        if let Some(o) = origin {
            h.insert(header::ORIGIN, HeaderValue::from_str(o).unwrap());
        }
        hosts.check(&h)
    };
    assert!(check("127.0.0.1:4000", None).is_ok());
    assert!(check("localhost", None).is_ok());
    assert!(check("[::1]:4000", None).is_ok());
    assert!(check("172.17.0.1:4000", None).is_ok());
    assert!(check("host.docker.internal:8080", None).is_ok());
    assert!(check("host.docker.internal:9090", None).is_err());
    assert!(check("evil.example:4000", None).is_err());
    assert!(check("127.0.0.1:4000", Some("http://localhost:3000")).is_ok());
    assert!(check("127.0.0.1:4000", Some("http://evil.example")).is_err());
    assert!(check("127.0.0.1:4000", Some("null")).is_err());
    assert!(
        hosts
            .for_rmcp()
            .contains(&"host.docker.internal:8080".to_owned())
    );
    assert!(hosts.for_rmcp().contains(&"[::1]".to_owned()));
}

#[test]
fn a_pending_token_gets_one_address() {
    let tokens = Tokens::default();
    let t = tokens.mint_with(
        ctx(),
        PeerRule::Pending,
        tokio_util::sync::CancellationToken::new(),
    );
    assert_eq!(
        tokens.authenticate(&bearer(&t)).unwrap().peer,
        PeerRule::Pending
    );
    let ip: IpAddr = "172.17.0.9".parse().unwrap();
    assert!(tokens.restrict(&t, ip));
    assert_eq!(
        tokens.authenticate(&bearer(&t)).unwrap().peer,
        PeerRule::Only(ip)
    );
    let plain = tokens.mint_with(
        ctx(),
        PeerRule::Any,
        tokio_util::sync::CancellationToken::new(),
    );
    assert_eq!(
        tokens.authenticate(&bearer(&plain)).unwrap().peer,
        PeerRule::Any
    );
    tokens.revoke(&t);
    assert!(!tokens.restrict(&t, ip));
}

#[test]
fn prefix_is_eight_chars() {
    assert_eq!(token_prefix("0123456789abcdef"), "01234567");
    assert_eq!(token_prefix("ab"), "ab");
}
