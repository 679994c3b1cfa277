//! Reading a CLI's JSON lines into the vendors' typed wire enums in one pass.
//!
//! Every vendor's line types are one serde enum whose variant a field of the object
//! names (`type`; Claude's `system` lines again by `subtype`, content blocks by `type`).
//! serde's own `#[serde(tag = "type")]` first copies every other field of the object
//! into an in-memory tree, and only then reads the variant from that tree: each array,
//! object and escaped string of a line is built once and thrown away, and the fields a
//! decoder skips are built too. So the vendor enums are derived as *externally* tagged
//! enums (`#[serde(remote = "Self")]`, which keeps serde's variant dispatch and
//! renames) and read in one of two ways, both reading each field once:
//!
//! - a whole line, by [`from_line`] (`line.rs`): the line's bytes show its tag (`{"type":
//!   "x"` at its start, or a later `"type":"x"` that is checked as it is read), so the
//!   variant's struct reads the object straight from the parser;
//! - any object, by [`tagged`] (`tag.rs`): the fields are read up to the tag field, kept
//!   as [`RawValue`] slices of the line, and handed to the variant's struct with the rest
//!   of the object. Nested enums (content blocks, Codex items) are read this way.
//!
//! Either way fields the struct does not name are skipped without building anything,
//! and strings are borrowed from the line where they have no escapes.
//!
//! An enum read this way has a variant `#[serde(rename = "__other")] Other(Cow<str>)`:
//! a tag it does not name lands there with the tag's value (`""` when the object has no
//! tag, or a tag that is not a string), so a new vendor line type never fails a line.
//! [`tagged_enum!`] writes the two impls that connect an enum to [`tagged`].
//!
//! The reader is serde_json. Measured against it on the bench's Claude corpus (README,
//! Benchmarks): sonic-rs 0.5.10 in its place made `aicli parse` slower (265 MB/s against
//! 401; 327 with thin LTO) and overflows the stack on deeply nested input (its skip of a
//! value recurses without a limit); simd-json 0.19 reads typed lines no faster and
//! validates at half serde_json's speed.

mod line;
mod tag;

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use serde_json::value::RawValue;

/// The variant an unknown tag is read as.
pub const OTHER: &str = "__other";

/// An enum whose variant a field of the JSON object names; see the module docs.
///
/// A variant's payload must not name the tag field nor keep unknown keys (a map, a
/// `Value`, `#[serde(flatten)]`): read from a line whose tag comes first, the payload sees
/// the whole object, tag field included, while the other paths take the tag field out.
pub trait Tagged<'de>: Sized {
    /// The field that names the variant (`type`, `subtype`).
    const TAG: &'static str;
    /// Another name older versions of the CLI give that field.
    const OLD_TAG: Option<&'static str> = None;
    /// Reads the enum from an enum access: the derived (remote) deserializer.
    fn from_variant<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error>;
}

/// Reads a [`Tagged`] enum from a JSON object (a field's value, or any deserializer):
/// the fields before the tag are kept as slices of the line and read once the tag has
/// named the variant.
pub fn tagged<'de, D: Deserializer<'de>, T: Tagged<'de>>(d: D) -> Result<T, D::Error> {
    T::from_variant(tag::ByTag::new(d, T::TAG, T::OLD_TAG))
}

/// Reads one line (a whole JSON text) into a [`Tagged`] enum, in one pass where the
/// line's bytes show its tag (see the module docs).
pub fn from_line<'a, T: Tagged<'a>>(text: &'a str) -> serde_json::Result<T> {
    line::from_line(text)
}

/// Connects an enum derived with `#[serde(remote = "Self")]` to [`tagged`]:
/// `tagged_enum!(Line, "type");` for `enum Line<'a>`.
#[macro_export]
macro_rules! tagged_enum {
    ($t:ident, $tag:literal) => {
        impl<'de: 'a, 'a> $crate::wire::Tagged<'de> for $t<'a> {
            const TAG: &'static str = $tag;
            fn from_variant<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $t::deserialize(d)
            }
        }
        impl<'de: 'a, 'a> ::serde::Deserialize<'de> for $t<'a> {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $crate::wire::tagged(d)
            }
        }
    };
    ($t:ident, $tag:literal, old = $old:literal) => {
        impl<'de: 'a, 'a> $crate::wire::Tagged<'de> for $t<'a> {
            const TAG: &'static str = $tag;
            const OLD_TAG: Option<&'static str> = Some($old);
            fn from_variant<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $t::deserialize(d)
            }
        }
        impl<'de: 'a, 'a> ::serde::Deserialize<'de> for $t<'a> {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $crate::wire::tagged(d)
            }
        }
    };
}

/// A string of a line: borrowed where it has no escapes, owned otherwise (serde's own
/// `Cow<str>` always copies).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Str<'a>(pub Cow<'a, str>);

impl Str<'_> {
    /// The string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The string, owned.
    pub fn into_string(self) -> String {
        self.0.into_owned()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V)
    }
}

/// A token count or similar: a non-negative integer, where `null`, negative numbers and
/// non-numbers a CLI may print read as 0 (and a fraction is cut), so one odd counter
/// never costs a line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Count(pub u64);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a count")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Count, E> {
                Ok(Count(n))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Count, E> {
                Ok(Count(u64::try_from(n).unwrap_or(0)))
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<Count, E> {
                Ok(Count(if n.is_finite() && n > 0.0 {
                    n as u64
                } else {
                    0
                }))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Count, E> {
                Ok(Count(0))
            }
            fn visit_none<E: de::Error>(self) -> Result<Count, E> {
                Ok(Count(0))
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Count, D::Error> {
                Count::deserialize(d)
            }
        }
        d.deserialize_any(V)
    }
}

/// `raw` as a JSON value (null when it is not JSON, which a kept slice always is).
pub fn value_of(raw: &RawValue) -> serde_json::Value {
    serde_json::from_str(raw.get()).unwrap_or(serde_json::Value::Null)
}

/// The fields of a kept line that go into `provider_data` verbatim (`T`), read when the
/// result is built. A line they cannot be read from (a key the CLI printed twice) says
/// so under `<what>_unread` in `data`, rather than losing them without a word.
pub fn verbatim<'a, T: Deserialize<'a>>(
    data: &mut serde_json::Map<String, serde_json::Value>,
    what: &str,
    line: &'a str,
) -> Option<T> {
    serde_json::from_str(line)
        .map_err(|e| {
            data.insert(
                format!("{what}_unread"),
                serde_json::Value::String(e.to_string()),
            );
        })
        .ok()
}

/// For `#[serde(deserialize_with)]`: `null` reads as the default (serde's `default`
/// covers only absent fields).
pub fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[cfg(test)]
mod tests;
