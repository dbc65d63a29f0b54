//! The tonic adapter of `ithaca.broker.v1.CatalogService`: protobuf in,
//! domain call, protobuf out, and the renderings of the answers. No logic
//! here.

use super::service::{CatalogReport, CatalogService, CrossmatchAnswer, CrossmatchQuery};
use crate::alerts::render::n;
use crate::alerts::service::MAX_FILE_BYTES;
use crate::astrotime;
use crate::progress::Events;
use ithaca_kit::principal;
use ithaca_proto::broker::v1 as pb;
use ithaca_proto::broker::v1::catalog_service_server::CatalogService as Rpc;
use tonic::{Request, Response, Status, Streaming};

/// The gRPC face of [`CatalogService`].
#[derive(Clone, Debug)]
pub struct CatalogGrpc {
    service: CatalogService,
}

impl CatalogGrpc {
    pub fn new(service: CatalogService) -> Self {
        CatalogGrpc { service }
    }
}

#[tonic::async_trait]
impl Rpc for CatalogGrpc {
    async fn crossmatch_broker_catalogs(
        &self,
        request: Request<pb::CrossmatchRequest>,
    ) -> Result<Response<pb::Crossmatch>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let query = CrossmatchQuery {
            broker_id: r.broker_id,
            ra: r.ra,
            dec: r.dec,
            radius_arcsec: r.radius_arcsec,
            candid: r.candid,
            object_id: r.object_id,
            epoch_jd: r.epoch_jd,
            catalogs: r.catalogs,
            limit: r.limit,
        };
        let answer = self.service.crossmatch(&caller, query).await?;
        Ok(Response::new(crossmatch(answer)))
    }

    async fn ingest_catalog(
        &self,
        request: Request<Streaming<pb::CatalogFileChunk>>,
    ) -> Result<Response<pb::CatalogIngestReport>, Status> {
        let caller = principal::of(&request)?;
        let (source, data) = read_catalog_file(request.into_inner()).await?;
        let report = self.service.ingest(&caller, &source, &data).await?;
        Ok(Response::new(catalog_report(report)))
    }

    type IngestCatalogWithProgressStream = Events;

    async fn ingest_catalog_with_progress(
        &self,
        request: Request<Streaming<pb::CatalogFileChunk>>,
    ) -> Result<Response<Events>, Status> {
        let caller = principal::of(&request)?;
        let (source, data) = read_catalog_file(request.into_inner()).await?;
        let catalogs = self.service.clone();
        Ok(Response::new(crate::progress::streamed(
            "sources",
            move |progress| async move {
                catalogs
                    .ingest_reporting(&caller, &source, &data, Some(&progress))
                    .await
            },
            catalog_report,
        )))
    }
}

/// One catalog file's chunks: its source (first chunk) and its bytes, at
/// most [`MAX_FILE_BYTES`].
async fn read_catalog_file(
    stream: Streaming<pb::CatalogFileChunk>,
) -> Result<(String, Vec<u8>), Status> {
    crate::upload::read_file(stream, MAX_FILE_BYTES, String::as_str, |c| {
        (c.source, c.data)
    })
    .await
}

fn crossmatch(a: CrossmatchAnswer) -> pb::Crossmatch {
    let matches: Vec<pb::CatalogMatch> = a
        .matches
        .iter()
        .map(|m| {
            let s = &m.source;
            pb::CatalogMatch {
                catalog: s.catalog.clone(),
                id: s.source_id.clone(),
                separation_arcsec: m.separation_arcsec,
                ra: m.ra,
                dec: m.dec,
                catalog_ra: s.ra,
                catalog_dec: s.dec,
                catalog_epoch: s.epoch,
                pm_ra: s.pm_ra,
                pm_dec: s.pm_dec,
                parallax: s.parallax,
                mag: s.mag,
                mag_band: s.mag_band.clone(),
                r#type: s.kind.clone(),
                morphology: s.morphology.clone(),
                major_axis_arcmin: s.major_axis,
                minor_axis_arcmin: s.minor_axis,
                redshift: s.redshift,
                radial_velocity: s.radial_velocity,
                distance_mpc: m.distance_mpc(),
                names: s.names.clone(),
                b_v: s.b_v,
            }
        })
        .collect();
    pb::Crossmatch {
        broker_id: a.broker_id,
        ra: a.ra,
        dec: a.dec,
        radius_arcsec: a.radius_arcsec,
        epoch_jd: a.epoch_jd,
        epoch_year: astrotime::julian_year(a.epoch_jd),
        position_from: a.position_from,
        catalogs: a.catalogs.iter().map(|c| (*c).to_owned()).collect(),
        count: n(matches.len() as i64),
        matches,
        truncated: a.truncated,
        coverage: a
            .coverage
            .into_iter()
            .map(|c| pb::CatalogCoverage {
                catalog: c.catalog.to_owned(),
                sources: c.sources,
                holds: c.holds,
                sky: c.sky.to_owned(),
            })
            .collect(),
        survey_crossmatch: a.survey.map(ithaca_kit::json::to_struct),
        note: a.note,
    }
}

fn catalog_report(r: CatalogReport) -> pb::CatalogIngestReport {
    pb::CatalogIngestReport {
        catalog: r.catalog.to_owned(),
        source: r.source,
        checksum: r.checksum,
        rows: n(r.rows),
        already_present: r.already_present,
    }
}
