//! Reading tagged lines in one pass.

use std::borrow::Cow;

use serde::Deserialize;

use super::*;

#[derive(Debug, Deserialize, PartialEq)]
#[serde(remote = "Self")]
enum Line<'a> {
    #[serde(rename = "a")]
    A(#[serde(borrow)] A<'a>),
    #[serde(rename = "b")]
    B(serde::de::IgnoredAny),
    /// Tagged again by another field of the same object (as Claude's `system` lines).
    #[serde(rename = "s")]
    S(#[serde(borrow)] Sys<'a>),
    #[serde(rename = "__other")]
    Other(#[serde(borrow)] Cow<'a, str>),
}
crate::tagged_enum!(Line, "type", old = "kind");

#[derive(Debug, Deserialize, PartialEq)]
#[serde(remote = "Self")]
enum Sys<'a> {
    #[serde(rename = "x")]
    X { n: u32 },
    #[serde(rename = "__other")]
    Other(#[serde(borrow)] Cow<'a, str>),
}
crate::tagged_enum!(Sys, "subtype");

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
struct A<'a> {
    #[serde(borrow)]
    name: Option<Str<'a>>,
    n: Count,
    inner: Option<Inner<'a>>,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(remote = "Self")]
enum Inner<'a> {
    #[serde(rename = "x")]
    X { v: u32 },
    #[serde(rename = "__other")]
    Other(#[serde(borrow)] Cow<'a, str>),
}
crate::tagged_enum!(Inner, "sub");

fn read(s: &str) -> Result<Line<'_>, serde_json::Error> {
    serde_json::from_str(s)
}

#[test]
fn the_tag_picks_the_variant_wherever_it_is() {
    let first = read(r#"{"type":"a","name":"n1","n":3,"inner":{"sub":"x","v":7}}"#).unwrap();
    let later = read(r#"{"name":"n1","n":3,"inner":{"v":7,"sub":"x"},"type":"a"}"#).unwrap();
    assert_eq!(first, later);
    let Line::A(a) = first else { panic!() };
    assert_eq!(a.n, Count(3));
    assert_eq!(a.inner, Some(Inner::X { v: 7 }));
    // Strings without escapes are borrowed from the line.
    assert!(matches!(a.name, Some(Str(Cow::Borrowed("n1")))));
    assert!(matches!(
        read(r#"{"type":"b","x":[1,{"y":2}]}"#).unwrap(),
        Line::B(_)
    ));
    // The older name of the tag field.
    assert!(matches!(read(r#"{"kind":"a"}"#).unwrap(), Line::A(_)));
}

#[test]
fn an_unknown_or_missing_tag_is_other_with_its_name() {
    assert_eq!(
        read(r#"{"type":"zz","a":1}"#).unwrap(),
        Line::Other(Cow::Borrowed("zz"))
    );
    assert_eq!(read(r#"{"a":1}"#).unwrap(), Line::Other(Cow::Borrowed("")));
    assert_eq!(
        read(r#"{"type":5}"#).unwrap(),
        Line::Other(Cow::Borrowed(""))
    );
    assert_eq!(
        read(r#"{"type":"__other"}"#).unwrap(),
        Line::Other(Cow::Borrowed("__other"))
    );
    assert!(read("[1]").is_err());
    assert!(read(r#"{"type":"a","n":1"#).is_err());
}

#[test]
fn counts_read_odd_numbers_as_zero() {
    for (json, n) in [("7", 7), ("null", 0), ("-3", 0), ("2.9", 2), ("1e400", 0)] {
        let line = format!(r#"{{"type":"a","n":{json}}}"#);
        match read(&line) {
            Ok(Line::A(a)) => assert_eq!(a.n, Count(n), "{json}"),
            other => assert!(json == "1e400" && other.is_err(), "{json}: {other:?}"),
        }
    }
}

/// Lines as [`from_line`] reads them, next to the generic read of the same text.
fn both(s: &str) -> (Result<Line<'_>, String>, Result<Line<'_>, String>) {
    (
        from_line::<Line<'_>>(s).map_err(|e| e.to_string()),
        read(s).map_err(|e| e.to_string()),
    )
}

#[test]
fn a_line_reads_the_same_whether_its_tag_comes_first_later_or_is_guessed_wrong() {
    for s in [
        // The tag first: the variant from the line's bytes.
        r#"{"type":"a","name":"n1","n":3,"inner":{"sub":"x","v":7}}"#,
        r#"{"type":"b","x":[1,{"y":2}]}"#,
        r#"{"type":"zz","a":1}"#,
        r#"{"type":"__other"}"#,
        // Later: guessed from the bytes, checked against the real field.
        r#"{"name":"n1","n":3,"type":"a"}"#,
        r#"{"n":3,"type":"b"}"#,
        // A nested `type` that names a variant comes first: the guess is wrong.
        r#"{"inner":{"type":"b","sub":"x","v":1},"type":"a","n":2}"#,
        r#"{"inner":{"type":"a","sub":"x","v":1},"n":2}"#,
        r#"{"inner":{"type":"a","sub":"x","v":1},"type":5}"#,
        // A tag inside a string is no tag (its quotes are escaped).
        r#"{"name":"say \"type\":\"b\"","type":"a"}"#,
        // Escapes in the tag, whitespace, the old tag name, no tag at all.
        r#"{"type":"\u0061","n":1}"#,
        r#"{ "type" : "a", "n": 1 }"#,
        r#"{"kind":"a","n":1}"#,
        r#"{"n":1,"kind":"b","type":"a"}"#,
        r#"{"a":1}"#,
        r#"{"type":"a","type":"b"}"#,
        // A payload tagged again by `subtype` on the same object, in every order.
        r#"{"type":"s","subtype":"x","n":1}"#,
        r#"{"subtype":"x","n":1,"type":"s"}"#,
        r#"{"n":1,"type":"s","subtype":"x"}"#,
        r#"{"type":"s","subtype":"zz","n":1}"#,
        r#"{"type":"s","n":1}"#,
        // Bad lines fail alike.
        r#"{"type":"a","n":1"#,
        r#"{"n":"x","type":"a"}"#,
        r#"{"type":"a","n":{}}"#,
        r#"{"type":"a"} x"#,
        "[1]",
        "",
    ] {
        let (fast, generic) = both(s);
        assert_eq!(fast, generic, "{s}");
    }
}

#[test]
fn a_line_tagged_twice_reads_both_tags() {
    for s in [
        r#"{"type":"s","subtype":"x","n":1}"#,
        r#"{"subtype":"x","n":1,"type":"s"}"#,
    ] {
        assert_eq!(
            from_line::<Line<'_>>(s).unwrap(),
            Line::S(Sys::X { n: 1 }),
            "{s}"
        );
    }
    assert_eq!(
        from_line::<Line<'_>>(r#"{"type":"s","subtype":"zz"}"#).unwrap(),
        Line::S(Sys::Other(Cow::Borrowed("zz")))
    );
}

#[test]
fn a_guessed_line_keeps_borrowing_and_drops_the_tag_field() {
    let Ok(Line::A(a)) = from_line::<Line<'_>>(r#"{"name":"n1","type":"a","n":4}"#) else {
        panic!()
    };
    assert!(matches!(a.name, Some(Str(Cow::Borrowed("n1")))));
    assert_eq!(a.n, Count(4));
}
