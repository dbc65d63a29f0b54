//! Skill manifests and ranked search over them. The manifests themselves
//! live with their skills (`crate::skills`).

use crate::model::Profile;
use crate::skills::{self, Skill};
use serde_json::Value;

/// One versioned manifest.
#[derive(Clone, Debug)]
pub struct Manifest {
    pub skill_id: &'static str,
    pub version: &'static str,
    pub name: &'static str,
    pub description: &'static str,
    pub input_schema: Value,
    pub output_schema: Value,
    pub profile: Profile,
    pub asset_class: &'static str,
    pub source_classes: &'static [&'static str],
    pub trigger_compatible: bool,
    pub intents: &'static [&'static str],
}

/// The manifests of `skills`, in their order.
pub fn manifests(skills: &[&'static dyn Skill]) -> Vec<Manifest> {
    skills.iter().map(|s| s.manifest()).collect()
}

/// The manifest of `skill_id` at `version`, or its latest version, among
/// the built-in skills.
pub fn find(skill_id: &str, version: Option<&str>) -> Option<Manifest> {
    skills::find(skills::BUILTIN, skill_id, version).map(|s| s.manifest())
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
        .filter(|m| asset_class.is_none_or(|a| m.asset_class.eq_ignore_ascii_case(a)))
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
        assert!(find("vol.realized", Some("1.0")).is_some());
        assert!(find("vol.realized", Some("9.9")).is_none());
    }
}
