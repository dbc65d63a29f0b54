//! Reading only the fields a pipeline needs out of a stored `candidate`
//! (a JSON object of about a hundred fields): the other values are skipped
//! by the tokenizer, never built, which is most of the cost of evaluating a
//! filter over an archive.

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

/// The keys wanted out of many JSON objects, prepared once: sorted, with a
/// table of (first byte, length) pairs so that most of an object's other
/// keys are passed over without a string comparison.
#[derive(Clone, Debug)]
pub struct KeySet {
    keys: Vec<String>,
    /// Bit `n` of `first[b]`: a wanted key starts with byte `b` and is `n`
    /// bytes long (bit 31: 31 bytes or more).
    first: Box<[u32; 256]>,
}

impl KeySet {
    pub fn new(mut keys: Vec<String>) -> KeySet {
        keys.sort();
        keys.dedup();
        let mut first = Box::new([0u32; 256]);
        for k in &keys {
            if let Some(&b) = k.as_bytes().first() {
                first[usize::from(b)] |= 1 << k.len().min(31);
            }
        }
        KeySet { keys, first }
    }

    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    fn index(&self, key: &str) -> Option<usize> {
        let b = *key.as_bytes().first()?;
        if self.first[usize::from(b)] & (1 << key.len().min(31)) == 0 {
            return None;
        }
        self.keys.binary_search_by(|k| k.as_str().cmp(key)).ok()
    }
}

/// The fields `keys` of the JSON object `text`, as an object; keys the
/// object lacks are absent. Fails only on text that is not a JSON object.
pub fn object_subset(text: &str, keys: &KeySet) -> Result<Map<String, Value>, serde_json::Error> {
    let mut out = Map::new();
    fill_subset(text, keys, &mut out)?;
    Ok(out)
}

/// [`object_subset`] into `out`, reusing its keys: a wanted key the object
/// has is set, one it lacks is removed (so a reused map never shows a value
/// of an earlier object).
///
/// A byte scanner walks the object's top level, parsing (with
/// `serde_json`) only the wanted values and stepping over the others
/// without looking inside numbers or strings beyond their ends; anything
/// unusual (an escaped key, text that does not look like an object) is
/// left to `serde_json`'s own reading, which also gives the errors.
pub fn fill_subset(
    text: &str,
    keys: &KeySet,
    out: &mut Map<String, Value>,
) -> Result<(), serde_json::Error> {
    let mut seen = vec![false; keys.keys.len()];
    match scan_subset(text, keys, out, &mut seen) {
        Some(Ok(())) => {
            for (k, seen) in keys.keys.iter().zip(seen) {
                if !seen {
                    out.remove(k);
                }
            }
            Ok(())
        }
        Some(Err(e)) => Err(e),
        None => {
            *out = serde_subset(text, &keys.keys)?;
            Ok(())
        }
    }
}

/// `object_subset` through `serde_json` alone (`keys` sorted).
pub(crate) fn serde_subset(
    text: &str,
    keys: &[String],
) -> Result<Map<String, Value>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let out = de.deserialize_map(Subset { keys })?;
    de.end()?;
    Ok(out)
}

fn ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\n' | b'\t' | b'\r')) {
        i += 1;
    }
    i
}

/// The index after the string starting at `i` (an opening quote).
fn skip_string(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        let n = b.get(j..)?.iter().position(|&c| c == b'"' || c == b'\\')?;
        j += n;
        if b[j] == b'\\' {
            j += 2;
        } else {
            return Some(j + 1);
        }
    }
}

/// The index after the value starting at `i`, not validated (a wanted
/// value is parsed; the others only need their end).
fn skip_value(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i)? {
        b'"' => skip_string(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match b.get(j)? {
                    b'"' => j = skip_string(b, j)?,
                    b'{' | b'[' => {
                        depth += 1;
                        j += 1;
                    }
                    b'}' | b']' => {
                        depth = depth.checked_sub(1)?;
                        j += 1;
                        if depth == 0 {
                            return Some(j);
                        }
                    }
                    _ => j += 1,
                }
            }
        }
        _ => {
            let n = b[i..]
                .iter()
                .position(|&c| matches!(c, b',' | b'}' | b']' | b' ' | b'\n' | b'\t' | b'\r'))
                .unwrap_or(b.len() - i);
            (n > 0).then_some(i + n)
        }
    }
}

/// The fast path of [`object_subset`]; `None` hands the text to `serde_json`.
fn scan_subset(
    text: &str,
    keys: &KeySet,
    out: &mut Map<String, Value>,
    seen: &mut [bool],
) -> Option<Result<(), serde_json::Error>> {
    let b = text.as_bytes();
    let mut i = ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        return (ws(b, i + 1) == b.len()).then_some(Ok(()));
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let start = i + 1;
        let len = b
            .get(start..)?
            .iter()
            .position(|&c| c == b'"' || c == b'\\')?;
        if b[start + len] == b'\\' {
            return None;
        }
        // Quotes are ASCII, so these are character boundaries.
        let key = text.get(start..start + len)?;
        i = ws(b, start + len + 1);
        if b.get(i) != Some(&b':') {
            return None;
        }
        i = ws(b, i + 1);
        match keys.index(key) {
            Some(k) => {
                let mut values =
                    serde_json::Deserializer::from_str(text.get(i..)?).into_iter::<Value>();
                let v = match values.next()? {
                    Ok(v) => v,
                    Err(e) => return Some(Err(e)),
                };
                i += values.byte_offset();
                seen[k] = true;
                match out.get_mut(key) {
                    Some(slot) => *slot = v,
                    None => {
                        out.insert(keys.keys[k].clone(), v);
                    }
                }
            }
            None => i = skip_value(b, i)?,
        }
        i = ws(b, i);
        match b.get(i) {
            Some(b',') => i = ws(b, i + 1),
            Some(b'}') => {
                return (ws(b, i + 1) == b.len()).then_some(Ok(()));
            }
            _ => return None,
        }
    }
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
        let keys = KeySet::new(vec![
            "missing".to_owned(),
            "drb".to_owned(),
            "isdiffpos".to_owned(),
        ]);
        let got = object_subset(text, &keys).expect("object");
        assert_eq!(
            Value::Object(got),
            serde_json::json!({"drb": 0.99, "isdiffpos": "t"})
        );
        assert!(object_subset("[1]", &keys).is_err());
        assert!(object_subset(r#"{"drb": 1} x"#, &keys).is_err());
        assert!(object_subset(r#"{"drb": "#, &keys).is_err());
        assert!(object_subset(r#"{"drb": 0.9x}"#, &keys).is_err());
        assert!(object_subset("", &keys).is_err());
        // A reused map loses what the next object lacks.
        let mut reused = Map::new();
        fill_subset(r#"{"drb": 1, "isdiffpos": "t"}"#, &keys, &mut reused).expect("object");
        fill_subset(r#"{"drb": 2}"#, &keys, &mut reused).expect("object");
        assert_eq!(Value::Object(reused), serde_json::json!({"drb": 2}));
    }

    /// A number read back out of a stored candidate's text is the number
    /// that was stored: the text holds the shortest form that round-trips,
    /// and reading it must land on the same double (found by the pipeline
    /// fuzz target: a 112-digit `fid` read back one step off, so a cut-down
    /// alert and the whole alert could disagree on a filter).
    #[test]
    fn numbers_read_back_exactly() {
        let keys = KeySet::new(vec!["fid".to_owned(), "magpsf".to_owned()]);
        let digits = format!("2{}", "0".repeat(111));
        for stored in [
            format!(r#"{{"fid": {digits}, "magpsf": 16.3}}"#),
            r#"{"fid": 2.0000000000000002e111, "magpsf": 0.30000000000000004}"#.to_owned(),
            r#"{"fid": 1.7976931348623157e308, "magpsf": 5e-324}"#.to_owned(),
        ] {
            let whole: Value = serde_json::from_str(&stored).expect("json");
            let rewritten = whole.to_string();
            let read = object_subset(&rewritten, &keys).expect("object");
            assert_eq!(
                Value::Object(read),
                whole,
                "{stored} written as {rewritten}"
            );
        }
    }

    /// The scanner and `serde_json` agree on every prefix and every one-byte
    /// corruption of a real-looking candidate (and neither panics).
    #[test]
    fn scanner_agrees_with_serde() {
        let text = r#"{"a": {"x": [1, "]\"}"]}, "drb": 0.99, "dec": -20.5, "isdiffpos": "t", "jd": 2460506.6, "k\u0041": 1, "ssnamenr": null, "z": [true, false]}"#;
        let names: Vec<String> = ["dec", "drb", "isdiffpos", "kA", "ssnamenr", "z"]
            .map(String::from)
            .to_vec();
        let keys = KeySet::new(names.clone());
        let whole = object_subset(text, &keys).expect("object");
        assert_eq!(whole.len(), 6, "{whole:?}");
        assert_eq!(
            Ok(&whole),
            serde_subset(text, &names).as_ref().map_err(|_| ())
        );
        let bytes = text.as_bytes();
        for cut in 0..bytes.len() {
            let Ok(prefix) = std::str::from_utf8(&bytes[..cut]) else {
                continue;
            };
            assert!(object_subset(prefix, &keys).is_err(), "{prefix}");
        }
        for at in 0..bytes.len() {
            for with in [b'"', b'{', b'}', b',', b':', b'\\', b' ', b'x', b'1', b']'] {
                let mut bad = bytes.to_vec();
                bad[at] = with;
                let Ok(bad) = String::from_utf8(bad) else {
                    continue;
                };
                let fast = object_subset(&bad, &keys).ok();
                let slow = serde_subset(&bad, &names).ok();
                if let (Some(f), Some(s)) = (&fast, &slow) {
                    assert_eq!(f, s, "{bad}");
                }
                // The scanner may accept an unread value serde would refuse,
                // never the other way round.
                assert!(fast.is_some() || slow.is_none(), "{bad}");
            }
        }
    }
}
