//! W3C trace ids for spans when nothing is exported.
//!
//! Trace ids must exist whether or not spans are exported: they are stored
//! on trace events and propagated across gRPC in `traceparent`. When
//! OpenTelemetry exports spans its layer gives them their ids; otherwise
//! [`crate::telemetry`] installs this [`IdLayer`] instead, which gives each
//! span a trace id and a span id and keeps nothing else (no attributes, no
//! events, no timings), so a span costs little more than the registry's own
//! bookkeeping.
//!
//! A new span takes the trace id of its parent span (explicit or
//! contextual) or, for a root, a fresh random one; [`set_parent`] makes it
//! the child of a remote span instead, as OpenTelemetry's `set_parent` does.

use std::cell::Cell;
use tracing::span;
use tracing::{Span, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::Registry;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// The W3C ids of one span, stored in its extensions; also what a
/// `traceparent` header carries (then `span_id` is the remote parent's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpanIds {
    /// The 128-bit trace id, never zero.
    pub trace_id: u128,
    /// The 64-bit span id, never zero.
    pub span_id: u64,
    /// The trace flags (bit 0: sampled).
    pub flags: u8,
}

/// The sampled flag: every trace is recorded (OpenTelemetry's default
/// parent-based always-on sampler does the same).
const SAMPLED: u8 = 0x01;

impl SpanIds {
    /// A new root: fresh trace and span ids, sampled.
    pub fn root() -> Self {
        Self {
            trace_id: fresh_trace_id(),
            span_id: fresh_span_id(),
            flags: SAMPLED,
        }
    }

    /// A child of `self`: the same trace and flags, a fresh span id.
    pub fn child(&self) -> Self {
        Self {
            trace_id: self.trace_id,
            span_id: fresh_span_id(),
            flags: self.flags,
        }
    }

    /// Parse a W3C `traceparent` value, `00-<32 hex>-<16 hex>-<2 hex>`
    /// (lowercase hex). A later version may append fields after a `-`;
    /// version `ff`, an all-zero trace or span id and anything else
    /// malformed give `None`.
    pub fn parse_traceparent(value: &str) -> Option<Self> {
        let value = value.trim();
        let mut parts = value.splitn(5, '-');
        let version = parts.next()?;
        let trace = parts.next()?;
        let span = parts.next()?;
        let flags = parts.next()?;
        let rest = parts.next();
        if version.len() != 2
            || trace.len() != 32
            || span.len() != 16
            || flags.len() != 2
            || !is_lower_hex(value.get(..55)?.as_bytes())
        {
            return None;
        }
        let version = u8::from_str_radix(version, 16).ok()?;
        // Version 00 has exactly four fields; a later one may have more.
        if version == 0xff || (version == 0 && rest.is_some()) {
            return None;
        }
        let trace_id = u128::from_str_radix(trace, 16).ok()?;
        let span_id = u64::from_str_radix(span, 16).ok()?;
        let flags = u8::from_str_radix(flags, 16).ok()?;
        (trace_id != 0 && span_id != 0).then_some(Self {
            trace_id,
            span_id,
            flags,
        })
    }

    /// The `traceparent` value naming this span as the parent.
    ///
    /// Written with `hex`, not `format!`: every hop and every streamed
    /// append prints one, and `{:032x}` goes through the formatting
    /// machinery digit by digit (callgrind put it at ~2,500 instructions
    /// each, against a few hundred this way).
    pub fn traceparent(&self) -> String {
        let mut text = [0u8; 55];
        text[..3].copy_from_slice(b"00-");
        hex_into(&self.trace_id.to_be_bytes(), &mut text[3..35]);
        text[35] = b'-';
        hex_into(&self.span_id.to_be_bytes(), &mut text[36..52]);
        text[52] = b'-';
        hex_into(&[self.flags & SAMPLED], &mut text[53..55]);
        String::from_utf8_lossy(&text).into_owned()
    }

    /// The trace id as 32 lowercase hex digits.
    pub fn trace_hex(&self) -> String {
        hex::encode(self.trace_id.to_be_bytes())
    }
}

/// `bytes` as lowercase hex into `out`, which is exactly twice as long.
fn hex_into(bytes: &[u8], out: &mut [u8]) {
    // The lengths are fixed by the callers above; a mismatch is a bug there.
    let _ = hex::encode_to_slice(bytes, out);
}

/// Hex digits and the three dashes of a version-00 `traceparent`, all
/// lowercase (W3C forbids uppercase).
fn is_lower_hex(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f' | b'-'))
}

thread_local! {
    /// Each thread's generator state, seeded once from the OS-seeded
    /// `rand` generator.
    static STATE: Cell<u64> = Cell::new(rand::random());
}

/// The next value of this thread's splitmix64 sequence: fast, well mixed,
/// and random enough for ids (which need to be unique, not secret).
fn next_u64() -> u64 {
    STATE.with(|state| {
        let s = state.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        state.set(s);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

fn fresh_span_id() -> u64 {
    loop {
        let id = next_u64();
        if id != 0 {
            return id;
        }
    }
}

fn fresh_trace_id() -> u128 {
    loop {
        let id = (u128::from(next_u64()) << 64) | u128::from(next_u64());
        if id != 0 {
            return id;
        }
    }
}

/// The layer that gives every span it sees a [`SpanIds`].
#[derive(Clone, Copy, Debug, Default)]
pub struct IdLayer;

impl<S> Layer<S> for IdLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, _attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        // The nearest parent this layer saw (explicit or contextual; the
        // registry resolved which).
        let inherited = span
            .parent()
            .and_then(|parent| parent.extensions().get::<SpanIds>().copied());
        let ids = inherited.map_or_else(SpanIds::root, |parent| parent.child());
        span.extensions_mut().insert(ids);
    }
}

/// Run `f` on the ids of `span`, mutably, when the light layer gave it
/// some.
fn with_ids<R>(span: &Span, f: impl FnOnce(&mut SpanIds) -> R) -> Option<R> {
    span.with_subscriber(|(id, dispatch)| {
        let registry = dispatch.downcast_ref::<Registry>()?;
        let data = registry.span(id)?;
        let mut extensions = data.extensions_mut();
        extensions.get_mut::<SpanIds>().map(f)
    })
    .flatten()
}

/// The ids of `span`, or of its nearest ancestor that has some (a span the
/// layer's level filter skipped has none); `None` without the light layer.
pub fn of(span: &Span) -> Option<SpanIds> {
    span.with_subscriber(|(id, dispatch)| {
        let registry = dispatch.downcast_ref::<Registry>()?;
        let data = registry.span(id)?;
        data.scope()
            .find_map(|s| s.extensions().get::<SpanIds>().copied())
    })
    .flatten()
}

/// The ids of the current span (see [`of`]).
pub fn current() -> Option<SpanIds> {
    of(&Span::current())
}

/// Make `span` a child of the remote span `parent`: it joins that trace
/// and keeps its own span id. Spans already opened inside it keep the
/// trace they had, so call this right after opening the span.
pub fn set_parent(span: &Span, parent: SpanIds) {
    with_ids(span, |ids| {
        ids.trace_id = parent.trace_id;
        ids.flags = parent.flags & SAMPLED;
    });
}

/// Make `span` the root of a new trace (what a missing or malformed
/// remote parent means).
pub fn set_root(span: &Span) {
    with_ids(span, |ids| {
        ids.trace_id = fresh_trace_id();
        ids.flags = SAMPLED;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats_traceparent() {
        let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let ids = SpanIds::parse_traceparent(header).expect("valid");
        assert_eq!(ids.trace_id, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(ids.span_id, 0x00f067aa0ba902b7);
        assert_eq!(ids.flags, 1);
        assert_eq!(ids.traceparent(), header);
        assert_eq!(ids.trace_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        assert_eq!(
            SpanIds::parse_traceparent(unsampled)
                .expect("valid")
                .traceparent(),
            unsampled
        );
    }

    #[test]
    fn formats_small_ids_with_leading_zeros() {
        let ids = SpanIds {
            trace_id: 1,
            span_id: 2,
            flags: 1,
        };
        assert_eq!(
            ids.traceparent(),
            "00-00000000000000000000000000000001-0000000000000002-01"
        );
        assert_eq!(SpanIds::parse_traceparent(&ids.traceparent()), Some(ids));
    }

    #[test]
    fn a_later_version_may_carry_more_fields() {
        let ids = SpanIds::parse_traceparent(
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-ever",
        )
        .expect("a later version is read as far as version 00 goes");
        assert_eq!(ids.trace_id, 0x4bf92f3577b34da6a3ce929d0e0e4736);
    }

    #[test]
    fn rejects_malformed_traceparent() {
        for bad in [
            "",
            "garbage",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e47366-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "0-04bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
        ] {
            assert_eq!(SpanIds::parse_traceparent(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn fresh_ids_are_nonzero_and_differ() {
        let a = SpanIds::root();
        let b = SpanIds::root();
        assert_ne!(a.trace_id, 0);
        assert_ne!(a.span_id, 0);
        assert_ne!(a.trace_id, b.trace_id);
        let c = a.child();
        assert_eq!(c.trace_id, a.trace_id);
        assert_ne!(c.span_id, a.span_id);
    }

    #[test]
    fn the_layer_gives_children_their_parents_trace() {
        use tracing_subscriber::layer::SubscriberExt;
        let subscriber = Registry::default().with(IdLayer);
        tracing::subscriber::with_default(subscriber, || {
            let root = tracing::info_span!("root");
            let child = root.in_scope(|| tracing::info_span!("child"));
            let explicit = tracing::info_span!(parent: &root, "explicit");
            let other = tracing::info_span!("other");
            let (root_ids, child_ids) = (of(&root).expect("ids"), of(&child).expect("ids"));
            assert_eq!(child_ids.trace_id, root_ids.trace_id);
            assert_ne!(child_ids.span_id, root_ids.span_id);
            assert_eq!(of(&explicit).expect("ids").trace_id, root_ids.trace_id);
            assert_ne!(of(&other).expect("ids").trace_id, root_ids.trace_id);

            let remote = SpanIds::parse_traceparent(
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            )
            .expect("valid");
            set_parent(&other, remote);
            let adopted = of(&other).expect("ids");
            assert_eq!(adopted.trace_id, remote.trace_id);
            assert_ne!(adopted.span_id, remote.span_id);
            let grandchild = other.in_scope(|| tracing::info_span!("grandchild"));
            assert_eq!(of(&grandchild).expect("ids").trace_id, remote.trace_id);
            set_root(&other);
            assert_ne!(of(&other).expect("ids").trace_id, remote.trace_id);
        });
    }
}
