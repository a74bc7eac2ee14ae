//! Every RPC of `cuzk.v1.ProvingEngine` on [`Service`]: SubmitProof, AwaitProof,
//! Prove, CancelProof, GetStatus, GetMetrics, PreloadSrs and EvictSrs, each in terms
//! of the service's jobs, the engine and its parameter cache.

use std::time::Instant;

use tonic::{Request, Response, Status};

use super::{
    convert::{device_health, listener_status, results_store},
    lock,
    specs::circuit_for_id,
    Service,
};
use crate::daemon::proto::{self, proving_engine_server::ProvingEngine};

#[tonic::async_trait]
impl ProvingEngine for Service {
    async fn submit_proof(
        &self,
        request: Request<proto::SubmitProofRequest>,
    ) -> Result<Response<proto::SubmitProofResponse>, Status> {
        let job_id = self.submit(request.into_inner()).await?;
        let queued = self.engine.stage_snapshots().iter().map(|s| s.queue_len).sum::<u64>();
        Ok(Response::new(proto::SubmitProofResponse {
            job_id,
            queue_position: u32::try_from(queued).unwrap_or(u32::MAX),
            assigned_gpu: String::new(),
        }))
    }

    async fn await_proof(
        &self,
        request: Request<proto::AwaitProofRequest>,
    ) -> Result<Response<proto::AwaitProofResponse>, Status> {
        let r = request.into_inner();
        Ok(Response::new(self.await_job(&r.job_id, r.timeout_ms).await?))
    }

    async fn prove(&self, request: Request<proto::ProveRequest>) -> Result<Response<proto::ProveResponse>, Status> {
        let submit = request.into_inner().submit.ok_or_else(|| Status::invalid_argument("submit is missing"))?;
        let job_id = self.submit(submit).await?;
        let result = self.await_job(&job_id, 0).await?;
        Ok(Response::new(proto::ProveResponse { result: Some(result) }))
    }

    async fn cancel_proof(
        &self,
        request: Request<proto::CancelProofRequest>,
    ) -> Result<Response<proto::CancelProofResponse>, Status> {
        let id = request.into_inner().job_id;
        let (canceller, running) = {
            let jobs = lock(&self.jobs);
            let j = jobs.get(&id).ok_or_else(|| Status::not_found(format!("no job `{id}`")))?;
            let running = j.result.borrow().is_none();
            (j.canceller.clone(), running)
        };
        canceller.cancel().await;
        Ok(Response::new(proto::CancelProofResponse { was_running: running }))
    }

    async fn get_status(
        &self,
        _: Request<proto::GetStatusRequest>,
    ) -> Result<Response<proto::GetStatusResponse>, Status> {
        let snap = self.engine.snapshot().await;
        let loaded_srs = self
            .engine
            .params()
            .resident()
            .into_iter()
            .map(|(p, bytes, refs)| proto::SrsStatus {
                circuit_id: p.curio_id(),
                tier: proto::srs_status::Tier::Hot as i32,
                size_bytes: bytes,
                ref_count: u32::try_from(refs).unwrap_or(u32::MAX),
            })
            .collect();
        // Per proof kind, in jobs, under the names Curio's server uses; per-stage
        // queues are in cuzk.ext.v1's GetPipeline.
        let queues = snap
            .jobs
            .by_kind
            .iter()
            .filter_map(|k| {
                let name = match k.kind {
                    "porep" => "porep-c2",
                    "snap_deals" => "snap-update",
                    "window_post" => "window-post",
                    "winning_post" => "winning-post",
                    _ => return None,
                };
                Some(proto::QueueStatus {
                    proof_kind: name.to_string(),
                    pending: u32::try_from(k.pending).unwrap_or(u32::MAX),
                    in_progress: u32::try_from(k.in_progress).unwrap_or(u32::MAX),
                })
            })
            .collect();
        let gpus = tokio::task::spawn_blocking(crate::metrics::gpus)
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|g| proto::GpuStatus {
                ordinal: g.index,
                name: g.name,
                vram_total_bytes: g.memory_total.unwrap_or(0),
                vram_free_bytes: g.memory_total.unwrap_or(0).saturating_sub(g.memory_used.unwrap_or(0)),
                current_job_id: String::new(),
                current_proof_kind: String::new(),
            })
            .collect();
        // statvfs may block (a network filesystem): off the runtime's threads.
        let store = self.results.clone();
        let results_store =
            tokio::task::spawn_blocking(move || store.map(|r| results_store(&r.state()))).await.unwrap_or_default();
        Ok(Response::new(proto::GetStatusResponse {
            gpus,
            loaded_srs,
            queues,
            total_proofs_completed: snap.jobs.succeeded,
            total_proofs_failed: snap.jobs.failed,
            uptime_seconds: self.started.elapsed().as_secs(),
            pinned_memory_bytes: snap.pinned.map_or(0, |p| p.in_use),
            pinned_memory_limit_bytes: snap.pinned.map_or(0, |p| p.capacity),
            devices: device_health(&snap.devices),
            listeners: self.listeners.iter().map(|l| listener_status(l)).collect(),
            results_store,
            parameter_files: snap
                .param_digests
                .iter()
                .map(|(path, status)| proto::ParameterFile {
                    path: path.display().to_string(),
                    digest_status: status.as_str().into(),
                })
                .collect(),
        }))
    }

    async fn get_metrics(
        &self,
        _: Request<proto::GetMetricsRequest>,
    ) -> Result<Response<proto::GetMetricsResponse>, Status> {
        let snap = self.engine.snapshot().await;
        let store = self.results.clone();
        let mut text = tokio::task::spawn_blocking(move || {
            crate::metrics::render(&snap) + &crate::daemon::results::render(store.as_deref())
        })
        .await
        .map_err(|e| Status::internal(format!("metrics: {e}")))?;
        text.push_str(&crate::daemon::listener::render(&self.listeners));
        text.push_str(&self.intake.render());
        Ok(Response::new(proto::GetMetricsResponse { prometheus_text: text }))
    }

    async fn preload_srs(
        &self,
        request: Request<proto::PreloadSrsRequest>,
    ) -> Result<Response<proto::PreloadSrsResponse>, Status> {
        let proof = circuit_for_id(&request.into_inner().circuit_id)?;
        let params = self.engine.params().clone();
        if params.is_resident(proof) {
            return Ok(Response::new(proto::PreloadSrsResponse { already_loaded: true, load_time_ms: 0 }));
        }
        let t = Instant::now();
        tokio::task::spawn_blocking(move || params.get(proof))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(|e| Status::failed_precondition(e.to_string()))?;
        Ok(Response::new(proto::PreloadSrsResponse {
            already_loaded: false,
            load_time_ms: t.elapsed().as_millis() as u64,
        }))
    }

    async fn evict_srs(
        &self,
        request: Request<proto::EvictSrsRequest>,
    ) -> Result<Response<proto::EvictSrsResponse>, Status> {
        let proof = circuit_for_id(&request.into_inner().circuit_id)?;
        let freed = self.engine.params().evict(proof).map_err(Status::failed_precondition)?;
        Ok(Response::new(proto::EvictSrsResponse { was_loaded: freed.is_some(), freed_bytes: freed.unwrap_or(0) }))
    }
}
