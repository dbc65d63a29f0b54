//! The alert schema as dotted paths: the union over ingested writer schemas,
//! else the schema files configured for the broker.
use super::schema::{self, FlatField};
use super::service::AlertService;
use ithaca_kit::error::DomainCode;
use ithaca_kit::error::ServiceError;
use ithaca_kit::principal::Principal;
use std::path::PathBuf;

/// The alert schema as an answer.
#[derive(Clone, Debug)]
pub struct SchemaAnswer {
    pub source: &'static str,
    pub versions: Vec<String>,
    pub paths: Vec<(FlatField, Vec<String>)>,
    pub matched: i64,
    pub truncated: bool,
    /// The producer asked for, when not the survey itself.
    pub producer: Option<String>,
    /// Producers whose added fields are kept apart from the survey's.
    pub producers: Vec<String>,
}

impl AlertService {
    /// `get_alert_schema`: the survey's own schema (the union over its
    /// ingested writer schemas, else the schema files), or the fields one
    /// producer adds (`producer`, see [`super::producers`]).
    pub async fn alert_schema(
        &self,
        caller: &Principal,
        search: Option<&str>,
        prefix: Option<&str>,
        limit: Option<i32>,
        producer: Option<&str>,
    ) -> Result<SchemaAnswer, ServiceError> {
        caller.tenant()?;
        let limit = match limit {
            None => 200,
            Some(n) if !(1..=2000).contains(&n) => {
                return Err(ServiceError::invalid(format!("limit: 1 to 2000 (got {n})")));
            }
            Some(n) => n as usize,
        };
        let super::schema::SchemaOf {
            source,
            versions,
            paths: union,
            producers,
        } = self.schema_of(producer).await?;
        let search = search
            .map(|s| s.trim().to_ascii_lowercase())
            .filter(|s| !s.is_empty());
        // `real-bogus` finds `RealBogus` and `real bogus`: separators are
        // compared away as well.
        let squashed = search.as_deref().map(super::schema::squash);
        let prefix = prefix
            .map(|p| p.trim().trim_end_matches('.').to_owned())
            .filter(|p| !p.is_empty());
        let matching: Vec<(FlatField, Vec<String>)> = union
            .into_iter()
            .filter(|(f, _)| {
                prefix.as_ref().is_none_or(|p| {
                    f.field == *p
                        || f.field.starts_with(&format!("{p}."))
                        || f.path.starts_with(p.as_str())
                })
            })
            .filter(|(f, _)| {
                search.as_ref().is_none_or(|s| {
                    let squashed = squashed.as_deref().unwrap_or(s.as_str());
                    f.path.to_ascii_lowercase().contains(s)
                        || f.doc.as_deref().is_some_and(|d| {
                            d.to_ascii_lowercase().contains(s)
                                || (!squashed.is_empty()
                                    && super::schema::squash(d).contains(squashed))
                        })
                })
            })
            .collect();
        let matched = matching.len() as i64;
        let truncated = matching.len() > limit;
        Ok(SchemaAnswer {
            source,
            versions,
            paths: matching.into_iter().take(limit).collect(),
            matched,
            truncated,
            producer: producer
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_owned),
            producers,
        })
    }

    /// The flattened schema of every version known: ingested ones, else the
    /// schema files. The filter validation of the next issue reads this.
    pub async fn schema_versions(
        &self,
    ) -> Result<(&'static str, Vec<(String, Vec<FlatField>)>), ServiceError> {
        let rows = self.store.schemas().await?;
        if !rows.is_empty() {
            let mut out: Vec<(String, Vec<FlatField>)> = Vec::new();
            for row in rows {
                let fields: Vec<FlatField> =
                    serde_json::from_str(&row.paths).map_err(|e| ServiceError::internal(&e))?;
                // Two writer schemas of one version label (a re-ordered
                // field, say) merge into one entry.
                match out.iter_mut().find(|(v, _)| *v == row.version) {
                    Some((_, known)) => {
                        for f in fields {
                            if !known.iter().any(|k| k.path == f.path) {
                                known.push(f);
                            }
                        }
                    }
                    None => out.push((row.version, fields)),
                }
            }
            return Ok(("ingested", out));
        }
        self.file_schema_versions().await
    }

    /// The schema versions of the configured schema files.
    pub async fn file_schema_versions(
        &self,
    ) -> Result<(&'static str, Vec<(String, Vec<FlatField>)>), ServiceError> {
        let Some(dir) = self.config.schema_dir.clone() else {
            return Err(ServiceError::precondition(
                "no alert has been ingested and no schema folder is configured (--ztf-schema-dir or ITHACA_ZTF_SCHEMA_DIR)",
            )
            .with_domain(DomainCode::NoAlertSchema));
        };
        let versions = tokio::task::spawn_blocking(move || schema_files(&dir))
            .await
            .map_err(|e| ServiceError::internal(&e))?
            .map_err(|e| {
                tracing::error!(error = %e, "schema files unreadable");
                ServiceError::precondition(
                    "no alert has been ingested and the schema files cannot be read",
                )
                .with_domain(DomainCode::NoAlertSchema)
            })?;
        Ok(("schema files", versions))
    }
}

/// The versions under `dir`: `dir` itself if it holds `alert.avsc`, else
/// each sub-folder that does.
pub(super) fn schema_files(dir: &std::path::Path) -> Result<Vec<(String, Vec<FlatField>)>, String> {
    if dir.join("alert.avsc").is_file() {
        return Ok(vec![schema::flatten_files(dir)?]);
    }
    let mut subdirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join("alert.avsc").is_file())
        .collect();
    subdirs.sort();
    if subdirs.is_empty() {
        return Err(format!("{}: no alert.avsc", dir.display()));
    }
    subdirs.iter().map(|d| schema::flatten_files(d)).collect()
}
