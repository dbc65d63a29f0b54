//! A preview over the compact filter records (`alert_cuts`,
//! [`crate::alerts::cuts`]): which columns to read, and which of the
//! pipeline's first cuts the database applies.
//!
//! The records stand for the candidate only where the pipeline, the sort
//! key and the programme filter read nothing but their fields; otherwise
//! the preview reads the candidates' JSON as before.

use super::pipeline::{CutOp, FieldCut};
use crate::alerts::cuts::{self, Kind};
use serde_json::Value;

/// Largest integer every backend compares with a float exactly.
const EXACT_INT: f64 = 9_007_199_254_740_992.0;

/// A value bound into a pushed-down cut.
#[derive(Clone, Debug, PartialEq)]
pub enum Bind {
    Int(i64),
    Real(f64),
    Text(String),
}

/// One cut the database applies: `column op $n` (or `IN (…)`).
#[derive(Clone, Debug, PartialEq)]
struct SqlCut {
    column: &'static str,
    op: CutOp,
    binds: Vec<Bind>,
}

/// How a preview reads the compact records.
#[derive(Clone, Debug, PartialEq)]
pub struct CompactPlan {
    /// The candidate keys read, each with its field index and type, in the
    /// order of the columns after `present`.
    pub fields: Vec<(String, usize, Kind)>,
    cuts: Vec<SqlCut>,
    /// `candidate.programid IN (…)` applied by the database.
    programids: Vec<i32>,
}

impl CompactPlan {
    /// A plan for reading `keys` (sorted, without withheld keys), or `None`
    /// when one of them is not a field of the record.
    pub fn new(keys: &[String]) -> Option<CompactPlan> {
        let fields = keys
            .iter()
            .map(|k| cuts::field(k).map(|(i, kind)| (k.clone(), i, kind)))
            .collect::<Option<Vec<_>>>()?;
        Some(CompactPlan {
            fields,
            cuts: Vec::new(),
            programids: Vec::new(),
        })
    }

    /// Let the database apply `leading` (the pipeline's first-stage cuts)
    /// where it compares exactly as the evaluator does, and the programme
    /// filter. Keys that are withheld are never pushed (the evaluator sees
    /// them as missing). Returns whether anything was pushed.
    pub fn push_down(
        &mut self,
        leading: &[FieldCut],
        withheld: &[String],
        programids: &[i32],
    ) -> bool {
        let readable = |key: &str| {
            !withheld
                .iter()
                .any(|w| w == "candidate" || w.strip_prefix("candidate.") == Some(key))
        };
        // A withheld programme is missing to the evaluator, which then
        // keeps nothing; the database would count what it cannot see.
        if !programids.is_empty() && !readable("programid") {
            return false;
        }
        for cut in leading {
            if !readable(&cut.key) {
                continue;
            }
            let Some((i, kind)) = cuts::field(&cut.key) else {
                continue;
            };
            if let Some(binds) = binds(kind, cut.op, &cut.values) {
                self.cuts.push(SqlCut {
                    column: cuts::FIELDS[i].0,
                    op: cut.op,
                    binds,
                });
            }
        }
        self.programids = programids.to_vec();
        !self.cuts.is_empty() || !self.programids.is_empty()
    }

    /// The plan that counts the alerts evaluated: the programme filter
    /// without the pipeline's cuts.
    pub fn counting(&self) -> CompactPlan {
        CompactPlan {
            fields: Vec::new(),
            cuts: Vec::new(),
            programids: self.programids.clone(),
        }
    }

    /// Whether the database applies cuts (so it, not the scan, counts the
    /// alerts evaluated).
    pub fn pushes(&self) -> bool {
        !self.cuts.is_empty() || !self.programids.is_empty()
    }

    /// `candid, object_id, schemavsn, hpx, present` and the fields read.
    pub fn columns(&self) -> String {
        let mut out = "candid, object_id, schemavsn, hpx, present".to_owned();
        for (_, i, _) in &self.fields {
            out.push_str(", ");
            out.push_str(cuts::FIELDS[*i].0);
        }
        out
    }

    /// The pushed-down cuts as ` AND …`, placeholders numbered from
    /// `first`, and the number of placeholders used.
    pub fn condition(&self, first: usize) -> (String, usize) {
        let mut sql = String::new();
        let mut n = first;
        let mut next = || {
            let p = format!("${n}");
            n += 1;
            p
        };
        for cut in &self.cuts {
            let op = match cut.op {
                CutOp::Eq => "=",
                CutOp::Gt => ">",
                CutOp::Gte => ">=",
                CutOp::Lt => "<",
                CutOp::Lte => "<=",
                CutOp::In => "IN",
            };
            if cut.op == CutOp::In {
                let list: Vec<String> = cut.binds.iter().map(|_| next()).collect();
                sql.push_str(&format!(" AND {} IN ({})", cut.column, list.join(", ")));
            } else {
                sql.push_str(&format!(" AND {} {op} {}", cut.column, next()));
            }
        }
        if !self.programids.is_empty() {
            let list: Vec<String> = self.programids.iter().map(|_| next()).collect();
            sql.push_str(&format!(" AND programid IN ({})", list.join(", ")));
        }
        (sql, n - first)
    }

    /// The values of [`Self::condition`]'s placeholders, in order.
    pub fn binds(&self) -> Vec<Bind> {
        let mut out: Vec<Bind> = self.cuts.iter().flat_map(|c| c.binds.clone()).collect();
        out.extend(self.programids.iter().map(|p| Bind::Int(i64::from(*p))));
        out
    }
}

/// The binds of `op values` on a `kind` column, if the database compares
/// them exactly as the evaluator does: numbers with numbers (integers
/// within 2^53, so no backend rounds), strings only for equality (a
/// backend's collation may order strings differently), never null (which
/// the evaluator matches with a missing field).
fn binds(kind: Kind, op: CutOp, values: &[Value]) -> Option<Vec<Bind>> {
    if values.is_empty() {
        return None;
    }
    values
        .iter()
        .map(|v| match (kind, v) {
            (Kind::Text, Value::String(s)) if matches!(op, CutOp::Eq | CutOp::In) => {
                Some(Bind::Text(s.clone()))
            }
            (Kind::Int | Kind::Real, Value::Number(n)) => {
                let f = n.as_f64()?;
                if !f.is_finite() || f.abs() >= EXACT_INT {
                    return None;
                }
                match (kind, n.as_i64()) {
                    (Kind::Int, Some(i)) => Some(Bind::Int(i)),
                    _ => Some(Bind::Real(f)),
                }
            }
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cut(key: &str, op: CutOp, values: Vec<Value>) -> FieldCut {
        FieldCut {
            key: key.to_owned(),
            op,
            values,
        }
    }

    #[test]
    fn only_record_fields_make_a_plan() {
        assert!(CompactPlan::new(&["drb".into(), "isdiffpos".into()]).is_some());
        assert!(CompactPlan::new(&["drb".into(), "programpi".into()]).is_none());
    }

    #[test]
    fn pushed_cuts_render_with_numbered_placeholders() {
        let mut plan = CompactPlan::new(&["drb".into(), "isdiffpos".into()]).expect("a plan");
        let leading = [
            cut("drb", CutOp::Gt, vec![json!(0.5)]),
            cut("isdiffpos", CutOp::In, vec![json!("t"), json!("1")]),
            cut("nbad", CutOp::Lte, vec![json!(5)]),
        ];
        assert!(plan.push_down(&leading, &[], &[1, 2]));
        let (sql, used) = plan.condition(4);
        assert_eq!(
            sql,
            " AND drb > $4 AND isdiffpos IN ($5, $6) AND nbad <= $7 AND programid IN ($8, $9)"
        );
        assert_eq!(used, 6);
        assert_eq!(
            plan.binds(),
            vec![
                Bind::Real(0.5),
                Bind::Text("t".into()),
                Bind::Text("1".into()),
                Bind::Int(5),
                Bind::Int(1),
                Bind::Int(2)
            ]
        );
    }

    #[test]
    fn what_the_database_would_compare_differently_stays_with_the_evaluator() {
        let mut plan = CompactPlan::new(&["drb".into()]).expect("a plan");
        let leading = [
            // null matches a missing field in the evaluator.
            cut("drb", CutOp::Eq, vec![json!(null)]),
            // Ordering strings depends on the backend's collation.
            cut("isdiffpos", CutOp::Gt, vec![json!("f")]),
            // A string against a number column, a number against text.
            cut("fwhm", CutOp::Lt, vec![json!("5")]),
            cut("isdiffpos", CutOp::Eq, vec![json!(1)]),
            // Past 2^53 a backend may round.
            cut(
                "ndethist",
                CutOp::Gt,
                vec![json!(9_007_199_254_740_993_i64)],
            ),
            // Not a field of the record; withheld.
            cut("programpi", CutOp::Eq, vec![json!("Kulkarni")]),
            cut("rb", CutOp::Gt, vec![json!(0.1)]),
            // An `$in` with one value the database cannot compare.
            cut("fid", CutOp::In, vec![json!(1), json!(null)]),
        ];
        assert!(!plan.push_down(&leading, &["candidate.rb".into()], &[]));
        assert_eq!(plan.condition(4), (String::new(), 0));
        // With the programme withheld nothing is pushed: the evaluator sees
        // it missing and keeps nothing, which the database cannot count.
        let pushable = [cut("drb", CutOp::Gt, vec![json!(0.5)])];
        assert!(!plan.push_down(&pushable, &["candidate.programid".into()], &[1]));
        assert!(!plan.pushes());
    }
}
