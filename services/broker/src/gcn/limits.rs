//! What a notice may be, checked before it is parsed: GCN's own notices are
//! small, and a notice is stored verbatim, so anything far beyond them is
//! refused with the limit it broke.
//!
//! The figures are the real notices of `../shared/data/gcn/notices` (the
//! `real_notices_fit_the_limits` test measures them): VOEvents of 2.9 to
//! 7.7 KB, at most 6 attributes on an element (the VOEvent root's) and 244
//! in a notice; JSON notices of under 600 bytes.
//!
//! The attribute count matters beyond size: `roxmltree` checks each
//! attribute of an element against every one before it, so its time grows
//! with the square of one element's attribute count (100,000 attributes on
//! one element took 9.7 s, 200,000 took 29 s). Counting them first, in one
//! pass, keeps the parser's work linear.

/// Largest VOEvent notice accepted: eight times the largest real one.
pub const MAX_VOEVENT_BYTES: usize = 64 * 1024;
/// Largest GCN JSON notice accepted. The real ones here are under 600
/// bytes; IGWN's alerts embed a base64 sky map, hence the room.
pub const MAX_JSON_NOTICE_BYTES: usize = 1024 * 1024;
/// Most attributes on one element (namespace declarations included).
pub const MAX_ELEMENT_ATTRIBUTES: usize = 32;
/// Most attributes in one notice.
pub const MAX_ATTRIBUTES: usize = 2_048;

/// Refuse a VOEvent beyond the limits, before the XML parser reads it.
pub fn check_voevent(text: &str) -> Result<(), String> {
    if text.len() > MAX_VOEVENT_BYTES {
        return Err(format!(
            "a VOEvent notice of {} bytes: at most {MAX_VOEVENT_BYTES} are accepted (GCN's are under 8 KB)",
            text.len()
        ));
    }
    let (most, total) = attribute_counts(text);
    if most > MAX_ELEMENT_ATTRIBUTES {
        return Err(format!(
            "an element with {most} attributes: at most {MAX_ELEMENT_ATTRIBUTES} are accepted on one element (GCN's have at most 6)"
        ));
    }
    if total > MAX_ATTRIBUTES {
        return Err(format!(
            "{total} attributes: at most {MAX_ATTRIBUTES} are accepted in a notice (GCN's have a few hundred)"
        ));
    }
    Ok(())
}

/// Refuse a JSON notice larger than [`MAX_JSON_NOTICE_BYTES`].
pub fn check_json_notice(text: &str) -> Result<(), String> {
    if text.len() > MAX_JSON_NOTICE_BYTES {
        return Err(format!(
            "a JSON notice of {} bytes: at most {MAX_JSON_NOTICE_BYTES} are accepted",
            text.len()
        ));
    }
    Ok(())
}

/// The most attributes on one start tag of `text`, and all of them, in one
/// pass and without parsing. Each attribute of a well-formed tag has exactly
/// one `=` outside its quoted value, so the count is exact for every tag the
/// parser accepts; comments, CDATA, processing instructions and end tags are
/// skipped whole (a DTD the parser refuses anyway).
pub fn attribute_counts(text: &str) -> (usize, usize) {
    let b = text.as_bytes();
    let (mut most, mut total) = (0usize, 0usize);
    let mut i = 0;
    while let Some(lt) = b[i..].iter().position(|&c| c == b'<') {
        i += lt + 1;
        let rest = &b[i..];
        let skip_to = |end: &[u8]| -> usize {
            rest.windows(end.len())
                .position(|w| w == end)
                .map_or(rest.len(), |p| p + end.len())
        };
        if rest.starts_with(b"!--") {
            i += skip_to(b"-->");
            continue;
        }
        if rest.starts_with(b"![CDATA[") {
            i += skip_to(b"]]>");
            continue;
        }
        if rest.starts_with(b"?") {
            i += skip_to(b"?>");
            continue;
        }
        if rest.starts_with(b"!") || rest.starts_with(b"/") {
            i += skip_to(b">");
            continue;
        }
        // A start tag: count `=` outside quotes up to its `>`.
        let mut quote = None;
        let mut count = 0usize;
        while i < b.len() {
            let c = b[i];
            i += 1;
            match quote {
                Some(q) if c == q => quote = None,
                Some(_) => {}
                None => match c {
                    b'"' | b'\'' => quote = Some(c),
                    b'=' => count += 1,
                    b'>' => break,
                    _ => {}
                },
            }
        }
        most = most.max(count);
        total += count;
    }
    (most, total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gcn::parse::parse;
    use std::path::PathBuf;

    const HEAD: &str = r#"<voe:VOEvent xmlns:voe="http://www.ivoa.net/xml/VOEvent/v2.0" role="observation" ivorn="ivo://x/y#1"><What>"#;
    const TAIL: &str = r#"</What><WhereWhen><ObsDataLocation><ObservationLocation><AstroCoords><Time><TimeInstant><ISOTime>2026-04-21T04:13:21.17</ISOTime></TimeInstant></Time></AstroCoords></ObservationLocation></ObsDataLocation></WhereWhen></voe:VOEvent>"#;

    /// The refusal of `text`; a short panic when it parses.
    fn refused(text: &str) -> String {
        match parse(text.as_bytes()) {
            Err(e) => e,
            Ok(f) => panic!("a {} of {} bytes was accepted", f.kind(), text.len()),
        }
    }

    fn voevent(what: &str) -> String {
        format!("{HEAD}{what}{TAIL}")
    }

    #[test]
    fn a_notice_within_the_limits_parses() {
        let ok = voevent(r#"<Param name="Packet_Type" value="112"/>"#);
        assert!(parse(ok.as_bytes()).is_ok());
    }

    #[test]
    fn an_element_with_too_many_attributes_is_refused_at_once() {
        // The probe's notice: 100,000 attributes on one element (1.1 MB) cost
        // the parser 9.7 s. Within the size limit, 6,000 would still cost it
        // 36 million comparisons; the count refuses it first.
        for n in [33, 6_000] {
            let attrs: String = (0..n).map(|i| format!(" a{i}=\"\"")).collect();
            let err = refused(&voevent(&format!("<Param{attrs}/>")));
            assert!(
                err.contains(&format!("an element with {n} attributes: at most 32")),
                "{err}"
            );
        }
        let attrs: String = (0..100_000).map(|i| format!(" a{i}=\"\"")).collect();
        let err = refused(&voevent(&format!("<Param{attrs}/>")));
        assert!(err.contains("at most 65536 are accepted"), "{err}");
    }

    #[test]
    fn too_many_attributes_in_all_are_refused() {
        let params: String = (0..1_100)
            .map(|i| format!(r#"<Param name="p{i}" value="1"/>"#))
            .collect();
        let text = voevent(&params);
        assert!(text.len() < MAX_VOEVENT_BYTES);
        let err = refused(&text);
        assert!(
            err.contains("2203 attributes: at most 2048 are accepted in a notice"),
            "{err}"
        );
    }

    #[test]
    fn a_notice_larger_than_the_limit_is_refused_not_stored() {
        // The probe stored a notice with a 20 MB attribute verbatim.
        let huge = voevent(&format!(
            r#"<Param name="x" value="{}"/>"#,
            "a".repeat(20 << 20)
        ));
        let err = refused(&huge);
        assert!(
            err.contains(&format!("a VOEvent notice of {} bytes", huge.len())),
            "{err}"
        );
        let json = format!(
            r#"{{"$schema":"https://gcn.nasa.gov/schema/main/gcn/notices/einstein_probe/wxt/alert.schema.json","trigger_time":"2026-04-21T04:13:21Z","id":["1"],"pad":"{}"}}"#,
            "a".repeat(MAX_JSON_NOTICE_BYTES)
        );
        let err = refused(&json);
        assert!(err.contains("a JSON notice of"), "{err}");
    }

    #[test]
    fn the_count_skips_what_holds_no_attributes() {
        let text = r#"<?xml version="1.0" a="b"?><!-- <x a="1" b="2"> --><r a='1>' b="x=y"><![CDATA[<y c="3">]]><s/></r>"#;
        assert_eq!(attribute_counts(text), (2, 2));
        assert_eq!(attribute_counts("<a b=\"1\""), (1, 1));
        assert_eq!(attribute_counts("<"), (0, 0));
    }

    #[test]
    fn real_notices_fit_the_limits() {
        let dir =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/gcn/notices");
        let (mut xml_bytes, mut json_bytes, mut most, mut total, mut n) = (0, 0, 0, 0, 0);
        for sub in std::fs::read_dir(&dir).expect("notices") {
            for f in std::fs::read_dir(sub.expect("dir").path()).expect("notices") {
                let path = f.expect("file").path();
                let text = std::fs::read_to_string(&path).expect("read");
                parse(text.as_bytes()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                n += 1;
                if text.trim_start().starts_with('<') {
                    xml_bytes = xml_bytes.max(text.len());
                    let (m, t) = attribute_counts(&text);
                    let doc = roxmltree::Document::parse(&text).expect("xml");
                    let exact = doc
                        .descendants()
                        .filter(|n| n.is_element())
                        .map(|e| e.attributes().len())
                        .max();
                    assert!(exact <= Some(m), "{}", path.display());
                    most = most.max(m);
                    total = total.max(t);
                } else {
                    json_bytes = json_bytes.max(text.len());
                }
            }
        }
        eprintln!(
            "{n} real notices: VOEvent at most {xml_bytes} B, {most} attributes an element, {total} a notice; JSON at most {json_bytes} B"
        );
        assert!(n >= 16);
        assert!(xml_bytes * 8 <= MAX_VOEVENT_BYTES);
        assert!(most * 5 <= MAX_ELEMENT_ATTRIBUTES);
        assert!(total * 8 <= MAX_ATTRIBUTES);
        assert!(json_bytes * 1000 <= MAX_JSON_NOTICE_BYTES);
    }
}
