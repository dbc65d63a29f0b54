//! The cuts a database can apply for a pipeline: the first stage's
//! condition, as far as it compares candidate fields with literals.
//!
//! Only the first stage is read, and only when it is a `$match`: a later
//! `$match` may read fields an `$addFields` changed, and the preview counts
//! the alerts each `$match` kept, which holds only if every alert the
//! database leaves out would have failed the first one. The condition keeps
//! its shape (`$and`, `$or`, `$nor`); what the database cannot decide
//! (`$ne`, `$nin`, `$exists`, `$not`, a path outside the candidate) is
//! [`CutTree::Opaque`], and the caller keeps only what is still a necessary
//! condition of the stage without it.

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

/// `candidate.<key> <op> <values>`. Values are as written in the pipeline
/// (JSON scalars); the caller decides which it can express.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldCut {
    pub key: String,
    pub op: CutOp,
    pub values: Vec<Value>,
}

/// The first stage's condition over candidate fields.
#[derive(Clone, Debug, PartialEq)]
pub enum CutTree {
    /// Every part holds (no part: always).
    All(Vec<CutTree>),
    /// At least one part holds.
    Any(Vec<CutTree>),
    /// No part holds.
    NoneOf(Vec<CutTree>),
    /// One comparison.
    Cut(FieldCut),
    /// Something only the evaluator decides.
    Opaque,
}

/// The condition of `stages`' first stage (always true when it is not a
/// `$match`).
pub(crate) fn leading_cuts(stages: &[Stage]) -> CutTree {
    match stages.first() {
        Some(Stage::Match(cond)) => tree(cond),
        _ => CutTree::All(Vec::new()),
    }
}

fn tree(cond: &Cond) -> CutTree {
    match cond {
        Cond::All(parts) | Cond::And(parts) => CutTree::All(parts.iter().map(tree).collect()),
        Cond::Or(parts) => CutTree::Any(parts.iter().map(tree).collect()),
        Cond::Nor(parts) => CutTree::NoneOf(parts.iter().map(tree).collect()),
        Cond::Field { path, ops } => {
            let [top, key] = path.segs.as_slice() else {
                return CutTree::Opaque;
            };
            if &*top.key != "candidate" || key.index.is_some() {
                return CutTree::Opaque;
            }
            let cut = |op: CutOp, values: Vec<Value>| {
                CutTree::Cut(FieldCut {
                    key: key.key.to_string(),
                    op,
                    values,
                })
            };
            CutTree::All(
                ops.iter()
                    .map(|op| match op {
                        Op::Eq(v) => cut(CutOp::Eq, vec![v.clone()]),
                        Op::Gt(v) => cut(CutOp::Gt, vec![v.clone()]),
                        Op::Gte(v) => cut(CutOp::Gte, vec![v.clone()]),
                        Op::Lt(v) => cut(CutOp::Lt, vec![v.clone()]),
                        Op::Lte(v) => cut(CutOp::Lte, vec![v.clone()]),
                        Op::In(vs) => cut(CutOp::In, vs.clone()),
                        Op::Ne(_) | Op::Nin(_) | Op::Exists(_) | Op::Not(_) => CutTree::Opaque,
                    })
                    .collect(),
            )
        }
    }
}
