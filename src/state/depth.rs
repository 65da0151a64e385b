//! Depth-limited conversion of a caller's value to JSON.
//!
//! serde serializes recursively: a value nested 100,000 levels deep would overflow the
//! stack before any check could run, and a value nested deeper than other readers accept
//! (serde_json alone reads 128 levels) would be written but not read back everywhere. So
//! values are converted through a serializer that counts nesting and refuses past
//! [`MAX_DEPTH`] before recursing further. It also refuses NaN and ±Infinity, which JSON
//! cannot carry (serde_json would turn them into `null`).

use serde::ser::{self, Serialize, Serializer};
use serde_json::Value;

/// The deepest nesting of arrays and objects a value may have when written. The envelope
/// adds two levels (the entry and its `data`), and serde_json alone reads at most 128;
/// this crate reads up to [`crate::json::MAX_READ_DEPTH`].
pub const MAX_DEPTH: usize = 100;

/// Converts `value` to JSON, refusing nesting deeper than [`MAX_DEPTH`].
pub(crate) fn to_value_limited<T: Serialize + ?Sized>(
    value: &T,
) -> Result<Value, serde_json::Error> {
    Limited {
        inner: serde_json::value::Serializer,
        depth: 0,
    }
    .serialize_value(value)
}

/// Why a value holding the number `v` (NaN, ±Infinity) is refused.
pub(crate) fn non_finite_message(v: impl std::fmt::Display) -> String {
    format!(
        "the value holds the number {v}, which JSON cannot carry (serde_json and Pi's \
         JSON.stringify would write null); store it as a string or as null yourself"
    )
}

/// Why a value nested deeper than [`MAX_DEPTH`] is refused.
pub(crate) fn too_deep_message() -> String {
    format!("the value is nested deeper than {MAX_DEPTH} levels of arrays and objects")
}

fn non_finite<E: ser::Error>(v: impl std::fmt::Display) -> E {
    E::custom(non_finite_message(v))
}

fn too_deep<E: ser::Error>() -> E {
    E::custom(too_deep_message())
}

struct Limited<S> {
    inner: S,
    depth: usize,
}

impl<S: Serializer> Limited<S> {
    fn serialize_value<T: Serialize + ?Sized>(self, v: &T) -> Result<S::Ok, S::Error> {
        v.serialize(self)
    }
    fn nest(&self) -> Result<usize, S::Error> {
        if self.depth >= MAX_DEPTH {
            Err(too_deep())
        } else {
            Ok(self.depth + 1)
        }
    }
}

/// A nested value, serialized one level deeper.
struct Deeper<'a, T: ?Sized> {
    v: &'a T,
    depth: usize,
}

impl<T: Serialize + ?Sized> Serialize for Deeper<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.v.serialize(Limited {
            inner: s,
            depth: self.depth,
        })
    }
}

struct Compound<C> {
    inner: C,
    depth: usize,
}

macro_rules! forward {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {
        $(fn $name(self, $($arg: $ty),*) -> Result<S::Ok, S::Error> {
            self.inner.$name($($arg),*)
        })*
    };
}

impl<S: Serializer> Serializer for Limited<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    type SerializeSeq = Compound<S::SerializeSeq>;
    type SerializeTuple = Compound<S::SerializeTuple>;
    type SerializeTupleStruct = Compound<S::SerializeTupleStruct>;
    type SerializeTupleVariant = Compound<S::SerializeTupleVariant>;
    type SerializeMap = Compound<S::SerializeMap>;
    type SerializeStruct = Compound<S::SerializeStruct>;
    type SerializeStructVariant = Compound<S::SerializeStructVariant>;

    forward! {
        serialize_bool(v: bool);
        serialize_i8(v: i8);
        serialize_i16(v: i16);
        serialize_i32(v: i32);
        serialize_i64(v: i64);
        serialize_i128(v: i128);
        serialize_u8(v: u8);
        serialize_u16(v: u16);
        serialize_u32(v: u32);
        serialize_u64(v: u64);
        serialize_u128(v: u128);
        serialize_char(v: char);
        serialize_str(v: &str);
        serialize_bytes(v: &[u8]);
        serialize_none();
        serialize_unit();
        serialize_unit_struct(name: &'static str);
        serialize_unit_variant(name: &'static str, index: u32, variant: &'static str);
    }

    fn serialize_f32(self, v: f32) -> Result<S::Ok, S::Error> {
        if !v.is_finite() {
            return Err(non_finite(v));
        }
        self.inner.serialize_f32(v)
    }
    fn serialize_f64(self, v: f64) -> Result<S::Ok, S::Error> {
        if !v.is_finite() {
            return Err(non_finite(v));
        }
        self.inner.serialize_f64(v)
    }

    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<S::Ok, S::Error> {
        let depth = self.depth;
        self.inner.serialize_some(&Deeper { v, depth })
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        v: &T,
    ) -> Result<S::Ok, S::Error> {
        let depth = self.depth;
        self.inner
            .serialize_newtype_struct(name, &Deeper { v, depth })
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        v: &T,
    ) -> Result<S::Ok, S::Error> {
        let depth = self.nest()?;
        self.inner
            .serialize_newtype_variant(name, index, variant, &Deeper { v, depth })
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Self::SerializeSeq, S::Error> {
        let depth = self.nest()?;
        Ok(Compound {
            inner: self.inner.serialize_seq(len)?,
            depth,
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Self::SerializeTuple, S::Error> {
        let depth = self.nest()?;
        Ok(Compound {
            inner: self.inner.serialize_tuple(len)?,
            depth,
        })
    }
    fn serialize_tuple_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleStruct, S::Error> {
        let depth = self.nest()?;
        Ok(Compound {
            inner: self.inner.serialize_tuple_struct(name, len)?,
            depth,
        })
    }
    fn serialize_tuple_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleVariant, S::Error> {
        let depth = self.nest()?.saturating_add(1);
        Ok(Compound {
            inner: self
                .inner
                .serialize_tuple_variant(name, index, variant, len)?,
            depth,
        })
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Self::SerializeMap, S::Error> {
        let depth = self.nest()?;
        Ok(Compound {
            inner: self.inner.serialize_map(len)?,
            depth,
        })
    }
    fn serialize_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStruct, S::Error> {
        let depth = self.nest()?;
        Ok(Compound {
            inner: self.inner.serialize_struct(name, len)?,
            depth,
        })
    }
    fn serialize_struct_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStructVariant, S::Error> {
        let depth = self.nest()?.saturating_add(1);
        Ok(Compound {
            inner: self
                .inner
                .serialize_struct_variant(name, index, variant, len)?,
            depth,
        })
    }
}

/// The compound parts pass each nested value on one level deeper. The six compound
/// traits differ only in their name and element method, so one macro writes them.
macro_rules! compound {
    ($($trait:ident :: $method:ident ($($key:ident: $kty:ty)?);)*) => {$(
        impl<C: ser::$trait> ser::$trait for Compound<C> {
            type Ok = C::Ok;
            type Error = C::Error;
            fn $method<T: Serialize + ?Sized>(
                &mut self,
                $($key: $kty,)?
                v: &T,
            ) -> Result<(), C::Error> {
                self.inner.$method($($key,)? &Deeper { v, depth: self.depth })
            }
            fn end(self) -> Result<C::Ok, C::Error> {
                self.inner.end()
            }
        }
    )*};
}

compound! {
    SerializeSeq::serialize_element();
    SerializeTuple::serialize_element();
    SerializeTupleStruct::serialize_field();
    SerializeTupleVariant::serialize_field();
    SerializeStruct::serialize_field(key: &'static str);
    SerializeStructVariant::serialize_field(key: &'static str);
}

impl<C: ser::SerializeMap> ser::SerializeMap for Compound<C> {
    type Ok = C::Ok;
    type Error = C::Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> Result<(), C::Error> {
        self.inner.serialize_key(&Deeper {
            v: k,
            depth: self.depth,
        })
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), C::Error> {
        self.inner.serialize_value(&Deeper {
            v,
            depth: self.depth,
        })
    }
    fn end(self) -> Result<C::Ok, C::Error> {
        self.inner.end()
    }
}

#[cfg(test)]
mod tests {
    #![expect(clippy::unwrap_used)]
    use super::*;
    use crate::json::depth_and_numbers;

    fn depth_of(v: &Value) -> usize {
        depth_and_numbers(v).0
    }

    fn nested(n: usize) -> Value {
        let mut v = Value::from(0);
        for _ in 0..n {
            v = Value::Array(vec![v]);
        }
        v
    }

    #[test]
    fn limit_is_exact_and_depth_agrees() {
        let ok = nested(MAX_DEPTH);
        assert_eq!(depth_of(&ok), MAX_DEPTH);
        assert_eq!(to_value_limited(&ok).unwrap(), ok);
        let bad = nested(MAX_DEPTH + 1);
        assert_eq!(depth_of(&bad), MAX_DEPTH + 1);
        assert!(
            to_value_limited(&bad)
                .unwrap_err()
                .to_string()
                .contains("deeper than 100")
        );
    }

    #[test]
    fn structs_maps_and_options_round_trip() {
        #[derive(serde::Serialize)]
        struct S {
            a: Option<Vec<u8>>,
            b: std::collections::BTreeMap<String, (i32, String)>,
        }
        let s = S {
            a: Some(vec![1, 2]),
            b: [("k".to_string(), (1, "x".to_string()))]
                .into_iter()
                .collect(),
        };
        assert_eq!(
            to_value_limited(&s).unwrap(),
            serde_json::to_value(&s).unwrap()
        );
        #[derive(serde::Serialize)]
        enum E {
            Tuple(u8, (u8, u8)),
            Struct { a: Vec<u8> },
            New(Vec<u8>),
        }
        for e in [
            E::Tuple(1, (2, 3)),
            E::Struct { a: vec![1] },
            E::New(vec![2]),
        ] {
            assert_eq!(
                to_value_limited(&e).unwrap(),
                serde_json::to_value(&e).unwrap()
            );
        }
        // Variants count toward the limit too: `{"Node": …}` is one object per level.
        #[derive(serde::Serialize)]
        enum N {
            Leaf,
            Node(Box<N>),
        }
        let nest = |n: usize| (0..n).fold(N::Leaf, |acc, _| N::Node(Box::new(acc)));
        let ok = to_value_limited(&nest(MAX_DEPTH)).unwrap();
        assert_eq!(depth_of(&ok), MAX_DEPTH);
        assert!(to_value_limited(&nest(MAX_DEPTH + 1)).is_err());
    }
}
