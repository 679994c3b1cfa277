//! Helpers every adapter uses the same way: reading a line as a JSON object, the facts
//! all results share (session id, tool calls, protocol errors), and the classification
//! of a run that ended without a final event.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::ErrorKind;
use crate::event::{AgentEvent, EventKind};
use crate::result::{SessionResult, SessionStatus};

/// How much of an over-long or non-UTF-8 line is kept in its protocol event.
pub const PROTOCOL_RAW_PREFIX: usize = 4096;

/// Parses `line` as a JSON object; otherwise says what was wrong (for a protocol event:
/// `AgentEvent::protocol(message, raw)`).
pub fn json_object(line: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(format!(
            "expected a JSON object, got {}",
            json_type_name(&other)
        )),
        Err(e) => Err(format!("malformed JSON: {e}")),
    }
}

/// The `type` of a line, read cheaply: from a line that starts `{"type":"<name>"` (what
/// every vendor prints), else from a shallow parse that skips everything else.
///
/// Only a hint for choosing a fast-path reader: that reader reads `type` again, checks it
/// is this name and unique, and reads the whole line strictly ([`strict::from_str`]).
/// `None` when the line has no string `type`, or is not JSON at all.
pub(crate) fn line_type(line: &str) -> Option<Cow<'_, str>> {
    if let Some(rest) = line.strip_prefix("{\"type\":\"")
        && let Some(end) = memchr::memchr(b'"', rest.as_bytes())
        && let Some(name) = rest.get(..end)
        && !name.contains('\\')
    {
        return Some(Cow::Borrowed(name));
    }
    shallow_type(line)
}

/// The `type` of a line by a shallow parse: `None` when the line has no string `type`
/// (or two), or is not a JSON object. Values other than `type` are skipped without the checks of
/// a `Value` parse: a line this reads may still be one a `Value` parse rejects.
pub(crate) fn shallow_type(line: &str) -> Option<Cow<'_, str>> {
    // serde reads a struct from an array too (field by field): only objects here.
    if !line
        .trim_start_matches([' ', '\t', '\n', '\r'])
        .starts_with('{')
    {
        return None;
    }
    #[derive(Deserialize)]
    struct Envelope<'a> {
        #[serde(borrow)]
        r#type: Option<Cow<'a, str>>,
    }
    serde_json::from_str::<Envelope<'_>>(line).ok()?.r#type
}

/// A string read from a line: borrowed where the line has it without escapes, owned
/// otherwise (`Option<Cow<str>>` alone would always copy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CowStr<'a>(pub(crate) Cow<'a, str>);

impl CowStr<'_> {
    /// The string.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The string, owned.
    pub(crate) fn into_string(self) -> String {
        self.0.into_owned()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for CowStr<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = CowStr<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                s: &'de str,
            ) -> Result<CowStr<'de>, E> {
                Ok(CowStr(Cow::Borrowed(s)))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<CowStr<'de>, E> {
                Ok(CowStr(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E: serde::de::Error>(self, s: String) -> Result<CowStr<'de>, E> {
                Ok(CowStr(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V)
    }
}

/// A field that may be absent but, when present, must be a `T` (`null` too must then be a
/// valid `T`, as for a `T` field with `#[serde(default)]`). For one struct that reads the
/// fields of several line shapes, each of which requires the field or not.
#[derive(Debug, Default)]
pub(crate) enum Field<T> {
    /// The line has no such field.
    #[default]
    Absent,
    /// The field's value.
    Present(T),
}

impl<T> Field<T> {
    /// The value, when present.
    pub(crate) fn present(self) -> Option<T> {
        match self {
            Field::Absent => None,
            Field::Present(v) => Some(v),
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Field<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(d).map(Field::Present)
    }
}

/// Reading a line straight into borrowed, typed structs, with exactly the checks of
/// parsing it into a [`Value`] first.
///
/// `serde_json::from_str::<T>` skips the fields `T` does not name with a lenient scanner:
/// it does not check `\u` surrogates, the range of numbers, or the nesting limit. Parsing
/// the line into a `Value` checks all three, so a line the adapters used to reject as
/// malformed JSON could pass a typed read. [`from_str`] reads skipped values the way a
/// `Value` parse reads them (without building anything), so it succeeds only on lines a
/// `Value` parse accepts. It also refuses a struct written as a JSON array (which serde
/// accepts, field by field) and enums; a caller falls back to its `Value` path on any
/// error, which then gives the same events and messages as before.
pub(crate) mod strict {
    use std::fmt;

    use serde::de::{
        self, Deserialize, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, Visitor,
    };

    /// `T` from `line`, like `serde_json::from_str`, with the checks described above.
    pub(crate) fn from_str<'a, T: Deserialize<'a>>(line: &'a str) -> Result<T, serde_json::Error> {
        let mut de = serde_json::Deserializer::from_str(line);
        let value = T::deserialize(Strict(&mut de))?;
        de.end()?;
        Ok(value)
    }

    /// A deserializer whose ignored values are read in full.
    struct Strict<D>(D);

    macro_rules! forward {
        ($($method:ident)*) => {$(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
                self.0.$method(Wrap { inner: visitor, is_struct: false })
            }
        )*};
    }

    impl<'de, D: Deserializer<'de>> Deserializer<'de> for Strict<D> {
        type Error = D::Error;

        forward! {
            deserialize_any deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32
            deserialize_i64 deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32
            deserialize_u64 deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char
            deserialize_str deserialize_string deserialize_bytes deserialize_byte_buf
            deserialize_option deserialize_unit deserialize_seq deserialize_map
            deserialize_identifier
        }

        fn deserialize_unit_struct<V: Visitor<'de>>(
            self,
            name: &'static str,
            visitor: V,
        ) -> Result<V::Value, D::Error> {
            self.0.deserialize_unit_struct(
                name,
                Wrap {
                    inner: visitor,
                    is_struct: false,
                },
            )
        }

        fn deserialize_newtype_struct<V: Visitor<'de>>(
            self,
            name: &'static str,
            visitor: V,
        ) -> Result<V::Value, D::Error> {
            self.0.deserialize_newtype_struct(
                name,
                Wrap {
                    inner: visitor,
                    is_struct: false,
                },
            )
        }

        fn deserialize_tuple<V: Visitor<'de>>(
            self,
            len: usize,
            visitor: V,
        ) -> Result<V::Value, D::Error> {
            self.0.deserialize_tuple(
                len,
                Wrap {
                    inner: visitor,
                    is_struct: false,
                },
            )
        }

        fn deserialize_tuple_struct<V: Visitor<'de>>(
            self,
            name: &'static str,
            len: usize,
            visitor: V,
        ) -> Result<V::Value, D::Error> {
            self.0.deserialize_tuple_struct(
                name,
                len,
                Wrap {
                    inner: visitor,
                    is_struct: false,
                },
            )
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            name: &'static str,
            fields: &'static [&'static str],
            visitor: V,
        ) -> Result<V::Value, D::Error> {
            self.0.deserialize_struct(
                name,
                fields,
                Wrap {
                    inner: visitor,
                    is_struct: true,
                },
            )
        }

        fn deserialize_enum<V: Visitor<'de>>(
            self,
            _name: &'static str,
            _variants: &'static [&'static str],
            _visitor: V,
        ) -> Result<V::Value, D::Error> {
            Err(de::Error::custom("enums are not read on the fast path"))
        }

        fn deserialize_ignored_any<V: Visitor<'de>>(
            self,
            visitor: V,
        ) -> Result<V::Value, D::Error> {
            self.0.deserialize_any(Skip(visitor))
        }

        fn is_human_readable(&self) -> bool {
            self.0.is_human_readable()
        }
    }

    /// Passes everything on to `inner`, keeping nested values [`Strict`].
    struct Wrap<V> {
        inner: V,
        /// Whether `inner` reads a struct (which must then be a JSON object).
        is_struct: bool,
    }

    macro_rules! pass {
        ($($method:ident: $ty:ty)*) => {$(
            fn $method<E: de::Error>(self, v: $ty) -> Result<Self::Value, E> {
                self.inner.$method(v)
            }
        )*};
    }

    impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<V> {
        type Value = V::Value;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            self.inner.expecting(f)
        }

        pass! {
            visit_bool: bool visit_i8: i8 visit_i16: i16 visit_i32: i32 visit_i64: i64
            visit_i128: i128 visit_u8: u8 visit_u16: u16 visit_u32: u32 visit_u64: u64
            visit_u128: u128 visit_f32: f32 visit_f64: f64 visit_char: char
            visit_str: &str visit_borrowed_str: &'de str visit_string: String
            visit_bytes: &[u8] visit_borrowed_bytes: &'de [u8] visit_byte_buf: Vec<u8>
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            self.inner.visit_none()
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            self.inner.visit_unit()
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            self.inner.visit_some(Strict(d))
        }

        fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            self.inner.visit_newtype_struct(Strict(d))
        }

        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
            if self.is_struct {
                return Err(de::Error::custom("a struct written as an array"));
            }
            self.inner.visit_seq(StrictSeq(seq))
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            self.inner.visit_map(StrictMap(map))
        }

        fn visit_enum<A: EnumAccess<'de>>(self, _data: A) -> Result<Self::Value, A::Error> {
            Err(de::Error::custom("enums are not read on the fast path"))
        }
    }

    /// Elements of a sequence, each read [`Strict`]ly.
    struct StrictSeq<A>(A);

    impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for StrictSeq<A> {
        type Error = A::Error;

        fn next_element_seed<T: DeserializeSeed<'de>>(
            &mut self,
            seed: T,
        ) -> Result<Option<T::Value>, A::Error> {
            self.0.next_element_seed(StrictSeed(seed))
        }

        fn size_hint(&self) -> Option<usize> {
            self.0.size_hint()
        }
    }

    /// Keys and values of a map, each read [`Strict`]ly.
    struct StrictMap<A>(A);

    impl<'de, A: MapAccess<'de>> MapAccess<'de> for StrictMap<A> {
        type Error = A::Error;

        fn next_key_seed<K: DeserializeSeed<'de>>(
            &mut self,
            seed: K,
        ) -> Result<Option<K::Value>, A::Error> {
            self.0.next_key_seed(StrictSeed(seed))
        }

        fn next_value_seed<T: DeserializeSeed<'de>>(
            &mut self,
            seed: T,
        ) -> Result<T::Value, A::Error> {
            self.0.next_value_seed(StrictSeed(seed))
        }

        fn size_hint(&self) -> Option<usize> {
            self.0.size_hint()
        }
    }

    /// A seed whose deserializer is [`Strict`].
    struct StrictSeed<S>(S);

    impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for StrictSeed<S> {
        type Value = S::Value;

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
            self.0.deserialize(Strict(d))
        }
    }

    /// Reads a whole value (strings, numbers and nesting checked as in a `Value` parse),
    /// keeps nothing, then answers `unit` to the visitor that asked to ignore it.
    struct Skip<V>(V);

    impl<'de, V: Visitor<'de>> Visitor<'de> for Skip<V> {
        type Value = V::Value;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("any JSON value")
        }

        fn visit_bool<E: de::Error>(self, _: bool) -> Result<V::Value, E> {
            self.0.visit_unit()
        }

        fn visit_i64<E: de::Error>(self, _: i64) -> Result<V::Value, E> {
            self.0.visit_unit()
        }

        fn visit_u64<E: de::Error>(self, _: u64) -> Result<V::Value, E> {
            self.0.visit_unit()
        }

        fn visit_f64<E: de::Error>(self, _: f64) -> Result<V::Value, E> {
            self.0.visit_unit()
        }

        fn visit_str<E: de::Error>(self, _: &str) -> Result<V::Value, E> {
            self.0.visit_unit()
        }

        fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
            self.0.visit_unit()
        }

        fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
            self.0.visit_unit()
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<V::Value, A::Error> {
            while seq.next_element_seed(SkipSeed)?.is_some() {}
            self.0.visit_unit()
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<V::Value, A::Error> {
            while map.next_key_seed(SkipSeed)?.is_some() {
                map.next_value_seed(SkipSeed)?;
            }
            self.0.visit_unit()
        }
    }

    /// [`Skip`] as a seed, for the parts of a skipped value.
    struct SkipSeed;

    impl<'de> DeserializeSeed<'de> for SkipSeed {
        type Value = ();

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(Skip(Unit))
        }
    }

    /// Accepts `unit`.
    struct Unit;

    impl<'de> Visitor<'de> for Unit {
        type Value = ();

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("unit")
        }

        fn visit_unit<E: de::Error>(self) -> Result<(), E> {
            Ok(())
        }
    }
}

/// [`content_text`] of a value the caller owns: a string is moved, not copied.
pub fn content_text_owned(v: Value) -> String {
    match v {
        Value::String(s) => s,
        other => content_text(&other),
    }
}

/// Deserializes `value` into a wire struct; when that fails, tries again with every
/// `null` removed, so a `null` where the struct has a non-optional field with a default
/// (`"input_tokens": null`) reads as absent instead of losing the whole line. Lines that
/// read the first time are untouched (nulls inside free-form tool inputs are kept).
pub fn from_value_lenient<T: serde::de::DeserializeOwned>(
    value: Value,
) -> Result<T, serde_json::Error> {
    match serde_json::from_value::<T>(value.clone()) {
        Ok(t) => Ok(t),
        Err(first) => {
            let mut v = value;
            strip_nulls(&mut v);
            serde_json::from_value(v).map_err(|_| first)
        }
    }
}

fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(strip_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_nulls),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
    }
}

/// `null`, `boolean`, `number`, ...
pub fn json_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `m[key]` as a string.
pub fn str_field<'a>(m: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    m.get(key).and_then(Value::as_str)
}

/// `m[key]` as an owned string.
pub fn string_field(m: &Map<String, Value>, key: &str) -> Option<String> {
    str_field(m, key).map(str::to_owned)
}

/// `v[key]` as u64 (0 when absent or not a number).
pub fn u64_at(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// Tool output as text: strings as they are, `[{type: text, text}]` blocks joined,
/// anything else as compact JSON.
pub fn content_text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let texts: Vec<&str> = items
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect();
            if texts.len() == items.len() {
                texts.join("\n")
            } else {
                v.to_string()
            }
        }
        other => other.to_string(),
    }
}

/// The facts every adapter reads from the events the same way.
#[derive(Debug, Default, Clone)]
pub struct Basics {
    /// The first session id seen.
    pub session_id: Option<String>,
    /// The model from the session start.
    pub model: Option<String>,
    /// The CLI version from the session start.
    pub cli_version: Option<String>,
    /// Tool calls made.
    pub tool_calls: u32,
    /// Protocol events.
    pub protocol_errors: u32,
    /// Events the adapter recognised (everything but protocol and unknown).
    pub recognized: usize,
    /// The last fatal error event.
    pub fatal_error: Option<(ErrorKind, String)>,
    /// The last error or retry event of any kind (for a run that never finished).
    pub last_error: Option<(ErrorKind, String)>,
    /// Whether a final event was seen.
    pub has_final: bool,
    /// The last question asked through aicli's MCP server.
    pub question: Option<(String, Vec<String>)>,
}

/// Reads the [`Basics`] of a run.
pub fn basics(events: &[AgentEvent]) -> Basics {
    let mut b = Basics::default();
    for ev in events {
        match &ev.kind {
            EventKind::SessionStarted {
                session_id,
                model,
                cli_version,
                ..
            } => {
                if b.session_id.is_none() && !session_id.is_empty() {
                    b.session_id = Some(session_id.clone());
                }
                if b.model.is_none() {
                    b.model = model.clone();
                }
                if b.cli_version.is_none() {
                    b.cli_version = cli_version.clone();
                }
                b.recognized += 1;
            }
            EventKind::ToolCall { .. } => {
                b.tool_calls += 1;
                b.recognized += 1;
            }
            EventKind::Error {
                error_kind,
                message,
                fatal,
                ..
            } => {
                if *fatal {
                    b.fatal_error = Some((*error_kind, message.clone()));
                }
                b.last_error = Some((*error_kind, message.clone()));
                b.recognized += 1;
            }
            EventKind::Retry {
                error_kind,
                message,
                ..
            } => {
                b.last_error = Some((*error_kind, message.clone()));
                b.recognized += 1;
            }
            EventKind::Final { .. } => {
                b.has_final = true;
                b.recognized += 1;
            }
            EventKind::Question { question, options } => {
                b.question = Some((question.clone(), options.clone()));
            }
            EventKind::Protocol { .. } => b.protocol_errors += 1,
            EventKind::Unknown { .. } | EventKind::Log { .. } => {}
            EventKind::UserMessage { .. }
            | EventKind::AssistantText { .. }
            | EventKind::Thinking { .. }
            | EventKind::ToolResult { .. }
            | EventKind::Usage { .. }
            | EventKind::RateLimit { .. }
            | EventKind::PermissionDenied { .. } => b.recognized += 1,
        }
    }
    b
}

/// A result with the basics filled in and the status still undecided (failed/unknown).
pub fn base_result(provider: &str, b: &Basics) -> SessionResult {
    SessionResult {
        provider: provider.to_owned(),
        session_id: b.session_id.clone(),
        model: b.model.clone(),
        cli_version: b.cli_version.clone(),
        tool_calls: b.tool_calls,
        protocol_errors: b.protocol_errors,
        status: SessionStatus::Failed,
        ..SessionResult::default()
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

/// At most `max` characters of `s`, with an ellipsis when cut.
pub fn truncate_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_owned(),
        Some((i, _)) => format!("{}…", &s[..i]),
    }
}

/// Why a run that printed no final event failed, when nothing vendor-specific says:
/// an auth failure, else the last fatal error, else a protocol problem (nothing
/// recognised, or malformed lines), else a crash.
pub fn classify_without_final(
    vendor: &str,
    b: &Basics,
    stderr: &str,
    exit_code: Option<i32>,
    auth_error: Option<String>,
) -> (ErrorKind, String) {
    if let Some(msg) = auth_error {
        return (ErrorKind::Auth, msg);
    }
    if let Some((k, m)) = &b.fatal_error {
        return (*k, m.clone());
    }
    let exit = match exit_code {
        Some(c) => format!("exit code {c}"),
        None => "killed by a signal".to_owned(),
    };
    let tail = stderr_last_line(stderr)
        .map(|l| format!("; stderr: {l}"))
        .unwrap_or_default();
    if b.recognized == 0 && b.protocol_errors > 0 {
        return (
            ErrorKind::Protocol,
            format!(
                "no line was a valid {vendor} event ({} malformed or over-long lines; {exit}){tail}",
                b.protocol_errors
            ),
        );
    }
    if b.recognized == 0 && b.protocol_errors == 0 && b.session_id.is_none() {
        // Lines that were JSON but none of this vendor's: the wrong transcript?
        return (
            ErrorKind::Crashed,
            format!("the CLI ended without any {vendor} event ({exit}){tail}"),
        );
    }
    if b.protocol_errors > 0 {
        return (
            ErrorKind::Protocol,
            format!(
                "the stream ended without a final event after {} malformed or over-long lines ({exit}){tail}",
                b.protocol_errors
            ),
        );
    }
    if let Some((k, m)) = &b.last_error
        && k.is_retryable()
    {
        return (
            *k,
            format!("{m} (the CLI ended without a final event, {exit})"),
        );
    }
    (
        ErrorKind::Crashed,
        format!("the CLI ended without a final event ({exit}){tail}"),
    )
}

/// Whether the events look like another vendor's transcript: JSON lines that the
/// adapter did not recognise, and nothing it did.
pub fn looks_foreign(events: &[AgentEvent]) -> bool {
    let unknown = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Unknown { .. }))
        .count();
    let recognized = events
        .iter()
        .filter(|e| {
            !matches!(
                e.kind,
                EventKind::Unknown { .. }
                    | EventKind::Protocol { .. }
                    | EventKind::Log { .. }
                    | EventKind::Question { .. }
            )
        })
        .count();
    unknown > 0 && recognized == 0
}

/// Concatenates assistant text: deltas joined as they are, whole blocks separated by a
/// blank line.
pub fn assistant_text(events: &[AgentEvent]) -> String {
    assistant_text_of(events)
}

/// [`assistant_text`] of any sequence of events.
pub(crate) fn assistant_text_of<'a>(events: impl IntoIterator<Item = &'a AgentEvent>) -> String {
    let mut out = String::new();
    let mut prev_delta = false;
    for ev in events {
        if let EventKind::AssistantText { text, delta } = &ev.kind {
            let continues_deltas = *delta && prev_delta;
            if !out.is_empty() && !continues_deltas {
                out.push_str("\n\n");
            }
            out.push_str(text);
            prev_delta = *delta;
        }
    }
    out
}

/// Lines for the tests that check the fast paths against the `Value` paths: every line
/// of every fixture, and variants of each with fields replaced, added, repeated or made
/// invalid in the ways a `Value` parse and a typed read tell apart.
#[cfg(test)]
pub(crate) mod test_lines {
    use serde_json::Value;

    /// Every fixture line and its [`variants`], made once for all the tests.
    pub(crate) fn all() -> &'static [String] {
        static ALL: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
        ALL.get_or_init(|| {
            let lines = fixture_lines();
            let words = vocabulary(&lines);
            lines.iter().flat_map(|l| variants(l, &words)).collect()
        })
    }

    /// Keys whose string values choose what a line means.
    const WORD_KEYS: [&str; 6] = ["type", "subtype", "status", "role", "severity", "model"];

    /// Per [`WORD_KEYS`] key, every string the fixtures give it, and a few they do not.
    fn vocabulary(lines: &[String]) -> Vec<(String, Vec<String>)> {
        fn walk(v: &Value, out: &mut Vec<(String, Vec<String>)>) {
            match v {
                Value::Object(m) => {
                    for (k, x) in m {
                        if let Some(s) = x.as_str()
                            && let Some((_, words)) = out.iter_mut().find(|(key, _)| key == k)
                            && !words.iter().any(|w| w == s)
                        {
                            words.push(s.to_owned());
                        }
                        walk(x, out);
                    }
                }
                Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
                _ => {}
            }
        }
        let extra = ["declined", "in_progress", "other", "<synthetic>", ""];
        let mut out: Vec<(String, Vec<String>)> = WORD_KEYS
            .iter()
            .map(|k| ((*k).to_owned(), extra.map(str::to_owned).to_vec()))
            .collect();
        for l in lines {
            if let Ok(v) = serde_json::from_str::<Value>(l) {
                walk(&v, &mut out);
            }
        }
        out
    }

    /// Every distinct non-blank line of every fixture (all vendors).
    pub(crate) fn fixture_lines() -> Vec<String> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
        let mut files = Vec::new();
        for dir in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            for f in std::fs::read_dir(dir.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                if f.path().extension().is_some_and(|x| x == "ndjson") {
                    files.push(f.path());
                }
            }
        }
        files.sort();
        let mut lines = Vec::new();
        for f in files {
            let bytes = std::fs::read(&f).unwrap_or_default();
            for l in String::from_utf8_lossy(&bytes).lines() {
                if !l.trim().is_empty() && !lines.iter().any(|seen| seen == l) {
                    lines.push(l.to_owned());
                }
            }
        }
        lines
    }

    /// Raw JSON put in place of a value.
    const TOKENS: [&str; 30] = [
        "null",
        "0",
        "-1",
        "1.5",
        "1e400",
        "18446744073709551616",
        "70000",
        "true",
        r#""x""#,
        r#""""#,
        r#""\ud800""#,
        r#""\ud83d\ude00""#,
        r#""\u0041""#,
        "[]",
        "{}",
        r#"[1,"a"]"#,
        r#"{"type":"text","text":"z"}"#,
        r#"[{"type":"text","text":"a"},{"type":"text","text":"b"}]"#,
        r#""completed""#,
        r#""failed""#,
        r#""text""#,
        r#""tool_use""#,
        r#""tool_result""#,
        r#""message_start""#,
        r#""message_delta""#,
        r#""content_block_delta""#,
        r#""text_delta""#,
        r#""assistant""#,
        r#""item.completed""#,
        r#""mcp__srv__tool""#,
    ];

    /// A placeholder string, replaced by raw JSON after serializing.
    const MARK: &str = "\u{1}MARK\u{1}";
    const MARK_JSON: &str = r#""\u0001MARK\u0001""#;

    fn nested(depth: usize) -> String {
        format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
    }

    type Path = Vec<Result<String, usize>>;

    /// Paths to every value (object keys and array indices), the root first.
    fn paths(v: &Value, at: Path, out: &mut Vec<Path>) {
        out.push(at.clone());
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    let mut p = at.clone();
                    p.push(Ok(k.clone()));
                    paths(x, p, out);
                }
            }
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    let mut p = at.clone();
                    p.push(Err(i));
                    paths(x, p, out);
                }
            }
            _ => {}
        }
    }

    fn at_mut<'a>(v: &'a mut Value, path: &[Result<String, usize>]) -> Option<&'a mut Value> {
        let mut v = v;
        for step in path {
            v = match step {
                Ok(k) => v.get_mut(k.as_str())?,
                Err(i) => v.get_mut(*i)?,
            };
        }
        Some(v)
    }

    /// `line` and its variants; `words` go in place of the values of [`WORD_KEYS`].
    pub(crate) fn variants(line: &str, words: &[(String, Vec<String>)]) -> Vec<String> {
        let mut out = vec![
            line.to_owned(),
            format!(" {line}"),
            format!("{line} x"),
            format!("[{line}]"),
            line.replacen(r#""type":"#, r#""type" :"#, 1),
            line.replacen('{', r#"{"type":"x","#, 1),
        ];
        for cut in [1, line.len() / 2, line.len().saturating_sub(1)] {
            if let Some(prefix) = line.get(..cut) {
                out.push(prefix.to_owned());
            }
        }
        let Ok(root) = serde_json::from_str::<Value>(line) else {
            return out;
        };
        if let Value::Object(m) = &root
            && let Some(t) = m.get("type")
        {
            // `type` last, and escaped.
            let mut rest = m.clone();
            rest.shift_remove("type");
            rest.insert("type".to_owned(), t.clone());
            out.push(Value::Object(rest).to_string());
            if let Some(t) = t.as_str()
                && let Some(first) = t.chars().next()
            {
                let escaped = format!(r#""\u{:04x}{}""#, u32::from(first), &t[first.len_utf8()..]);
                out.push(line.replacen(&format!(r#""{t}""#), &escaped, 1));
            }
        }
        let mut all = Vec::new();
        paths(&root, Vec::new(), &mut all);
        for (n, path) in all.iter().enumerate() {
            if let Some(Ok(key)) = path.last()
                && let Some((_, words)) = words.iter().find(|(k, _)| k == key)
            {
                for word in words {
                    let mut v = root.clone();
                    if let Some(slot) = at_mut(&mut v, path) {
                        *slot = Value::String(word.clone());
                        out.push(v.to_string());
                    }
                }
            }
            if n >= 30 {
                continue;
            }
            // Replace the value (a rotating handful of tokens per path).
            for k in 0..4 {
                let token = TOKENS[(n * 7 + k * 5) % TOKENS.len()];
                let mut v = root.clone();
                if let Some(slot) = at_mut(&mut v, path) {
                    *slot = Value::String(MARK.to_owned());
                    out.push(v.to_string().replacen(MARK_JSON, token, 1));
                }
            }
            let mut v = root.clone();
            let Some(Value::Object(obj)) = at_mut(&mut v, path) else {
                continue;
            };
            // The object as the array of its values (serde reads a struct from both).
            let mut w = root.clone();
            if let Some(slot) = at_mut(&mut w, path) {
                *slot = Value::Array(obj.values().cloned().collect());
                out.push(w.to_string());
            }
            // Drop each key in turn; add an unknown key with odd values; repeat a key.
            for key in obj.keys().cloned().collect::<Vec<_>>() {
                let mut w = root.clone();
                if let Some(Value::Object(o)) = at_mut(&mut w, path) {
                    o.shift_remove(&key);
                    out.push(w.to_string());
                }
            }
            let first = obj.keys().next().cloned();
            obj.insert("zz_extra".to_owned(), Value::String(MARK.to_owned()));
            let text = v.to_string();
            let extra = format!(r#""zz_extra":{MARK_JSON}"#);
            for raw in [
                "1e400".to_owned(),
                "-1e400".to_owned(),
                "1e308".to_owned(),
                r#""\udc00""#.to_owned(),
                r#""\ud800x""#.to_owned(),
                r#"{"\ud800":1}"#.to_owned(),
                nested(120),
                nested(124),
                nested(125),
                nested(126),
                nested(127),
                r#"{"k":[1,{"a":null}]}"#.to_owned(),
            ] {
                out.push(text.replacen(&extra, &format!(r#""zz_extra":{raw}"#), 1));
            }
            if let Some(first) = first {
                let key = serde_json::to_string(&first).unwrap_or_default();
                out.push(text.replacen(&extra, &format!("{key}:null"), 1));
                out.push(text.replacen(&extra, &format!(r#"{key}:"x""#), 1));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_object_reports_what_it_got() {
        assert_eq!(
            json_object("[1]").err().as_deref(),
            Some("expected a JSON object, got an array")
        );
        let e = json_object("{\"a\":").err().unwrap_or_default();
        assert!(e.starts_with("malformed JSON: EOF while parsing"), "{e}");
        assert!(json_object("{\"a\":1}").is_ok());
    }

    #[test]
    fn a_null_in_a_defaulted_field_reads_as_absent() {
        #[derive(serde::Deserialize, Debug, PartialEq)]
        struct U {
            #[serde(default)]
            n: u64,
            #[serde(default)]
            s: Option<String>,
        }
        let v = serde_json::json!({"n": null, "s": null});
        assert!(serde_json::from_value::<U>(v.clone()).is_err());
        assert_eq!(from_value_lenient::<U>(v).ok(), Some(U { n: 0, s: None }));
        assert!(from_value_lenient::<U>(serde_json::json!({"n": "x"})).is_err());
    }

    #[test]
    fn content_text_joins_text_blocks() {
        let v = serde_json::json!([{"type":"text","text":"a"},{"type":"text","text":"b"}]);
        assert_eq!(content_text(&v), "a\nb");
        assert_eq!(content_text(&serde_json::json!("x")), "x");
        assert_eq!(content_text(&serde_json::json!({"k":1})), "{\"k\":1}");
    }

    #[test]
    fn assistant_text_joins_deltas_and_separates_blocks() {
        let t = |text: &str, delta| {
            AgentEvent::synthetic(EventKind::AssistantText {
                text: text.into(),
                delta,
            })
        };
        assert_eq!(assistant_text(&[t("Hel", true), t("lo", true)]), "Hello");
        assert_eq!(
            assistant_text(&[t("A.", false), t("B.", false)]),
            "A.\n\nB."
        );
    }

    /// Reads `type` and drops the rest, like the fast paths.
    #[derive(Debug, Deserialize)]
    struct Typed<'a> {
        #[serde(borrow)]
        r#type: Cow<'a, str>,
    }

    #[test]
    fn strict_reads_refuse_what_a_value_parse_refuses() {
        let value_ok = |l: &str| serde_json::from_str::<Value>(l).is_ok();
        let deep = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
        for (line, ok) in [
            (r#"{"type":"a","x":1}"#.to_owned(), true),
            (r#"{"type":"a","x":1e400}"#.to_owned(), false),
            (r#"{"type":"a","x":[1,-1e400]}"#.to_owned(), false),
            (r#"{"type":"a","x":"\ud800"}"#.to_owned(), false),
            (r#"{"type":"a","x":"\udc00"}"#.to_owned(), false),
            (r#"{"type":"a","x":"\ud83d\ude00"}"#.to_owned(), true),
            (r#"{"type":"a","x":{"\ud800":1}}"#.to_owned(), false),
            (format!(r#"{{"type":"a","x":{}}}"#, deep(126)), true),
            (format!(r#"{{"type":"a","x":{}}}"#, deep(127)), false),
            (r#"{"type":"a"} x"#.to_owned(), false),
        ] {
            assert_eq!(value_ok(&line), ok, "{line}");
            assert_eq!(strict::from_str::<Typed<'_>>(&line).is_ok(), ok, "{line}");
        }
        // serde_json's own typed read skips an unknown field without these checks.
        assert!(serde_json::from_str::<Typed<'_>>(r#"{"type":"a","x":1e400}"#).is_ok());
    }

    #[test]
    fn strict_reads_refuse_structs_as_arrays_and_repeated_fields() {
        assert!(serde_json::from_str::<Typed<'_>>(r#"["a"]"#).is_ok());
        assert!(strict::from_str::<Typed<'_>>(r#"["a"]"#).is_err());
        assert!(strict::from_str::<Typed<'_>>(r#"{"type":"a","type":"b"}"#).is_err());
        let t: Result<Typed<'_>, _> = strict::from_str(r#"{"type":"a"}"#);
        assert!(matches!(t.map(|t| t.r#type), Ok(Cow::Borrowed("a"))));
    }

    #[test]
    fn line_type_is_read_from_the_start_or_by_a_shallow_parse() {
        assert_eq!(
            line_type(r#"{"type":"user","x":1}"#).as_deref(),
            Some("user")
        );
        assert_eq!(
            line_type(r#"{"x":1,"type":"user"}"#).as_deref(),
            Some("user")
        );
        assert_eq!(line_type(r#"{"type":"a\"b"}"#).as_deref(), Some("a\"b"));
        assert_eq!(line_type(r#"{"type":5}"#), None);
        assert_eq!(line_type(r#"["user"]"#), None);
        assert_eq!(line_type("not json"), None);
    }

    #[test]
    fn truncate_keeps_char_boundaries() {
        assert_eq!(truncate_chars("héllo", 2), "hé…");
        assert_eq!(truncate_chars("hi", 5), "hi");
    }
}
