//! Reading only the fields a pipeline needs out of a stored `candidate`
//! (a JSON object of about a hundred fields): the other values are skipped
//! by the tokenizer, never built, which is most of the cost of evaluating a
//! filter over an archive.

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

/// The fields `keys` (sorted) of the JSON object `text`, as an object; keys
/// the object lacks are absent. Fails only on text that is not a JSON
/// object.
pub fn object_subset(text: &str, keys: &[String]) -> Result<Map<String, Value>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let out = de.deserialize_map(Subset { keys })?;
    de.end()?;
    Ok(out)
}

struct Subset<'k> {
    keys: &'k [String],
}

impl<'de> Visitor<'de> for Subset<'_> {
    type Value = Map<String, Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = Map::new();
        let mut remaining = self.keys.len();
        while let Some(slot) = map.next_key_seed(KeySlot { keys: self.keys })? {
            match slot {
                Some(i) if remaining > 0 => {
                    let v: Value = map.next_value()?;
                    if out.insert(self.keys[i].clone(), v).is_none() {
                        remaining -= 1;
                    }
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(out)
    }
}

/// Deserializes a key to its index in the wanted keys, without allocating.
struct KeySlot<'k> {
    keys: &'k [String],
}

impl<'de> DeserializeSeed<'de> for KeySlot<'_> {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySlot<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
        Ok(self.keys.binary_search_by(|k| k.as_str().cmp(key)).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subset_reads_only_the_wanted_keys() {
        let text =
            r#"{"b": [1, {"x": "}"}], "drb": 0.99, "a\"q": "s", "isdiffpos": "t", "z": null}"#;
        let keys = vec![
            "drb".to_owned(),
            "isdiffpos".to_owned(),
            "missing".to_owned(),
        ];
        let got = object_subset(text, &keys).expect("object");
        assert_eq!(
            Value::Object(got),
            serde_json::json!({"drb": 0.99, "isdiffpos": "t"})
        );
        assert!(object_subset("[1]", &keys).is_err());
        assert!(object_subset(r#"{"drb": 1} x"#, &keys).is_err());
        assert!(object_subset(r#"{"drb": "#, &keys).is_err());
    }
}
