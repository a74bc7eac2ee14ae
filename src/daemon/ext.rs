//! `cuzk.ext.v1.Engine`: what cuzk serves beyond `cuzk.v1` (synthetic jobs, per-stage
//! timings, pipeline state, the timeline). Jobs share the `cuzk.v1` registry, so a
//! synthetic job is awaited and cancelled with `cuzk.v1` calls.

// tonic::Status is 176 bytes; every gRPC handler returns it, as tonic requires.
#![allow(clippy::result_large_err)]

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use rand::SeedableRng;
use tonic::{Request, Response, Status};
use tracing::info;

use super::{
    ext_proto::{self as pb, engine_server::Engine as ExtEngine},
    service::{priority, Service},
};
use crate::{actors::budget::Reservation, JobSpec, ProvingKey, SyntheticCircuit, SyntheticSpec};

/// The largest synthetic job the daemon generates parameters for (2^26 constraints
/// need about 50 GiB of host memory for parameters and a, b, c).
const MAX_SYNTHETIC_LOG2: u32 = 26;

/// Synthetic parameter sets kept at once (benchmarks use one or two shapes); the
/// least recently generated is dropped beyond this. Each is charged to the host
/// budget while kept.
const MAX_SYNTHETIC_SETS: usize = 4;

/// Host bytes reserved per constraint while a synthetic set is generated: above what
/// generation and the resulting set use (about 0.6 KiB per constraint at density 1).
const GENERATION_BYTES_PER_CONSTRAINT: u64 = 1024;

type Kept = (Arc<ProvingKey>, std::time::Instant, Reservation);

pub(super) struct Ext {
    v1: Arc<Service>,
    /// Off unless `[daemon] allow_synthetic`: any client could otherwise make the
    /// daemon generate tens of GiB of parameters.
    allowed: bool,
    /// Synthetic parameters by shape, generated on first use (deterministic seed).
    synthetic: Mutex<HashMap<String, Kept>>,
    /// Held while generating (one generation at a time), so that concurrent first
    /// requests for a shape wait for one generation instead of each running their own.
    generating: tokio::sync::Mutex<()>,
}

impl Ext {
    pub(super) fn new(v1: Arc<Service>, allowed: bool) -> Self {
        Ext { v1, allowed, synthetic: Mutex::new(HashMap::new()), generating: tokio::sync::Mutex::new(()) }
    }

    async fn params_for(&self, spec: SyntheticSpec) -> Result<Arc<ProvingKey>, Status> {
        let key = format!("{}-{}-{}-{}", spec.constraints, spec.public_inputs, spec.a_density, spec.b_density);
        let cached = || self.synthetic.lock().unwrap_or_else(|e| e.into_inner()).get(&key).map(|(p, _, _)| p.clone());
        if let Some(p) = cached() {
            return Ok(p);
        }
        let _generating = self.generating.lock().await;
        if let Some(p) = cached() {
            return Ok(p);
        }
        // Room first (evicting older sets), so generation never runs outside the budget.
        let need = (spec.constraints as u64).saturating_mul(GENERATION_BYTES_PER_CONSTRAINT);
        let ledger = self.v1.engine.host_ledger().clone();
        let mut reservation = loop {
            if let Some(r) = ledger.try_reserve(need) {
                break r;
            }
            let mut cache = self.synthetic.lock().unwrap_or_else(|e| e.into_inner());
            let Some(oldest) = cache.iter().min_by_key(|(_, (_, at, _))| *at).map(|(k, _)| k.clone()) else {
                let b = ledger.snapshot();
                return Err(Status::resource_exhausted(format!(
                    "synthetic parameters for {} constraints need {} of host budget; {} of {} is free",
                    spec.constraints,
                    crate::actors::ByteSize(need),
                    crate::actors::ByteSize(b.capacity.saturating_sub(b.used)),
                    crate::actors::ByteSize(b.capacity)
                )));
            };
            cache.remove(&oldest);
        };
        let t = std::time::Instant::now();
        let p = tokio::task::spawn_blocking(move || {
            let circuit = SyntheticCircuit::new(spec, 0).map_err(|e| e.to_string())?;
            let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(7);
            crate::srs::generate_random(circuit, &mut rng).map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| Status::internal(format!("parameter generation: {e}")))?
        .map_err(|e| Status::internal(format!("parameter generation: {e}")))?;
        info!(constraints = spec.constraints, ms = t.elapsed().as_millis() as u64, "synthetic parameters generated");
        reservation.shrink_to(p.heap_bytes());
        let p = Arc::new(p);
        let mut cache = self.synthetic.lock().unwrap_or_else(|e| e.into_inner());
        while cache.len() >= MAX_SYNTHETIC_SETS {
            let Some(oldest) = cache.iter().min_by_key(|(_, (_, at, _))| *at).map(|(k, _)| k.clone()) else { break };
            cache.remove(&oldest);
        }
        cache.insert(key, (p.clone(), std::time::Instant::now(), reservation));
        Ok(p)
    }
}

fn spec_of(r: &pb::SubmitSyntheticRequest) -> Result<SyntheticSpec, Status> {
    let constraints = match (r.log2, r.constraints) {
        (0, 0) => return Err(Status::invalid_argument("give log2 or constraints")),
        (k, _) if k > MAX_SYNTHETIC_LOG2 => {
            return Err(Status::invalid_argument(format!(
                "log2 {k} is above the daemon's limit of {MAX_SYNTHETIC_LOG2}"
            )))
        }
        (0, n) if n > 1 << MAX_SYNTHETIC_LOG2 => {
            return Err(Status::invalid_argument(format!(
                "constraints {n} is above the daemon's limit of 2^{MAX_SYNTHETIC_LOG2}"
            )))
        }
        (0, n) => n as usize,
        (k, _) => 1usize << k,
    };
    let density = |d: f64| if d == 0.0 { 1.0 } else { d };
    let spec = SyntheticSpec {
        constraints,
        public_inputs: r.public_inputs as usize,
        a_density: density(r.a_density),
        b_density: density(r.b_density),
    };
    spec.validate().map_err(|e| Status::invalid_argument(e.to_string()))?;
    Ok(spec)
}

fn secs(d: std::time::Duration) -> f64 {
    d.as_secs_f64()
}

#[tonic::async_trait]
impl ExtEngine for Ext {
    async fn submit_synthetic(
        &self,
        request: Request<pb::SubmitSyntheticRequest>,
    ) -> Result<Response<pb::SubmitSyntheticResponse>, Status> {
        if !self.allowed {
            return Err(Status::failed_precondition(
                "synthetic jobs are off in this daemon: set [daemon] allow_synthetic = true (benchmarking only)",
            ));
        }
        let r = request.into_inner();
        let spec = spec_of(&r)?;
        let partitions = r.partitions.max(1) as u64;
        if partitions > 64 {
            return Err(Status::invalid_argument(format!("partitions {partitions}: at most 64")));
        }
        let params = self.params_for(spec).await?;
        let circuits = (0..partitions)
            .map(|i| SyntheticCircuit::new(spec, r.seed.wrapping_add(i)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let job = JobSpec::circuits(params, circuits).with_seed(r.seed).with_priority(priority(r.priority));
        self.v1.expire();
        let handle = self.v1.engine.submit(job).await.map_err(super::service::submit_status)?;
        let key = super::results::JobKey {
            kind: -1,
            miner_id: 0,
            sector_number: r.seed,
            registered_proof: spec.constraints as u64,
            inputs: String::new(),
        };
        let job_id = self.v1.register(handle, "", key);
        Ok(Response::new(pb::SubmitSyntheticResponse { job_id }))
    }

    async fn get_job_timings(
        &self,
        request: Request<pb::GetJobTimingsRequest>,
    ) -> Result<Response<pb::GetJobTimingsResponse>, Status> {
        let job_id = request.into_inner().job_id;
        let (finished, timings) = self.v1.job_timings(&job_id)?;
        let mut resp = pb::GetJobTimingsResponse { job_id, finished, ..Default::default() };
        if let Some(t) = timings {
            resp.total_seconds = secs(t.total);
            resp.stages = crate::StageName::ALL
                .iter()
                .map(|s| pb::StageTiming {
                    stage: s.as_str().into(),
                    queue_wait_seconds: secs(t.stage(*s).queue_wait),
                    busy_seconds: secs(t.stage(*s).busy),
                    blocked_seconds: secs(t.stage(*s).blocked),
                })
                .collect();
            resp.ops = t.ops.iter().map(|(op, d)| pb::OpTiming { op: (*op).into(), seconds: secs(*d) }).collect();
        }
        Ok(Response::new(resp))
    }

    async fn get_pipeline(
        &self,
        _: Request<pb::GetPipelineRequest>,
    ) -> Result<Response<pb::GetPipelineResponse>, Status> {
        let snap = self.v1.engine.snapshot().await;
        let wall = snap.uptime;
        let stages = snap
            .stages
            .iter()
            .map(|s| pb::StageStatus {
                stage: s.stage.as_str().into(),
                workers: u32::try_from(s.workers).unwrap_or(u32::MAX),
                queue_capacity: u32::try_from(s.queue_capacity).unwrap_or(u32::MAX),
                queue_length: s.queue_len,
                in_flight: s.in_flight,
                received: s.received,
                completed: s.completed,
                failed: s.failed,
                busy_seconds: secs(s.busy),
                utilization: s.utilization(wall),
                blocked_seconds: secs(s.blocked),
            })
            .collect();
        let b = &snap.host_budget;
        let budgets = vec![pb::BudgetStatus {
            name: b.name.into(),
            capacity_bytes: b.capacity,
            used_bytes: b.used,
            peak_bytes: b.peak,
            waiting: b.waiting as u64,
        }];
        let bottleneck =
            crate::bench::verdict(&snap, wall).map(|v| format!("{}: {}", v.stage, v.reason)).unwrap_or_default();
        Ok(Response::new(pb::GetPipelineResponse {
            backend: snap.backend.into(),
            stages,
            budgets,
            jobs_in_flight: snap.jobs.in_flight,
            bottleneck,
        }))
    }

    async fn set_timeline(
        &self,
        request: Request<pb::SetTimelineRequest>,
    ) -> Result<Response<pb::SetTimelineResponse>, Status> {
        let r = request.into_inner();
        let tl = self.v1.engine.timeline();
        if r.clear {
            tl.clear();
        }
        tl.set_enabled(r.enabled);
        info!(enabled = r.enabled, cleared = r.clear, "timeline recording set");
        Ok(Response::new(pb::SetTimelineResponse { enabled: tl.is_enabled() }))
    }

    async fn get_timeline(
        &self,
        _: Request<pb::GetTimelineRequest>,
    ) -> Result<Response<pb::GetTimelineResponse>, Status> {
        let tl = self.v1.engine.timeline().clone();
        let json = tokio::task::spawn_blocking(move || tl.chrome_trace())
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        let tl = self.v1.engine.timeline();
        Ok(Response::new(pb::GetTimelineResponse {
            enabled: tl.is_enabled(),
            chrome_trace_json: json,
            dropped_events: tl.dropped(),
        }))
    }
}
