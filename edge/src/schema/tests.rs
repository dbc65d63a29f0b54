//! The schema builder's own tests.
use super::*;

#[test]
fn declared_field_bounds_reach_the_input_schema() {
    let pool = ithaca_proto::annotations::pool();
    let message = pool
        .get_message_by_name("ithaca.skills.v1.ProposeStrategyRequest")
        .expect("in the pool");
    let input = message_schema(&message, Direction::Input);
    let universe = &input["properties"]["universe"];
    assert_eq!(universe["maxItems"], 20, "{input}");
    assert_eq!(universe["items"]["maxLength"], 32, "{input}");
    assert_eq!(input["properties"]["name"]["maxLength"], 100, "{input}");
    // A field without bounds has none, and outputs carry none.
    assert!(input["properties"]["lookback"].get("maximum").is_none());
    let output = message_schema(&message, Direction::Output);
    assert!(output["properties"]["universe"].get("maxItems").is_none());
}

#[test]
fn declared_values_are_an_enum_both_ways() {
    let pool = ithaca_proto::annotations::pool();
    let promote = pool
        .get_message_by_name("ithaca.skills.v1.PromoteStrategyRequest")
        .expect("in the pool");
    let input = message_schema(&promote, Direction::Input);
    assert_eq!(
        input["properties"]["mode"]["enum"],
        json!(["paper", "live"])
    );
    let screen = pool
        .get_message_by_name("ithaca.broker.v1.ScreenPeersRequest")
        .expect("in the pool");
    let input = message_schema(&screen, Direction::Input);
    assert_eq!(input["properties"]["metrics"]["items"]["enum"][0], "pe");
    let run = pool
        .get_message_by_name("ithaca.skills.v1.Run")
        .expect("in the pool");
    let output = message_schema(&run, Direction::Output);
    assert_eq!(
        output["properties"]["status"]["enum"][0], "draft",
        "{output}"
    );
}

#[test]
fn a_message_used_twice_is_defined_once_within_the_schema() {
    let pool = ithaca_proto::annotations::pool();
    // Every message in the pool: each `$ref` resolves in its own
    // schema's `$defs`, and every definition is used.
    for message in pool.all_messages() {
        for direction in [Direction::Input, Direction::Output] {
            let schema = message_schema(&message, direction);
            let text = schema.to_string();
            let defs = schema["$defs"].as_object().cloned().unwrap_or_default();
            for key in defs.keys() {
                let reference = format!("\"#/$defs/{key}\"");
                assert!(
                    text.contains(&reference),
                    "{}: {key} unused",
                    message.full_name()
                );
            }
            let mut rest = text.as_str();
            while let Some(at) = rest.find("\"$ref\":\"") {
                rest = &rest[at + 8..];
                let end = rest.find('"').unwrap_or(rest.len());
                let target = &rest[..end];
                let key = target.strip_prefix("#/$defs/").unwrap_or_else(|| {
                    panic!("{}: $ref {target} outside $defs", message.full_name())
                });
                assert!(defs.contains_key(key), "{}: {target}", message.full_name());
            }
        }
    }
    // A message the schema uses twice is one definition.
    let preview = pool
        .get_message_by_name("ithaca.broker.v1.GetGcnEventResponse")
        .or_else(|| pool.get_message_by_name("ithaca.broker.v1.GcnEvent"))
        .expect("in the pool");
    let schema = message_schema(&preview, Direction::Output);
    let text = schema.to_string();
    for (key, _) in schema["$defs"].as_object().into_iter().flatten() {
        let uses = text.matches(&format!("\"#/$defs/{key}\"")).count();
        assert!(uses >= 2, "{key} is defined for {uses} use");
    }
}

#[test]
fn an_output_description_that_restates_the_name_is_left_out() {
    assert!(restates("run_id", &[], "The run id."));
    assert!(restates("symbols", &[], "The symbols."));
    assert!(restates("filter_id", &[], "The filter's id."));
    let statuses = ["open".to_owned(), "closed".to_owned()];
    assert!(restates("status", &statuses, "`open` or `closed`."));
    assert!(!restates("run_id", &[], "Run id (UUID)."));
    assert!(!restates(
        "total_return",
        &[],
        "The total return, a fraction."
    ));
    assert!(!restates("status", &statuses, "`open`, `closed` or gone."));
}
