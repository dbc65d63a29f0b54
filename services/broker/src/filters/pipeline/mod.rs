//! The filter pipeline language: a documented subset of MongoDB's
//! aggregation pipeline, compiled once against the alert schema and the
//! filter's stream, then evaluated in Rust on each alert document.
//!
//! - Stages: `$match`, `$project`, `$addFields` (alias `$set`).
//! - Query operators: `$eq $ne $gt $gte $lt $lte $in $nin $exists`, `$not`
//!   on a field, `$and $or $nor`, implicit equality and implicit AND.
//! - Expressions: `"$path"`, literals, `{"$literal": v}`, `$add $subtract
//!   $multiply $divide $mod $abs`.
//!
//! [`compile`] names every problem at once (unknown stages, operators and
//! paths with the nearest real path, type mismatches against the schema),
//! and warns about cuts on data the filter's stream does not carry. The
//! language, the alert document and the array semantics are described in
//! the broker's README ("Filter pipelines").
//!
//! Modules: `ast` (the compiled form and its canonical JSON), `compile`
//! (checking), `paths` (schema index, document shape, suggestions), `eval`
//! (evaluation), `scan` (reading only the candidate fields a pipeline
//! needs out of the stored JSON), `pushdown` (the first stage's cuts a
//! database can apply).

mod ast;
mod compile;
mod eval;
mod paths;
mod pushdown;
pub mod scan;
#[cfg(test)]
mod tests;

use crate::alerts::schema::FlatField;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

pub use compile::{MAX_DEPTH, MAX_IN, MAX_PATH, MAX_STAGES};
pub use pushdown::{CutOp, CutTree, FieldCut};

/// What a filter's stream carries: the ZTF programmes (`candidate.programid`:
/// 1 public, 2 partnership, 3 Caltech) and the paths (prefixes such as
/// `candidate` or `candidate.magpsf`; `None` carries every path).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StreamBounds {
    pub programids: Vec<i32>,
    pub fields: Option<Vec<String>>,
}

/// A problem with a pipeline: an error (from [`compile`]'s `Err`) or a
/// warning (in [`Checked::warnings`]).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Problem {
    /// Where: `pipeline[0].$match.candidate.magpfs`.
    pub location: String,
    pub message: String,
    /// A replacement for what is at the location: the nearest real path,
    /// operator or stage name, or a corrected value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<String>,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}

/// A pipeline that compiled, and its warnings.
#[derive(Clone, Debug)]
pub struct Checked {
    pub pipeline: Pipeline,
    pub warnings: Vec<Problem>,
}

/// The parts of the alert document a pipeline reads to decide whether an
/// alert passes, and to compute the fields it adds (the document's other
/// parts cannot change either).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    pub candidate: CandidateNeeds,
    /// A top-level field beyond `objectId`, `candid`, `schemavsn` and
    /// `candidate` (`prv_candidates`, `fp_hists`, a broker's own fields):
    /// the packet must be decoded.
    pub packet: bool,
    /// Those top-level fields by name, each with the keys of its records
    /// (or of its array's records) read: `prv_candidates.magpsf` needs
    /// `prv_candidates` with `Keys(["magpsf"])`, a cut on `fp_hists` itself
    /// needs it `Whole`. Empty exactly when `packet` is false.
    pub top: BTreeMap<String, CandidateNeeds>,
}

/// Which fields of `candidate` a pipeline reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CandidateNeeds {
    #[default]
    Nothing,
    /// These keys, sorted.
    Keys(Vec<String>),
    Whole,
}

/// A compiled pipeline. Cheap to clone; evaluation never panics and never
/// fails (see the README for what missing fields and bad arithmetic give).
#[derive(Clone, Debug)]
pub struct Pipeline {
    stages: Arc<[ast::Stage]>,
    needs: Needs,
    /// What the output is built from when an inclusion `$project` shapes
    /// it (the fields read and the fields kept); `None` when the output is
    /// the whole document with what the stages changed.
    output_needs: Option<Needs>,
    /// The schema and the document's shape after the last stage, to check
    /// paths into the output (a preview's `sort_by`).
    output: Arc<(paths::SchemaIndex, paths::Shape)>,
}

/// Compile `stages` (a JSON array) against the alert schema's flattened
/// paths and the filter's stream. Every problem is reported, each with its
/// location; warnings do not stop compilation.
pub fn compile(
    stages: &Value,
    schema: &[FlatField],
    stream: &StreamBounds,
) -> Result<Checked, Vec<Problem>> {
    let index = paths::SchemaIndex::new(schema);
    let compiled = compile::compile(stages, &index, stream)?;
    let needs = needs_of(compiled.inputs.iter().map(String::as_str));
    let includes = compiled
        .stages
        .iter()
        .any(|s| matches!(s, ast::Stage::Project(ast::Projection::Include { .. })));
    let output_needs = includes.then(|| {
        needs_of(
            compiled
                .inputs
                .iter()
                .chain(compiled.kept.iter())
                .map(String::as_str),
        )
    });
    Ok(Checked {
        pipeline: Pipeline {
            stages: compiled.stages.into(),
            needs,
            output_needs,
            output: Arc::new((index, compiled.shape)),
        },
        warnings: compiled.warnings,
    })
}

/// The document parts that reading `fields` (plain schema paths) takes.
pub(crate) fn needs_of<'a>(fields: impl IntoIterator<Item = &'a str>) -> Needs {
    let mut needs = Needs::default();
    let mut keys: Vec<String> = Vec::new();
    let mut whole = false;
    for field in fields {
        let (top, rest) = field.split_once('.').unwrap_or((field, ""));
        match top {
            "objectId" | "candid" | "schemavsn" => {}
            "candidate" if rest.is_empty() => whole = true,
            "candidate" => {
                let key = rest.split('.').next().unwrap_or(rest);
                if !keys.iter().any(|k| k == key) {
                    keys.push(key.to_owned());
                }
            }
            _ => {
                needs.packet = true;
                let entry = needs.top.entry(top.to_owned()).or_default();
                let key = rest.split('.').next().unwrap_or(rest);
                match entry {
                    CandidateNeeds::Whole => {}
                    _ if key.is_empty() => *entry = CandidateNeeds::Whole,
                    CandidateNeeds::Nothing => *entry = CandidateNeeds::Keys(vec![key.to_owned()]),
                    CandidateNeeds::Keys(k) => {
                        if !k.iter().any(|k| k == key) {
                            k.push(key.to_owned());
                            k.sort();
                        }
                    }
                }
            }
        }
    }
    keys.sort();
    needs.candidate = if whole {
        CandidateNeeds::Whole
    } else if keys.is_empty() {
        CandidateNeeds::Nothing
    } else {
        CandidateNeeds::Keys(keys)
    };
    needs
}

impl CandidateNeeds {
    /// Whether reading these keys of a record gives what `other` reads.
    pub fn covers(&self, other: &CandidateNeeds) -> bool {
        match (self, other) {
            (CandidateNeeds::Whole, _) | (_, CandidateNeeds::Nothing) => true,
            (CandidateNeeds::Keys(mine), CandidateNeeds::Keys(theirs)) => {
                theirs.iter().all(|k| mine.contains(k))
            }
            _ => false,
        }
    }

    /// These needs and `other`'s together.
    pub fn union(&mut self, other: &CandidateNeeds) {
        match (&mut *self, other) {
            (CandidateNeeds::Whole, _) | (_, CandidateNeeds::Nothing) => {}
            (_, CandidateNeeds::Whole) => *self = CandidateNeeds::Whole,
            (CandidateNeeds::Nothing, CandidateNeeds::Keys(k)) => {
                *self = CandidateNeeds::Keys(k.clone());
            }
            (CandidateNeeds::Keys(mine), CandidateNeeds::Keys(theirs)) => {
                for k in theirs {
                    if !mine.contains(k) {
                        mine.push(k.clone());
                    }
                }
                mine.sort();
            }
        }
    }
}

impl Pipeline {
    /// `None`: the alert is filtered out; `Some(doc)`: the (projected)
    /// document that passed.
    pub fn eval(&self, alert: &Value) -> Option<Value> {
        eval::run(&self.stages, alert).map(std::borrow::Cow::into_owned)
    }

    /// Whether the alert passes, without building the output document when
    /// no stage changes it before the last `$match`.
    pub fn passes(&self, alert: &Value) -> bool {
        self.passes_counted(alert, &mut [])
    }

    /// The number of stages (`kept` slices of [`Self::eval_counted`] have
    /// this length).
    pub fn stage_count(&self) -> usize {
        self.stages.len()
    }

    /// Whether a `$project` stage shapes the output (otherwise the output
    /// is the whole alert, with what `$addFields` added).
    pub fn projects(&self) -> bool {
        self.stages
            .iter()
            .any(|s| matches!(s, ast::Stage::Project(_)))
    }

    /// The indices of the `$match` stages, in order.
    pub fn match_stages(&self) -> Vec<usize> {
        self.stages
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s, ast::Stage::Match(_)))
            .map(|(i, _)| i)
            .collect()
    }

    /// [`Self::eval`], adding one to `kept[i]` for each `$match` stage `i`
    /// the alert passes: the per-stage counts of a preview.
    pub fn eval_counted(&self, alert: &Value, kept: &mut [u64]) -> Option<Value> {
        eval::run_counted(&self.stages, alert, kept).map(std::borrow::Cow::into_owned)
    }

    /// [`Self::passes`], counting as [`Self::eval_counted`] does.
    pub fn passes_counted(&self, alert: &Value, kept: &mut [u64]) -> bool {
        let last_match = self
            .stages
            .iter()
            .rposition(|s| matches!(s, ast::Stage::Match(_)));
        match last_match {
            None => true,
            Some(i) => eval::run_counted(&self.stages[..=i], alert, kept).is_some(),
        }
    }

    /// The normalised stages, for hashing and diffing: implicit equality
    /// written as `$eq`, keys sorted, `$set` as `$addFields`, an inclusion
    /// `$project`'s ids explicit. Compiling it again gives the same
    /// pipeline.
    pub fn canonical(&self) -> Value {
        ast::canonical_stages(&self.stages)
    }

    /// The first stage's condition over candidate fields compared with
    /// literals, for a database to apply what it can of it first.
    pub fn leading_cuts(&self) -> CutTree {
        pushdown::leading_cuts(&self.stages)
    }

    /// The parts of the alert document the pipeline reads.
    pub fn needs(&self) -> &Needs {
        &self.needs
    }

    /// The parts of the alert document its output is built from, when an
    /// inclusion `$project` shapes the output; `None` when the output is
    /// the whole document (every top-level field passes through).
    pub fn output_needs(&self) -> Option<&Needs> {
        self.output_needs.as_ref()
    }

    /// Check a path into the pipeline's output (a preview's `sort_by`).
    /// Returns whether it reads an alert field (rather than a field the
    /// pipeline added).
    pub fn check_output_path(&self, path: &str) -> Result<bool, Problem> {
        let problem = |message: String, suggestion: Option<String>| Problem {
            location: "sort_by".to_owned(),
            message,
            suggestion,
        };
        if path.is_empty()
            || path.starts_with('$')
            || path.split('.').any(str::is_empty)
            || path.len() > MAX_PATH
        {
            return Err(problem(format!("{path:?} is not a field path"), None));
        }
        let (schema, shape) = &*self.output;
        let field = ast::FieldPath::parse(path).schema_field();
        match shape.resolve(schema, &field) {
            paths::Resolved::Schema(_) => Ok(true),
            paths::Resolved::Added(_) => Ok(false),
            paths::Resolved::Removed(stage) => Err(problem(
                format!("{path} was removed by the $project of pipeline[{stage}]"),
                None,
            )),
            paths::Resolved::Unknown => {
                let hint = schema.suggest(&field, &shape.added_names());
                Err(problem(
                    match &hint {
                        Some(h) => format!(
                            "{path} is not a path of the pipeline's output (did you mean {h}?)"
                        ),
                        None => format!("{path} is not a path of the pipeline's output"),
                    },
                    hint,
                ))
            }
        }
    }
}

/// The value at a path (its first value through arrays), for sort keys.
pub(crate) fn value_at<'a>(doc: &'a Value, path: &str) -> Option<&'a Value> {
    eval::first_value(doc, &ast::FieldPath::parse(path))
}

/// Compare two sort keys of one class (numbers exactly, strings, booleans).
pub(crate) fn compare_values(a: &Value, b: &Value) -> Option<std::cmp::Ordering> {
    eval::compare(a, b)
}
