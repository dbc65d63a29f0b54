//! Evaluation: query conditions with MongoDB's array semantics, exact
//! number comparison, arithmetic that never fails (a result that is not a
//! finite number is null), and projections.
//!
//! Conditions read the document by reference; only `$addFields` and
//! `$project` build a new document.

use super::ast::{Arith, Cond, Expr, FieldPath, Op, Projection, Seg, Stage};
use serde_json::{Map, Number, Value};
use std::borrow::Cow;
use std::cmp::Ordering;

/// Run `stages` over `doc`: `None` when a `$match` drops it.
pub(crate) fn run<'a>(stages: &[Stage], doc: &'a Value) -> Option<Cow<'a, Value>> {
    run_counted(stages, doc, &mut [])
}

/// [`run`], adding one to `kept[i]` for each `$match` stage `i` the
/// document passes (a stage it never reaches counts nothing). `kept` may be
/// shorter than `stages`: stages beyond it are not counted.
pub(crate) fn run_counted<'a>(
    stages: &[Stage],
    doc: &'a Value,
    kept: &mut [u64],
) -> Option<Cow<'a, Value>> {
    let mut current = Cow::Borrowed(doc);
    for (i, stage) in stages.iter().enumerate() {
        match stage {
            Stage::Match(cond) => {
                if !matches(cond, &current) {
                    return None;
                }
                if let Some(n) = kept.get_mut(i) {
                    *n += 1;
                }
            }
            Stage::AddFields(fields) => {
                let values: Vec<Option<Value>> =
                    fields.iter().map(|(_, e)| eval_expr(e, &current)).collect();
                let mut owned = current.into_owned();
                for ((path, _), value) in fields.iter().zip(values) {
                    if let Some(v) = value {
                        set_path(&mut owned, &path.segs, v);
                    }
                }
                current = Cow::Owned(owned);
            }
            Stage::Project(p) => current = Cow::Owned(project(p, &current)),
        }
    }
    Some(current)
}

// ---- conditions -------------------------------------------------------------

pub(crate) fn matches(cond: &Cond, doc: &Value) -> bool {
    match cond {
        Cond::All(parts) | Cond::And(parts) => parts.iter().all(|c| matches(c, doc)),
        Cond::Or(parts) => parts.iter().any(|c| matches(c, doc)),
        Cond::Nor(parts) => !parts.iter().any(|c| matches(c, doc)),
        Cond::Field { path, ops } => ops.iter().all(|op| op_matches(op, doc, &path.segs)),
    }
}

/// What a walk along a path found: whether the path exists at all, and
/// whether some value there satisfied the test.
#[derive(Clone, Copy, Default)]
struct Walk {
    found: bool,
    hit: bool,
}

/// Visit the values `segs` reaches in `v`, MongoDB's way: an array met on
/// the way is entered (each element document continues the path; a numeric
/// segment also names an element), and at the end of the path both an
/// array and each of its elements are tested. Stops at the first hit.
fn walk(v: &Value, segs: &[Seg], test: &mut dyn FnMut(&Value) -> bool) -> Walk {
    let Some((seg, rest)) = segs.split_first() else {
        let mut hit = test(v);
        if !hit && let Value::Array(items) = v {
            hit = items.iter().any(&mut *test);
        }
        return Walk { found: true, hit };
    };
    match v {
        Value::Object(m) => match m.get(&*seg.key) {
            Some(child) => walk(child, rest, test),
            None => Walk::default(),
        },
        Value::Array(items) => {
            let mut out = Walk::default();
            if let Some(i) = seg.index
                && let Some(item) = items.get(i)
            {
                out = walk(item, rest, test);
                if out.hit {
                    return out;
                }
            }
            for item in items {
                if item.is_object() {
                    let w = walk(item, segs, test);
                    out.found |= w.found;
                    if w.hit {
                        out.hit = true;
                        return out;
                    }
                }
            }
            out
        }
        _ => Walk::default(),
    }
}

fn op_matches(op: &Op, doc: &Value, segs: &[Seg]) -> bool {
    match op {
        Op::Eq(x) => equals_at(doc, segs, x),
        Op::Ne(x) => !equals_at(doc, segs, x),
        Op::In(xs) => xs.iter().any(|x| equals_at(doc, segs, x)),
        Op::Nin(xs) => !xs.iter().any(|x| equals_at(doc, segs, x)),
        Op::Gt(x) => compare_at(doc, segs, x, |o| o == Ordering::Greater),
        Op::Gte(x) => compare_at(doc, segs, x, |o| o != Ordering::Less),
        Op::Lt(x) => compare_at(doc, segs, x, |o| o == Ordering::Less),
        Op::Lte(x) => compare_at(doc, segs, x, |o| o != Ordering::Greater),
        Op::Exists(want) => walk(doc, segs, &mut |_| true).found == *want,
        Op::Not(inner) => !inner.iter().all(|op| op_matches(op, doc, segs)),
    }
}

/// `{path: x}`: some value there equals `x`; `null` also matches a path
/// that does not exist.
fn equals_at(doc: &Value, segs: &[Seg], x: &Value) -> bool {
    let w = walk(doc, segs, &mut |v| equal(v, x));
    w.hit || (x.is_null() && !w.found)
}

/// An ordering comparison: some value of the same class (numbers with
/// numbers, strings with strings, booleans with booleans) stands in the
/// wanted order to `x`. `$gte`/`$lte` with `null` behave as equality.
fn compare_at(doc: &Value, segs: &[Seg], x: &Value, want: fn(Ordering) -> bool) -> bool {
    if x.is_null() {
        return want(Ordering::Equal) && equals_at(doc, segs, x);
    }
    walk(doc, segs, &mut |v| compare(v, x).is_some_and(want)).hit
}

/// The order of two values of one class; `None` across classes.
pub(crate) fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => compare_numbers(x, y),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        (Value::Bool(x), Value::Bool(y)) => Some(x.cmp(y)),
        (Value::Null, Value::Null) => Some(Ordering::Equal),
        _ => None,
    }
}

/// Equality with numbers compared by value (`1 == 1.0`), arrays element by
/// element and objects field by field.
pub(crate) fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => compare_numbers(x, y) == Some(Ordering::Equal),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| equal(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| equal(v, w)))
        }
        _ => a == b,
    }
}

/// A JSON number as an exact integer or a float.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Num {
    Int(i128),
    Float(f64),
}

impl Num {
    pub fn of(n: &Number) -> Num {
        if let Some(i) = n.as_i64() {
            Num::Int(i128::from(i))
        } else if let Some(u) = n.as_u64() {
            Num::Int(i128::from(u))
        } else {
            Num::Float(n.as_f64().unwrap_or(f64::NAN))
        }
    }

    fn float(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }

    /// As JSON: integers that fit 64 bits stay integers; anything else
    /// that is not a finite number is null.
    fn to_json(self) -> Value {
        match self {
            Num::Int(i) => {
                if let Ok(v) = i64::try_from(i) {
                    Value::from(v)
                } else if let Ok(v) = u64::try_from(i) {
                    Value::from(v)
                } else {
                    Number::from_f64(i as f64).map_or(Value::Null, Value::Number)
                }
            }
            Num::Float(f) => Number::from_f64(f).map_or(Value::Null, Value::Number),
        }
    }
}

fn compare_numbers(a: &Number, b: &Number) -> Option<Ordering> {
    match (Num::of(a), Num::of(b)) {
        (Num::Int(x), Num::Int(y)) => Some(x.cmp(&y)),
        (Num::Float(x), Num::Float(y)) => x.partial_cmp(&y),
        (Num::Int(x), Num::Float(y)) => int_float(x, y),
        (Num::Float(x), Num::Int(y)) => int_float(y, x).map(Ordering::reverse),
    }
}

/// Compare an integer with a float exactly (no rounding of large integers
/// to the nearest double).
fn int_float(i: i128, f: f64) -> Option<Ordering> {
    if f.is_nan() {
        return None;
    }
    // Beyond ±2^100 every i128 we hold (at most 2^64) is on one side.
    const FAR: f64 = 1.267_650_600_228_229_4e30;
    if f >= FAR {
        return Some(Ordering::Less);
    }
    if f <= -FAR {
        return Some(Ordering::Greater);
    }
    let t = f.trunc();
    // In range, so exact: a float below 2^100 with no fraction is an integer.
    let ti = t as i128;
    Some(i.cmp(&ti).then(if f > t {
        Ordering::Less
    } else if f < t {
        Ordering::Greater
    } else {
        Ordering::Equal
    }))
}

// ---- expressions ------------------------------------------------------------

/// The value of an expression; `None` when it names a missing field.
pub(crate) fn eval_expr(expr: &Expr, doc: &Value) -> Option<Value> {
    match expr {
        Expr::Literal(v) => Some(v.clone()),
        Expr::Path(p) => get_path(doc, &p.segs),
        Expr::Arith(op, args) => Some(arith(*op, args, doc)),
    }
}

/// A field path's value in an expression: through arrays, the values of
/// each element (an array), as MongoDB gives `"$prv_candidates.magpsf"`.
pub(crate) fn get_path(v: &Value, segs: &[Seg]) -> Option<Value> {
    let Some((seg, rest)) = segs.split_first() else {
        return Some(v.clone());
    };
    match v {
        Value::Object(m) => get_path(m.get(&*seg.key)?, rest),
        Value::Array(items) => {
            if let Some(i) = seg.index {
                return get_path(items.get(i)?, rest);
            }
            let out: Vec<Value> = items
                .iter()
                .filter(|i| i.is_object())
                .filter_map(|i| get_path(i, segs))
                .collect();
            Some(Value::Array(out))
        }
        _ => None,
    }
}

/// Arithmetic: null when an operand is missing, null or not a number, and
/// when the result is not a finite number (division by zero, overflow).
fn arith(op: Arith, args: &[Expr], doc: &Value) -> Value {
    let mut nums = Vec::with_capacity(args.len());
    for a in args {
        match eval_expr(a, doc) {
            Some(Value::Number(n)) => nums.push(Num::of(&n)),
            _ => return Value::Null,
        }
    }
    let result = match (op, nums.as_slice()) {
        (Arith::Add, [first, rest @ ..]) => rest.iter().try_fold(*first, |a, b| Some(add(a, *b))),
        (Arith::Multiply, [first, rest @ ..]) => {
            rest.iter().try_fold(*first, |a, b| Some(multiply(a, *b)))
        }
        (Arith::Subtract, [a, b]) => Some(subtract(*a, *b)),
        (Arith::Divide, [a, b]) => {
            let d = b.float();
            (d != 0.0).then(|| Num::Float(a.float() / d))
        }
        (Arith::Mod, [a, b]) => modulo(*a, *b),
        (Arith::Abs, [a]) => Some(match a {
            Num::Int(i) => Num::Int(i.abs()),
            Num::Float(f) => Num::Float(f.abs()),
        }),
        _ => None,
    };
    result.map_or(Value::Null, Num::to_json)
}

fn add(a: Num, b: Num) -> Num {
    match (a, b) {
        (Num::Int(x), Num::Int(y)) => x
            .checked_add(y)
            .map_or(Num::Float(x as f64 + y as f64), Num::Int),
        _ => Num::Float(a.float() + b.float()),
    }
}

fn subtract(a: Num, b: Num) -> Num {
    match (a, b) {
        (Num::Int(x), Num::Int(y)) => x
            .checked_sub(y)
            .map_or(Num::Float(x as f64 - y as f64), Num::Int),
        _ => Num::Float(a.float() - b.float()),
    }
}

fn multiply(a: Num, b: Num) -> Num {
    match (a, b) {
        (Num::Int(x), Num::Int(y)) => x
            .checked_mul(y)
            .map_or(Num::Float(x as f64 * y as f64), Num::Int),
        _ => Num::Float(a.float() * b.float()),
    }
}

/// The remainder with the dividend's sign (MongoDB's `$mod`); none by zero.
fn modulo(a: Num, b: Num) -> Option<Num> {
    match (a, b) {
        (Num::Int(x), Num::Int(y)) => x.checked_rem(y).map(Num::Int),
        _ => {
            let d = b.float();
            (d != 0.0).then(|| Num::Float(a.float() % d))
        }
    }
}

// ---- documents ----------------------------------------------------------------

/// Set `segs` to `value`, creating objects on the way; an array on the way
/// gets the field in each of its element documents (MongoDB's
/// `$addFields` through an array), and a scalar on the way is replaced by
/// an object.
pub(crate) fn set_path(doc: &mut Value, segs: &[Seg], value: Value) {
    let Some((seg, rest)) = segs.split_first() else {
        *doc = value;
        return;
    };
    match doc {
        Value::Object(m) => {
            if rest.is_empty() {
                m.insert(seg.key.to_string(), value);
                return;
            }
            let child = m
                .entry(seg.key.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            set_path(child, rest, value);
        }
        Value::Array(items) => {
            for item in items.iter_mut().filter(|i| i.is_object()) {
                set_path(item, segs, value.clone());
            }
        }
        other => {
            *other = Value::Object(Map::new());
            set_path(other, segs, value);
        }
    }
}

fn project(p: &Projection, doc: &Value) -> Value {
    match p {
        Projection::Include {
            keep,
            computed,
            keep_object_id,
            keep_candid,
        } => {
            let mut out = Value::Object(Map::new());
            for (id, kept) in [("objectId", keep_object_id), ("candid", keep_candid)] {
                if *kept && let (Some(v), Value::Object(m)) = (doc.get(id), &mut out) {
                    m.insert(id.to_owned(), v.clone());
                }
            }
            for path in keep {
                copy_path(doc, &path.segs, &mut out);
            }
            for (path, expr) in computed {
                if let Some(v) = eval_expr(expr, doc) {
                    set_path(&mut out, &path.segs, v);
                }
            }
            out
        }
        Projection::Exclude(paths) => {
            let mut out = doc.clone();
            for path in paths {
                remove_path(&mut out, &path.segs);
            }
            out
        }
    }
}

/// Copy what `segs` names from `src` into `dst` (an object), keeping the
/// structure: through an array, each element document keeps only the path.
fn copy_path(src: &Value, segs: &[Seg], dst: &mut Value) {
    let Some((seg, rest)) = segs.split_first() else {
        return;
    };
    let (Value::Object(from), Value::Object(to)) = (src, &mut *dst) else {
        return;
    };
    let Some(v) = from.get(&*seg.key) else {
        return;
    };
    if rest.is_empty() {
        to.insert(seg.key.to_string(), v.clone());
        return;
    }
    match v {
        Value::Object(_) => {
            let child = to
                .entry(seg.key.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            if child.is_object() {
                copy_path(v, rest, child);
            }
        }
        Value::Array(items) => {
            let elements: Vec<&Value> = items.iter().filter(|i| i.is_object()).collect();
            let child = to
                .entry(seg.key.to_string())
                .or_insert_with(|| Value::Array(vec![Value::Object(Map::new()); elements.len()]));
            if let Value::Array(outs) = child {
                for (item, out) in elements.into_iter().zip(outs.iter_mut()) {
                    copy_path(item, rest, out);
                }
            }
        }
        _ => {}
    }
}

fn remove_path(doc: &mut Value, segs: &[Seg]) {
    let Some((seg, rest)) = segs.split_first() else {
        return;
    };
    match doc {
        Value::Object(m) => {
            if rest.is_empty() {
                m.remove(&*seg.key);
            } else if let Some(child) = m.get_mut(&*seg.key) {
                remove_path(child, rest);
            }
        }
        Value::Array(items) => {
            for item in items.iter_mut().filter(|i| i.is_object()) {
                remove_path(item, segs);
            }
        }
        _ => {}
    }
}

/// The value a sort key reads: the first value the path reaches (the
/// first element of an array).
pub(crate) fn first_value<'a>(doc: &'a Value, path: &FieldPath) -> Option<&'a Value> {
    first_plain(doc, &path.segs)
}

fn first_plain<'a>(v: &'a Value, segs: &[Seg]) -> Option<&'a Value> {
    let Some((seg, rest)) = segs.split_first() else {
        return match v {
            Value::Array(items) => items.first(),
            other => Some(other),
        };
    };
    match v {
        Value::Object(m) => first_plain(m.get(&*seg.key)?, rest),
        Value::Array(items) => {
            if let Some(i) = seg.index {
                return first_plain(items.get(i)?, rest);
            }
            items
                .iter()
                .filter(|i| i.is_object())
                .find_map(|i| first_plain(i, segs))
        }
        _ => None,
    }
}
