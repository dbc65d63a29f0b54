//! The cuts a database can apply for a pipeline: comparisons of candidate
//! fields with literals that every alert passing the first stage meets.
//!
//! Only the first stage is read, and only when it is a `$match`: a later
//! `$match` may read fields an `$addFields` changed, and the preview counts
//! the alerts each `$match` kept, which holds only if every alert the
//! database leaves out would have failed the first one. Inside it, only
//! conjuncts (`$and`, implicit AND) count; `$or`, `$nor`, `$not`, `$ne`,
//! `$nin` and `$exists` are left to the evaluator.

use super::ast::{Cond, Op, Stage};
use serde_json::Value;

/// A comparison the database can make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutOp {
    Eq,
    Gt,
    Gte,
    Lt,
    Lte,
    /// Equal to one of the values.
    In,
}

/// `candidate.<key> <op> <values>`, a necessary condition of the first
/// stage. Values are as written in the pipeline (JSON scalars); the caller
/// decides which it can express.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldCut {
    pub key: String,
    pub op: CutOp,
    pub values: Vec<Value>,
}

/// The cuts of `stages`' first stage.
pub(crate) fn leading_cuts(stages: &[Stage]) -> Vec<FieldCut> {
    let mut out = Vec::new();
    if let Some(Stage::Match(cond)) = stages.first() {
        collect(cond, &mut out);
    }
    out
}

fn collect(cond: &Cond, out: &mut Vec<FieldCut>) {
    match cond {
        Cond::All(parts) | Cond::And(parts) => parts.iter().for_each(|c| collect(c, out)),
        Cond::Or(_) | Cond::Nor(_) => {}
        Cond::Field { path, ops } => {
            let [top, key] = path.segs.as_slice() else {
                return;
            };
            if &*top.key != "candidate" || key.index.is_some() {
                return;
            }
            for op in ops {
                let (op, values) = match op {
                    Op::Eq(v) => (CutOp::Eq, vec![v.clone()]),
                    Op::Gt(v) => (CutOp::Gt, vec![v.clone()]),
                    Op::Gte(v) => (CutOp::Gte, vec![v.clone()]),
                    Op::Lt(v) => (CutOp::Lt, vec![v.clone()]),
                    Op::Lte(v) => (CutOp::Lte, vec![v.clone()]),
                    Op::In(vs) => (CutOp::In, vs.clone()),
                    Op::Ne(_) | Op::Nin(_) | Op::Exists(_) | Op::Not(_) => continue,
                };
                out.push(FieldCut {
                    key: key.key.to_string(),
                    op,
                    values,
                });
            }
        }
    }
}
