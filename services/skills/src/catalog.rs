//! Skill manifests and ranked search over them. The manifests themselves
//! live with their skills (`crate::skills`).

pub use crate::model::Manifest;
use crate::skills::{self, Skill};

/// The manifests of `skills`, in their order.
pub fn manifests(skills: &[&'static dyn Skill]) -> Vec<Manifest> {
    skills.iter().map(|s| s.manifest()).collect()
}

/// The manifest of `skill_id` at `version`, or its latest version, among
/// the built-in skills.
pub fn find(skill_id: &str, version: Option<&str>) -> Option<Manifest> {
    skills::find(skills::BUILTIN, skill_id, version).map(|s| s.manifest())
}

/// Asset-class names an agent may use for several of ours (seed 000 asks
/// for `market` and expects volatility skills back).
const ASSET_CLASS_ALIASES: &[(&str, &[&str])] = &[
    ("market", &["equity", "vol"]),
    ("equities", &["equity"]),
    ("stocks", &["equity"]),
    ("volatility", &["vol"]),
    ("astro", &["astronomy"]),
];

/// Whether `skill_class` answers the asked `asset_class` (ours or an alias).
fn class_matches(asked: &str, skill_class: &str) -> bool {
    asked.eq_ignore_ascii_case(skill_class)
        || ASSET_CLASS_ALIASES.iter().any(|(alias, classes)| {
            asked.eq_ignore_ascii_case(alias) && classes.contains(&skill_class)
        })
}

/// The distinct asset classes and intents of `skills`, sorted.
pub fn vocabulary(skills: &[&'static dyn Skill]) -> (Vec<&'static str>, Vec<&'static str>) {
    let manifests = manifests(skills);
    let mut classes: Vec<&str> = manifests.iter().map(|m| m.asset_class).collect();
    let mut intents: Vec<&str> = manifests
        .iter()
        .flat_map(|m| m.intents.iter().copied())
        .collect();
    classes.sort_unstable();
    classes.dedup();
    intents.sort_unstable();
    intents.dedup();
    (classes, intents)
}

/// Why a search found nothing, or which of its filter values the catalog
/// does not know; `None` when it found something with known filters.
pub fn search_note(
    (classes, intents): (&[&str], &[&str]),
    query: Option<&str>,
    asset_class: Option<&str>,
    intent: Option<&str>,
    found: usize,
) -> Option<String> {
    let mut unknown = Vec::new();
    if let Some(a) = asset_class.filter(|a| !classes.iter().any(|c| class_matches(a, c))) {
        let aliases: Vec<String> = ASSET_CLASS_ALIASES
            .iter()
            .map(|(alias, to)| format!("{alias} = {}", to.join(" + ")))
            .collect();
        unknown.push(format!(
            "asset_class {:?} is not one of the catalog's ({}; also {})",
            short(a),
            classes.join(", "),
            aliases.join(", ")
        ));
    }
    if let Some(i) = intent.filter(|i| !intents.iter().any(|x| x.eq_ignore_ascii_case(i))) {
        unknown.push(format!(
            "intent {:?} is not one of the catalog's ({})",
            short(i),
            intents.join(", ")
        ));
    }
    if !unknown.is_empty() {
        return Some(unknown.join("; "));
    }
    (found == 0).then(|| match query.map(str::trim).filter(|q| !q.is_empty()) {
        Some(q) => format!(
            "no skill matches {:?} with these filters; asset_classes and intents list what the catalog holds",
            short(q)
        ),
        None => "no skill matches these filters; asset_classes and intents list what the catalog holds"
            .to_owned(),
    })
}

/// A caller's value, cut for quoting back.
fn short(s: &str) -> String {
    let mut out: String = s.chars().take(40).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

/// Skills matching the filters, best first, by a simple term score: a word
/// in the id or name counts three, in an intent two, in the description one.
pub fn search(
    skills: &[&'static dyn Skill],
    query: Option<&str>,
    asset_class: Option<&str>,
    intent: Option<&str>,
) -> Vec<Manifest> {
    let words: Vec<String> = query
        .unwrap_or("")
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let mut scored: Vec<(usize, Manifest)> = manifests(skills)
        .into_iter()
        .filter(|m| asset_class.is_none_or(|a| class_matches(a, m.asset_class)))
        .filter(|m| intent.is_none_or(|i| m.intents.iter().any(|x| x.eq_ignore_ascii_case(i))))
        .filter_map(|m| {
            if words.is_empty() {
                return Some((0, m));
            }
            let head = format!("{} {}", m.skill_id, m.name).to_lowercase();
            let desc = m.description.to_lowercase();
            let score: usize = words
                .iter()
                .map(|w| {
                    3 * usize::from(head.contains(w.as_str()))
                        + 2 * usize::from(m.intents.iter().any(|i| i.contains(w.as_str())))
                        + usize::from(desc.contains(w.as_str()))
                })
                .sum();
            (score > 0).then_some((score, m))
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.skill_id.cmp(b.1.skill_id)));
    scored.into_iter().map(|(_, m)| m).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_ranks_and_filters() {
        let search = |q, a, i| search(skills::BUILTIN, q, a, i);
        let hits = search(Some("volatility"), None, None);
        assert_eq!(hits[0].skill_id, "vol.realized");
        assert!(hits.iter().any(|m| m.skill_id == "vol.term_structure"));
        let vol: Vec<_> = search(None, Some("vol"), Some("risk"))
            .into_iter()
            .map(|m| m.skill_id)
            .collect();
        assert_eq!(vol, vec!["vol.realized", "vol.term_structure"]);
        assert!(search(Some("astrology"), None, None).is_empty());
        // Seed 000's own example: `market` holds the volatility skills.
        let market: Vec<_> = search(Some("volatility"), Some("market"), Some("risk"))
            .into_iter()
            .map(|m| m.skill_id)
            .collect();
        assert_eq!(market[0], "vol.realized", "{market:?}");
        assert!(find("vol.realized", Some("1.0")).is_some());
        assert!(find("vol.realized", Some("9.9")).is_none());
    }

    #[test]
    fn an_empty_or_unknown_search_says_what_the_catalog_holds() {
        let (classes, intents) = vocabulary(skills::BUILTIN);
        let note = |q, a, i, n| search_note((&classes, &intents), q, a, i, n);
        assert_eq!(
            note(Some("volatility"), Some("market"), Some("risk"), 2),
            None
        );
        let bad = note(None, Some("crypto"), Some("risk"), 0).expect("note");
        assert!(
            bad.contains("asset_class \"crypto\"") && bad.contains("equity, vol"),
            "{bad}"
        );
        let bad = note(None, None, Some("divination"), 0).expect("note");
        assert!(
            bad.contains("intent \"divination\"") && bad.contains("backtest"),
            "{bad}"
        );
        let none = note(Some("astrology"), None, None, 0).expect("note");
        assert!(
            none.contains("astrology") && none.contains("asset_classes"),
            "{none}"
        );
        assert!(classes.contains(&"astronomy") && intents.contains(&"fundamentals"));
    }
}
