//! The compiled pipeline: stages, conditions, expressions and paths, and
//! their canonical JSON (the normalised form versions are hashed and diffed
//! by; compiling it again gives the same pipeline).

use serde_json::{Map, Value};

/// A dotted path split once at compile time, so evaluation never parses a
/// string.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct FieldPath {
    /// As written: `candidate.magpsf`, `prv_candidates.0.magpsf`.
    pub text: String,
    pub segs: Vec<Seg>,
}

/// One segment of a path; `index` is set when the segment is a decimal
/// number, which on an array names an element (as in MongoDB).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Seg {
    pub key: Box<str>,
    pub index: Option<usize>,
}

impl FieldPath {
    pub fn parse(text: &str) -> FieldPath {
        FieldPath {
            text: text.to_owned(),
            segs: text
                .split('.')
                .map(|s| Seg {
                    key: s.into(),
                    index: (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                        .then(|| s.parse().ok())
                        .flatten(),
                })
                .collect(),
        }
    }

    /// The path without array indexes, the way the schema spells it.
    pub fn schema_field(&self) -> String {
        let keys: Vec<&str> = self
            .segs
            .iter()
            .filter(|s| s.index.is_none())
            .map(|s| &*s.key)
            .collect();
        keys.join(".")
    }
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Stage {
    Match(Cond),
    AddFields(Vec<(FieldPath, Expr)>),
    Project(Projection),
}

/// A `$project`: inclusion (the listed paths, computed fields, and the
/// alert's ids unless excluded) or exclusion (everything but the listed
/// paths).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Projection {
    Include {
        keep: Vec<FieldPath>,
        computed: Vec<(FieldPath, Expr)>,
        /// The ids an inclusion keeps unless told otherwise, like MongoDB's `_id`.
        keep_object_id: bool,
        keep_candid: bool,
    },
    Exclude(Vec<FieldPath>),
}

/// A query document.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Cond {
    /// The fields and operators of one query object (implicit AND).
    All(Vec<Cond>),
    And(Vec<Cond>),
    Or(Vec<Cond>),
    Nor(Vec<Cond>),
    Field {
        path: FieldPath,
        ops: Vec<Op>,
    },
}

/// A field operator. Operands are JSON scalars (or arrays of them for
/// `$in`/`$nin`), checked at compile time.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Op {
    Eq(Value),
    Ne(Value),
    Gt(Value),
    Gte(Value),
    Lt(Value),
    Lte(Value),
    In(Vec<Value>),
    Nin(Vec<Value>),
    Exists(bool),
    Not(Vec<Op>),
}

/// An aggregation expression.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Expr {
    Literal(Value),
    Path(FieldPath),
    Arith(Arith, Vec<Expr>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arith {
    Add,
    Subtract,
    Multiply,
    Divide,
    Mod,
    Abs,
}

impl Arith {
    pub const ALL: [Arith; 6] = [
        Arith::Add,
        Arith::Subtract,
        Arith::Multiply,
        Arith::Divide,
        Arith::Mod,
        Arith::Abs,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Arith::Add => "$add",
            Arith::Subtract => "$subtract",
            Arith::Multiply => "$multiply",
            Arith::Divide => "$divide",
            Arith::Mod => "$mod",
            Arith::Abs => "$abs",
        }
    }

    pub fn parse(name: &str) -> Option<Arith> {
        Arith::ALL.into_iter().find(|a| a.name() == name)
    }

    /// How many operands it takes: (at least, at most).
    pub fn arity(self) -> (usize, usize) {
        match self {
            Arith::Add | Arith::Multiply => (1, usize::MAX),
            Arith::Subtract | Arith::Divide | Arith::Mod => (2, 2),
            Arith::Abs => (1, 1),
        }
    }
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::Eq(_) => "$eq",
            Op::Ne(_) => "$ne",
            Op::Gt(_) => "$gt",
            Op::Gte(_) => "$gte",
            Op::Lt(_) => "$lt",
            Op::Lte(_) => "$lte",
            Op::In(_) => "$in",
            Op::Nin(_) => "$nin",
            Op::Exists(_) => "$exists",
            Op::Not(_) => "$not",
        }
    }
}

// ---- canonical form ----------------------------------------------------------

/// An object with its keys inserted in sorted order, so the canonical text
/// is the same whichever map `serde_json` was built with.
fn sorted(mut entries: Vec<(String, Value)>) -> Value {
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut m = Map::new();
    for (k, v) in entries {
        m.insert(k, v);
    }
    Value::Object(m)
}

pub(crate) fn canonical_stages(stages: &[Stage]) -> Value {
    Value::Array(stages.iter().map(canonical_stage).collect())
}

fn canonical_stage(stage: &Stage) -> Value {
    let (name, body) = match stage {
        Stage::Match(c) => ("$match", canonical_cond(c)),
        Stage::AddFields(fields) => (
            "$addFields",
            sorted(
                fields
                    .iter()
                    .map(|(p, e)| (p.text.clone(), canonical_expr(e)))
                    .collect(),
            ),
        ),
        Stage::Project(Projection::Include {
            keep,
            computed,
            keep_object_id,
            keep_candid,
        }) => {
            let mut entries: Vec<(String, Value)> = keep
                .iter()
                .map(|p| (p.text.clone(), Value::from(1)))
                .collect();
            entries.extend(
                computed
                    .iter()
                    .map(|(p, e)| (p.text.clone(), canonical_expr(e))),
            );
            for (id, kept) in [("objectId", keep_object_id), ("candid", keep_candid)] {
                if !entries.iter().any(|(k, _)| k == id) {
                    entries.push((id.to_owned(), Value::from(i32::from(*kept))));
                }
            }
            ("$project", sorted(entries))
        }
        Stage::Project(Projection::Exclude(paths)) => (
            "$project",
            sorted(
                paths
                    .iter()
                    .map(|p| (p.text.clone(), Value::from(0)))
                    .collect(),
            ),
        ),
    };
    sorted(vec![(name.to_owned(), body)])
}

pub(crate) fn canonical_cond(cond: &Cond) -> Value {
    match cond {
        Cond::All(parts) => {
            let mut entries = Vec::new();
            for p in parts {
                if let Value::Object(m) = canonical_cond(p) {
                    entries.extend(m);
                }
            }
            sorted(entries)
        }
        Cond::And(parts) => logical("$and", parts),
        Cond::Or(parts) => logical("$or", parts),
        Cond::Nor(parts) => logical("$nor", parts),
        Cond::Field { path, ops } => sorted(vec![(path.text.clone(), canonical_ops(ops))]),
    }
}

fn logical(name: &str, parts: &[Cond]) -> Value {
    sorted(vec![(
        name.to_owned(),
        Value::Array(parts.iter().map(canonical_cond).collect()),
    )])
}

fn canonical_ops(ops: &[Op]) -> Value {
    sorted(
        ops.iter()
            .map(|op| {
                let operand = match op {
                    Op::Eq(v) | Op::Ne(v) | Op::Gt(v) | Op::Gte(v) | Op::Lt(v) | Op::Lte(v) => {
                        v.clone()
                    }
                    Op::In(vs) | Op::Nin(vs) => Value::Array(vs.clone()),
                    Op::Exists(b) => Value::Bool(*b),
                    Op::Not(inner) => canonical_ops(inner),
                };
                (op.name().to_owned(), operand)
            })
            .collect(),
    )
}

pub(crate) fn canonical_expr(expr: &Expr) -> Value {
    match expr {
        Expr::Literal(v) => match v {
            Value::Number(_) | Value::Bool(_) | Value::Null => v.clone(),
            Value::String(s) if !s.starts_with('$') => v.clone(),
            other => sorted(vec![("$literal".to_owned(), other.clone())]),
        },
        Expr::Path(p) => Value::String(format!("${}", p.text)),
        Expr::Arith(Arith::Abs, args) => sorted(vec![(
            Arith::Abs.name().to_owned(),
            args.first().map_or(Value::Null, canonical_expr),
        )]),
        Expr::Arith(op, args) => sorted(vec![(
            op.name().to_owned(),
            Value::Array(args.iter().map(canonical_expr).collect()),
        )]),
    }
}
