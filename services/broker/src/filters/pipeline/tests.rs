//! Unit tests of the pipeline language: each operator, MongoDB's array
//! semantics, expressions, projections, every kind of problem, stream
//! warnings, the canonical form, and garbage that must not panic.

use super::*;
use crate::alerts::schema::{FlatField, flatten_files};
use serde_json::json;
use std::sync::OnceLock;

/// The real ZTF 4.02 schema, flattened.
fn schema() -> &'static [FlatField] {
    static SCHEMA: OnceLock<Vec<FlatField>> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/data/ztf/schema/v4.02");
        flatten_files(&dir).expect("the ZTF schema files").1
    })
}

fn all() -> StreamBounds {
    StreamBounds {
        programids: vec![1, 2, 3],
        fields: None,
    }
}

fn ok(stages: Value) -> Pipeline {
    match compile(&stages, schema(), &all()) {
        Ok(c) => c.pipeline,
        Err(p) => panic!("{stages} does not compile: {p:#?}"),
    }
}

fn problems(stages: Value) -> Vec<Problem> {
    match compile(&stages, schema(), &all()) {
        Ok(_) => panic!("{stages} compiled"),
        Err(p) => p,
    }
}

fn warnings(stages: Value, stream: &StreamBounds) -> Vec<Problem> {
    match compile(&stages, schema(), stream) {
        Ok(c) => c.warnings,
        Err(p) => panic!("{stages} does not compile: {p:#?}"),
    }
}

fn alert() -> Value {
    json!({
        "objectId": "ZTF24aavxtjp",
        "candid": 2752190655615010063_i64,
        "schemavsn": "4.02",
        "candidate": {
            "jd": 2460506.69, "fid": 1, "programid": 1, "magpsf": 16.3, "sigmapsf": 0.05,
            "drb": 0.99, "rb": 0.8, "isdiffpos": "t", "ndethist": 3, "ssdistnr": -999.0,
            "sgscore1": 0.1, "distpsnr1": 2.5, "ssnamenr": null, "nbad": 0
        },
        "prv_candidates": [
            {"jd": 2460500.5, "magpsf": 17.5, "fid": 1},
            {"jd": 2460501.5, "magpsf": null, "diffmaglim": 20.1, "fid": 2},
            {"jd": 2460502.5, "magpsf": 16.9, "fid": 1}
        ]
    })
}

fn passes(stages: Value, doc: &Value) -> bool {
    let p = ok(stages);
    let by_eval = p.eval(doc).is_some();
    assert_eq!(by_eval, p.passes(doc), "eval and passes agree");
    by_eval
}

fn m(q: Value) -> Value {
    json!([{"$match": q}])
}

#[test]
fn comparison_operators() {
    let a = alert();
    for (q, want) in [
        (json!({"candidate.drb": {"$gt": 0.5}}), true),
        (json!({"candidate.drb": {"$gt": 0.99}}), false),
        (json!({"candidate.drb": {"$gte": 0.99}}), true),
        (json!({"candidate.magpsf": {"$lt": 16.3}}), false),
        (json!({"candidate.magpsf": {"$lte": 16.3}}), true),
        (json!({"candidate.fid": {"$eq": 1}}), true),
        (json!({"candidate.fid": {"$eq": 1.0}}), true),
        (json!({"candidate.fid": {"$ne": 1}}), false),
        (json!({"candidate.fid": {"$ne": 2}}), true),
        (json!({"candidate.isdiffpos": {"$in": ["t", "1"]}}), true),
        (json!({"candidate.isdiffpos": {"$in": ["f", "0"]}}), false),
        (json!({"candidate.isdiffpos": {"$nin": ["f", "0"]}}), true),
        (json!({"candidate.isdiffpos": {"$nin": ["t"]}}), false),
        (json!({"candidate.ssnamenr": {"$exists": true}}), true),
        (json!({"candidate.drb": {"$exists": false}}), false),
        (json!({"candidate.ssnamenr": null}), true),
        (json!({"candidate.ssnamenr": {"$ne": null}}), false),
        (json!({"candidate.drb": null}), false),
        // `null` also matches a field the document lacks.
        (json!({"candidate.drbversion": null}), true),
        (json!({"candidate.drbversion": {"$exists": true}}), false),
        (json!({"candidate.drb": {"$not": {"$lt": 0.5}}}), true),
        (json!({"candidate.drb": {"$not": {"$gt": 0.5}}}), false),
        // A missing field satisfies $not and $ne, as in MongoDB.
        (
            json!({"candidate.drbversion": {"$not": {"$gt": "a"}}}),
            true,
        ),
        // Ordering comparisons need one class: a number never orders a null.
        (json!({"candidate.ssnamenr": {"$gt": "a"}}), false),
        (json!({"candidate.ssnamenr": {"$gte": null}}), true),
        (json!({"candidate.ssnamenr": {"$gt": null}}), false),
        (json!({"objectId": {"$gte": "ZTF24"}}), true),
    ] {
        assert_eq!(passes(m(q.clone()), &a), want, "{q}");
    }
}

#[test]
fn implicit_equality_and_conjunction_and_logical_operators() {
    let a = alert();
    for (q, want) in [
        (json!({"candidate.isdiffpos": "t"}), true),
        (
            json!({"candidate.isdiffpos": "t", "candidate.fid": 2}),
            false,
        ),
        (
            json!({"candidate.isdiffpos": "t", "candidate.drb": {"$gt": 0.5, "$lt": 1}}),
            true,
        ),
        (json!({"candidate.drb": {"$gt": 0.5, "$lt": 0.9}}), false),
        (
            json!({"$and": [{"candidate.fid": 1}, {"candidate.drb": {"$gt": 0.5}}]}),
            true,
        ),
        (
            json!({"$and": [{"candidate.fid": 1}, {"candidate.drb": {"$gt": 0.995}}]}),
            false,
        ),
        (
            json!({"$or": [{"candidate.fid": 2}, {"candidate.drb": {"$gt": 0.5}}]}),
            true,
        ),
        (
            json!({"$or": [{"candidate.fid": 2}, {"candidate.drb": {"$lt": 0.5}}]}),
            false,
        ),
        (
            json!({"$nor": [{"candidate.fid": 2}, {"candidate.drb": {"$lt": 0.5}}]}),
            true,
        ),
        (json!({"$nor": [{"candidate.fid": 1}]}), false),
        (
            json!({"candidate.fid": 1, "$or": [{"candidate.ndethist": {"$lte": 1}}, {"candidate.ssdistnr": {"$lt": 0}}]}),
            true,
        ),
        (json!({}), true),
    ] {
        assert_eq!(passes(m(q.clone()), &a), want, "{q}");
    }
    // Successive $match stages are a conjunction.
    assert!(!passes(
        json!([{"$match": {"candidate.fid": 1}}, {"$match": {"candidate.fid": 2}}]),
        &a
    ));
}

#[test]
fn array_semantics_follow_mongodb() {
    let a = alert();
    for (q, want) in [
        // Some element satisfies the condition.
        (json!({"prv_candidates.magpsf": {"$lt": 17}}), true),
        (json!({"prv_candidates.magpsf": {"$lt": 16}}), false),
        (json!({"prv_candidates.magpsf": 16.9}), true),
        (json!({"prv_candidates.fid": {"$in": [2, 3]}}), true),
        // $ne/$nin: no element equals.
        (json!({"prv_candidates.fid": {"$ne": 2}}), false),
        (json!({"prv_candidates.fid": {"$ne": 3}}), true),
        (json!({"prv_candidates.fid": {"$nin": [1]}}), false),
        // null matches the element whose magpsf is null.
        (json!({"prv_candidates.magpsf": null}), true),
        (
            json!({"prv_candidates.diffmaglim": {"$exists": true}}),
            true,
        ),
        (json!({"prv_candidates.rb": {"$exists": true}}), false),
        // A numeric segment names an element.
        (json!({"prv_candidates.0.magpsf": 17.5}), true),
        (json!({"prv_candidates.2.magpsf": 17.5}), false),
        (json!({"prv_candidates.7.magpsf": {"$exists": true}}), false),
        // Several conditions in one field object may be met by different
        // elements (MongoDB without $elemMatch).
        (
            json!({"prv_candidates.magpsf": {"$gt": 17, "$lt": 17.2}}),
            true,
        ),
    ] {
        assert_eq!(passes(m(q.clone()), &a), want, "{q}");
    }
    let no_history = json!({"objectId": "x", "candidate": {"fid": 1}});
    assert!(passes(
        m(json!({"prv_candidates.magpsf": null})),
        &no_history
    ));
    assert!(!passes(
        m(json!({"prv_candidates.magpsf": {"$lt": 30}})),
        &no_history
    ));
}

#[test]
fn numbers_compare_exactly() {
    let a = alert();
    assert!(passes(m(json!({"candid": 2752190655615010063_i64})), &a));
    // One above: a float comparison would call them equal.
    assert!(!passes(m(json!({"candid": 2752190655615010064_i64})), &a));
    assert!(passes(
        m(json!({"candid": {"$lt": 2752190655615010064_i64}})),
        &a
    ));
    assert!(passes(m(json!({"candid": {"$gt": 2.7e18}})), &a));
    assert!(!passes(m(json!({"candid": {"$gt": 1e300}})), &a));
    assert!(passes(m(json!({"candidate.fid": {"$lt": 1.5}})), &a));
    assert!(passes(m(json!({"candidate.ndethist": {"$gt": 2.999}})), &a));
    assert!(passes(
        m(json!({"candidate.ndethist": {"$gte": 18446744073709551615_u64}})),
        &json!({"candidate": {"ndethist": 18446744073709551615_u64}})
    ));
}

#[test]
fn add_fields_arithmetic_then_match() {
    let a = alert();
    let stages = json!([
        {"$addFields": {
            "age": {"$subtract": ["$candidate.jd", 2460500.5]},
            "flux": {"$multiply": [2, {"$add": ["$candidate.magpsf", 1, 0.5]}]},
            "ratio": {"$divide": ["$candidate.drb", "$candidate.rb"]},
            "rest": {"$mod": ["$candidate.ndethist", 2]},
            "far": {"$abs": "$candidate.ssdistnr"},
            "broken": {"$divide": ["$candidate.drb", 0]},
            "missing": {"$add": ["$candidate.magzpsci", 1]},
            "label": "fresh",
            "nested.value": {"$literal": "$not a path"}
        }},
        {"$match": {"age": {"$gt": 6}, "far": 999, "rest": 1, "label": "fresh"}}
    ]);
    let p = ok(stages);
    let out = p.eval(&a).expect("passes");
    assert!((out["age"].as_f64().expect("age") - 6.19).abs() < 1e-6);
    assert!((out["flux"].as_f64().expect("flux") - 35.6).abs() < 1e-9);
    assert!((out["ratio"].as_f64().expect("ratio") - 0.99 / 0.8).abs() < 1e-12);
    assert_eq!(out["rest"], json!(1));
    assert_eq!(out["far"], json!(999.0));
    assert_eq!(out["broken"], Value::Null, "division by zero is null");
    assert_eq!(
        out["missing"],
        Value::Null,
        "arithmetic on a missing field is null"
    );
    assert_eq!(out["nested"]["value"], json!("$not a path"));
    assert_eq!(
        out["candidate"]["drb"],
        json!(0.99),
        "the rest of the alert stays"
    );

    // The new field is a valid path for later stages, and filters.
    assert!(!passes(
        json!([{"$addFields": {"age": {"$subtract": ["$candidate.jd", 2460506]}}}, {"$match": {"age": {"$gt": 1}}}]),
        &a
    ));
    // Integer arithmetic stays exact and overflows into floats.
    let big = json!({"candidate": {"ndethist": 9223372036854775807_i64}});
    let out = ok(json!([{"$addFields": {"x": {"$add": ["$candidate.ndethist", 1]}, "y": {"$multiply": ["$candidate.ndethist", 3]}}}]))
        .eval(&big)
        .expect("passes");
    assert_eq!(out["x"], json!(9223372036854775808_u64));
    assert!(out["y"].as_f64().is_some_and(|y| y > 2.7e19));
    // A $set through an array sets the field in each element.
    let out = ok(json!([{"$set": {"prv_candidates.seen": true}}]))
        .eval(&a)
        .expect("passes");
    assert_eq!(out["prv_candidates"][1]["seen"], json!(true));
}

#[test]
fn project_includes_excludes_and_computes() {
    let a = alert();
    let out = ok(json!([{"$project": {"candidate.magpsf": 1, "candidate.fid": true, "mag2": {"$add": ["$candidate.magpsf", 2]}}}]))
        .eval(&a)
        .expect("passes");
    assert_eq!(
        out,
        json!({"objectId": "ZTF24aavxtjp", "candid": 2752190655615010063_i64, "candidate": {"magpsf": 16.3, "fid": 1}, "mag2": 18.3})
    );
    let out = ok(json!([{"$project": {"candidate": {"drb": 1}, "objectId": 0}}]))
        .eval(&a)
        .expect("passes");
    assert_eq!(
        out,
        json!({"candid": 2752190655615010063_i64, "candidate": {"drb": 0.99}})
    );
    let out = ok(json!([{"$project": {"prv_candidates.jd": 1, "candid": 0}}]))
        .eval(&a)
        .expect("passes");
    assert_eq!(
        out,
        json!({"objectId": "ZTF24aavxtjp", "prv_candidates": [{"jd": 2460500.5}, {"jd": 2460501.5}, {"jd": 2460502.5}]})
    );
    let out = ok(json!([{"$project": {"prv_candidates": 0, "candidate": 0, "schemavsn": 0}}]))
        .eval(&a)
        .expect("passes");
    assert_eq!(
        out,
        json!({"objectId": "ZTF24aavxtjp", "candid": 2752190655615010063_i64})
    );
    let out = ok(json!([{"$project": {"prv_candidates.magpsf": 0, "candidate": 0}}]))
        .eval(&a)
        .expect("passes");
    assert_eq!(out["prv_candidates"][0], json!({"jd": 2460500.5, "fid": 1}));
    // Only the ids.
    let out = ok(json!([{"$project": {"objectId": 1, "candid": 0}}]))
        .eval(&a)
        .expect("passes");
    assert_eq!(out, json!({"objectId": "ZTF24aavxtjp"}));
    // A later stage sees only what the projection kept.
    assert!(passes(
        json!([{"$project": {"candidate.drb": 1}}, {"$match": {"candidate.drb": {"$gt": 0.5}}}]),
        &a
    ));
}

#[test]
fn canonical_form_is_normalised_and_stable() {
    let p = ok(json!([
        {"$match": {"candidate.isdiffpos": {"$in": ["t", "1"]}, "candidate.drb": {"$gt": 0.5}, "candidate.fid": 1}},
        {"$set": {"age": {"$subtract": ["$candidate.jd", 2460000]}, "tag": {"$literal": "$x"}}},
        {"$project": {"candidate.magpsf": 1, "age": 1, "objectId": 0}}
    ]));
    let canonical = p.canonical();
    assert_eq!(
        canonical,
        json!([
            {"$match": {"candidate.drb": {"$gt": 0.5}, "candidate.fid": {"$eq": 1}, "candidate.isdiffpos": {"$in": ["t", "1"]}}},
            {"$addFields": {"age": {"$subtract": ["$candidate.jd", 2460000]}, "tag": {"$literal": "$x"}}},
            {"$project": {"age": 1, "candid": 1, "candidate.magpsf": 1, "objectId": 0}}
        ])
    );
    let again = ok(canonical.clone());
    assert_eq!(again.canonical(), canonical);
    assert_eq!(again.eval(&alert()), p.eval(&alert()));
    let text = serde_json::to_string(&canonical).expect("text");
    assert!(
        text.find("candidate.drb") < text.find("candidate.fid"),
        "keys sorted: {text}"
    );
}

fn has(problems: &[Problem], location: &str, needle: &str) -> Problem {
    problems
        .iter()
        .find(|p| p.location == location && p.message.contains(needle))
        .unwrap_or_else(|| panic!("no problem at {location} saying {needle:?} in {problems:#?}"))
        .clone()
}

#[test]
fn a_misspelt_path_is_named_with_the_nearest_real_one() {
    let ps = problems(m(json!({"candidate.magpfs": {"$lt": 18}})));
    assert_eq!(ps.len(), 1, "{ps:#?}");
    let p = has(
        &ps,
        "pipeline[0].$match.candidate.magpfs",
        "not a path of the alert schema",
    );
    assert_eq!(p.suggestion.as_deref(), Some("candidate.magpsf"));
    assert!(
        p.message.contains("did you mean candidate.magpsf"),
        "{}",
        p.message
    );
    // A bare field name finds its record.
    let ps = problems(m(json!({"drb": {"$gt": 0.5}})));
    assert_eq!(
        has(&ps, "pipeline[0].$match.drb", "not a path")
            .suggestion
            .as_deref(),
        Some("candidate.drb")
    );
    // In an expression, a projection and a nested logical operator too.
    let ps = problems(json!([
        {"$addFields": {"x": {"$add": ["$candidate.jdd", 1]}}},
        {"$project": {"candidate.sgscore": 1}},
        {"$match": {"$or": [{"candidate.fid": 1}, {"prv_candidates.magpfs": 1}]}}
    ]));
    assert_eq!(
        has(&ps, "pipeline[0].$addFields.x.$add[0]", "candidate.jdd")
            .suggestion
            .as_deref(),
        Some("candidate.jd")
    );
    assert_eq!(
        has(&ps, "pipeline[1].$project.candidate.sgscore", "not a path")
            .suggestion
            .as_deref(),
        Some("candidate.sgscore1")
    );
    assert!(
        has(
            &ps,
            "pipeline[2].$match.$or[1].prv_candidates.magpfs",
            "not a path"
        )
        .suggestion
        .is_some()
    );
    // Nothing near: no suggestion, and a pointer to the schema tool.
    let ps = problems(m(json!({"zzzzzzzzzzzz": 1})));
    assert!(
        has(&ps, "pipeline[0].$match.zzzzzzzzzzzz", "get_alert_schema")
            .suggestion
            .is_none()
    );
}

#[test]
fn every_problem_is_reported_together() {
    let ps = problems(json!([
        {"$match": {
            "candidate.magpfs": {"$lt": 18},
            "candidate.magpsf": {"$lt": "18"},
            "candidate.isdiffpos": {"$in": "t"},
            "candidate.drb": {"$gtt": 0.5},
            "candidate.fid": {"$exists": "yes"},
            "$not": {"candidate.fid": 1}
        }},
        {"$mtach": {}},
        {"$group": {"_id": "$objectId"}},
        {"$addFields": {"x": {"$sqrt": "$candidate.drb"}, "y": {"$pow2": 1}, "z": {"$add": ["$candidate.isdiffpos", 1]}}},
        {"$project": {"candidate.drb": 1, "candidate.rb": 0}},
        "not a stage",
        {"$match": {}, "$project": {}}
    ]));
    let p = has(
        &ps,
        "pipeline[0].$match.candidate.magpsf.$lt",
        "type mismatch",
    );
    assert_eq!(
        p.suggestion.as_deref(),
        Some("18.0"),
        "the number the string meant"
    );
    has(&ps, "pipeline[0].$match.candidate.magpfs", "not a path");
    assert_eq!(
        has(
            &ps,
            "pipeline[0].$match.candidate.isdiffpos.$in",
            "takes an array"
        )
        .suggestion
        .as_deref(),
        Some("[\"t\"]")
    );
    assert_eq!(
        has(
            &ps,
            "pipeline[0].$match.candidate.drb.$gtt",
            "unknown operator"
        )
        .suggestion
        .as_deref(),
        Some("$gt")
    );
    has(
        &ps,
        "pipeline[0].$match.candidate.fid.$exists",
        "true or false",
    );
    assert_eq!(
        has(&ps, "pipeline[0].$match.$not", "$nor")
            .suggestion
            .as_deref(),
        Some("$nor")
    );
    assert_eq!(
        has(&ps, "pipeline[1].$mtach", "unknown stage")
            .suggestion
            .as_deref(),
        Some("$match")
    );
    has(
        &ps,
        "pipeline[2].$group",
        "not part of the broker's filter language",
    );
    has(&ps, "pipeline[3].$addFields.x.$sqrt", "not part of");
    has(
        &ps,
        "pipeline[3].$addFields.y.$pow2",
        "unknown expression operator",
    );
    has(&ps, "pipeline[3].$addFields.z.$add[0]", "takes numbers");
    has(&ps, "pipeline[4].$project", "not both");
    has(&ps, "pipeline[5]", "a stage is an object");
    has(&ps, "pipeline[6]", "exactly one key");
    assert_eq!(ps.len(), 14, "{ps:#?}");
}

#[test]
fn type_mismatches_against_the_schema() {
    for (q, location, suggestion) in [
        (
            json!({"candidate.isdiffpos": 1}),
            "pipeline[0].$match.candidate.isdiffpos",
            Some("\"1\""),
        ),
        (
            json!({"candidate.isdiffpos": {"$in": ["t", 1]}}),
            "pipeline[0].$match.candidate.isdiffpos.$in[1]",
            Some("\"1\""),
        ),
        (
            json!({"candidate.fid": {"$gt": "r"}}),
            "pipeline[0].$match.candidate.fid.$gt",
            None,
        ),
        (
            json!({"candidate.fid": {"$gt": [1, 2]}}),
            "pipeline[0].$match.candidate.fid.$gt",
            None,
        ),
        (
            json!({"candidate.fid": [1, 2]}),
            "pipeline[0].$match.candidate.fid",
            Some("{\"$in\":[1,2]}"),
        ),
        (
            json!({"candidate.fid": {"$eq": {"a": 1}}}),
            "pipeline[0].$match.candidate.fid.$eq",
            None,
        ),
        (
            json!({"candidate": {"magpsf": 18}}),
            "pipeline[0].$match.candidate",
            Some("candidate.magpsf"),
        ),
        (
            json!({"candidate": 3}),
            "pipeline[0].$match.candidate",
            None,
        ),
        (
            json!({"prv_candidates": {"$gt": 3}}),
            "pipeline[0].$match.prv_candidates.$gt",
            None,
        ),
        (
            json!({"cutoutScience.stampData": {"$exists": true}}),
            "pipeline[0].$match.cutoutScience.stampData",
            None,
        ),
        (
            json!({"candidate.drb": {"$not": 0.5}}),
            "pipeline[0].$match.candidate.drb.$not",
            None,
        ),
        (json!({"$and": []}), "pipeline[0].$match.$and", None),
        (json!({"$or": [3]}), "pipeline[0].$match.$or[0]", None),
        (
            json!({"candidate..drb": 1}),
            "pipeline[0].$match.candidate..drb",
            None,
        ),
    ] {
        let ps = problems(m(q.clone()));
        assert_eq!(ps.len(), 1, "{q}: {ps:#?}");
        assert_eq!(ps[0].location, location, "{q}: {ps:#?}");
        assert_eq!(ps[0].suggestion.as_deref(), suggestion, "{q}: {ps:#?}");
    }
    has(
        &problems(json!([{"$addFields": {"x": {"$add": ["$prv_candidates.magpsf", 1]}}}])),
        "pipeline[0].$addFields.x.$add[0]",
        "an array of numbers",
    );
    ok(json!([{"$addFields": {"x": {"$add": ["$prv_candidates.0.magpsf", 1]}}}]));
    has(
        &problems(json!([{"$addFields": {"x": {"$subtract": [1]}}}])),
        "pipeline[0].$addFields.x.$subtract",
        "2 operands",
    );
    has(
        &problems(json!([{"$addFields": {"x": [1, 2]}}])),
        "pipeline[0].$addFields.x",
        "$literal",
    );
    has(
        &problems(json!([{"$addFields": {"x": "$$NOW"}}])),
        "pipeline[0].$addFields.x",
        "variables",
    );
    has(
        &problems(json!([{"$project": {"candidate.drb": 5}}])),
        "pipeline[0].$project.candidate.drb",
        "1 to keep",
    );
    has(
        &problems(json!([{"$addFields": {"a": 1, "a.b": 2}}])),
        "pipeline[0].$addFields.a",
        "path collision",
    );
    // Found by the pipeline fuzz target: objectId is kept by a projection
    // that keeps fields, so a field computed under it collides (its
    // canonical form, which names objectId, was refused).
    for (name, id) in [("objectId.x", "objectId"), ("candid.y.z", "candid")] {
        has(
            &problems(json!([{"$project": {name: "fresh"}}])),
            &format!("pipeline[0].$project.{name}"),
            &format!("path collision: {name} and {id}"),
        );
    }
    has(&problems(json!({"$match": {}})), "pipeline", "JSON array");
}

#[test]
fn paths_follow_the_document_through_the_stages() {
    let ps = problems(json!([
        {"$project": {"candidate.drb": 1}},
        {"$match": {"candidate.magpsf": {"$lt": 18}}}
    ]));
    has(
        &ps,
        "pipeline[1].$match.candidate.magpsf",
        "removed by the $project of pipeline[0]",
    );
    let ps = problems(json!([
        {"$project": {"candidate": 0}},
        {"$addFields": {"x": "$candidate.drb"}}
    ]));
    has(
        &ps,
        "pipeline[1].$addFields.x",
        "removed by the $project of pipeline[0]",
    );
    // An added field, and what is under it, are paths; a projection that
    // keeps a computed field keeps it visible.
    ok(json!([
        {"$addFields": {"scores": {"sum": {"$add": ["$candidate.drb", "$candidate.rb"]}}}},
        {"$project": {"total": "$scores.sum", "candidate.fid": 1}},
        {"$match": {"total": {"$gt": 1}, "candidate.fid": 1}}
    ]));
    let ps = problems(json!([{"$addFields": {"score": 1}}, {"$match": {"scroe": 1}}]));
    assert_eq!(
        has(&ps, "pipeline[1].$match.scroe", "not a path")
            .suggestion
            .as_deref(),
        Some("score")
    );
}

#[test]
fn limits_are_errors_not_crashes() {
    let mut deep = json!({"candidate.fid": 1});
    for _ in 0..(MAX_DEPTH + 5) {
        deep = json!({"$or": [deep]});
    }
    let ps = problems(m(deep));
    assert!(
        ps.iter().any(|p| p.message.contains("nested deeper than")),
        "{ps:#?}"
    );
    let mut expr = json!("$candidate.drb");
    for _ in 0..(MAX_DEPTH + 5) {
        expr = json!({"$abs": expr});
    }
    let ps = problems(json!([{"$addFields": {"x": expr}}]));
    assert!(
        ps.iter().any(|p| p.message.contains("nested deeper than")),
        "{ps:#?}"
    );
    let many: Vec<Value> = (0..=MAX_STAGES).map(|_| json!({"$match": {}})).collect();
    has(&problems(Value::Array(many)), "pipeline", "at most");
    let huge: Vec<i64> = (0..=MAX_IN as i64).collect();
    has(
        &problems(m(json!({"candidate.fid": {"$in": huge}}))),
        "pipeline[0].$match.candidate.fid.$in",
        "at most",
    );
    let long = "a.".repeat(200) + "b";
    has(
        &problems(m(json!({long.clone(): 1}))),
        &format!("pipeline[0].$match.{long}"),
        "not a field path",
    );
    // Huge and tiny numbers are just numbers.
    assert!(!passes(
        m(json!({"candidate.magpsf": {"$gt": 1.7e308}})),
        &alert()
    ));
    assert!(passes(
        m(json!({"candidate.magpsf": {"$gt": -1.7e308}})),
        &alert()
    ));
    let p = ok(json!([{"$addFields": {"x": {"$multiply": ["$candidate.magpsf", 1.7e308, 1e10]}}}]));
    assert_eq!(
        p.eval(&alert()).expect("passes")["x"],
        Value::Null,
        "overflow to infinity is null"
    );
}

#[test]
fn stream_bounds_warn() {
    let public_candidate = StreamBounds {
        programids: vec![1],
        fields: Some(vec!["objectId".into(), "candid".into(), "candidate".into()]),
    };
    let ws = warnings(
        json!([
            {"$match": {"candidate.programid": {"$in": [1, 2]}, "prv_candidates.magpsf": {"$lt": 18}}},
            {"$addFields": {"x": {"$add": ["$fp_hists.0.forcediffimflux", 1]}}},
            {"$match": {"candidate.programid": 2}},
            {"$project": {"fp_hists.jd": 1}}
        ]),
        &public_candidate,
    );
    has(
        &ws,
        "pipeline[0].$match.candidate.programid",
        "programid 2 is not in the filter's stream",
    );
    has(
        &ws,
        "pipeline[0].$match.prv_candidates.magpsf",
        "does not carry prv_candidates.magpsf: a cut on it passes no alert",
    );
    has(
        &ws,
        "pipeline[1].$addFields.x.$add[0]",
        "sees it as missing",
    );
    has(
        &ws,
        "pipeline[2].$match.candidate.programid",
        "would pass no alert",
    );
    has(&ws, "pipeline[3].$project.fp_hists.jd", "does not carry");
    assert_eq!(ws.len(), 5, "{ws:#?}");
    // A stream that carries it all warns about nothing.
    assert!(warnings(json!([{"$match": {"candidate.programid": {"$in": [1, 2]}, "prv_candidates.magpsf": {"$lt": 18}}}]), &all()).is_empty());
    // A range that excludes every programme of the stream.
    let ws = warnings(
        m(json!({"candidate.programid": {"$gt": 1}})),
        &public_candidate,
    );
    has(
        &ws,
        "pipeline[0].$match.candidate.programid",
        "would pass no alert",
    );
}

#[test]
fn needs_name_what_the_decision_reads() {
    let p = ok(json!([
        {"$match": {"candidate.drb": {"$gt": 0.5}, "objectId": {"$ne": "x"}}},
        {"$addFields": {"a": {"$add": ["$candidate.magpsf", 1]}}},
        {"$project": {"candidate.rb": 1, "a": 1}}
    ]));
    assert_eq!(
        p.needs(),
        &Needs {
            candidate: CandidateNeeds::Keys(vec!["drb".into(), "magpsf".into()]),
            packet: false,
            top: Default::default(),
        }
    );
    assert!(ok(m(json!({"prv_candidates.magpsf": 1}))).needs().packet);
    assert_eq!(
        ok(json!([{"$addFields": {"c": "$candidate"}}]))
            .needs()
            .candidate,
        CandidateNeeds::Whole
    );
    assert_eq!(
        ok(m(json!({"objectId": "x"}))).needs().candidate,
        CandidateNeeds::Nothing
    );
}

#[test]
fn needs_name_the_top_level_fields_and_their_keys() {
    let p = ok(json!([
        {"$match": {"prv_candidates.magpsf": {"$lt": 19}, "prv_candidates.0.jd": {"$gt": 1}}},
        {"$match": {"fp_hists": {"$exists": true}}}
    ]));
    let needs = p.needs();
    assert!(needs.packet);
    assert_eq!(
        needs.top.get("prv_candidates"),
        Some(&CandidateNeeds::Keys(vec!["jd".into(), "magpsf".into()]))
    );
    assert_eq!(needs.top.get("fp_hists"), Some(&CandidateNeeds::Whole));
    assert_eq!(needs.top.len(), 2);
    // On the candidate only: no top-level field, no packet.
    let c = ok(m(json!({"candidate.magpsf": {"$lt": 19}})));
    assert!(!c.needs().packet && c.needs().top.is_empty());
}

#[test]
fn output_needs_name_what_an_inclusion_project_builds_from() {
    let p = ok(json!([
        {"$match": {"candidate.drb": {"$gt": 0.5}}},
        {"$addFields": {"a": {"$add": ["$candidate.magpsf", 1]}}},
        {"$project": {"candidate.rb": 1, "prv_candidates.magpsf": 1, "a": 1}}
    ]));
    let out = p.output_needs().expect("an inclusion $project");
    assert_eq!(
        out.candidate,
        CandidateNeeds::Keys(vec!["drb".into(), "magpsf".into(), "rb".into()])
    );
    assert_eq!(
        out.top.get("prv_candidates"),
        Some(&CandidateNeeds::Keys(vec!["magpsf".into()]))
    );
    // What it reads to decide is less than what its output keeps.
    assert!(!p.needs().packet);
    // No $project, or one that drops: the output is the whole document.
    assert!(
        ok(m(json!({"candidate.drb": {"$gt": 0.5}})))
            .output_needs()
            .is_none()
    );
    assert!(
        ok(json!([{"$project": {"candidate": 0}}]))
            .output_needs()
            .is_none()
    );
}

#[test]
fn candidate_needs_cover_and_join() {
    let keys = |k: &[&str]| CandidateNeeds::Keys(k.iter().map(|s| (*s).to_owned()).collect());
    assert!(CandidateNeeds::Whole.covers(&keys(&["a"])));
    assert!(keys(&["a", "b"]).covers(&keys(&["b"])));
    assert!(!keys(&["a"]).covers(&keys(&["a", "b"])));
    assert!(!keys(&["a"]).covers(&CandidateNeeds::Whole));
    assert!(CandidateNeeds::Nothing.covers(&CandidateNeeds::Nothing));
    let mut joined = keys(&["b"]);
    joined.union(&keys(&["a", "b"]));
    assert_eq!(joined, keys(&["a", "b"]));
    joined.union(&CandidateNeeds::Whole);
    assert_eq!(joined, CandidateNeeds::Whole);
}

#[test]
fn sort_paths_are_checked_against_the_output() {
    let p = ok(json!([{"$addFields": {"age": 1}}, {"$project": {"candidate.jd": 1, "age": 1}}]));
    assert_eq!(p.check_output_path("candidate.jd"), Ok(true));
    assert_eq!(p.check_output_path("age"), Ok(false));
    assert!(
        p.check_output_path("candidate.magpsf")
            .expect_err("projected away")
            .message
            .contains("removed")
    );
    assert_eq!(
        p.check_output_path("candidate.jdd")
            .expect_err("misspelt")
            .suggestion
            .as_deref(),
        Some("candidate.jd")
    );
}

/// splitmix64, for repeatable garbage.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() % items.len() as u64) as usize]
    }
}

const WORDS: [&str; 34] = [
    "$match",
    "$project",
    "$addFields",
    "$set",
    "$and",
    "$or",
    "$nor",
    "$not",
    "$eq",
    "$ne",
    "$gt",
    "$gte",
    "$lt",
    "$lte",
    "$in",
    "$nin",
    "$exists",
    "$add",
    "$subtract",
    "$multiply",
    "$divide",
    "$mod",
    "$abs",
    "$literal",
    "candidate.magpsf",
    "candidate.isdiffpos",
    "candidate.drb",
    "prv_candidates.magpsf",
    "prv_candidates.0.jd",
    "candid",
    "objectId",
    "x",
    "x.y",
    "$candidate.drb",
];

/// A pipeline-shaped value: real stage, operator and path names around
/// random operands, so that many compile and get evaluated.
fn plausible(rng: &mut Rng, depth: usize) -> Value {
    const PATHS: [&str; 8] = [
        "candidate.magpsf",
        "candidate.isdiffpos",
        "candidate.drb",
        "candidate.fid",
        "prv_candidates.magpsf",
        "prv_candidates.1.jd",
        "candid",
        "objectId",
    ];
    const OPS: [&str; 10] = [
        "$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists", "$not",
    ];
    if depth < 3 && rng.next().is_multiple_of(4) {
        let op = rng.pick(&["$and", "$or", "$nor"]);
        let parts: Vec<Value> = (0..1 + rng.next() % 3)
            .map(|_| plausible(rng, depth + 1))
            .collect();
        return json!({op: parts});
    }
    let path = rng.pick(&PATHS);
    let op = rng.pick(&OPS);
    let operand = match op {
        "$in" | "$nin" => Value::Array((0..rng.next() % 3).map(|_| garbage(rng, 5)).collect()),
        "$not" => json!({"$gt": garbage(rng, 7)}),
        "$exists" => Value::Bool(rng.next().is_multiple_of(2)),
        _ => garbage(rng, 7),
    };
    json!({path: {op: operand}})
}

fn garbage(rng: &mut Rng, depth: usize) -> Value {
    let choice = if depth > 6 {
        rng.next() % 6
    } else {
        rng.next() % 9
    };
    match choice {
        0 => Value::Null,
        1 => Value::Bool(rng.next().is_multiple_of(2)),
        2 => json!((rng.next() % 7) as i64 - 3),
        3 => [
            json!(1.5e308),
            json!(-0.0),
            json!(1e-320),
            json!(9_223_372_036_854_775_807_i64),
            json!(18_446_744_073_709_551_615_u64),
        ][(rng.next() % 5) as usize]
            .clone(),
        4 | 5 => Value::String(rng.pick(&WORDS).to_owned()),
        6 => Value::Array(
            (0..rng.next() % 4)
                .map(|_| garbage(rng, depth + 1))
                .collect(),
        ),
        _ => {
            let mut map = serde_json::Map::new();
            for _ in 0..1 + rng.next() % 3 {
                map.insert(rng.pick(&WORDS).to_owned(), garbage(rng, depth + 1));
            }
            Value::Object(map)
        }
    }
}

#[test]
fn garbage_never_panics() {
    let mut rng = Rng(7);
    let docs = [
        alert(),
        json!({}),
        json!({"candidate": [1, {"drb": "x"}]}),
        json!({"prv_candidates": 3}),
    ];
    let mut compiled = 0;
    for _ in 0..10_000 {
        let stages: Vec<Value> = (0..1 + rng.next() % 3)
            .map(|_| {
                let mut stage = serde_json::Map::new();
                let name = rng.pick(&["$match", "$project", "$addFields", "$set", "$match", "$x"]);
                let body = if name == "$match" && rng.next().is_multiple_of(2) {
                    plausible(&mut rng, 0)
                } else {
                    garbage(&mut rng, 0)
                };
                stage.insert(name.to_owned(), body);
                Value::Object(stage)
            })
            .collect();
        let stages = Value::Array(stages);
        let stream = StreamBounds {
            programids: vec![1],
            fields: Some(vec!["candidate".into()]),
        };
        match compile(&stages, schema(), &stream) {
            Ok(c) => {
                compiled += 1;
                for d in &docs {
                    let _ = c.pipeline.eval(d);
                    let _ = c.pipeline.passes(d);
                }
                let again = compile(&c.pipeline.canonical(), schema(), &stream)
                    .unwrap_or_else(|p| panic!("canonical of {stages} does not compile: {p:#?}"));
                assert_eq!(again.pipeline.canonical(), c.pipeline.canonical());
            }
            Err(ps) => assert!(!ps.is_empty()),
        }
    }
    assert!(compiled > 150, "only {compiled} garbage pipelines compiled");
}
