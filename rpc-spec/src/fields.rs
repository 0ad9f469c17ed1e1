//! The keys a parameter struct declares, for the tests that compare them with its method's
//! spec.

use serde::de::DeserializeOwned;

/// The field names a `#[derive(Deserialize)]` struct declares (serde hands them to
/// `deserialize_struct`), or `None` for anything else.
pub fn struct_fields<P: DeserializeOwned>() -> Option<Vec<&'static str>> {
    let mut seen = None;
    let _ = P::deserialize(FieldLister(&mut seen));
    seen
}

struct FieldLister<'a>(&'a mut Option<Vec<&'static str>>);

#[derive(Debug)]
struct Listed;

impl std::fmt::Display for Listed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("fields listed")
    }
}

impl std::error::Error for Listed {}

impl serde::de::Error for Listed {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Listed
    }
}

impl<'de> serde::Deserializer<'de> for FieldLister<'_> {
    type Error = Listed;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Listed> {
        Err(Listed)
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Listed> {
        *self.0 = Some(fields.to_vec());
        Err(Listed)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, Value};

    #[test]
    fn struct_fields_are_listed() {
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        struct A {
            nqn: String,
            #[serde(default)]
            nsid: u32,
        }
        assert_eq!(struct_fields::<A>(), Some(vec!["nqn", "nsid"]));
        assert_eq!(struct_fields::<Map<String, Value>>(), None);
    }
}
