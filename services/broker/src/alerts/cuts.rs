//! The compact filter record of an alert (`alert_cuts`, issue 27): the
//! candidate fields filters cut on most, typed, so a preview reads a narrow
//! row instead of the candidate's JSON and the database applies a
//! pipeline's first cuts itself.
//!
//! A record is built from the same JSON the `candidate` column holds, so a
//! document made from it holds exactly the values a document made from the
//! JSON does: the same keys present or absent, null where the JSON has
//! null, integers as integers and floats as floats. A candidate whose field
//! has a type its column cannot carry that way (a float in an integer
//! column, a string in a number column) is not compact: its record says so
//! and readers take its candidate instead.

use serde_json::{Map, Value};

/// A column's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A JSON integer (an Avro `int` or `long`).
    Int,
    /// A JSON float (an Avro `float` or `double`).
    Real,
    /// A JSON string.
    Text,
}

/// The record's fields: candidate keys, which are also the column names,
/// in column order; bit i of `present` is field i.
pub const FIELDS: [(&str, Kind); 16] = [
    ("jd", Kind::Real),
    ("fid", Kind::Int),
    ("programid", Kind::Int),
    ("isdiffpos", Kind::Text),
    ("drb", Kind::Real),
    ("rb", Kind::Real),
    ("nbad", Kind::Int),
    ("fwhm", Kind::Real),
    ("elong", Kind::Real),
    ("magpsf", Kind::Real),
    ("sigmapsf", Kind::Real),
    ("ndethist", Kind::Int),
    ("ssdistnr", Kind::Real),
    ("sgscore1", Kind::Real),
    ("distpsnr1", Kind::Real),
    ("jdstarthist", Kind::Real),
];

/// `present` of a record that is not compact.
pub const NOT_COMPACT: i64 = -1;

/// The field `key` of the record: its index and type.
pub fn field(key: &str) -> Option<(usize, Kind)> {
    FIELDS
        .iter()
        .position(|(name, _)| *name == key)
        .map(|i| (i, FIELDS[i].1))
}

/// One field's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Cut {
    /// Absent, or JSON null (`present` tells which).
    Null,
    Int(i64),
    Real(f64),
    Text(String),
}

impl Cut {
    /// The JSON value a document holds for it.
    pub fn to_json(&self) -> Value {
        match self {
            Cut::Null => Value::Null,
            Cut::Int(i) => Value::from(*i),
            Cut::Real(f) => Value::from(*f),
            Cut::Text(s) => Value::from(s.as_str()),
        }
    }
}

/// An alert's compact filter record (its row of `alert_cuts` but the ids).
#[derive(Clone, Debug, PartialEq)]
pub struct Cuts {
    /// Bit i: `FIELDS[i]` is a key of the candidate; [`NOT_COMPACT`]: read
    /// the candidate instead.
    pub present: i64,
    /// One per field of [`FIELDS`], in order.
    pub values: Vec<Cut>,
}

impl Cuts {
    /// The record of a candidate (the JSON object the `candidate` column
    /// holds).
    pub fn of(candidate: &Value) -> Cuts {
        let not_compact = || Cuts {
            present: NOT_COMPACT,
            values: vec![Cut::Null; FIELDS.len()],
        };
        let Value::Object(map) = candidate else {
            return not_compact();
        };
        let mut present = 0i64;
        let mut values = Vec::with_capacity(FIELDS.len());
        for (i, (key, kind)) in FIELDS.iter().enumerate() {
            let Some(v) = map.get(*key) else {
                values.push(Cut::Null);
                continue;
            };
            present |= 1 << i;
            match typed(v, *kind) {
                Some(cut) => values.push(cut),
                None => return not_compact(),
            }
        }
        Cuts { present, values }
    }

    /// Whether the record stands for its candidate's fields.
    pub fn compact(&self) -> bool {
        self.present >= 0
    }
}

/// `v` as a value of a `kind` column, if the column gives it back exactly.
fn typed(v: &Value, kind: Kind) -> Option<Cut> {
    match (v, kind) {
        (Value::Null, _) => Some(Cut::Null),
        (Value::Number(n), Kind::Int) => n.as_i64().map(Cut::Int),
        // A float column gives back an f64, which a document holds as a
        // float: an integer in the JSON would come back as a float.
        (Value::Number(n), Kind::Real) if n.is_f64() => n.as_f64().map(Cut::Real),
        (Value::String(s), Kind::Text) => Some(Cut::Text(s.clone())),
        _ => None,
    }
}

/// Set `key` of `candidate` to field `i` of a record read back: removed
/// when absent, its value otherwise, reusing the entry (and a string's
/// buffer) already there, so refilling one document per alert allocates
/// nothing once the keys exist.
pub fn fill(candidate: &mut Map<String, Value>, key: &str, present: bool, cut: CutRef<'_>) {
    if !present {
        candidate.remove(key);
        return;
    }
    match candidate.get_mut(key) {
        Some(slot) => match (slot, cut) {
            (Value::String(s), CutRef::Text(t)) => {
                s.clear();
                s.push_str(t);
            }
            (slot, cut) => *slot = cut.to_json(),
        },
        None => {
            candidate.insert(key.to_owned(), cut.to_json());
        }
    }
}

/// A field's value as read from a row, borrowing a string.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CutRef<'a> {
    Null,
    Int(i64),
    Real(f64),
    Text(&'a str),
}

impl CutRef<'_> {
    fn to_json(self) -> Value {
        match self {
            CutRef::Null => Value::Null,
            CutRef::Int(i) => Value::from(i),
            CutRef::Real(f) => Value::from(f),
            CutRef::Text(s) => Value::from(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_record_keeps_presence_nulls_and_number_kinds() {
        let c = json!({"jd": 2458000.5, "fid": 2, "isdiffpos": "t", "drb": null, "nbad": 0});
        let cuts = Cuts::of(&c);
        assert!(cuts.compact());
        let bit = |k: &str| 1i64 << field(k).expect("a field").0;
        assert_eq!(
            cuts.present,
            bit("jd") | bit("fid") | bit("isdiffpos") | bit("drb") | bit("nbad")
        );
        assert_eq!(cuts.values[field("fid").expect("a field").0], Cut::Int(2));
        assert_eq!(cuts.values[field("drb").expect("a field").0], Cut::Null);
        assert_eq!(
            cuts.values[field("isdiffpos").expect("a field").0],
            Cut::Text("t".into())
        );
        assert_eq!(cuts.values[field("rb").expect("a field").0], Cut::Null);
    }

    #[test]
    fn a_type_the_column_cannot_carry_makes_the_record_not_compact() {
        // An integer in a float column would come back as a float.
        assert!(!Cuts::of(&json!({"jd": 2458000.5, "drb": 1})).compact());
        assert!(!Cuts::of(&json!({"jd": 2458000.5, "nbad": 1.5})).compact());
        assert!(!Cuts::of(&json!({"jd": 2458000.5, "isdiffpos": 1})).compact());
        assert!(!Cuts::of(&json!({"jd": 2458000.5, "fwhm": "2"})).compact());
        assert!(!Cuts::of(&json!([1, 2])).compact());
        assert!(Cuts::of(&json!({"jd": 2458000.5, "drb": 1.0})).compact());
    }

    #[test]
    fn fill_reuses_entries_and_removes_absent_keys() {
        let mut m = Map::new();
        fill(&mut m, "isdiffpos", true, CutRef::Text("t"));
        fill(&mut m, "drb", true, CutRef::Real(0.5));
        fill(&mut m, "nbad", true, CutRef::Null);
        assert_eq!(
            Value::Object(m.clone()),
            json!({"isdiffpos": "t", "drb": 0.5, "nbad": null})
        );
        fill(&mut m, "isdiffpos", true, CutRef::Text("f"));
        fill(&mut m, "drb", false, CutRef::Null);
        fill(&mut m, "nbad", true, CutRef::Int(3));
        assert_eq!(Value::Object(m), json!({"isdiffpos": "f", "nbad": 3}));
    }
}
