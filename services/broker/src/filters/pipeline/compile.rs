//! Compiling a pipeline's JSON: every stage, condition, expression and path
//! checked against the alert schema and the filter's stream, every problem
//! collected (not only the first), each with its location.

use super::ast::{Arith, Cond, Expr, FieldPath, Op, Projection, Stage};
use super::eval;
use super::paths::{Kind, Resolved, SchemaIndex, Shape, nearest, under};
use super::{Problem, StreamBounds};
use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// Most stages a pipeline may have.
pub const MAX_STAGES: usize = 64;
/// Deepest nesting of conditions, `$not`s and expressions (and of operand
/// values).
pub const MAX_DEPTH: usize = 32;
/// Most values of one `$in`/`$nin`.
pub const MAX_IN: usize = 10_000;
/// Longest field path, in bytes.
pub const MAX_PATH: usize = 256;

const STAGES: [&str; 4] = ["$match", "$project", "$addFields", "$set"];
const FIELD_OPS: [&str; 10] = [
    "$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists", "$not",
];
const LOGICAL: [&str; 3] = ["$and", "$or", "$nor"];
/// MongoDB names that are real but not part of this subset: they get "not
/// supported" rather than "unknown".
const OTHER_MONGO: [&str; 40] = [
    "$group",
    "$sort",
    "$limit",
    "$skip",
    "$unwind",
    "$lookup",
    "$count",
    "$facet",
    "$bucket",
    "$bucketAuto",
    "$sample",
    "$replaceRoot",
    "$replaceWith",
    "$unset",
    "$out",
    "$merge",
    "$geoNear",
    "$redact",
    "$graphLookup",
    "$sortByCount",
    "$unionWith",
    "$regex",
    "$elemMatch",
    "$size",
    "$type",
    "$all",
    "$options",
    "$expr",
    "$where",
    "$text",
    "$jsonSchema",
    "$comment",
    "$geoWithin",
    "$near",
    "$cond",
    "$ifNull",
    "$sqrt",
    "$log10",
    "$pow",
    "$round",
];

/// What compiling produced.
pub(crate) struct Compiled {
    pub stages: Vec<Stage>,
    pub warnings: Vec<Problem>,
    /// Alert fields (plain paths) the stages read.
    pub inputs: BTreeSet<String>,
    /// Alert fields (plain paths) an inclusion `$project` keeps as they
    /// are: with `inputs`, what such a pipeline's output is built from.
    pub kept: BTreeSet<String>,
    /// The document's shape after the last stage.
    pub shape: Shape,
}

/// How a path is used, for the wording of stream warnings.
#[derive(Clone, Copy)]
enum Usage {
    Match,
    Expr,
    Keep,
    Drop,
}

pub(crate) fn compile(
    stages: &Value,
    schema: &SchemaIndex,
    stream: &StreamBounds,
) -> Result<Compiled, Vec<Problem>> {
    let mut c = Compiler {
        schema,
        stream,
        errors: Vec::new(),
        warnings: Vec::new(),
        shape: Shape::default(),
        inputs: BTreeSet::new(),
        kept: BTreeSet::new(),
    };
    let Value::Array(list) = stages else {
        c.error(
            "pipeline",
            format!(
                "a pipeline is a JSON array of stages, not {}",
                json_kind(stages)
            ),
            Some("[{\"$match\": {...}}]".to_owned()),
        );
        return Err(c.errors);
    };
    if list.len() > MAX_STAGES {
        c.error(
            "pipeline",
            format!("at most {MAX_STAGES} stages (got {})", list.len()),
            None,
        );
        return Err(c.errors);
    }
    if schema.is_empty() {
        c.error(
            "pipeline",
            "no alert schema is known to check the paths against (ingest alerts or configure the schema files)",
            None,
        );
        return Err(c.errors);
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, stage) in list.iter().enumerate() {
        if let Some(s) = c.stage(i, stage) {
            out.push(s);
        }
    }
    if c.errors.is_empty() {
        Ok(Compiled {
            stages: out,
            warnings: c.warnings,
            inputs: c.inputs,
            kept: c.kept,
            shape: c.shape,
        })
    } else {
        Err(c.errors)
    }
}

struct Compiler<'a> {
    schema: &'a SchemaIndex,
    stream: &'a StreamBounds,
    errors: Vec<Problem>,
    warnings: Vec<Problem>,
    shape: Shape,
    inputs: BTreeSet<String>,
    kept: BTreeSet<String>,
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// How deep a value nests, counted up to `MAX_DEPTH + 1`.
fn depth_of(v: &Value, at: usize) -> usize {
    if at > MAX_DEPTH {
        return at;
    }
    match v {
        Value::Array(items) => items
            .iter()
            .map(|i| depth_of(i, at + 1))
            .max()
            .unwrap_or(at + 1),
        Value::Object(m) => m
            .values()
            .map(|i| depth_of(i, at + 1))
            .max()
            .unwrap_or(at + 1),
        _ => at,
    }
}

impl Compiler<'_> {
    fn error(&mut self, location: &str, message: impl Into<String>, suggestion: Option<String>) {
        self.errors.push(Problem {
            location: location.to_owned(),
            message: message.into(),
            suggestion,
        });
    }

    fn warn(&mut self, location: &str, message: impl Into<String>) {
        self.warnings.push(Problem {
            location: location.to_owned(),
            message: message.into(),
            suggestion: None,
        });
    }

    fn too_deep(&mut self, loc: &str, depth: usize) -> bool {
        if depth > MAX_DEPTH {
            self.error(loc, format!("nested deeper than {MAX_DEPTH} levels"), None);
            return true;
        }
        false
    }

    fn unknown_name(&mut self, loc: &str, name: &str, what: &str, supported: &[&str]) {
        if OTHER_MONGO.contains(&name) {
            self.error(
                loc,
                format!(
                    "{name} is MongoDB's but not part of the broker's filter language; {what}s supported here: {}",
                    supported.join(", ")
                ),
                None,
            );
        } else {
            let hint = nearest(name, supported);
            self.error(
                loc,
                match hint {
                    Some(h) => format!("unknown {what} {name:?} (did you mean {h}?)"),
                    None => format!(
                        "unknown {what} {name:?}; supported: {}",
                        supported.join(", ")
                    ),
                },
                hint.map(str::to_owned),
            );
        }
    }

    // ---- stages -------------------------------------------------------------

    fn stage(&mut self, i: usize, v: &Value) -> Option<Stage> {
        let loc = format!("pipeline[{i}]");
        let Value::Object(m) = v else {
            self.error(
                &loc,
                format!(
                    "a stage is an object with one key such as {{\"$match\": {{...}}}}, not {}",
                    json_kind(v)
                ),
                None,
            );
            return None;
        };
        let mut entries = m.iter();
        let (Some((name, body)), None) = (entries.next(), entries.next()) else {
            let keys: Vec<&str> = m.keys().map(String::as_str).collect();
            self.error(
                &loc,
                format!(
                    "a stage has exactly one key, the stage name (found {}: {})",
                    keys.len(),
                    keys.join(", ")
                ),
                None,
            );
            return None;
        };
        let loc = format!("{loc}.{name}");
        match name.as_str() {
            "$match" => {
                let Value::Object(q) = body else {
                    self.error(
                        &loc,
                        format!("$match takes a query object, not {}", json_kind(body)),
                        None,
                    );
                    return None;
                };
                self.query(q, &loc, 0).map(Stage::Match)
            }
            "$addFields" | "$set" => self.add_fields(body, &loc),
            "$project" => self.project(i, body, &loc),
            other => {
                self.unknown_name(&loc, other, "stage", &STAGES);
                None
            }
        }
    }

    /// The entries of a `$project`/`$addFields` body, nested field objects
    /// (`{"a": {"b": 1}}`) flattened to dotted names (`a.b`).
    fn field_specs<'v>(
        &mut self,
        body: &'v Map<String, Value>,
        prefix: &str,
        loc: &str,
        out: &mut Vec<(String, &'v Value, String)>,
        depth: usize,
    ) {
        if self.too_deep(loc, depth) {
            return;
        }
        for (k, v) in body {
            let name = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            let here = format!("{loc}.{k}");
            match v {
                Value::Object(inner)
                    if !inner.is_empty() && !inner.keys().any(|k| k.starts_with('$')) =>
                {
                    self.field_specs(inner, &name, &here, out, depth + 1);
                }
                _ => out.push((name, v, here)),
            }
        }
    }

    /// Check a field name a stage writes.
    fn new_field(&mut self, name: &str, loc: &str) -> bool {
        if name.is_empty()
            || name.starts_with('$')
            || name.split('.').any(str::is_empty)
            || name.len() > MAX_PATH
        {
            self.error(
                loc,
                format!("{name:?} is not a field name (dotted names, no leading $, at most {MAX_PATH} bytes)"),
                None,
            );
            return false;
        }
        true
    }

    fn add_fields(&mut self, body: &Value, loc: &str) -> Option<Stage> {
        let Value::Object(m) = body else {
            self.error(
                loc,
                format!(
                    "$addFields takes an object of new fields, not {}",
                    json_kind(body)
                ),
                None,
            );
            return None;
        };
        let mut specs = Vec::new();
        self.field_specs(m, "", loc, &mut specs, 0);
        if specs.is_empty() {
            self.error(loc, "$addFields adds at least one field", None);
            return None;
        }
        let mut fields = Vec::new();
        let mut kinds = Vec::new();
        let mut ok = true;
        for (name, v, here) in &specs {
            ok &= self.new_field(name, here);
            ok &= self.no_collision(name, specs.iter().map(|s| &s.0), here);
            match self.expr(v, here, 0) {
                Some((e, k)) => {
                    fields.push((FieldPath::parse(name), e));
                    kinds.push((name.clone(), k));
                }
                None => ok = false,
            }
        }
        // Every expression of a stage reads the document before it.
        for (name, kind) in kinds {
            self.shape.add(name, kind);
        }
        ok.then_some(Stage::AddFields(fields))
    }

    fn no_collision<'s>(
        &mut self,
        name: &str,
        all: impl Iterator<Item = &'s String>,
        loc: &str,
    ) -> bool {
        if let Some(other) = all.filter(|o| o.as_str() != name).find(|o| under(o, name)) {
            self.error(
                loc,
                format!("path collision: {name} and {other} in one stage"),
                None,
            );
            return false;
        }
        true
    }

    fn project(&mut self, stage: usize, body: &Value, loc: &str) -> Option<Stage> {
        let Value::Object(m) = body else {
            self.error(
                loc,
                format!(
                    "$project takes an object of fields, not {}",
                    json_kind(body)
                ),
                None,
            );
            return None;
        };
        let mut specs = Vec::new();
        self.field_specs(m, "", loc, &mut specs, 0);
        if specs.is_empty() {
            self.error(loc, "$project names at least one field", None);
            return None;
        }
        let mut keep = Vec::new();
        let mut drop = Vec::new();
        let mut computed = Vec::new();
        let mut computed_kinds = Vec::new();
        let (mut keep_object_id, mut keep_candid) = (true, true);
        let mut ids_kept_explicitly = false;
        let mut ok = true;
        for (name, v, here) in &specs {
            ok &= self.no_collision(name, specs.iter().map(|s| &s.0), here);
            let flag = match v {
                Value::Bool(b) => Some(*b),
                Value::Number(n) if n.as_f64() == Some(1.0) => Some(true),
                Value::Number(n) if n.as_f64() == Some(0.0) => Some(false),
                Value::Number(n) => {
                    self.error(
                        here,
                        format!("$project takes 1 to keep a field, 0 to drop it, or an expression; {n} is none of these"),
                        Some(format!("{{\"$literal\": {n}}}")),
                    );
                    ok = false;
                    continue;
                }
                _ => None,
            };
            match flag {
                Some(kept) if name == "objectId" || name == "candid" => {
                    if name == "objectId" {
                        keep_object_id = kept;
                    } else {
                        keep_candid = kept;
                    }
                    if kept {
                        ids_kept_explicitly = true;
                    } else {
                        drop.push(FieldPath::parse(name));
                    }
                }
                Some(kept) => {
                    let usage = if kept { Usage::Keep } else { Usage::Drop };
                    if let Some((path, _)) = self.path(name, here, usage) {
                        if kept {
                            keep.push(path);
                        } else {
                            drop.push(path);
                        }
                    } else {
                        ok = false;
                    }
                }
                None => {
                    ok &= self.new_field(name, here);
                    // objectId and candid are kept by a projection that
                    // keeps fields (unless it drops them, which the
                    // collision check above refuses beside a path under
                    // them), so a field computed under one collides with it.
                    if let Some(id) = ["objectId", "candid"]
                        .into_iter()
                        .find(|id| name != id && under(name, id))
                    {
                        self.error(
                            here,
                            format!(
                                "path collision: {name} and {id}, which a $project that keeps fields also keeps"
                            ),
                            Some(format!("compute the field under another name than {id}")),
                        );
                        ok = false;
                        continue;
                    }
                    match self.expr(v, here, 0) {
                        Some((e, k)) => {
                            computed.push((FieldPath::parse(name), e));
                            computed_kinds.push((name.clone(), k));
                        }
                        None => ok = false,
                    }
                }
            }
        }
        let ids_only_dropped = drop
            .iter()
            .all(|p| p.text == "objectId" || p.text == "candid");
        let including = !keep.is_empty() || !computed.is_empty() || ids_kept_explicitly;
        if including && !ids_only_dropped {
            self.error(
                loc,
                "a $project either keeps fields (1, or expressions) or drops them (0), not both; only objectId and candid may be dropped from one that keeps",
                None,
            );
            return None;
        }
        if !ok {
            return None;
        }
        if including {
            let mut kept: Vec<String> = keep.iter().map(|p| p.text.clone()).collect();
            if keep_object_id {
                kept.push("objectId".to_owned());
            }
            if keep_candid {
                kept.push("candid".to_owned());
            }
            self.shape.keep(stage, kept, computed_kinds);
            Some(Stage::Project(Projection::Include {
                keep,
                computed,
                keep_object_id,
                keep_candid,
            }))
        } else {
            self.shape
                .drop(stage, drop.iter().map(|p| p.text.clone()).collect());
            Some(Stage::Project(Projection::Exclude(drop)))
        }
    }

    // ---- paths --------------------------------------------------------------

    /// Check a path a stage reads, against the schema and what earlier
    /// stages did; note it as an input and warn when the stream lacks it.
    fn path(&mut self, text: &str, loc: &str, usage: Usage) -> Option<(FieldPath, Kind)> {
        if text.is_empty()
            || text.starts_with('$')
            || text.split('.').any(str::is_empty)
            || text.len() > MAX_PATH
        {
            self.error(
                loc,
                format!("{text:?} is not a field path (dotted names such as candidate.magpsf, at most {MAX_PATH} bytes)"),
                None,
            );
            return None;
        }
        let path = FieldPath::parse(text);
        let field = path.schema_field();
        if field.is_empty() {
            self.error(loc, format!("{text:?} is not a field path"), None);
            return None;
        }
        match self.shape.resolve(self.schema, &field) {
            Resolved::Schema(info) => {
                let kind = if info.in_array && path.segs.iter().all(|s| s.index.is_none()) {
                    Kind::Array(Box::new(info.kind.clone()))
                } else {
                    info.kind.clone()
                };
                if kind == Kind::Bytes {
                    self.error(
                        loc,
                        format!(
                            "{text} is {} ({}); filters cannot read image cutouts",
                            kind.describe(),
                            info.avro_type
                        ),
                        None,
                    );
                    return None;
                }
                match usage {
                    Usage::Match | Usage::Expr => {
                        self.inputs.insert(field.clone());
                    }
                    Usage::Keep => {
                        self.kept.insert(field.clone());
                    }
                    Usage::Drop => {}
                }
                self.stream_check(&field, loc, usage);
                Some((path, kind))
            }
            Resolved::Added(kind) => Some((path, kind)),
            Resolved::Removed(stage) => {
                self.error(
                    loc,
                    format!("{text} was removed by the $project of pipeline[{stage}]"),
                    None,
                );
                None
            }
            Resolved::Unknown => {
                let hint = self.schema.suggest(&field, &self.shape.added_names());
                self.error(
                    loc,
                    match &hint {
                        Some(h) => {
                            format!("{text} is not a path of the alert schema (did you mean {h}?)")
                        }
                        None => format!(
                            "{text} is not a path of the alert schema (see get_alert_schema)"
                        ),
                    },
                    hint,
                );
                None
            }
        }
    }

    fn stream_check(&mut self, field: &str, loc: &str, usage: Usage) {
        let Some(carried) = &self.stream.fields else {
            return;
        };
        if carried.iter().any(|p| under(field, p) || under(p, field)) {
            return;
        }
        let consequence = match usage {
            Usage::Match => "a cut on it passes no alert, exactly like a cut nothing satisfies",
            Usage::Expr => "the expression sees it as missing",
            Usage::Keep => "nothing of it reaches the output",
            Usage::Drop => return,
        };
        self.warn(
            loc,
            format!("the filter's stream does not carry {field}: {consequence}"),
        );
    }

    // ---- conditions -----------------------------------------------------------

    fn query(&mut self, q: &Map<String, Value>, loc: &str, depth: usize) -> Option<Cond> {
        if self.too_deep(loc, depth) {
            return None;
        }
        let mut parts = Vec::new();
        let mut ok = true;
        for (k, v) in q {
            let here = format!("{loc}.{k}");
            if k.starts_with('$') {
                match k.as_str() {
                    "$and" | "$or" | "$nor" => match self.logical(k, v, &here, depth) {
                        Some(c) => parts.push(c),
                        None => ok = false,
                    },
                    "$not" => {
                        self.error(
                            &here,
                            "$not applies to one field ({\"candidate.drb\": {\"$not\": {\"$lt\": 0.5}}}); to negate whole conditions use $nor",
                            Some("$nor".to_owned()),
                        );
                        ok = false;
                    }
                    "$expr" => {
                        // Usually written to compare two fields; say how to
                        // do that here, so the refusal does not read as if
                        // the comparison operators inside it were missing.
                        self.error(
                            &here,
                            "$expr (a condition on computed values) is not supported; \
                             $eq $ne $gt $gte $lt $lte $in $nin $exists apply to a field path \
                             ({\"candidate.magpsf\": {\"$lt\": 18}}), and to compare two fields, \
                             compute the difference in an $addFields stage first \
                             ({\"$addFields\": {\"d\": {\"$subtract\": [\"$candidate.magpsf\", \"$candidate.magap\"]}}}) \
                             and $match on it ({\"d\": {\"$lt\": 0}})",
                            Some("$addFields".to_owned()),
                        );
                        ok = false;
                    }
                    other => {
                        self.unknown_name(&here, other, "query operator", &LOGICAL);
                        ok = false;
                    }
                }
            } else {
                match self.field_cond(k, v, &here, depth) {
                    Some(c) => parts.push(c),
                    None => ok = false,
                }
            }
        }
        if !ok {
            return None;
        }
        Some(if parts.len() == 1 {
            parts.pop().expect("one part")
        } else {
            Cond::All(parts)
        })
    }

    fn logical(&mut self, name: &str, v: &Value, loc: &str, depth: usize) -> Option<Cond> {
        let items = match v {
            Value::Array(items) if !items.is_empty() => items,
            _ => {
                self.error(
                    loc,
                    format!(
                        "{name} takes a non-empty array of query objects, not {}",
                        json_kind(v)
                    ),
                    None,
                );
                return None;
            }
        };
        let mut parts = Vec::new();
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let here = format!("{loc}[{i}]");
            match item {
                Value::Object(q) => match self.query(q, &here, depth + 1) {
                    Some(c) => parts.push(c),
                    None => ok = false,
                },
                other => {
                    self.error(
                        &here,
                        format!("{name} takes query objects, not {}", json_kind(other)),
                        None,
                    );
                    ok = false;
                }
            }
        }
        if !ok {
            return None;
        }
        Some(match name {
            "$and" => Cond::And(parts),
            "$or" => Cond::Or(parts),
            _ => Cond::Nor(parts),
        })
    }

    fn field_cond(&mut self, field: &str, v: &Value, loc: &str, depth: usize) -> Option<Cond> {
        let resolved = self.path(field, loc, Usage::Match);
        // Check the operators even when the path is bad: every problem at once.
        let kind = resolved.as_ref().map_or(Kind::Any, |(_, k)| k.clone());
        let ops = match v {
            Value::Object(m) if !m.is_empty() && m.keys().all(|k| k.starts_with('$')) => {
                self.ops(m, &kind, field, loc, depth)
            }
            Value::Object(m) if m.keys().any(|k| k.starts_with('$')) => {
                self.error(
                    loc,
                    "an object mixing operators ($...) and field names; write dotted paths for fields",
                    None,
                );
                None
            }
            Value::Object(m) => {
                let first = m.keys().next().map_or("field", String::as_str);
                self.error(
                    loc,
                    format!("comparing {field} with a whole object matches only an identical object; compare its fields with dotted paths"),
                    Some(format!("{field}.{first}")),
                );
                None
            }
            other => self
                .operand(&kind, other, field, "$eq", loc, true)
                .then(|| vec![Op::Eq(other.clone())]),
        };
        let (path, _) = resolved?;
        let ops = ops?;
        let cond = Cond::Field { path, ops };
        self.programid_check(&cond, loc);
        Some(cond)
    }

    fn ops(
        &mut self,
        m: &Map<String, Value>,
        kind: &Kind,
        field: &str,
        loc: &str,
        depth: usize,
    ) -> Option<Vec<Op>> {
        if self.too_deep(loc, depth) {
            return None;
        }
        let mut ops = Vec::new();
        let mut ok = true;
        for (name, operand) in m {
            let here = format!("{loc}.{name}");
            let op = match name.as_str() {
                "$eq" | "$ne" => self
                    .operand(kind, operand, field, name, &here, true)
                    .then(|| {
                        if name == "$eq" {
                            Op::Eq(operand.clone())
                        } else {
                            Op::Ne(operand.clone())
                        }
                    }),
                "$gt" | "$gte" | "$lt" | "$lte" => self
                    .operand(kind, operand, field, name, &here, false)
                    .then(|| match name.as_str() {
                        "$gt" => Op::Gt(operand.clone()),
                        "$gte" => Op::Gte(operand.clone()),
                        "$lt" => Op::Lt(operand.clone()),
                        _ => Op::Lte(operand.clone()),
                    }),
                "$in" | "$nin" => self.in_list(kind, operand, field, name, &here).map(|vs| {
                    if name == "$in" {
                        Op::In(vs)
                    } else {
                        Op::Nin(vs)
                    }
                }),
                "$exists" => match operand {
                    Value::Bool(b) => Some(Op::Exists(*b)),
                    Value::Number(n) if n.as_f64() == Some(0.0) || n.as_f64() == Some(1.0) => {
                        Some(Op::Exists(n.as_f64() == Some(1.0)))
                    }
                    other => {
                        self.error(
                            &here,
                            format!("$exists takes true or false, not {}", json_kind(other)),
                            Some("true".to_owned()),
                        );
                        None
                    }
                },
                "$not" => {
                    match operand {
                        Value::Object(inner)
                            if !inner.is_empty() && inner.keys().all(|k| k.starts_with('$')) =>
                        {
                            self.ops(inner, kind, field, &here, depth + 1).map(Op::Not)
                        }
                        other => {
                            self.error(
                            &here,
                            format!("$not takes an object of operators such as {{\"$gt\": 5}}, not {}", json_kind(other)),
                            None,
                        );
                            None
                        }
                    }
                }
                other => {
                    self.unknown_name(&here, other, "operator", &FIELD_OPS);
                    None
                }
            };
            match op {
                Some(op) => ops.push(op),
                None => ok = false,
            }
        }
        ok.then_some(ops)
    }

    fn in_list(
        &mut self,
        kind: &Kind,
        operand: &Value,
        field: &str,
        name: &str,
        loc: &str,
    ) -> Option<Vec<Value>> {
        let Value::Array(items) = operand else {
            self.error(
                loc,
                format!(
                    "{name} takes an array of values, not {}",
                    json_kind(operand)
                ),
                Some(format!("[{operand}]")),
            );
            return None;
        };
        if items.len() > MAX_IN {
            self.error(
                loc,
                format!("{name} takes at most {MAX_IN} values (got {})", items.len()),
                None,
            );
            return None;
        }
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            ok &= self.operand(kind, item, field, name, &format!("{loc}[{i}]"), true);
        }
        ok.then(|| items.clone())
    }

    /// Check one operand against the kind of the field it is compared with.
    fn operand(
        &mut self,
        kind: &Kind,
        operand: &Value,
        field: &str,
        op: &str,
        loc: &str,
        equality: bool,
    ) -> bool {
        if depth_of(operand, 0) > MAX_DEPTH {
            self.error(
                loc,
                format!("an operand nested deeper than {MAX_DEPTH} levels"),
                None,
            );
            return false;
        }
        let element = kind.element();
        match (operand, element) {
            (Value::Object(_), _) => {
                self.error(
                    loc,
                    format!("{op} compares with a value (a number, string, boolean or null), not an object"),
                    None,
                );
                false
            }
            (Value::Array(_), _) if !equality => {
                self.error(
                    loc,
                    format!("{op} compares with one value, not an array"),
                    None,
                );
                false
            }
            (Value::Array(_), _) => {
                if matches!(kind, Kind::Array(_) | Kind::Any) {
                    return true;
                }
                self.error(
                    loc,
                    format!("{field} is {}: comparing it with an array matches nothing; to match any of several values use $in", kind.describe()),
                    Some(serde_json::json!({ "$in": operand }).to_string()),
                );
                false
            }
            (Value::Null, _) | (_, Kind::Any) => true,
            (_, Kind::Record | Kind::Map | Kind::Bytes) => {
                self.error(
                    loc,
                    format!(
                        "{field} is {}: {op} cannot compare it with {}; compare one of its fields",
                        element.describe(),
                        json_kind(operand)
                    ),
                    None,
                );
                false
            }
            (Value::Number(_), Kind::Number)
            | (Value::String(_), Kind::String)
            | (Value::Bool(_), Kind::Bool) => true,
            (Value::String(s), Kind::Number) => {
                let hint = s
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .and_then(serde_json::Number::from_f64);
                self.error(
                    loc,
                    format!("type mismatch: {field} is {} but {op} compares it with the string {s:?}, which no alert matches", kind.describe()),
                    hint.map(|n| n.to_string()),
                );
                false
            }
            (Value::Number(n), Kind::String) => {
                self.error(
                    loc,
                    format!("type mismatch: {field} is {} but {op} compares it with the number {n}, which no alert matches", kind.describe()),
                    Some(format!("\"{n}\"")),
                );
                false
            }
            (other, _) => {
                self.error(
                    loc,
                    format!("type mismatch: {field} is {} but {op} compares it with {}, which no alert matches", kind.describe(), json_kind(other)),
                    None,
                );
                false
            }
        }
    }

    /// Warn when a cut on `candidate.programid` reaches outside the stream's
    /// programmes.
    fn programid_check(&mut self, cond: &Cond, loc: &str) {
        let Cond::Field { path, ops } = cond else {
            return;
        };
        if path.schema_field() != "candidate.programid" || self.stream.programids.is_empty() {
            return;
        }
        if !matches!(
            self.shape.resolve(self.schema, "candidate.programid"),
            Resolved::Schema(_)
        ) {
            return;
        }
        let carried: Vec<String> = self.stream.programids.iter().map(i32::to_string).collect();
        let carried = carried.join(", ");
        let passing = self
            .stream
            .programids
            .iter()
            .filter(|p| {
                let doc = serde_json::json!({"candidate": {"programid": p}});
                eval::matches(cond, &doc)
            })
            .count();
        if passing == 0 {
            self.warn(
                loc,
                format!("no programme of the filter's stream (programid {carried}) passes this cut: the filter would pass no alert"),
            );
            return;
        }
        let mut outside: Vec<String> = Vec::new();
        let mut note = |v: &Value| {
            if let Some(n) = v.as_i64()
                && !self.stream.programids.iter().any(|p| i64::from(*p) == n)
                && !outside.contains(&n.to_string())
            {
                outside.push(n.to_string());
            }
        };
        for op in ops {
            match op {
                Op::Eq(v) => note(v),
                Op::In(vs) => vs.iter().for_each(&mut note),
                _ => {}
            }
        }
        if !outside.is_empty() {
            self.warn(
                loc,
                format!(
                    "programid {} is not in the filter's stream (it carries programid {carried}): those alerts never reach this filter",
                    outside.join(", ")
                ),
            );
        }
    }

    // ---- expressions ------------------------------------------------------------

    fn expr(&mut self, v: &Value, loc: &str, depth: usize) -> Option<(Expr, Kind)> {
        if self.too_deep(loc, depth) {
            return None;
        }
        match v {
            Value::String(s) if s.starts_with("$$") => {
                self.error(loc, format!("variables ({s}) are not supported"), None);
                None
            }
            Value::String(s) if s.starts_with('$') => {
                let (path, kind) = self.path(&s[1..], loc, Usage::Expr)?;
                Some((Expr::Path(path), kind))
            }
            Value::String(_) => Some((Expr::Literal(v.clone()), Kind::String)),
            Value::Number(_) => Some((Expr::Literal(v.clone()), Kind::Number)),
            Value::Bool(_) => Some((Expr::Literal(v.clone()), Kind::Bool)),
            Value::Null => Some((Expr::Literal(Value::Null), Kind::Any)),
            Value::Array(_) => {
                self.error(
                    loc,
                    "an array is not an expression here; write a constant array as {\"$literal\": [...]}",
                    None,
                );
                None
            }
            Value::Object(m) => {
                let mut entries = m.iter();
                let (Some((name, arg)), None) = (entries.next(), entries.next()) else {
                    self.error(
                        loc,
                        "an expression object has exactly one operator, such as {\"$add\": [\"$candidate.magpsf\", 1]}",
                        None,
                    );
                    return None;
                };
                let here = format!("{loc}.{name}");
                if name == "$literal" {
                    if depth_of(arg, 0) > MAX_DEPTH {
                        self.error(
                            &here,
                            format!("a literal nested deeper than {MAX_DEPTH} levels"),
                            None,
                        );
                        return None;
                    }
                    let kind = match arg {
                        Value::Number(_) => Kind::Number,
                        Value::String(_) => Kind::String,
                        Value::Bool(_) => Kind::Bool,
                        _ => Kind::Any,
                    };
                    return Some((Expr::Literal(arg.clone()), kind));
                }
                let Some(op) = Arith::parse(name) else {
                    let mut names: Vec<&str> = Arith::ALL.iter().map(|a| a.name()).collect();
                    names.push("$literal");
                    self.unknown_name(&here, name, "expression operator", &names);
                    return None;
                };
                self.arith(op, arg, &here, depth)
            }
        }
    }

    fn arith(&mut self, op: Arith, arg: &Value, loc: &str, depth: usize) -> Option<(Expr, Kind)> {
        let args: Vec<(&Value, String)> = match arg {
            Value::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, a)| (a, format!("{loc}[{i}]")))
                .collect(),
            single => vec![(single, loc.to_owned())],
        };
        let (least, most) = op.arity();
        if args.len() < least || args.len() > most {
            let wanted = match (least, most) {
                (1, 1) => "one operand".to_owned(),
                (l, m) if l == m => format!("{l} operands"),
                (l, _) => format!("at least {l} operand"),
            };
            self.error(
                loc,
                format!("{} takes {wanted} (got {})", op.name(), args.len()),
                None,
            );
            return None;
        }
        let mut out = Vec::with_capacity(args.len());
        let mut ok = true;
        for (a, here) in args {
            match self.expr(a, &here, depth + 1) {
                Some((e, kind)) => {
                    let numeric = matches!(kind.element(), Kind::Number | Kind::Any)
                        && !matches!(kind, Kind::Array(_));
                    if !numeric {
                        self.error(
                            &here,
                            format!(
                                "{} takes numbers; this operand is {}",
                                op.name(),
                                kind.describe()
                            ),
                            None,
                        );
                        ok = false;
                    }
                    out.push(e);
                }
                None => ok = false,
            }
        }
        ok.then_some((Expr::Arith(op, out), Kind::Number))
    }
}
