//! The catalog's own tests: templates and the embedded catalog.
use super::*;

#[test]
fn templates_match_and_extract_variables() {
    let parts = parse_template("doomberg://skills/{skill_id}/{version}").expect("valid");
    assert_eq!(parts.len(), 4);
    assert!(
        parse_template("a/{b}{c}").is_none(),
        "adjacent variables are ambiguous"
    );
    assert!(parse_template("a/{b").is_none());
    let catalog = Catalog::from_pool(ithaca_proto::annotations::pool()).expect("catalog builds");
    let (r, vars) = catalog
        .resource("doomberg://sessions/abc-123")
        .expect("the session resource matches");
    assert_eq!(r.name, "session");
    assert_eq!(vars.get("session_id").map(String::as_str), Some("abc-123"));
    assert!(catalog.resource("doomberg://sessions/a/b").is_none());
    assert!(catalog.resource("doomberg://nothing").is_none());
}

#[test]
fn runs_and_sessions_are_subscribable_through_their_watches() {
    let catalog = Catalog::from_pool(ithaca_proto::annotations::pool()).expect("catalog builds");
    assert!(catalog.subscribable());
    let watch = |uri: &str| {
        catalog
            .resource(uri)
            .and_then(|(r, _)| r.watch.as_ref())
            .map(|m| m.full_name().to_owned())
    };
    assert_eq!(
        watch("doomberg://runs/r-1").as_deref(),
        Some("ithaca.skills.v1.SkillsService.WatchRun")
    );
    assert_eq!(
        watch("doomberg://sessions/s-1").as_deref(),
        Some("ithaca.session.v1.SessionService.WatchSession")
    );
    assert_eq!(watch("doomberg://sessions/s-1/record"), None);
    assert_eq!(watch("doomberg://runs/r-1/artifacts/a-1"), None);
}
