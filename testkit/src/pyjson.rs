//! JSON the way Python's `json.dumps` writes it by default (`", "` and `": "` separators,
//! non-ASCII escaped as `\uXXXX`). The reference Gemini fake quoted tool results this way,
//! so the Gemini fake does too, to reproduce its transcripts byte for byte.

use std::io;

use serde::Serialize;
use serde_json::ser::Formatter;

struct PythonFormatter;

impl Formatter for PythonFormatter {
    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }

    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        for c in fragment.chars() {
            if c.is_ascii() {
                let mut buf = [0u8; 1];
                w.write_all(c.encode_utf8(&mut buf).as_bytes())?;
            } else {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    write!(w, "\\u{unit:04x}")?;
                }
            }
        }
        Ok(())
    }
}

/// Serializes `value` like Python's `json.dumps(value)`.
pub(crate) fn dumps<T: Serialize>(value: &T) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, PythonFormatter);
    if value.serialize(&mut ser).is_err() {
        return String::new();
    }
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn matches_python() {
        // python3 -c 'import json; print(json.dumps({"output": "a\nb", "n": [1, 2], "é": "\u2603"}))'
        assert_eq!(
            dumps(&json!({"output": "a\nb", "n": [1, 2], "é": "☃"})),
            r#"{"output": "a\nb", "n": [1, 2], "\u00e9": "\u2603"}"#
        );
        assert_eq!(dumps(&json!("\u{1F600}")), r#""\ud83d\ude00""#);
    }
}
