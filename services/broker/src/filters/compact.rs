//! A preview over the compact filter records (`alert_cuts`,
//! [`crate::alerts::cuts`]): which columns to read, and which of the
//! pipeline's first cuts the database applies.
//!
//! The records stand for the candidate only where the pipeline, the sort
//! key and the programme filter read nothing but their fields; otherwise
//! the preview reads the candidates' JSON as before.

use super::pipeline::{CutOp, CutTree, FieldCut};
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

/// What the database applies: the cuts and how they combine.
#[derive(Clone, Debug, PartialEq)]
enum SqlTree {
    All(Vec<SqlTree>),
    Any(Vec<SqlTree>),
    NoneOf(Vec<SqlTree>),
    Cut(SqlCut),
}

/// How a preview reads the compact records.
#[derive(Clone, Debug, PartialEq)]
pub struct CompactPlan {
    /// The candidate keys read, each with its field index and type, in the
    /// order of the columns after `present`.
    pub fields: Vec<(String, usize, Kind)>,
    /// Conjuncts the database applies.
    cuts: Vec<SqlTree>,
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

    /// Let the database apply what it can of `leading` (the pipeline's
    /// first stage): a condition every alert the stage keeps meets, made of
    /// comparisons it makes exactly as the evaluator does, and the
    /// programme filter. Keys that are withheld are never pushed (the
    /// evaluator sees them as missing). Returns whether anything was pushed.
    pub fn push_down(
        &mut self,
        leading: &CutTree,
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
        let leaf = |cut: &FieldCut| -> Option<SqlTree> {
            if !readable(&cut.key) {
                return None;
            }
            let (i, kind) = cuts::field(&cut.key)?;
            Some(SqlTree::Cut(SqlCut {
                column: cuts::FIELDS[i].0,
                op: cut.op,
                binds: binds(kind, cut.op, &cut.values)?,
            }))
        };
        self.cuts = match necessary(leading, &leaf) {
            None => Vec::new(),
            Some(SqlTree::All(parts)) => parts,
            Some(one) => vec![one],
        };
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
        for cut in &self.cuts {
            sql.push_str(" AND ");
            render(cut, false, &mut n, &mut sql);
        }
        if !self.programids.is_empty() {
            let list: Vec<String> = (0..self.programids.len())
                .map(|_| placeholder(&mut n))
                .collect();
            sql.push_str(&format!(" AND programid IN ({})", list.join(", ")));
        }
        (sql, n - first)
    }

    /// The values of [`Self::condition`]'s placeholders, in order.
    pub fn binds(&self) -> Vec<Bind> {
        fn walk(t: &SqlTree, out: &mut Vec<Bind>) {
            match t {
                SqlTree::All(parts) | SqlTree::Any(parts) | SqlTree::NoneOf(parts) => {
                    parts.iter().for_each(|p| walk(p, out));
                }
                SqlTree::Cut(c) => out.extend(c.binds.iter().cloned()),
            }
        }
        let mut out = Vec::new();
        self.cuts.iter().for_each(|c| walk(c, &mut out));
        out.extend(self.programids.iter().map(|p| Bind::Int(i64::from(*p))));
        out
    }
}

fn placeholder(n: &mut usize) -> String {
    let p = format!("${n}");
    *n += 1;
    p
}

/// `t` as SQL. Under a negation every comparison is made two-valued
/// (`COALESCE(…, FALSE)`): the evaluator finds a comparison with a missing
/// or null field false, and `NOT` of SQL's unknown would drop the alert
/// the evaluator keeps. Elsewhere unknown already drops it, as false does.
fn render(t: &SqlTree, negated: bool, n: &mut usize, sql: &mut String) {
    let join = |parts: &[SqlTree], with: &str, negated: bool, n: &mut usize, sql: &mut String| {
        sql.push('(');
        for (i, p) in parts.iter().enumerate() {
            if i > 0 {
                sql.push_str(with);
            }
            render(p, negated, n, sql);
        }
        sql.push(')');
    };
    match t {
        SqlTree::All(parts) => join(parts, " AND ", negated, n, sql),
        SqlTree::Any(parts) => join(parts, " OR ", negated, n, sql),
        SqlTree::NoneOf(parts) => {
            sql.push_str("NOT ");
            join(parts, " OR ", true, n, sql);
        }
        SqlTree::Cut(cut) => {
            let symbol = match cut.op {
                CutOp::Eq => "=",
                CutOp::Gt => ">",
                CutOp::Gte => ">=",
                CutOp::Lt => "<",
                CutOp::Lte => "<=",
                CutOp::In => "IN",
            };
            let compare = if cut.op == CutOp::In {
                let list: Vec<String> = cut.binds.iter().map(|_| placeholder(n)).collect();
                format!("{} IN ({})", cut.column, list.join(", "))
            } else {
                format!("{} {symbol} {}", cut.column, placeholder(n))
            };
            if negated {
                sql.push_str(&format!("COALESCE({compare}, FALSE)"));
            } else {
                sql.push_str(&compare);
            }
        }
    }
}

/// A condition the database can apply that every alert meeting `t` meets,
/// or `None` when there is none (always true). A conjunction keeps the
/// parts it can; a disjunction needs one for every branch; a negation
/// needs its parts exactly (`NOT (a OR b)` implies `NOT a`, so the parts
/// it has exactly are enough).
fn necessary(t: &CutTree, leaf: &dyn Fn(&FieldCut) -> Option<SqlTree>) -> Option<SqlTree> {
    match t {
        CutTree::Cut(c) => leaf(c),
        CutTree::Opaque => None,
        CutTree::All(parts) => {
            let mut kept: Vec<SqlTree> = parts.iter().filter_map(|p| necessary(p, leaf)).collect();
            match kept.len() {
                0 => None,
                1 => kept.pop(),
                _ => Some(SqlTree::All(kept)),
            }
        }
        CutTree::Any(parts) if !parts.is_empty() => parts
            .iter()
            .map(|p| necessary(p, leaf))
            .collect::<Option<Vec<_>>>()
            .map(SqlTree::Any),
        CutTree::Any(_) => None,
        CutTree::NoneOf(parts) => {
            let kept: Vec<SqlTree> = parts.iter().filter_map(|p| exact(p, leaf)).collect();
            (!kept.is_empty()).then_some(SqlTree::NoneOf(kept))
        }
    }
}

/// `t` exactly, or `None` when part of it is beyond the database.
fn exact(t: &CutTree, leaf: &dyn Fn(&FieldCut) -> Option<SqlTree>) -> Option<SqlTree> {
    let all = |parts: &[CutTree]| -> Option<Vec<SqlTree>> {
        if parts.is_empty() {
            return None;
        }
        parts.iter().map(|p| exact(p, leaf)).collect()
    };
    match t {
        CutTree::Cut(c) => leaf(c),
        CutTree::Opaque => None,
        CutTree::All(parts) => all(parts).map(SqlTree::All),
        CutTree::Any(parts) => all(parts).map(SqlTree::Any),
        CutTree::NoneOf(parts) => all(parts).map(SqlTree::NoneOf),
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

    fn cut(key: &str, op: CutOp, values: Vec<Value>) -> CutTree {
        CutTree::Cut(FieldCut {
            key: key.to_owned(),
            op,
            values,
        })
    }

    fn all(parts: impl IntoIterator<Item = CutTree>) -> CutTree {
        CutTree::All(parts.into_iter().collect())
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
        assert!(plan.push_down(&all(leading), &[], &[1, 2]));
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
        assert!(!plan.push_down(&all(leading), &["candidate.rb".into()], &[]));
        assert_eq!(plan.condition(4), (String::new(), 0));
        // With the programme withheld nothing is pushed: the evaluator sees
        // it missing and keeps nothing, which the database cannot count.
        let pushable = [cut("drb", CutOp::Gt, vec![json!(0.5)])];
        assert!(!plan.push_down(&all(pushable), &["candidate.programid".into()], &[1]));
        assert!(!plan.pushes());
    }

    #[test]
    fn or_and_nor_are_pushed_where_they_stay_necessary() {
        let gt = |k: &str, v: f64| cut(k, CutOp::Gt, vec![json!(v)]);
        let mut plan = CompactPlan::new(&["drb".into()]).expect("a plan");
        let leading = all([
            gt("drb", 0.5),
            CutTree::Any(vec![gt("ndethist", 1.0), gt("ssdistnr", 0.0)]),
            // A branch the database cannot decide: the whole `$or` stays.
            CutTree::Any(vec![gt("fwhm", 1.0), CutTree::Opaque]),
            // A negation keeps the parts it has exactly.
            CutTree::NoneOf(vec![
                all([
                    gt("sgscore1", 0.76),
                    cut("distpsnr1", CutOp::Lt, vec![json!(2)]),
                ]),
                all([gt("rb", 0.1), CutTree::Opaque]),
            ]),
        ]);
        assert!(plan.push_down(&leading, &[], &[]));
        let (sql, used) = plan.condition(1);
        assert_eq!(
            sql,
            " AND drb > $1 AND (ndethist > $2 OR ssdistnr > $3) \
             AND NOT ((COALESCE(sgscore1 > $4, FALSE) AND COALESCE(distpsnr1 < $5, FALSE)))"
        );
        assert_eq!(used, 5);
        assert_eq!(plan.binds().len(), 5);
        // Nothing exact under a negation, nothing pushed.
        let mut plan = CompactPlan::new(&["drb".into()]).expect("a plan");
        assert!(!plan.push_down(
            &all([CutTree::NoneOf(vec![CutTree::Opaque]), CutTree::Any(vec![])]),
            &[],
            &[]
        ));
    }
}
