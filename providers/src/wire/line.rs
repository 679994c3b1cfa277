//! Reading a whole line into a [`Tagged`] enum where the line's bytes show its tag.
//!
//! The CLIs print their lines compact, most with the tag first: `{"type":"x",...`. Those
//! bytes name the variant before anything is parsed, so the variant's struct reads the
//! whole object straight from the line (the tag field is one it does not name, skipped):
//! nothing is buffered and no layer sits between the struct and the parser. A line
//! whose tag comes later (Claude prints its `result` lines with `type` near the end)
//! has its tag guessed from the first top-level-looking `"type":"<variant>"` in its
//! bytes (inside a JSON string the quotes are escaped, so none is found there); the
//! struct then reads the object through [`Checked`], which takes the real tag field out
//! of the stream and compares. A line with no such bytes, or whose guess turns out
//! wrong, or that fails to read on a guess, is read through [`super::tagged`] from the
//! start: that line alone is read twice, and gets exactly the result and error it
//! would have had anyway.

use std::cell::Cell;
use std::fmt;

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, IgnoredAny, MapAccess, VariantAccess, Visitor,
};
use serde::forward_to_deserialize_any;

use super::tag::{TagMap, TagValue, is_tag, str_de};
use super::{OTHER, Str, Tagged};

type JsonDe<'de> = serde_json::Deserializer<serde_json::de::StrRead<'de>>;

/// See the module docs.
pub(super) fn from_line<'a, T: Tagged<'a>>(text: &'a str) -> serde_json::Result<T> {
    let check = Cell::new(Check::NotGuessed);
    let mut de = serde_json::Deserializer::from_str(text);
    let read = T::from_variant(Line {
        text,
        de: &mut de,
        tag: T::TAG,
        old: T::OLD_TAG,
        check: &check,
    })
    .and_then(|v| de.end().map(|()| v));
    match check.get() {
        Check::NotGuessed => read,
        Check::Confirmed if read.is_ok() => read,
        Check::Confirmed | Check::Guessed | Check::Wrong => {
            let mut de = serde_json::Deserializer::from_str(text);
            let v = super::tagged(&mut de)?;
            de.end()?;
            Ok(v)
        }
    }
}

/// How the variant of a line was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    /// From the leading tag, or the whole object was read by [`TagMap`]: nothing to
    /// check.
    NotGuessed,
    /// Guessed; the object's tag field not seen (yet).
    Guessed,
    /// Guessed, and the object's tag field says so.
    Confirmed,
    /// Guessed, and the object's tag field says otherwise (or is not a string).
    Wrong,
}

/// The value of the tag when it is the object's first field and a string without
/// escapes: `{"type":"x"`.
fn leading_tag<'a>(text: &'a str, tag: &str) -> Option<&'a str> {
    let rest = text
        .strip_prefix("{\"")?
        .strip_prefix(tag)?
        .strip_prefix("\":\"")?;
    string_value(rest)
}

/// The string at the start of `rest` (after its opening quote), when it has no escape.
fn string_value(rest: &str) -> Option<&str> {
    let end = memchr::memchr2(b'"', b'\\', rest.as_bytes())?;
    (rest.as_bytes()[end] == b'"').then(|| &rest[..end])
}

/// The values of every `"<tag>":"<value>"` in the line's bytes (values without escapes).
fn tag_values<'a>(text: &'a str, tag: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    memchr::memmem::find_iter(text.as_bytes(), tag.as_bytes()).filter_map(move |at| {
        let before = at.checked_sub(1)?;
        if text.as_bytes()[before] != b'"' {
            return None;
        }
        string_value(text[at + tag.len()..].strip_prefix("\":\"")?)
    })
}

/// A whole line, as a deserializer of the enum.
struct Line<'a, 'de> {
    text: &'de str,
    de: &'a mut JsonDe<'de>,
    tag: &'static str,
    old: Option<&'static str>,
    check: &'a Cell<Check>,
}

impl<'de> Deserializer<'de> for Line<'_, 'de> {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> serde_json::Result<V::Value> {
        self.de.deserialize_any(v)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        v: V,
    ) -> serde_json::Result<V::Value> {
        let names = |t: &&str| *t != OTHER && variants.contains(t);
        if let Some(tag) = leading_tag(self.text, self.tag) {
            let known = names(&tag);
            return v.visit_enum(Known {
                line: self,
                tag,
                known,
                guessed: false,
            });
        }
        if let Some(tag) = tag_values(self.text, self.tag).find(names) {
            self.check.set(Check::Guessed);
            return v.visit_enum(Known {
                line: self,
                tag,
                known: true,
                guessed: true,
            });
        }
        self.de.deserialize_map(TagMap {
            v,
            variants,
            tag: self.tag,
            old: self.old,
        })
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct identifier
        ignored_any
    }
}

/// The variant a line's bytes named: `tag` when `known`, else [`OTHER`] (with `tag` as
/// its payload).
struct Known<'a, 'de> {
    line: Line<'a, 'de>,
    tag: &'de str,
    known: bool,
    /// Whether the tag was guessed (the object's tag field is then checked).
    guessed: bool,
}

impl<'de> Known<'_, 'de> {
    /// The rest of the line as the variant's value: straight from the parser, or
    /// through [`Checked`] on a guess.
    fn value<S: DeserializeSeed<'de>>(self, seed: S) -> serde_json::Result<S::Value> {
        if !self.guessed {
            return seed.deserialize(self.line.de);
        }
        seed.deserialize(Checked {
            de: self.line.de,
            tag: self.line.tag,
            old: self.line.old,
            expect: self.tag,
            check: self.line.check,
        })
    }
}

impl<'de> EnumAccess<'de> for Known<'_, 'de> {
    type Error = serde_json::Error;
    type Variant = Self;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> serde_json::Result<(S::Value, Self)> {
        let name = if self.known { self.tag } else { OTHER };
        let v = seed.deserialize(BorrowedStrDeserializer::<serde_json::Error>::new(name))?;
        Ok((v, self))
    }
}

impl<'de> VariantAccess<'de> for Known<'_, 'de> {
    type Error = serde_json::Error;

    fn unit_variant(self) -> serde_json::Result<()> {
        self.value(std::marker::PhantomData::<IgnoredAny>)
            .map(|_| ())
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> serde_json::Result<S::Value> {
        if self.known {
            return self.value(seed);
        }
        let v = seed.deserialize(BorrowedStrDeserializer::<serde_json::Error>::new(self.tag))?;
        self.value(std::marker::PhantomData::<IgnoredAny>)?;
        Ok(v)
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, _v: V) -> serde_json::Result<V::Value> {
        Err(de::Error::custom("a tagged object is not a tuple"))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        v: V,
    ) -> serde_json::Result<V::Value> {
        self.value(StructSeed(v))
    }
}

/// A struct variant's visitor as a seed.
struct StructSeed<V>(V);

impl<'de, V: Visitor<'de>> DeserializeSeed<'de> for StructSeed<V> {
    type Value = V::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        d.deserialize_map(self.0)
    }
}

/// The line's object for a guessed variant: its first tag field is taken out of the
/// stream and compared with the guess.
struct Checked<'a, 'de> {
    de: &'a mut JsonDe<'de>,
    tag: &'static str,
    old: Option<&'static str>,
    expect: &'de str,
    check: &'a Cell<Check>,
}

impl<'de> Deserializer<'de> for Checked<'_, 'de> {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> serde_json::Result<V::Value> {
        self.de.deserialize_map(CheckedMap {
            v,
            tag: self.tag,
            old: self.old,
            expect: self.expect,
            check: self.check,
        })
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct identifier
        ignored_any enum
    }
}

struct CheckedMap<'a, 'de, V> {
    v: V,
    tag: &'static str,
    old: Option<&'static str>,
    expect: &'de str,
    check: &'a Cell<Check>,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for CheckedMap<'_, 'de, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a JSON object with a `{}` field", self.tag)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.v.visit_map(CheckedFields {
            map,
            tag: self.tag,
            old: self.old,
            expect: self.expect,
            check: self.check,
        })
    }
}

/// The fields of a guessed line's object, its first tag field taken out.
struct CheckedFields<'a, 'de, A> {
    map: A,
    tag: &'static str,
    old: Option<&'static str>,
    expect: &'de str,
    check: &'a Cell<Check>,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for CheckedFields<'_, 'de, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        loop {
            let Some(Str(key)) = self.map.next_key::<Str<'de>>()? else {
                return Ok(None);
            };
            if self.check.get() == Check::Guessed && is_tag(&key, self.tag, self.old) {
                let TagValue(value) = self.map.next_value()?;
                let right = value.as_deref() == Some(self.expect);
                self.check.set(if right {
                    Check::Confirmed
                } else {
                    Check::Wrong
                });
                continue;
            }
            return str_de(seed, key).map(Some);
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}
