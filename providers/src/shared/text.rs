//! Text helpers: clipping, the last line of stderr, a tool's output as text.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// How much of a run's answer text a decoder keeps (256 KiB: more than the longest
/// single answer a model writes): a stream of any length costs no more memory. The
/// whole stream is in the run record.
pub const RESPONSE_CAP: usize = 256 << 10;

/// What ends an answer cut at [`RESPONSE_CAP`].
pub const RESPONSE_CUT_NOTE: &str =
    "\n[aicli: the answer is longer than 256 KiB; the rest of it is in the run record]";

/// Appends `text` to a run's answer `out`, which keeps at most [`RESPONSE_CAP`] bytes
/// (cut at a character boundary and ended by [`RESPONSE_CUT_NOTE`]); nothing more is
/// added once it is full.
pub fn push_capped(out: &mut String, text: &str) {
    if out.len() >= RESPONSE_CAP {
        return;
    }
    let room = RESPONSE_CAP - out.len();
    if text.len() <= room {
        out.push_str(text);
        return;
    }
    let mut cut = room;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    out.push_str(&text[..cut]);
    out.push_str(RESPONSE_CUT_NOTE);
}

/// At most `max` characters of `s`, with an ellipsis when cut.
pub fn truncate_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_owned(),
        Some((i, _)) => format!("{}…", &s[..i]),
    }
}

/// The last non-empty line of stderr, trimmed to 500 characters.
pub fn stderr_last_line(stderr: &str) -> Option<String> {
    let line = stderr
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())?;
    Some(truncate_chars(line, 500))
}

/// A tool's output as text: a string as it is, `[{type: text, text}]` blocks joined by
/// newlines, anything else as compact JSON, `null` as nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolOutput(pub String);

impl<'de> Deserialize<'de> for ToolOutput {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ToolOutput;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a tool's output")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<ToolOutput, E> {
                Ok(ToolOutput(s.to_owned()))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<ToolOutput, E> {
                Ok(ToolOutput(s))
            }
            fn visit_unit<E: de::Error>(self) -> Result<ToolOutput, E> {
                Ok(ToolOutput(String::new()))
            }
            fn visit_none<E: de::Error>(self) -> Result<ToolOutput, E> {
                Ok(ToolOutput(String::new()))
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<ToolOutput, E> {
                Ok(ToolOutput(b.to_string()))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<ToolOutput, E> {
                Ok(ToolOutput(n.to_string()))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<ToolOutput, E> {
                Ok(ToolOutput(n.to_string()))
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<ToolOutput, E> {
                Ok(ToolOutput(Value::from(n).to_string()))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut a: A) -> Result<ToolOutput, A::Error> {
                let mut items = Vec::new();
                while let Some(v) = a.next_element::<Value>()? {
                    items.push(v);
                }
                Ok(ToolOutput(blocks_text(&items)))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, a: A) -> Result<ToolOutput, A::Error> {
                let v: Value = Deserialize::deserialize(de::value::MapAccessDeserializer::new(a))?;
                Ok(ToolOutput(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// Text blocks joined by newlines, or the whole array as compact JSON when one is not
/// a text block.
pub fn blocks_text(items: &[Value]) -> String {
    let texts: Vec<&str> = items
        .iter()
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect();
    if texts.len() == items.len() {
        texts.join("\n")
    } else {
        Value::Array(items.to_vec()).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_keeps_its_first_256_kib_cut_at_a_character_and_says_so() {
        let mut out = String::new();
        let chunk = "é".repeat(1000); // 2 bytes each
        for _ in 0..1000 {
            push_capped(&mut out, &chunk);
        }
        assert!(out.ends_with(RESPONSE_CUT_NOTE));
        let body = &out[..out.len() - RESPONSE_CUT_NOTE.len()];
        assert!(body.len() <= RESPONSE_CAP && body.len() > RESPONSE_CAP - 4);
        assert!(body.chars().all(|c| c == 'é'));
        let before = out.len();
        push_capped(&mut out, "more");
        assert_eq!(out.len(), before, "nothing is added once full");
    }

    #[test]
    fn tool_output_joins_text_blocks_and_keeps_the_rest_as_json() {
        let read = |s: &str| serde_json::from_str::<ToolOutput>(s).map(|o| o.0).ok();
        assert_eq!(read(r#""x""#).as_deref(), Some("x"));
        assert_eq!(
            read(r#"[{"type":"text","text":"a"},{"type":"text","text":"b"}]"#).as_deref(),
            Some("a\nb")
        );
        assert_eq!(read(r#"{"k":1}"#).as_deref(), Some(r#"{"k":1}"#));
        assert_eq!(read("null").as_deref(), Some(""));
        assert_eq!(
            read(r#"[{"type":"image"}]"#).as_deref(),
            Some(r#"[{"type":"image"}]"#)
        );
        // One block without text: the whole array, as the tree prints it.
        assert_eq!(
            read(r#"[{"type":"text","text":"a"}, {"type":"image","n":1.50}]"#).as_deref(),
            Some(r#"[{"type":"text","text":"a"},{"type":"image","n":1.5}]"#)
        );
        // Escapes decoded; a repeated key reads as its last value, as in a tree.
        assert_eq!(
            read(r#"[{"text":"a\nb"},{"text":"x","text":"c"}]"#).as_deref(),
            Some("a\nb\nc")
        );
        assert_eq!(read("[]").as_deref(), Some(""));
    }

    #[test]
    fn truncate_keeps_char_boundaries() {
        assert_eq!(truncate_chars("héllo", 2), "hé…");
        assert_eq!(truncate_chars("hi", 5), "hi");
    }
}
