//! The embedded descriptor set carries the MCP annotations and the comments
//! the edge turns into tool descriptions.

use ithaca_proto::annotations;

#[test]
fn finds_annotated_tools_with_options_and_comments() {
    let pool = annotations::pool();
    let tools = annotations::tools(pool);
    let ctx = tools
        .iter()
        .find(|t| t.options.name == "session_context")
        .expect("session_context is annotated as a tool");
    assert_eq!(
        ctx.method.full_name(),
        "ithaca.session.v1.SessionService.SessionContext"
    );
    assert!(ctx.options.session_exempt);
    assert!(!ctx.options.read_only);
    assert_eq!(ctx.options.title, "Open or resume a research session");
    assert!(
        ctx.description
            .starts_with("Open a traced research session"),
        "description comes from the RPC comment: {:?}",
        ctx.description
    );

    let close = tools
        .iter()
        .find(|t| t.options.name == "session_close")
        .expect("session_close is annotated");
    assert!(!close.options.session_exempt);

    // Unannotated RPCs are not tools.
    assert!(tools.iter().all(|t| t.method.name() != "AppendEvent"));
    assert!(
        tools
            .iter()
            .all(|t| t.method.parent_service().name() != "AuthService")
    );
}

#[test]
fn finds_resources_and_field_comments() {
    let pool = annotations::pool();
    let resources = annotations::resources(pool);
    let session = resources
        .iter()
        .find(|r| r.options.uri_template == "doomberg://sessions/{session_id}")
        .expect("GetSession is a resource");
    assert_eq!(session.options.mime_type, "application/json");
    assert_eq!(session.method.name(), "GetSession");

    let input = pool
        .get_message_by_name("ithaca.session.v1.SessionContextRequest")
        .expect("message exists");
    let prompt = input.get_field_by_name("prompt").expect("field exists");
    let comment = annotations::field_comment(&prompt).expect("prompt has a comment");
    assert!(comment.contains("stored verbatim"), "{comment}");
}

#[test]
fn every_service_package_is_present() {
    let pool = annotations::pool();
    for package in [
        "ithaca.mcp.v1",
        "ithaca.auth.v1",
        "ithaca.session.v1",
        "ithaca.skills.v1",
        "ithaca.broker.v1",
        "ithaca.approvals.v1",
    ] {
        assert!(
            pool.files().any(|f| f.package_name() == package),
            "{package} is in the descriptor set"
        );
    }
}

#[test]
fn every_service_name_is_a_service_of_the_descriptor_set() {
    use ithaca_proto::service_names::*;
    let pool = annotations::pool();
    for name in [
        AUTH,
        SESSION,
        BROKER,
        ALERTS,
        CATALOGS,
        FILTERS,
        GCN,
        FUNDAMENTALS,
        SKILLS,
        APPROVALS,
    ] {
        assert!(
            pool.get_service_by_name(name).is_some(),
            "{name} is a service of the descriptor set"
        );
    }
}

/// The broker's services list their tools in the order they had on the one
/// `BrokerService` they were split from: market first (the package's
/// namesake file leads its folder, `build.rs`), then alerts, then catalogs.
#[test]
fn the_broker_services_keep_their_tools_in_order() {
    use ithaca_proto::service_names::{ALERTS, BROKER, CATALOGS};
    let pool = annotations::pool();
    let broker: Vec<(String, String)> = annotations::tools(pool)
        .into_iter()
        .map(|t| {
            (
                t.method.parent_service().full_name().to_owned(),
                t.options.name,
            )
        })
        .filter(|(service, _)| [BROKER, ALERTS, CATALOGS].contains(&service.as_str()))
        .collect();
    let on = |service: &str, tool: &str| (service.to_owned(), tool.to_owned());
    assert_eq!(
        broker,
        [
            on(BROKER, "list_symbols"),
            on(BROKER, "list_datasets"),
            on(BROKER, "get_price_history"),
            on(ALERTS, "list_brokers"),
            on(ALERTS, "get_broker_alerts"),
            on(ALERTS, "get_broker_alert_photometry"),
            on(ALERTS, "convert_time"),
            on(ALERTS, "get_alert_schema"),
            on(CATALOGS, "crossmatch_broker_catalogs"),
        ]
    );
}
