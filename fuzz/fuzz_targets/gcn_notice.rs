//! A GCN file from outside: bytes through `ithaca_broker::gcn::parse::parse`,
//! which reads VOEvent notices (XML), GCN JSON notices and circulars.
//! Nothing may panic, and:
//!
//! - a notice it accepts keeps the limits (`gcn::limits`): its size, and the
//!   attributes of each element and in all;
//! - the attribute count taken before parsing is never below what the XML
//!   parser finds on any element of a document it reads, so the count
//!   always guards the parser's quadratic duplicate check.
//!
//! Seeds (`fuzz/seeds/gcn_notice/`): real VOEvents of
//! `../shared/data/gcn/notices` (SVOM GRM, Fermi GBM, LVC, Swift BAT), an
//! Einstein Probe JSON notice, and two real circulars with their bodies cut
//! to 400 characters.

#![no_main]

use ithaca_broker::gcn::limits::{
    MAX_ATTRIBUTES, MAX_ELEMENT_ATTRIBUTES, MAX_JSON_NOTICE_BYTES, MAX_VOEVENT_BYTES,
    attribute_counts,
};
use ithaca_broker::gcn::parse::{NoticeFormat, ParsedFile, parse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(ParsedFile::Notice(notice)) = parse(data) {
        match notice.format {
            NoticeFormat::VoEvent => {
                assert!(notice.content.len() <= MAX_VOEVENT_BYTES);
                let (most, total) = attribute_counts(&notice.content);
                assert!(most <= MAX_ELEMENT_ATTRIBUTES && total <= MAX_ATTRIBUTES);
            }
            NoticeFormat::GcnJson => assert!(notice.content.len() <= MAX_JSON_NOTICE_BYTES),
        }
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(doc) = roxmltree::Document::parse(text) {
        let (most, _) = attribute_counts(text);
        for element in doc.descendants().filter(|n| n.is_element()) {
            let found = element.attributes().len();
            assert!(
                found <= most,
                "{found} attributes on <{}>, counted {most}",
                element.tag_name().name()
            );
        }
    }
});
