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
    #[serde(rename = "__other")]
    Other(#[serde(borrow)] Cow<'a, str>),
}
crate::tagged_enum!(Line, "type", old = "kind");

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
