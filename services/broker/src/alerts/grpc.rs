//! The tonic adapter of `ithaca.broker.v1.AlertService`: protobuf in, domain
//! call, protobuf out ([`super::render`] gives the answers their shape). No
//! logic here.

use super::render;
use super::service::{AlertQuery, AlertService, MAX_FILE_BYTES, NewBroker};
use crate::progress::Events;
use ithaca_kit::principal;
use ithaca_proto::broker::v1 as pb;
use ithaca_proto::broker::v1::alert_service_server::AlertService as Rpc;
use ithaca_proto::mcp::v1 as mcp;
use tonic::{Request, Response, Status, Streaming};

/// What every converted time says about its scale.
const TIME_NOTE: &str = "UTC throughout: ZTF's jd and every JD the broker tools take are UTC Julian dates (no TT or TDB offset applied)";

/// The gRPC face of [`AlertService`], and of time conversion, which the
/// alert tools' JD arguments need.
#[derive(Clone, Debug)]
pub struct AlertGrpc {
    service: AlertService,
}

impl AlertGrpc {
    pub fn new(service: AlertService) -> Self {
        AlertGrpc { service }
    }
}

#[tonic::async_trait]
impl Rpc for AlertGrpc {
    async fn list_brokers(
        &self,
        request: Request<pb::ListBrokersRequest>,
    ) -> Result<Response<pb::Brokers>, Status> {
        let caller = principal::of(&request)?;
        let brokers = self.service.brokers(&caller).await?;
        Ok(Response::new(pb::Brokers {
            kind: "brokers".to_owned(),
            brokers: brokers.into_iter().map(render::broker).collect(),
        }))
    }

    async fn get_broker_alerts(
        &self,
        request: Request<pb::GetBrokerAlertsRequest>,
    ) -> Result<Response<pb::BrokerAlerts>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let query = AlertQuery {
            broker_id: r.broker_id,
            object_id: r.object_id,
            ra: r.ra,
            dec: r.dec,
            radius_arcsec: r.radius_arcsec,
            jd_start: r.jd_start,
            jd_end: r.jd_end,
            candid: r.candid,
            full: r.full.unwrap_or(false),
            limit: r.limit,
        };
        let answer = self.service.alerts(&caller, query).await?;
        Ok(Response::new(render::alerts(answer)))
    }

    async fn get_broker_alert_photometry(
        &self,
        request: Request<pb::GetBrokerAlertPhotometryRequest>,
    ) -> Result<Response<pb::LightCurve>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let page = super::lightcurve::Page::parse(r.limit, r.cursor.as_deref())
            .map_err(Status::invalid_argument)?;
        let lc = self
            .service
            .light_curve(
                &caller,
                &r.broker_id,
                &r.object_id,
                r.include_forced.unwrap_or(true),
            )
            .await?;
        Ok(Response::new(render::light_curve(lc, &page)))
    }

    async fn get_light_curve_plot(
        &self,
        request: Request<pb::GetLightCurvePlotRequest>,
    ) -> Result<Response<mcp::ToolContent>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let svg = self
            .service
            .light_curve_svg(&caller, &r.broker_id, &r.object_id)
            .await?;
        let uri = format!(
            "{}.svg",
            render::light_curve_uri(r.broker_id.trim(), r.object_id.trim())
        );
        Ok(Response::new(mcp::ToolContent {
            content: vec![mcp::Content {
                kind: Some(mcp::content::Kind::Resource(mcp::EmbeddedResource {
                    uri,
                    mime_type: "image/svg+xml".to_owned(),
                    body: Some(mcp::embedded_resource::Body::Text(svg)),
                })),
            }],
            structured: None,
        }))
    }

    async fn get_alert_packet(
        &self,
        request: Request<pb::GetAlertPacketRequest>,
    ) -> Result<Response<pb::Alert>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let alert = self
            .service
            .packet(&caller, &r.broker_id, &r.candid)
            .await?;
        Ok(Response::new(render::alert(alert)))
    }

    async fn get_alert_cutout(
        &self,
        request: Request<pb::GetAlertCutoutRequest>,
    ) -> Result<Response<mcp::ToolContent>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let cutout = self
            .service
            .cutout(&caller, &r.broker_id, &r.candid, &r.kind)
            .await?;
        Ok(Response::new(render::cutout(cutout)))
    }

    async fn convert_time(
        &self,
        request: Request<pb::ConvertTimeRequest>,
    ) -> Result<Response<pb::ConvertedTime>, Status> {
        let _caller = principal::of(&request)?;
        let r = request.into_inner();
        let t = crate::astrotime::convert(&r.value, r.from.as_deref())?;
        Ok(Response::new(pb::ConvertedTime {
            interpreted_as: t.from.as_str().to_owned(),
            iso: t.iso(),
            jd: t.jd,
            mjd: t.mjd(),
            julian_year: t.julian_year(),
            scale: crate::astrotime::SCALE.to_owned(),
            note: TIME_NOTE.to_owned(),
        }))
    }

    async fn get_alert_schema(
        &self,
        request: Request<pb::GetAlertSchemaRequest>,
    ) -> Result<Response<pb::AlertSchema>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let answer = self
            .service
            .alert_schema(
                &caller,
                r.search.as_deref(),
                r.prefix.as_deref(),
                r.limit,
                r.producer.as_deref(),
            )
            .await?;
        Ok(Response::new(render::schema(answer)))
    }

    async fn add_broker(
        &self,
        request: Request<pb::AddBrokerRequest>,
    ) -> Result<Response<pb::Broker>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let view = self
            .service
            .add_broker(
                &caller,
                NewBroker {
                    broker_id: r.broker_id,
                    name: r.name,
                    survey: r.survey,
                    operations: r.operations,
                    altdata: r.altdata.map(ithaca_kit::json::from_struct),
                    credential: r.credential,
                },
            )
            .await?;
        Ok(Response::new(render::broker(view)))
    }

    async fn ingest_alerts(
        &self,
        request: Request<Streaming<pb::AlertFileChunk>>,
    ) -> Result<Response<pb::AlertIngestReport>, Status> {
        let caller = principal::of(&request)?;
        let (broker_id, source, data) = read_alert_file(request.into_inner()).await?;
        let report = self
            .service
            .ingest_file(&caller, &broker_id, &source, data)
            .await?;
        Ok(Response::new(render::ingest_report(report)))
    }

    type IngestAlertsWithProgressStream = Events;

    async fn ingest_alerts_with_progress(
        &self,
        request: Request<Streaming<pb::AlertFileChunk>>,
    ) -> Result<Response<Events>, Status> {
        let caller = principal::of(&request)?;
        let (broker_id, source, data) = read_alert_file(request.into_inner()).await?;
        let alerts = self.service.clone();
        Ok(Response::new(crate::progress::streamed(
            "packets",
            move |progress| async move {
                alerts
                    .ingest_file_reporting(&caller, &broker_id, &source, data, Some(&progress))
                    .await
            },
            render::ingest_report,
        )))
    }
}

/// One alert file's chunks: broker and source (first chunk) and its bytes,
/// at most [`MAX_FILE_BYTES`].
async fn read_alert_file(
    stream: Streaming<pb::AlertFileChunk>,
) -> Result<(String, String, Vec<u8>), Status> {
    let ((broker_id, source), data) = crate::upload::read_file(
        stream,
        MAX_FILE_BYTES,
        |(_, source): &(String, String)| source,
        |c| ((c.broker_id, c.source), c.data),
    )
    .await?;
    Ok((broker_id, source, data))
}
