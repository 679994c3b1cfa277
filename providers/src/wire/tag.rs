//! Reading a [`Tagged`](super::Tagged) enum from any JSON object: the fields are read
//! up to the tag (kept as slices of the line), the tag names the variant, and the
//! variant's struct reads the kept fields and then the rest of the object.

use std::borrow::Cow;
use std::fmt;

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, IgnoredAny, IntoDeserializer, MapAccess,
    VariantAccess, Visitor,
};
use serde::{Deserialize, forward_to_deserialize_any};
use serde_json::value::RawValue;
use smallvec::SmallVec;

use super::{OTHER, Str};

/// A JSON object as a deserializer of a tagged enum: the derived (remote) enum asks for
/// an enum, and gets the object read by [`TagMap`].
pub(super) struct ByTag<D> {
    d: D,
    tag: &'static str,
    old: Option<&'static str>,
}

impl<D> ByTag<D> {
    pub(super) fn new(d: D, tag: &'static str, old: Option<&'static str>) -> ByTag<D> {
        ByTag { d, tag, old }
    }
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for ByTag<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, D::Error> {
        self.d.deserialize_any(v)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, D::Error> {
        self.d.deserialize_map(TagMap {
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

/// Reads an object up to its tag field, then hands the enum's visitor the variant the
/// tag names and the object's other fields.
pub(super) struct TagMap<V> {
    pub(super) v: V,
    pub(super) variants: &'static [&'static str],
    pub(super) tag: &'static str,
    pub(super) old: Option<&'static str>,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for TagMap<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a JSON object with a `{}` field", self.tag)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<V::Value, A::Error> {
        let mut before: Before<'de> = SmallVec::new();
        let mut tag = None;
        while let Some(Str(key)) = map.next_key::<Str<'de>>()? {
            if is_tag(&key, self.tag, self.old) {
                tag = map.next_value::<TagValue<'de>>()?.0;
                break;
            }
            before.push((key, map.next_value()?));
        }
        self.v.visit_enum(Enum {
            fields: Fields {
                before: before.into_iter(),
                map,
                stash: None,
            },
            tag,
            variants: self.variants,
        })
    }
}

/// The fields of an object read before its tag: the CLIs print the tag first, or after
/// a field or two (Claude's `system` lines: `type`, then `subtype`).
type Before<'de> = SmallVec<[(Cow<'de, str>, &'de RawValue); 2]>;

/// Whether `key` names the tag field.
pub(super) fn is_tag(key: &str, tag: &str, old: Option<&str>) -> bool {
    key == tag || old == Some(key)
}

/// The tag's value: a string, or nothing (any other JSON value).
pub(super) struct TagValue<'a>(pub(super) Option<Cow<'a, str>>);

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

/// Hands `s` to `seed` as a string (borrowed from the line where it is).
pub(super) fn str_de<'de, S: DeserializeSeed<'de>, E: de::Error>(
    seed: S,
    s: Cow<'de, str>,
) -> Result<S::Value, E> {
    match s {
        Cow::Borrowed(b) => seed.deserialize(BorrowedStrDeserializer::<E>::new(b)),
        Cow::Owned(o) => seed.deserialize(o.into_deserializer()),
    }
}

/// The object's fields but the tag, as the variant's struct (or map) reads them: the
/// kept ones first, then the rest.
struct Fields<'de, A> {
    before: smallvec::IntoIter<[(Cow<'de, str>, &'de RawValue); 2]>,
    map: A,
    /// The value of the kept field whose key was just read.
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

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, A::Error> {
        v.visit_map(self)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct identifier
        ignored_any enum
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

/// The enum access of a [`TagMap`]: the variant the tag names, else [`OTHER`].
struct Enum<'de, A> {
    fields: Fields<'de, A>,
    tag: Option<Cow<'de, str>>,
    variants: &'static [&'static str],
}

impl<'de, A: MapAccess<'de>> EnumAccess<'de> for Enum<'de, A> {
    type Error = A::Error;
    type Variant = Variant<'de, A>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Variant<'de, A>), A::Error> {
        let tag = self.tag.unwrap_or_default();
        if tag != OTHER && self.variants.contains(&tag.as_ref()) {
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
