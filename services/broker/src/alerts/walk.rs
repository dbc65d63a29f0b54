//! The writer schema's shape and each datum's size, checked against the
//! limits of [`super::container`] without decoding: a schema measured once
//! per named type, a datum walked as the decoder will read it but
//! allocating nothing.

use super::limits::{Cursor, MAX_ALERT_VALUES, MAX_BLOCK_BYTES, MAX_SCHEMA_DEPTH, WalkError};
use apache_avro::Schema;
use apache_avro::schema::{Name, NamesRef, Namespace, ResolvedSchema};
use std::collections::HashMap;

/// Refuse a schema with a named type that contains itself, one that nests
/// deeper than [`MAX_SCHEMA_DEPTH`], or a `fixed` larger than a block;
/// answer its depth.
pub fn check_schema(schema: &Schema) -> Result<usize, String> {
    let resolved = ResolvedSchema::try_from(schema).map_err(|e| e.to_string())?;
    let mut heights = Heights {
        names: resolved.get_names(),
        memo: HashMap::new(),
    };
    heights.height(schema, &None, 1)
}

/// Heights of a schema's subtrees, each named type's once (so a schema that
/// uses a type many times costs its size, not its expansion).
struct Heights<'s, 'n> {
    names: &'n NamesRef<'s>,
    /// `None` while the type's own fields are being measured: meeting it
    /// again then means it contains itself.
    memo: HashMap<Name, Option<usize>>,
}

impl Heights<'_, '_> {
    /// The height of `schema` met at `depth` (the top is 1); refused when
    /// `depth` plus it exceeds the limit.
    fn height(&mut self, schema: &Schema, ns: &Namespace, depth: usize) -> Result<usize, String> {
        if depth > MAX_SCHEMA_DEPTH {
            return Err(too_deep());
        }
        let below = match schema {
            Schema::Array(a) => self.height(&a.items, ns, depth + 1)?,
            Schema::Map(m) => self.height(&m.types, ns, depth + 1)?,
            Schema::Union(u) => {
                let mut most = 0;
                for v in u.variants() {
                    most = most.max(self.height(v, ns, depth + 1)?);
                }
                most
            }
            Schema::Record(r) => {
                let name = r.name.fully_qualified_name(ns);
                if let Some(known) = self.known(&name)? {
                    return self.fits(known, depth);
                }
                self.memo.insert(name.clone(), None);
                let mut most = 0;
                for f in &r.fields {
                    most = most.max(self.height(&f.schema, &name.namespace, depth + 1)?);
                }
                self.memo.insert(name, Some(most + 1));
                most
            }
            Schema::Ref { name } => {
                let name = name.fully_qualified_name(ns);
                if let Some(known) = self.known(&name)? {
                    return self.fits(known, depth);
                }
                let target = *self
                    .names
                    .get(&name)
                    .ok_or_else(|| format!("the writer schema names an unknown type {name}"))?;
                return self.height(target, &name.namespace, depth);
            }
            Schema::Fixed(f) if f.size > MAX_BLOCK_BYTES => {
                return Err(format!(
                    "the writer schema's fixed type {} is {} bytes, above the {MAX_BLOCK_BYTES}-byte block limit",
                    f.name, f.size
                ));
            }
            Schema::Decimal(d) => return self.height(&d.inner, ns, depth),
            _ => 0,
        };
        self.fits(below + 1, depth)
    }

    /// The height of a named type already measured, or an error when it is
    /// being measured (it contains itself).
    fn known(&self, name: &Name) -> Result<Option<usize>, String> {
        match self.memo.get(name) {
            None => Ok(None),
            Some(Some(h)) => Ok(Some(*h)),
            Some(None) => Err(format!(
                "the writer schema is recursive: type {name} contains itself (an alert schema never is)"
            )),
        }
    }

    fn fits(&self, height: usize, depth: usize) -> Result<usize, String> {
        if depth + height - 1 > MAX_SCHEMA_DEPTH {
            return Err(too_deep());
        }
        Ok(height)
    }
}

fn too_deep() -> String {
    format!(
        "the writer schema nests deeper than {MAX_SCHEMA_DEPTH} levels (ZTF's nests 6, Fink's 7)"
    )
}

/// A walk of data against a schema: reads as the decoder will, allocates
/// nothing, and counts every value against a budget.
pub struct Walk<'s, 'n> {
    names: &'n NamesRef<'s>,
    /// Values this alert may still hold.
    left: usize,
}

impl<'s, 'n> Walk<'s, 'n> {
    /// A walk over the alerts of one file; `names` from the writer schema's
    /// [`ResolvedSchema`].
    pub fn new(names: &'n NamesRef<'s>) -> Self {
        Walk { names, left: 0 }
    }

    /// Walk one datum of `schema` at the start of `data`; on success `data`
    /// is left after it. Answers how many values it holds.
    pub fn datum(&mut self, schema: &Schema, data: &mut &[u8]) -> Result<usize, WalkError> {
        self.left = MAX_ALERT_VALUES;
        self.value(schema, &None, &mut Cursor(data))?;
        Ok(MAX_ALERT_VALUES - self.left)
    }

    fn spend(&mut self) -> Result<(), WalkError> {
        if self.left == 0 {
            return Err(WalkError::Limit(format!(
                "more than the limit of {MAX_ALERT_VALUES} values in one alert"
            )));
        }
        self.left -= 1;
        Ok(())
    }

    fn value(
        &mut self,
        schema: &Schema,
        ns: &Namespace,
        cur: &mut Cursor,
    ) -> Result<(), WalkError> {
        self.spend()?;
        match schema {
            Schema::Null => {}
            Schema::Boolean => {
                cur.take(1)?;
            }
            Schema::Int
            | Schema::Long
            | Schema::Date
            | Schema::TimeMillis
            | Schema::TimeMicros
            | Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos => {
                cur.long()?;
            }
            Schema::Float => {
                cur.take(4)?;
            }
            Schema::Double => {
                cur.take(8)?;
            }
            Schema::Duration => {
                cur.take(12)?;
            }
            Schema::Bytes | Schema::String | Schema::BigDecimal | Schema::Uuid => {
                cur.bytes(usize::MAX)?;
            }
            Schema::Fixed(f) => {
                cur.take(f.size)?;
            }
            Schema::Decimal(d) => self.value(&d.inner, ns, cur)?,
            Schema::Enum(e) => {
                let i = cur.long()?;
                if i < 0 || i as u64 >= e.symbols.len() as u64 {
                    return Err(WalkError::Corrupt(format!(
                        "enum {} has no symbol {i}",
                        e.name
                    )));
                }
            }
            Schema::Union(u) => {
                let i = cur.long()?;
                let variant = usize::try_from(i)
                    .ok()
                    .and_then(|i| u.variants().get(i))
                    .ok_or_else(|| WalkError::Corrupt(format!("a union has no branch {i}")))?;
                self.value(variant, ns, cur)?;
            }
            Schema::Array(a) => loop {
                let n = cur.block_len()?;
                if n == 0 {
                    break;
                }
                self.precheck(n, "an array")?;
                for _ in 0..n {
                    self.value(&a.items, ns, cur)?;
                }
            },
            Schema::Map(m) => loop {
                let n = cur.block_len()?;
                if n == 0 {
                    break;
                }
                self.precheck(n, "a map")?;
                for _ in 0..n {
                    cur.bytes(usize::MAX)?;
                    self.value(&m.types, ns, cur)?;
                }
            },
            Schema::Record(r) => {
                let name = r.name.fully_qualified_name(ns);
                for f in &r.fields {
                    self.value(&f.schema, &name.namespace, cur)?;
                }
            }
            Schema::Ref { name } => {
                let name = name.fully_qualified_name(ns);
                let target = *self
                    .names
                    .get(&name)
                    .ok_or_else(|| WalkError::Corrupt(format!("unknown type {name}")))?;
                // The reference and its target are one value.
                self.left += 1;
                self.value(target, &name.namespace, cur)?;
            }
        }
        Ok(())
    }

    /// Refuse a block of `n` items at once when the budget cannot hold
    /// them, rather than after walking as many as it can.
    fn precheck(&self, n: usize, what: &str) -> Result<(), WalkError> {
        if n > self.left {
            return Err(WalkError::Limit(format!(
                "{what} declares {n} items, more than the limit of {MAX_ALERT_VALUES} values in one alert"
            )));
        }
        Ok(())
    }
}

/// Refuse a writer schema (as JSON) that `apache_avro` would panic on
/// rather than refuse: its parser unwraps names, namespaces and aliases it
/// has not validated, and its canonical form unwraps `size`, `precision` and
/// `scale` and assumes every reserved key holds what the specification
/// says. So before the crate parses it, every name must be a valid Avro
/// name, and every reserved key the JSON type it must have.
pub fn check_schema_json(schema: &serde_json::Value) -> Result<(), String> {
    json_schema(schema)
}

/// `serde_json` nests at most 128 levels, so neither does this.
fn json_schema(v: &serde_json::Value) -> Result<(), String> {
    use serde_json::Value as J;
    match v {
        J::String(s) => full_name(s, "a type name"),
        J::Array(branches) => branches.iter().try_for_each(json_schema),
        J::Object(map) => {
            match map.get("type") {
                Some(t @ (J::String(_) | J::Array(_) | J::Object(_))) => json_schema(t)?,
                _ => return Err("the writer schema has an object without a type".to_owned()),
            }
            for (key, value) in map {
                match key.as_str() {
                    "name" => json_str(value, key).and_then(|s| full_name(s, "a name"))?,
                    "namespace" => {
                        let ns = json_str(value, key)?;
                        // Prefixed to aliases as `{ns}.{alias}`: no leading dot.
                        if !ns.is_empty() && (ns.starts_with('.') || full_name(ns, "").is_err()) {
                            return Err(format!(
                                "the writer schema has a namespace {:?} that is not an Avro name",
                                ns.chars().take(64).collect::<String>()
                            ));
                        }
                    }
                    "aliases" => json_names(value, key)?,
                    "symbols" => {
                        json_names(value, key)?;
                    }
                    "items" | "values" => json_schema(value)?,
                    "size" | "precision" | "scale" if value.as_u64().is_none() => {
                        return Err(format!("the writer schema's {key:?} is not a whole number"));
                    }
                    "order" => {
                        json_str(value, key)?;
                    }
                    "fields" => {
                        let J::Array(fields) = value else {
                            return Err("the writer schema's \"fields\" is not a list".to_owned());
                        };
                        for f in fields {
                            json_field(f)?;
                        }
                    }
                    _ => {}
                }
            }
            Ok(())
        }
        _ => Err(format!("the writer schema holds {v} where a type belongs")),
    }
}

/// A record's field: a name, a type, and none of a type's own keys (the
/// canonical form would read them as the field's).
fn json_field(f: &serde_json::Value) -> Result<(), String> {
    let serde_json::Value::Object(map) = f else {
        return Err("the writer schema has a field that is not an object".to_owned());
    };
    let name = map
        .get("name")
        .ok_or("the writer schema has a field without a name")?;
    full_name(json_str(name, "name")?, "a field name")?;
    json_schema(
        map.get("type")
            .ok_or("the writer schema has a field without a type")?,
    )?;
    for (key, value) in map {
        match key.as_str() {
            "aliases" => json_names(value, key)?,
            "order" => {
                json_str(value, key)?;
            }
            "fields" | "symbols" | "items" | "values" | "size" | "precision" | "scale"
            | "namespace" => {
                return Err(format!("the writer schema has a field carrying {key:?}"));
            }
            _ => {}
        }
    }
    Ok(())
}

fn json_str<'v>(v: &'v serde_json::Value, key: &str) -> Result<&'v str, String> {
    v.as_str()
        .ok_or_else(|| format!("the writer schema's {key:?} is not a string"))
}

fn json_names(v: &serde_json::Value, key: &str) -> Result<(), String> {
    let serde_json::Value::Array(items) = v else {
        return Err(format!("the writer schema's {key:?} is not a list"));
    };
    for item in items {
        full_name(json_str(item, key)?, key)?;
    }
    Ok(())
}

/// An Avro full name: dot-separated parts, each a letter or `_` then letters,
/// digits or `_`; a leading dot (an empty namespace) may only precede a
/// single part.
fn full_name(s: &str, what: &str) -> Result<(), String> {
    let ident = |p: &str| {
        let mut c = p.chars();
        c.next()
            .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
            && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
    };
    let valid = match s.strip_prefix('.') {
        // An empty namespace: one name after the dot, no more.
        Some(name) => ident(name),
        None => s.split('.').all(ident),
    };
    if valid {
        Ok(())
    } else {
        Err(format!(
            "the writer schema has {what} {:?} that is not an Avro name",
            s.chars().take(64).collect::<String>()
        ))
    }
}
