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
