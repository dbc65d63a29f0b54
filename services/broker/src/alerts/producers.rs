//! Who wrote an alert's fields. A broker that redistributes ZTF alerts
//! (Fink, say) adds fields of its own to each packet; its containers are
//! stored under a schema version label naming it (`4.02/Fink`, see
//! [`super::avro`]). Each producer's added fields are kept in its own
//! namespace: the survey's schema is the union of its own versions only,
//! and a producer's schema lists only the paths it adds. A filter on a
//! survey's stream is checked against the survey's schema alone, so
//! ingesting enriched packets never changes what a ZTF filter may name.

use super::schema::{self, FlatField};
pub use super::schema::{SchemaOf, squash};
use super::service::AlertService;
use ithaca_kit::error::ServiceError;

/// The survey whose alerts the archive holds: its own fields have no
/// producer in their version label.
pub const SURVEY: &str = "ZTF";

/// Version labels with their flattened paths.
pub type Versions = Vec<(String, Vec<FlatField>)>;

/// The producer of a version label: `4.02/Fink` is Fink's, `4.02` the
/// survey's own (`None`).
pub fn producer_of(label: &str) -> Option<&str> {
    label.split_once('/').map(|(_, p)| p)
}

fn union_of(versions: &Versions) -> Vec<(FlatField, Vec<String>)> {
    schema::union(versions.iter().map(|(v, f)| (v.as_str(), f.as_slice())))
}

impl AlertService {
    /// The survey's own schema versions: those ingested without a producer,
    /// else the schema files (when only producers' packets were ingested).
    pub async fn survey_schema_versions(&self) -> Result<(&'static str, Versions), ServiceError> {
        let (source, all) = self.schema_versions().await?;
        let own: Versions = all
            .into_iter()
            .filter(|(v, _)| producer_of(v).is_none())
            .collect();
        if own.is_empty() && source == "ingested" {
            return self.file_schema_versions().await;
        }
        Ok((source, own))
    }

    /// The survey's own schema: what a filter on a survey stream is
    /// checked against.
    pub async fn survey_schema(&self) -> Result<Vec<FlatField>, ServiceError> {
        let (_, versions) = self.survey_schema_versions().await?;
        Ok(union_of(&versions).into_iter().map(|(f, _)| f).collect())
    }

    /// Every path a producer adds (its versions have it, the survey's do
    /// not: compared as plain fields, since a producer may mark a survey
    /// field nullable where the survey does not), with the producer's name.
    pub async fn producer_paths(&self) -> Result<Vec<(String, FlatField)>, ServiceError> {
        let (_, all) = self.schema_versions().await?;
        let mut producers: Vec<&str> = all.iter().filter_map(|(v, _)| producer_of(v)).collect();
        producers.sort_unstable();
        producers.dedup();
        if producers.is_empty() {
            return Ok(Vec::new());
        }
        let own = self.survey_schema().await.unwrap_or_default();
        let mut out = Vec::new();
        for producer in producers {
            let theirs: Versions = all
                .iter()
                .filter(|(v, _)| producer_of(v) == Some(producer))
                .cloned()
                .collect();
            for (f, _) in union_of(&theirs) {
                if !own.iter().any(|o| o.field == f.field) {
                    out.push((producer.to_owned(), f));
                }
            }
        }
        Ok(out)
    }

    /// The schema `get_alert_schema` answers for `producer`: the survey's
    /// own (no producer, or the survey's name), or only the paths that
    /// producer adds.
    pub(super) async fn schema_of(&self, producer: Option<&str>) -> Result<SchemaOf, ServiceError> {
        let (source, all) = self.schema_versions().await?;
        let mut producers: Vec<String> = all
            .iter()
            .filter_map(|(v, _)| producer_of(v).map(str::to_owned))
            .collect();
        producers.sort();
        producers.dedup();
        let wanted = producer.map(str::trim).filter(|p| !p.is_empty());
        let Some(wanted) = wanted.filter(|p| !p.eq_ignore_ascii_case(SURVEY)) else {
            let (source, own) = self.survey_schema_versions().await?;
            return Ok(SchemaOf {
                source,
                versions: own.iter().map(|(v, _)| v.clone()).collect(),
                paths: union_of(&own),
                producers,
            });
        };
        let Some(name) = producers
            .iter()
            .find(|p| p.eq_ignore_ascii_case(wanted))
            .cloned()
        else {
            let mut known = vec![SURVEY.to_owned()];
            known.extend(producers.iter().cloned());
            return Err(ServiceError::invalid(format!(
                "producer: no alerts of producer {wanted:?} were ingested; producers: {}",
                known.join(", ")
            )));
        };
        let theirs: Versions = all
            .into_iter()
            .filter(|(v, _)| producer_of(v) == Some(name.as_str()))
            .collect();
        let own = self.survey_schema().await.unwrap_or_default();
        let paths = union_of(&theirs)
            .into_iter()
            .filter(|(f, _)| !own.iter().any(|o| o.field == f.field))
            .collect();
        Ok(SchemaOf {
            source,
            versions: theirs.iter().map(|(v, _)| v.clone()).collect(),
            paths,
            producers,
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn labels_name_their_producer() {
        assert_eq!(super::producer_of("4.02/Fink"), Some("Fink"));
        assert_eq!(super::producer_of("4.02"), None);
    }

    #[test]
    fn separators_compare_away() {
        assert!(super::squash("RealBogus quality score").contains(&super::squash("real-bogus")));
        assert!(
            super::squash("deep-learning real bogus score").contains(&super::squash("real-bogus"))
        );
    }
}
