//! The tonic adapter of [`FundamentalsService`]: no logic here.

use super::FundamentalsService;
use crate::progress::Events;
use ithaca_kit::principal;
use ithaca_proto::broker::v1 as pb;
use ithaca_proto::broker::v1::fundamentals_service_server::FundamentalsService as Rpc;
use tonic::{Request, Response, Status, Streaming};

/// Read a streamed file, refusing one larger than the parsers accept.
async fn read_file(stream: Streaming<pb::SecFileChunk>) -> Result<(String, Vec<u8>), Status> {
    crate::upload::read_file(stream, super::parse::MAX_FILE_BYTES, String::as_str, |c| {
        (c.source, c.data)
    })
    .await
}

/// The gRPC face of [`FundamentalsService`].
#[derive(Clone, Debug)]
pub struct FundamentalsGrpc {
    service: FundamentalsService,
}

impl FundamentalsGrpc {
    pub fn new(service: FundamentalsService) -> Self {
        FundamentalsGrpc { service }
    }
}

#[tonic::async_trait]
impl Rpc for FundamentalsGrpc {
    async fn get_fundamentals(
        &self,
        request: Request<pb::GetFundamentalsRequest>,
    ) -> Result<Response<pb::Fundamentals>, Status> {
        principal::of(&request)?;
        Ok(Response::new(
            self.service.fundamentals(request.get_ref()).await?,
        ))
    }

    async fn get_filings(
        &self,
        request: Request<pb::GetFilingsRequest>,
    ) -> Result<Response<pb::Filings>, Status> {
        principal::of(&request)?;
        Ok(Response::new(
            self.service.filings(request.get_ref()).await?,
        ))
    }

    async fn get_filing(
        &self,
        request: Request<pb::GetFilingRequest>,
    ) -> Result<Response<pb::Filing>, Status> {
        principal::of(&request)?;
        Ok(Response::new(
            self.service.filing(&request.get_ref().accession).await?,
        ))
    }

    async fn get_insider_activity(
        &self,
        request: Request<pb::GetInsiderActivityRequest>,
    ) -> Result<Response<pb::InsiderActivity>, Status> {
        principal::of(&request)?;
        Ok(Response::new(
            self.service.insider_activity(request.get_ref()).await?,
        ))
    }

    async fn screen_peers(
        &self,
        request: Request<pb::ScreenPeersRequest>,
    ) -> Result<Response<pb::PeerScreen>, Status> {
        principal::of(&request)?;
        Ok(Response::new(
            self.service.screen_peers(request.get_ref()).await?,
        ))
    }

    async fn ingest_sec(
        &self,
        request: Request<Streaming<pb::SecFileChunk>>,
    ) -> Result<Response<pb::SecIngestReport>, Status> {
        let caller = principal::of(&request)?;
        let (source, data) = read_file(request.into_inner()).await?;
        Ok(Response::new(
            self.service.ingest_file(&caller, &source, data).await?,
        ))
    }

    type IngestSecWithProgressStream = Events;

    async fn ingest_sec_with_progress(
        &self,
        request: Request<Streaming<pb::SecFileChunk>>,
    ) -> Result<Response<Events>, Status> {
        let caller = principal::of(&request)?;
        let (source, data) = read_file(request.into_inner()).await?;
        let service = self.service.clone();
        Ok(Response::new(crate::progress::streamed(
            "rows",
            move |progress| async move {
                service
                    .ingest_file_reporting(&caller, &source, data, Some(&progress))
                    .await
            },
            |r| r,
        )))
    }
}
