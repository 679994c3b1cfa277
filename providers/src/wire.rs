//! Reading a CLI's JSON lines into the vendors' typed wire enums in one pass.
//!
//! Every vendor's line types are one serde enum whose variant a field of the object
//! names (`type`; Claude's `system` lines again by `subtype`, content blocks by `type`).
//! serde's own `#[serde(tag = "type")]` first copies every other field of the object
//! into an in-memory tree, and only then reads the variant from that tree: each array,
//! object and escaped string of a line is built once and thrown away, and the fields a
//! decoder skips are built too. So the vendor enums are derived as *externally* tagged
//! enums (`#[serde(remote = "Self")]`, which keeps serde's variant dispatch and
//! renames) and read through [`tagged`], which finds the tag field and hands the rest
//! of the object straight to the variant's struct: fields the struct does not name are
//! skipped without building anything, strings are borrowed from the line where they
//! have no escapes. Fields before the tag (rare: the CLIs print it first) are kept as
//! [`RawValue`] slices of the line and read when the variant is known.
//!
//! An enum read this way has a variant `#[serde(rename = "__other")] Other(Cow<str>)`:
//! a tag it does not name lands there with the tag's value (`""` when the object has no
//! tag, or a tag that is not a string), so a new vendor line type never fails a line.
//! [`tagged_enum!`] writes the two impls that connect an enum to [`tagged`].

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, IgnoredAny, IntoDeserializer, MapAccess,
    VariantAccess, Visitor,
};
use serde::{Deserialize, forward_to_deserialize_any};
use serde_json::value::RawValue;

/// The variant an unknown tag is read as.
pub const OTHER: &str = "__other";

/// An enum whose variant a field of the JSON object names; see the module docs.
pub trait Tagged<'de>: Sized {
    /// The field that names the variant (`type`, `subtype`).
    const TAG: &'static str;
    /// Another name older versions of the CLI give that field.
    const OLD_TAG: Option<&'static str> = None;
    /// Reads the enum from an enum access: the derived (remote) deserializer.
    fn from_variant<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error>;
}

/// Reads a [`Tagged`] enum from a JSON object.
pub fn tagged<'de, D: Deserializer<'de>, T: Tagged<'de>>(d: D) -> Result<T, D::Error> {
    d.deserialize_map(TagVisitor::<T>(PhantomData))
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

/// A value kept both as the CLI printed it (a slice of the line, for `provider_data`,
/// verbatim) and typed (read from that slice). For the few fields of a run's last line
/// that go into the result both ways.
#[derive(Debug, Clone)]
pub struct Kept<'a, T> {
    /// The value as the CLI printed it.
    pub raw: &'a RawValue,
    /// The value read as `T`.
    pub typed: T,
}

impl<'de: 'a, 'a, T: serde::de::DeserializeOwned> Deserialize<'de> for Kept<'a, T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = <&'a RawValue>::deserialize(d)?;
        let typed = serde_json::from_str(raw.get()).map_err(de::Error::custom)?;
        Ok(Kept { raw, typed })
    }
}

/// A JSON value a decoder keeps verbatim until the result is built.
pub type RawJson = Box<RawValue>;

/// `raw` as a JSON value (null when it is not JSON, which a kept slice always is).
pub fn value_of(raw: &RawValue) -> serde_json::Value {
    serde_json::from_str(raw.get()).unwrap_or(serde_json::Value::Null)
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

/// The tag's value: a string, or nothing (any other JSON value).
struct TagValue<'a>(Option<Cow<'a, str>>);

impl<'de: 'a, 'a> Deserialize<'de> for TagValue<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TagValue<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<TagValue<'de>, E> {
                Ok(TagValue(Some(Cow::Borrowed(s))))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<TagValue<'de>, E> {
                Ok(TagValue(Some(Cow::Owned(s.to_owned()))))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<TagValue<'de>, E> {
                Ok(TagValue(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<TagValue<'de>, E> {
                Ok(TagValue(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<TagValue<'de>, E> {
                Ok(TagValue(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<TagValue<'de>, E> {
                Ok(TagValue(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<TagValue<'de>, E> {
                Ok(TagValue(None))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut a: A) -> Result<TagValue<'de>, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(TagValue(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<TagValue<'de>, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(TagValue(None))
            }
        }
        d.deserialize_any(V)
    }
}

fn str_de<'de, S: DeserializeSeed<'de>, E: de::Error>(
    seed: S,
    s: Cow<'de, str>,
) -> Result<S::Value, E> {
    match s {
        Cow::Borrowed(b) => seed.deserialize(BorrowedStrDeserializer::<E>::new(b)),
        Cow::Owned(o) => seed.deserialize(o.into_deserializer()),
    }
}

struct TagVisitor<T>(PhantomData<T>);

impl<'de, T: Tagged<'de>> Visitor<'de> for TagVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a JSON object with a `{}` field", T::TAG)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let mut before: Vec<(Cow<'de, str>, &'de RawValue)> = Vec::new();
        let mut tag = None;
        while let Some(Str(key)) = map.next_key::<Str<'de>>()? {
            if key == T::TAG || T::OLD_TAG == Some(key.as_ref()) {
                tag = map.next_value::<TagValue<'de>>()?.0;
                break;
            }
            before.push((key, map.next_value()?));
        }
        T::from_variant(Fields {
            tag,
            before: before.into_iter(),
            map,
            stash: None,
        })
    }
}

/// The object's fields but the tag, as a deserializer of the enum (the tag picks the
/// variant) and then of the variant's struct.
struct Fields<'de, A> {
    tag: Option<Cow<'de, str>>,
    before: std::vec::IntoIter<(Cow<'de, str>, &'de RawValue)>,
    map: A,
    /// The value of the buffered field whose key was just read.
    stash: Option<&'de RawValue>,
}

impl<'de, A: MapAccess<'de>> Fields<'de, A> {
    fn drain(mut self) -> Result<(), A::Error> {
        while self.map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(())
    }
}

impl<'de, A: MapAccess<'de>> Deserializer<'de> for Fields<'de, A> {
    type Error = A::Error;

    /// As the variant's struct (or map): the remaining fields.
    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, A::Error> {
        v.visit_map(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, A::Error> {
        v.visit_enum(Enum {
            fields: self,
            variants,
        })
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct identifier
        ignored_any
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Fields<'de, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        if let Some((key, value)) = self.before.next() {
            self.stash = Some(value);
            return str_de(seed, key).map(Some);
        }
        self.map.next_key_seed(seed)
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        match self.stash.take() {
            Some(raw) => seed.deserialize(raw).map_err(de::Error::custom),
            None => self.map.next_value_seed(seed),
        }
    }
}

struct Enum<'de, A> {
    fields: Fields<'de, A>,
    variants: &'static [&'static str],
}

impl<'de, A: MapAccess<'de>> EnumAccess<'de> for Enum<'de, A> {
    type Error = A::Error;
    type Variant = Variant<'de, A>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        mut self,
        seed: S,
    ) -> Result<(S::Value, Variant<'de, A>), A::Error> {
        let tag = self.fields.tag.take().unwrap_or_default();
        let known = tag != OTHER && self.variants.contains(&tag.as_ref());
        if known {
            let v = str_de(seed, tag)?;
            return Ok((
                v,
                Variant {
                    fields: self.fields,
                    other: None,
                },
            ));
        }
        let v = str_de(seed, Cow::Borrowed(OTHER))?;
        Ok((
            v,
            Variant {
                fields: self.fields,
                other: Some(tag),
            },
        ))
    }
}

struct Variant<'de, A> {
    fields: Fields<'de, A>,
    /// The tag, when it named no variant (the payload of [`OTHER`]).
    other: Option<Cow<'de, str>>,
}

impl<'de, A: MapAccess<'de>> VariantAccess<'de> for Variant<'de, A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.fields.drain()
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, A::Error> {
        match self.other {
            Some(tag) => {
                let v = str_de(seed, tag)?;
                self.fields.drain()?;
                Ok(v)
            }
            None => seed.deserialize(self.fields),
        }
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, _v: V) -> Result<V::Value, A::Error> {
        Err(de::Error::custom("a tagged object is not a tuple"))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, A::Error> {
        v.visit_map(self.fields)
    }
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
