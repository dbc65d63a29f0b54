//! The principal assertion (DESIGN §5): who a call is made for, signed by the
//! caller with the deployment's internal key and verified by every service.
//!
//! Wire form, in the `x-ithaca-principal` gRPC metadata entry:
//! `v1.<base64url(claims JSON)>.<base64url(HMAC-SHA256(key, "v1." + claims))>`.
//! The claims carry the tenant, key id, agent id, scopes, actor, optional
//! session and an expiry in Unix seconds. An assertion is short-lived. A key
//! hands out again an assertion it minted for the same principal while more
//! than half of its lifetime is left, and accepts again one it verified
//! until it expires, so a stream of calls for one caller pays for the HMAC,
//! base64 and JSON once every half a minute, not on every call.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::sync::{Arc, Mutex, PoisonError};
use subtle::ConstantTimeEq;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::{Request, Status};

/// The metadata key that carries the assertion.
pub const METADATA_KEY: &str = "x-ithaca-principal";

/// How long a minted assertion stays valid.
pub const DEFAULT_TTL_SECS: i64 = 60;

/// Longer assertions are refused before any decoding work is done.
const MAX_ASSERTION_LEN: usize = 8 * 1024;

/// Who acts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Actor {
    /// A person with a human key.
    Human,
    /// An AI agent with an agent key (or over stdio).
    Agent,
    /// Ithaca itself: the edge verifying keys, the admin CLI, the local stack.
    System,
}

impl Actor {
    pub fn as_str(self) -> &'static str {
        match self {
            Actor::Human => "human",
            Actor::Agent => "agent",
            Actor::System => "system",
        }
    }
}

/// The identity a service acts for. Its fields are private: a principal is
/// built only from a verified key ([`Principal::verified`]), for a local
/// agent the machine itself trusts ([`Principal::local_agent`]), for the
/// system ([`Principal::system`]), or by verifying a signed assertion
/// ([`InternalKey::verify`]); nothing downstream can widen it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Principal {
    /// The tenant every query is filtered by; empty only for system callers
    /// that work across tenants (tenant administration).
    tenant_id: Arc<str>,
    /// The API key the caller authenticated with; empty for system and stdio.
    #[serde(default = "empty")]
    key_id: Arc<str>,
    /// The agent whose current session applies: the key id over HTTP, a
    /// per-process id over stdio.
    #[serde(default = "empty")]
    agent_id: Arc<str>,
    /// Granted scopes, as seed 000 names them (`data:read`, …). The ids and
    /// the scopes are shared, not copied, when a principal is cloned: the
    /// edge clones one several times per call (measured: a sixth of the
    /// edge's heap allocations per call went to those copies).
    #[serde(default = "no_scopes")]
    scopes: Arc<[String]>,
    actor: Actor,
    /// The research session the call belongs to, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    session_id: Option<String>,
    /// The object that session was opened on (a filter, a GCN event), which
    /// subject-scoped write tools may write to and nothing else (DESIGN §5).
    /// Only a person sets a session's subject; the edge copies it here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    subject: Option<Subject>,
}

/// The object a session was opened on: a kind (`filter`, `gcn_event`, the
/// `subject_kind` of the tools that write to it) and the object's id.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Subject {
    pub kind: String,
    pub id: String,
}

impl Subject {
    pub fn new(kind: impl Into<String>, id: impl Into<String>) -> Self {
        Subject {
            kind: kind.into(),
            id: id.into(),
        }
    }
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind, self.id)
    }
}

/// What the auth service vouched for when it verified an API key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedKey {
    pub tenant_id: String,
    pub key_id: String,
    pub scopes: Vec<String>,
    /// `Human` or `Agent`; a key never verifies as the system.
    pub human: bool,
}

impl Principal {
    /// A system principal, optionally acting inside one tenant.
    pub fn system(tenant_id: impl Into<String>) -> Self {
        Principal {
            tenant_id: Arc::from(tenant_id.into()),
            key_id: empty(),
            agent_id: Arc::from("system"),
            scopes: no_scopes(),
            actor: Actor::System,
            session_id: None,
            subject: None,
        }
    }

    /// The caller a verified API key names; over HTTP the key is the agent.
    pub fn verified(key: VerifiedKey) -> Self {
        let key_id: Arc<str> = Arc::from(key.key_id);
        Principal {
            tenant_id: Arc::from(key.tenant_id),
            agent_id: Arc::clone(&key_id),
            key_id,
            scopes: Arc::from(key.scopes),
            actor: if key.human {
                Actor::Human
            } else {
                Actor::Agent
            },
            session_id: None,
            subject: None,
        }
    }

    /// An agent of a process the local machine trusts (stdio, or an edge
    /// with authentication off on loopback): no key, its own agent id.
    pub fn local_agent(
        tenant_id: impl Into<String>,
        agent_id: impl Into<String>,
        scopes: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Principal {
            tenant_id: Arc::from(tenant_id.into()),
            key_id: empty(),
            agent_id: Arc::from(agent_id.into()),
            scopes: scopes.into_iter().map(Into::into).collect(),
            actor: Actor::Agent,
            session_id: None,
            subject: None,
        }
    }

    /// The same principal, acting inside `session_id` (and no subject: a
    /// session's subject comes with [`Principal::on_subject`]).
    pub fn in_session(mut self, session_id: Option<String>) -> Self {
        self.session_id = session_id;
        self.subject = None;
        self
    }

    /// The same principal, in a session opened on `subject`.
    pub fn on_subject(mut self, subject: Option<Subject>) -> Self {
        self.subject = subject;
        self
    }

    /// The subject of the caller's session, if it has one.
    pub fn subject(&self) -> Option<&Subject> {
        self.subject.as_ref()
    }

    /// Whether this caller may write to the object `kind`/`id` with a
    /// subject-scoped tool: the system always may (admin commands, approved
    /// calls re-checked when requested); anyone else only inside a session
    /// whose subject is that very object. Services call this on every
    /// subject-scoped write, so the edge's offering is not the only check.
    pub fn may_write(&self, kind: &str, id: &str) -> bool {
        self.actor == Actor::System
            || self
                .subject
                .as_ref()
                .is_some_and(|s| s.kind == kind && s.id == id)
    }

    pub fn tenant_id(&self) -> &str {
        &self.tenant_id
    }

    /// The caller's tenant, refused (PERMISSION_DENIED) for a caller without
    /// one; the system acts without a tenant and gets `""`.
    pub fn tenant(&self) -> Result<&str, crate::error::ServiceError> {
        if self.tenant_id.is_empty() && self.actor != Actor::System {
            return Err(crate::error::ServiceError::denied(
                "the caller has no tenant",
            ));
        }
        Ok(&self.tenant_id)
    }

    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    pub fn scopes(&self) -> &[String] {
        &self.scopes
    }

    pub fn actor(&self) -> Actor {
        self.actor
    }

    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes.iter().any(|s| s == scope)
    }

    /// The agent id, falling back to the key id.
    pub fn agent(&self) -> &str {
        if self.agent_id.is_empty() {
            &self.key_id
        } else {
            &self.agent_id
        }
    }
}

fn empty() -> Arc<str> {
    Arc::from("")
}

fn no_scopes() -> Arc<[String]> {
    Arc::from([])
}

/// The signed claims as they are read back.
#[derive(Deserialize)]
struct Claims {
    #[serde(flatten)]
    principal: Principal,
    exp: i64,
}

/// The same claims as they are written: the principal borrowed, not cloned
/// (an assertion is minted for every outgoing call).
#[derive(Serialize)]
struct ClaimsRef<'a> {
    #[serde(flatten)]
    principal: &'a Principal,
    exp: i64,
}

/// Why an assertion was refused. Callers see one UNAUTHENTICATED message; the
/// variant is for logs and tests.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AssertionError {
    #[error("principal assertion missing")]
    Missing,
    #[error("principal assertion malformed")]
    Malformed,
    #[error("principal assertion signature invalid")]
    BadSignature,
    #[error("principal assertion expired")]
    Expired,
}

/// The internal key that signs and verifies assertions. Cheap to clone;
/// clones share the secret and the assertions lately minted and verified.
#[derive(Clone)]
pub struct InternalKey(Arc<KeyState>);

struct KeyState {
    secret: Vec<u8>,
    recent: Mutex<Recent>,
}

/// How many assertions a key keeps of each kind, minted and verified: a
/// process serves a handful of callers at a time, and a miss only costs the
/// signature it would have cost anyway.
const RECENT: usize = 8;

/// The assertions a key minted and verified lately, newest first.
#[derive(Default)]
struct Recent {
    minted: Vec<Kept>,
    verified: Vec<Kept>,
}

/// One assertion and what it says.
struct Kept {
    principal: Principal,
    /// The lifetime it was minted for (minted ones only; 0 for verified).
    ttl_secs: i64,
    exp: i64,
    token: String,
}

/// The signature part of an assertion (after its last dot), or all of it.
fn tag_of(assertion: &str) -> &str {
    assertion.rsplit_once('.').map_or(assertion, |(_, tag)| tag)
}

impl Recent {
    /// A token minted for `principal` with `ttl_secs` that still has more
    /// than half of that lifetime left.
    fn reusable(&self, principal: &Principal, ttl_secs: i64, now: i64) -> Option<String> {
        self.minted
            .iter()
            .find(|kept| {
                kept.ttl_secs == ttl_secs
                    && kept.exp - now > ttl_secs / 2
                    && kept.principal == *principal
            })
            .map(|kept| kept.token.clone())
    }

    /// The principal and expiry of `assertion`, when it was verified lately.
    /// The tag, the one secret part, is compared in constant time, so a
    /// forger learns nothing from how long a near miss takes; the claims,
    /// which anyone holding the token can read, only once the tag matched.
    fn verified(&self, assertion: &str) -> Option<(Principal, i64)> {
        let tag = tag_of(assertion);
        self.verified
            .iter()
            .find(|kept| {
                bool::from(tag_of(&kept.token).as_bytes().ct_eq(tag.as_bytes()))
                    && kept.token == assertion
            })
            .map(|kept| (kept.principal.clone(), kept.exp))
    }

    fn keep(list: &mut Vec<Kept>, kept: Kept) {
        list.truncate(RECENT - 1);
        list.insert(0, kept);
    }
}

impl std::fmt::Debug for InternalKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InternalKey(..)")
    }
}

/// The internal key is too weak to sign with.
#[derive(Debug, thiserror::Error)]
#[error("internal key must be at least 32 bytes (got {0})")]
pub struct WeakKey(usize);

impl InternalKey {
    /// Use the given secret. At least 32 bytes, so it cannot be guessed.
    pub fn new(secret: impl Into<Vec<u8>>) -> Result<Self, WeakKey> {
        let secret = secret.into();
        if secret.len() < 32 {
            return Err(WeakKey(secret.len()));
        }
        Ok(InternalKey(Arc::new(KeyState {
            secret,
            recent: Mutex::default(),
        })))
    }

    /// A fresh random key, rendered as 64 hex digits.
    pub fn generate_hex() -> String {
        let bytes: [u8; 32] = rand::random();
        hex::encode(bytes)
    }

    fn mac(&self) -> Hmac<Sha256> {
        // HMAC accepts keys of any length, so this cannot fail.
        <Hmac<Sha256> as Mac>::new_from_slice(&self.0.secret).expect("hmac takes any key length")
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, Recent> {
        // What it holds is only ever replaced whole, so a panic elsewhere
        // cannot leave it half-written.
        self.0.recent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An assertion of `principal`, valid for at least half of `ttl_secs`
    /// from now: the one minted for it lately, or a fresh one valid for
    /// `ttl_secs`.
    pub fn mint(&self, principal: &Principal, ttl_secs: i64) -> String {
        let now = now_secs();
        if let Some(token) = self.recent().reusable(principal, ttl_secs, now) {
            return token;
        }
        let exp = now + ttl_secs;
        let token = self.sign_claims(principal, exp);
        Recent::keep(
            &mut self.recent().minted,
            Kept {
                principal: principal.clone(),
                ttl_secs,
                exp,
                token: token.clone(),
            },
        );
        token
    }

    /// The signed wire form of `principal`'s claims, expiring at `exp`.
    fn sign_claims(&self, principal: &Principal, exp: i64) -> String {
        let claims = ClaimsRef { principal, exp };
        let body = serde_json::to_vec(&claims).expect("claims serialize to JSON");
        let signed = format!("v1.{}", URL_SAFE_NO_PAD.encode(body));
        let mut mac = self.mac();
        mac.update(signed.as_bytes());
        let tag = mac.finalize().into_bytes();
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(tag))
    }

    /// Check the signature and the expiry, then return the principal.
    pub fn verify(&self, assertion: &str) -> Result<Principal, AssertionError> {
        if assertion.len() > MAX_ASSERTION_LEN {
            return Err(AssertionError::Malformed);
        }
        let now = now_secs();
        if let Some((principal, exp)) = self.recent().verified(assertion) {
            return if exp < now {
                Err(AssertionError::Expired)
            } else {
                Ok(principal)
            };
        }
        let claims = self.check(assertion)?;
        if claims.exp < now {
            return Err(AssertionError::Expired);
        }
        Recent::keep(
            &mut self.recent().verified,
            Kept {
                principal: claims.principal.clone(),
                ttl_secs: 0,
                exp: claims.exp,
                token: assertion.to_owned(),
            },
        );
        Ok(claims.principal)
    }

    /// The claims of an assertion whose signature holds.
    fn check(&self, assertion: &str) -> Result<Claims, AssertionError> {
        let (signed, tag) = assertion
            .rsplit_once('.')
            .ok_or(AssertionError::Malformed)?;
        let body = signed
            .strip_prefix("v1.")
            .ok_or(AssertionError::Malformed)?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| AssertionError::Malformed)?;
        let mut mac = self.mac();
        mac.update(signed.as_bytes());
        // verify_slice compares in constant time.
        mac.verify_slice(&tag)
            .map_err(|_| AssertionError::BadSignature)?;
        let body = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| AssertionError::Malformed)?;
        serde_json::from_slice(&body).map_err(|_| AssertionError::Malformed)
    }

    /// A 32-byte key for another purpose (for example encrypting stored
    /// credentials), derived as HMAC-SHA256(internal key, purpose) so it is
    /// independent of the signing use.
    pub fn derive(&self, purpose: &str) -> [u8; 32] {
        let mut mac = self.mac();
        mac.update(b"derive:");
        mac.update(purpose.as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// Sign an outgoing request for `principal`: the assertion and the
    /// current trace context.
    pub fn sign<T>(&self, request: &mut Request<T>, principal: &Principal) {
        self.attach(request.metadata_mut(), principal);
        crate::propagation::inject(request.metadata_mut());
    }

    /// Put a freshly minted assertion for `principal` into `metadata`.
    pub fn attach(&self, metadata: &mut MetadataMap, principal: &Principal) {
        let token = self.mint(principal, DEFAULT_TTL_SECS);
        let value = AsciiMetadataValue::try_from(token)
            .expect("base64url and dots are valid metadata characters");
        metadata.insert(METADATA_KEY, value);
    }
}

fn now_secs() -> i64 {
    crate::clock::now_ms() / 1000
}

/// Server-side interceptor: verifies the assertion and puts the [`Principal`]
/// into the request's extensions; refuses the call with UNAUTHENTICATED
/// otherwise.
#[derive(Clone, Debug)]
pub struct Verifier {
    key: InternalKey,
}

impl Verifier {
    pub fn new(key: InternalKey) -> Self {
        Verifier { key }
    }
}

impl tonic::service::Interceptor for Verifier {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let verified = match request.metadata().get(METADATA_KEY) {
            None => Err(AssertionError::Missing),
            Some(v) => v
                .to_str()
                .map_err(|_| AssertionError::Malformed)
                .and_then(|s| self.key.verify(s)),
        };
        match verified {
            Ok(principal) => {
                request.extensions_mut().insert(principal);
                Ok(request)
            }
            Err(err) => {
                tracing::debug!(error = %err, "refused call");
                Err(Status::unauthenticated(err.to_string()))
            }
        }
    }
}

/// The verified principal of a request that passed [`Verifier`].
pub fn of<T>(request: &Request<T>) -> Result<Principal, Status> {
    request
        .extensions()
        .get::<Principal>()
        .cloned()
        .ok_or_else(|| Status::unauthenticated("principal assertion missing"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> InternalKey {
        InternalKey::new(vec![byte; 32]).expect("32 bytes is enough")
    }

    fn alice() -> Principal {
        Principal::verified(VerifiedKey {
            tenant_id: "t1".into(),
            key_id: "k1".into(),
            scopes: vec!["data:read".into()],
            human: false,
        })
    }

    #[test]
    fn round_trips() {
        let k = key(1);
        let token = k.mint(&alice(), 60);
        assert_eq!(k.verify(&token), Ok(alice()));
        let scoped = alice()
            .in_session(Some("s1".into()))
            .on_subject(Some(Subject::new("filter", "f1")));
        let back = k.verify(&k.mint(&scoped, 60)).expect("verifies");
        assert_eq!(back.subject(), Some(&Subject::new("filter", "f1")));
    }

    #[test]
    fn only_the_sessions_subject_may_be_written() {
        let plain = alice().in_session(Some("s1".into()));
        assert!(!plain.may_write("filter", "f1"));
        let scoped = plain.on_subject(Some(Subject::new("filter", "f1")));
        assert!(scoped.may_write("filter", "f1"));
        assert!(!scoped.may_write("filter", "f2"));
        assert!(!scoped.may_write("gcn_event", "f1"));
        // A new session drops the old subject.
        assert!(
            !scoped
                .in_session(Some("s2".into()))
                .may_write("filter", "f1")
        );
        assert!(Principal::system("t1").may_write("filter", "anything"));
    }

    #[test]
    fn refuses_other_keys_tampering_and_expiry() {
        let token = key(1).mint(&alice(), 60);
        assert_eq!(key(2).verify(&token), Err(AssertionError::BadSignature));

        // Swap the claims for another tenant's but keep the old signature.
        let mut other = alice();
        other.tenant_id = "t2".into();
        let forged_body = key(2).mint(&other, 60);
        let (_, tag) = token.rsplit_once('.').expect("has a tag");
        let (signed, _) = forged_body.rsplit_once('.').expect("has a tag");
        assert_eq!(
            key(1).verify(&format!("{signed}.{tag}")),
            Err(AssertionError::BadSignature)
        );

        let expired = key(1).mint(&alice(), -5);
        assert_eq!(key(1).verify(&expired), Err(AssertionError::Expired));
    }

    #[test]
    fn refuses_garbage_without_panicking() {
        let k = key(1);
        for junk in [
            "",
            ".",
            "v1.",
            "v1..",
            "v2.abc.def",
            "v1.!!!.???",
            &"a".repeat(10_000),
        ] {
            assert!(k.verify(junk).is_err(), "{junk:?} must be refused");
        }
    }

    #[test]
    fn a_minted_assertion_is_handed_out_again_while_half_its_life_is_left() {
        let k = key(1);
        let token = k.mint(&alice(), 60);
        assert_eq!(k.mint(&alice(), 60), token, "the same principal reuses it");
        // Another principal, another lifetime: a token of their own.
        let in_session = alice().in_session(Some("s1".into()));
        assert_ne!(k.mint(&in_session, 60), token);
        assert_ne!(k.mint(&alice(), 600), token);
        // A clone shares what the key minted.
        assert_eq!(k.clone().mint(&alice(), 60), token);
        assert_eq!(k.recent().minted.len(), 3);
        // A token with half its life gone or less is never handed out: the
        // key signs again (within the same second, the same text).
        let now = now_secs();
        for kept in k
            .recent()
            .minted
            .iter_mut()
            .filter(|kept| kept.token == token)
        {
            kept.exp = now + 30;
        }
        let fresh = k.mint(&alice(), 60);
        let signed_again = k.recent().minted[0].exp;
        assert!(signed_again >= now + 60, "a fresh token, valid for 60 s");
        assert_eq!(k.verify(&fresh), Ok(alice()));
        // A token with no lifetime left is minted afresh every time.
        assert_eq!(k.recent().minted.len(), 4);
        k.mint(&alice(), 0);
        k.mint(&alice(), 0);
        assert_eq!(
            k.recent().minted.len(),
            6,
            "a token of no lifetime is not reused"
        );
        for n in 0..20 {
            k.mint(&alice().in_session(Some(format!("s{n}"))), 60);
        }
        assert_eq!(k.recent().minted.len(), RECENT, "the list stays bounded");
    }

    #[test]
    fn a_verified_assertion_is_accepted_again_only_as_is_and_until_it_expires() {
        let k = key(1);
        let token = key(1).mint(&alice(), 60);
        assert_eq!(k.verify(&token), Ok(alice()));
        assert_eq!(k.recent().verified.len(), 1);
        assert_eq!(k.verify(&token), Ok(alice()));
        assert_eq!(
            k.recent().verified.len(),
            1,
            "the second check is the kept one"
        );
        // A byte changed anywhere is checked in full, and refused.
        for at in [0, token.len() / 2, token.len() - 1] {
            let mut bytes = token.clone().into_bytes();
            bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
            let forged = String::from_utf8(bytes).expect("ASCII");
            assert!(
                k.verify(&forged).is_err(),
                "a change at byte {at} must be refused"
            );
        }
        // Nothing refused is kept.
        assert_eq!(k.recent().verified.len(), 1);
        // Kept, but past its expiry: refused as expired.
        k.recent().verified[0].exp = now_secs() - 1;
        assert_eq!(k.verify(&token), Err(AssertionError::Expired));
        // Another key's check kept nothing for this one.
        assert_eq!(key(2).verify(&token), Err(AssertionError::BadSignature));
    }

    #[test]
    fn weak_keys_are_refused() {
        assert!(InternalKey::new(b"short".to_vec()).is_err());
    }
}
