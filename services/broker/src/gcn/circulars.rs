//! Circulars a page at a time: an event's circulars behind a cursor (so
//! `get_gcn_event` stays small for a busy burst), one circular by number,
//! and a word search over every circular's subject and body.
//!
//! Cursors are plain text an agent can read (`after:34420`, `before:34420`):
//! the page boundary is a circular number, so a page stays right when
//! circulars arrive between calls.

pub use super::model::CircularPage;
use super::service::GcnService;
use super::store::{CircularRow, like_escape};
use ithaca_kit::error::DomainCode;
use ithaca_kit::error::ServiceError;
use ithaca_kit::principal::Principal;

/// Default and largest page of an event's circulars in `get_gcn_event`.
pub const DEFAULT_CIRCULARS: i64 = 10;
pub const MAX_CIRCULARS: i64 = 100;
/// Default and largest page of `search_gcn_circulars`.
pub const DEFAULT_HITS: i64 = 20;
pub const MAX_HITS: i64 = 100;
/// Most words a search takes.
pub const MAX_WORDS: usize = 8;
/// Characters of a hit's snippet either side of the first word found.
const SNIPPET_SIDE: usize = 100;

/// One page of an event's circulars.
#[derive(Clone, Debug)]
pub struct CircularsPage {
    pub rows: Vec<CircularRow>,
    /// The cursor of the next page, when more circulars follow.
    pub next_cursor: Option<String>,
}

/// A `search_gcn_circulars` request.
#[derive(Clone, Debug, Default)]
pub struct CircularQuery {
    pub query: String,
    pub dateobs: Option<String>,
    pub limit: Option<i32>,
    pub cursor: Option<String>,
}

/// A hit: the circular (its body is not returned) and the text around the
/// first word.
#[derive(Clone, Debug)]
pub struct Hit {
    pub row: CircularRow,
    pub snippet: String,
}

/// A `search_gcn_circulars` answer.
#[derive(Clone, Debug)]
pub struct SearchAnswer {
    pub words: Vec<String>,
    pub hits: Vec<Hit>,
    pub total: i64,
    pub next_cursor: Option<String>,
}

/// The circular number in a cursor `{prefix}:N`; `None` for no cursor.
fn parse_cursor(cursor: Option<&str>, prefix: &str) -> Result<Option<i64>, ServiceError> {
    let Some(c) = cursor.map(str::trim).filter(|c| !c.is_empty()) else {
        return Ok(None);
    };
    c.strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix(':'))
        .and_then(|n| n.parse::<i64>().ok())
        .filter(|n| *n >= 0)
        .map(Some)
        .ok_or_else(|| {
            ServiceError::invalid(format!(
                "cursor: {:?} is not a cursor of this tool; pass the next_cursor of the previous answer ({prefix}:<circular number>)",
                c.chars().take(60).collect::<String>()
            ))
        })
}

fn page_size(value: Option<i32>, default: i64, max: i64) -> Result<i64, ServiceError> {
    match value {
        None => Ok(default),
        Some(v) if v >= 1 && i64::from(v) <= max => Ok(i64::from(v)),
        Some(v) => Err(ServiceError::invalid(format!(
            "limit: {v} is not between 1 and {max}"
        ))),
    }
}

/// The words of a query: lowercase, at least one, at most [`MAX_WORDS`].
fn words(query: &str) -> Result<Vec<String>, ServiceError> {
    let query = query.trim();
    let chars = query.chars().count();
    if !(2..=200).contains(&chars) {
        return Err(ServiceError::invalid(format!(
            "query: {chars} characters; give 2 to 200 (words that must all appear in a circular)"
        )));
    }
    let mut out: Vec<String> = Vec::new();
    for w in query.split_whitespace().map(str::to_lowercase) {
        if !out.contains(&w) {
            out.push(w);
        }
    }
    if out.len() > MAX_WORDS {
        return Err(ServiceError::invalid(format!(
            "query: {} words; at most {MAX_WORDS}",
            out.len()
        )));
    }
    Ok(out)
}

/// About [`SNIPPET_SIDE`] characters either side of the first of `words`
/// in the subject or body (the subject's start when only it matched), on
/// one line.
fn snippet(row: &CircularRow, words: &[String]) -> String {
    let lower = row.body.to_lowercase();
    // Lowercasing may change byte lengths outside ASCII; only an ASCII-safe
    // offset is used, else the body's start.
    let at = words
        .iter()
        .filter_map(|w| lower.find(w.as_str()))
        .min()
        .filter(|_| lower.len() == row.body.len());
    let text = match at {
        Some(at) => {
            let start = row
                .body
                .floor_char_boundary(at.saturating_sub(SNIPPET_SIDE * 2));
            let end = row
                .body
                .ceil_char_boundary((at + SNIPPET_SIDE * 2).min(row.body.len()));
            let window = &row.body[start..end];
            // Characters, not bytes, either side of the word.
            let before: Vec<char> = row.body[start..at].chars().collect();
            let skip = before.len().saturating_sub(SNIPPET_SIDE);
            let keep = SNIPPET_SIDE + words.iter().map(|w| w.chars().count()).max().unwrap_or(0);
            let chars = window
                .chars()
                .skip(skip)
                .take(SNIPPET_SIDE.min(before.len()) + keep);
            let mut s: String = chars.collect();
            if skip > 0 || start > 0 {
                s.insert(0, '…');
            }
            if end < row.body.len() {
                s.push('…');
            }
            s
        }
        None => row.body.chars().take(SNIPPET_SIDE * 2).collect(),
    };
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl GcnService {
    /// A page of the event `dateobs`'s circulars, oldest first.
    pub async fn circulars_page(
        &self,
        dateobs: &str,
        page: &CircularPage,
    ) -> Result<CircularsPage, ServiceError> {
        let limit = page_size(page.limit, DEFAULT_CIRCULARS, MAX_CIRCULARS)?;
        let after = parse_cursor(page.cursor.as_deref(), "after")?;
        let mut rows = self.store().circulars_page(dateobs, after, limit).await?;
        let more = rows.len() as i64 > limit;
        rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        let next_cursor = more
            .then(|| rows.last().map(|r| format!("after:{}", r.circular_id)))
            .flatten();
        Ok(CircularsPage { rows, next_cursor })
    }

    /// `get_gcn_circular`: one circular in full.
    pub async fn circular(
        &self,
        caller: &Principal,
        circular_id: i32,
    ) -> Result<CircularRow, ServiceError> {
        caller.tenant()?;
        if circular_id < 1 {
            return Err(ServiceError::invalid(format!(
                "circular_id: {circular_id} is not a circular number (GCN Circular 34397 is 34397)"
            )));
        }
        self.store()
            .circular(i64::from(circular_id))
            .await?
            .ok_or_else(|| {
                ServiceError::not_found(format!(
                    "circular_id: no GCN Circular {circular_id} is stored; search_gcn_circulars finds circulars by their words"
                ))
                .with_domain(DomainCode::UnknownGcnCircular)
            })
    }

    /// `search_gcn_circulars`: circulars containing every word, newest
    /// first, a page at a time.
    pub async fn search_circulars(
        &self,
        caller: &Principal,
        q: &CircularQuery,
    ) -> Result<SearchAnswer, ServiceError> {
        caller.tenant()?;
        let words = words(&q.query)?;
        let limit = page_size(q.limit, DEFAULT_HITS, MAX_HITS)?;
        let before = parse_cursor(q.cursor.as_deref(), "before")?;
        let dateobs = match q.dateobs.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(d) => Some(self.resolve(d).await?.dateobs),
        };
        let patterns: Vec<String> = words.iter().map(|w| like_escape(w)).collect();
        let (mut rows, total) = self
            .store()
            .search_circulars(&patterns, dateobs.as_deref(), before, limit)
            .await?;
        let more = rows.len() as i64 > limit;
        rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        let next_cursor = more
            .then(|| rows.last().map(|r| format!("before:{}", r.circular_id)))
            .flatten();
        let hits = rows
            .into_iter()
            .map(|row| Hit {
                snippet: snippet(&row, &words),
                row,
            })
            .collect();
        Ok(SearchAnswer {
            words,
            hits,
            total,
            next_cursor,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_say_what_is_wrong() {
        assert_eq!(parse_cursor(None, "after").ok(), Some(None));
        assert_eq!(parse_cursor(Some(" "), "after").ok(), Some(None));
        assert_eq!(
            parse_cursor(Some("after:34420"), "after").ok(),
            Some(Some(34420))
        );
        for bad in ["before:1", "after:", "after:-3", "34420", "after:x"] {
            let e = parse_cursor(Some(bad), "after").expect_err(bad);
            assert!(e.message.starts_with("cursor:"), "{}", e.message);
        }
    }

    #[test]
    fn words_are_lowercase_and_bounded() {
        assert_eq!(
            words(" ZTF23aaxeacr  Afterglow ztf23AAXEACR").ok(),
            Some(vec!["ztf23aaxeacr".to_owned(), "afterglow".to_owned()])
        );
        assert!(words("x").is_err());
        assert!(words("a b c d e f g h i").is_err());
    }

    #[test]
    fn a_snippet_surrounds_the_word_on_one_line() {
        let row = CircularRow {
            circular_id: 1,
            dateobs: None,
            subject: "s".into(),
            submitter: String::new(),
            created_on_ms: 0,
            body: format!(
                "{}\nthe ZTF23aaxeacr afterglow\n{}",
                "é".repeat(300),
                "b".repeat(300)
            ),
            event_id: None,
            bibcode: None,
        };
        let s = snippet(&row, &["afterglow".to_owned()]);
        assert!(s.contains("ZTF23aaxeacr afterglow"), "{s}");
        assert!(
            s.chars().count() <= 2 * SNIPPET_SIDE + 20,
            "{}",
            s.chars().count()
        );
        assert!(!s.contains('\n'));
    }
}
