//! The relay's own tests: sealed ask ids, answers, rewritten events.
use super::*;

#[test]
fn a_marker_becomes_a_request_and_anything_else_passes() {
    let marker = format!(
        "data: {}\n\n",
        json!({"jsonrpc": "2.0", "method": ASK_MARKER, "params": {"id": "ithaca-1", "method": "roots/list", "params": {}}})
    );
    let out = String::from_utf8(rewrite_event(marker.as_bytes())).expect("utf-8");
    let data: Value = serde_json::from_str(out.trim().trim_start_matches("data: ")).expect("json");
    assert_eq!(
        data,
        json!({"jsonrpc": "2.0", "id": "ithaca-1", "method": "roots/list", "params": {}})
    );
    let progress = b"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n";
    assert_eq!(rewrite_event(progress), progress.to_vec());
    assert_eq!(
        rewrite_event(b": keep-alive\n\n"),
        b": keep-alive\n\n".to_vec()
    );
}

#[test]
fn ids_name_their_replica_to_the_others_only() {
    let key = [7u8; 32];
    let a = Asks::new(key, Some("http://10.0.0.1:8080/".into()));
    let b = Asks::new(key, Some("http://10.0.0.2:8080".into()));
    let alice = Principal::local_agent("t", "alice", ["data:read"]);
    let (id, _receiver) = a.register(owner_of(&alice)).expect("room");
    assert!(!id.contains("10.0.0.1"), "the URL is not readable: {id}");
    assert_eq!(b.elsewhere(&id).as_deref(), Some("http://10.0.0.1:8080"));
    assert_eq!(a.elsewhere(&id), None, "a's own id is answered at a");
    // A changed character, another key, or no home: nothing to forward.
    let mut forged = id.clone().into_bytes();
    let last = forged.len() - 1;
    forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).expect("ascii");
    assert_eq!(b.elsewhere(&forged), None);
    let other = Asks::new([8u8; 32], Some("http://10.0.0.3:8080".into()));
    assert_eq!(other.elsewhere(&id), None);
    assert_eq!(Asks::default().elsewhere(&id), None);
    assert_eq!(b.elsewhere("ithaca-nothing"), None);
    // Without a home, ids are as before.
    let (plain, _r) = Asks::default().register(owner_of(&alice)).expect("room");
    assert_eq!(plain.len(), "ithaca-".len() + 32);
}

#[test]
fn only_the_caller_asked_may_answer() {
    let asks = Asks::default();
    let alice = Principal::local_agent("t", "alice", ["data:read"]);
    let bob = Principal::local_agent("t", "bob", ["data:read"]);
    let (id, mut receiver) = asks.register(owner_of(&alice)).expect("room");
    assert!(!asks.answer(&bob, json!({"id": id, "result": {}})));
    assert!(!asks.answer(&alice, json!({"id": "ithaca-other", "result": {}})));
    assert!(asks.answer(&alice, json!({"id": id, "result": {"ok": true}})));
    assert_eq!(
        receiver.try_recv().expect("answered"),
        json!({"id": id, "result": {"ok": true}})
    );
    assert!(
        !asks.answer(&alice, json!({"id": id, "result": {}})),
        "an answer is taken once"
    );
}
