//! The job tracker: knows every job in flight, collects its partitions' proofs in
//! order, and gives every job exactly one terminal result (proof, error, cancelled).

use std::{collections::HashMap, sync::Arc};

use actix::prelude::*;
use bellperson::groth16::Proof;
use blstrs::Bls12;
use serde::Serialize;
use tokio::sync::oneshot;
use tracing::{info, warn};

use crate::{
    ground::{JobContext, JobError, JobId, JobOutput, JobTimings, PartitionFailed, PartitionProof, StageError},
    runtime::{StageControl, WorkItem},
    timeline::Timeline,
};

/// A job's terminal result.
pub type JobResult = Result<JobOutput, JobError>;

struct Entry {
    ctx: Arc<JobContext>,
    proofs: Vec<Option<Proof<Bls12>>>,
    /// Each partition's public inputs, kept for jobs whose aggregate is verified.
    inputs: Vec<Vec<blstrs::Scalar>>,
    remaining: usize,
    /// All partitions are in and the aggregate is being made: stragglers are dropped.
    aggregating: bool,
    timings: JobTimings,
    done: oneshot::Sender<JobResult>,
}

/// Job counters.
#[derive(Clone, Debug, Default, Serialize)]
pub struct JobCounts {
    pub submitted: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub cancelled: u64,
    pub in_flight: u64,
    /// Submission-to-result time of ended jobs, per kind and outcome (every kind
    /// and outcome listed from the start, at zero).
    pub latency: Vec<JobLatency>,
    /// Jobs in flight per kind (every kind listed, at zero when none).
    pub by_kind: Vec<KindJobs>,
}

/// Jobs of one kind in flight.
#[derive(Clone, Debug, Default, Serialize)]
pub struct KindJobs {
    pub kind: &'static str,
    /// Submitted, no partition synthesized yet.
    pub pending: u64,
    /// A partition has started synthesis.
    pub in_progress: u64,
}

/// Upper bounds, in seconds, of the job latency histogram's buckets: from a 2KiB
/// proof (tenths of a second) to a 64GiB sector's ten partitions on a busy host.
pub const LATENCY_BUCKETS: [f64; 14] =
    [0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0];

/// The latency histogram of one job kind and outcome ("succeeded" or "failed";
/// cancelled jobs are not timed).
#[derive(Clone, Debug, Serialize)]
pub struct JobLatency {
    pub kind: &'static str,
    pub outcome: &'static str,
    /// Jobs that took at most each bound of [`LATENCY_BUCKETS`] (cumulative).
    pub buckets: [u64; LATENCY_BUCKETS.len()],
    pub count: u64,
    pub sum_secs: f64,
}

impl JobLatency {
    fn new(kind: &'static str, outcome: &'static str) -> Self {
        JobLatency { kind, outcome, buckets: [0; LATENCY_BUCKETS.len()], count: 0, sum_secs: 0.0 }
    }

    fn observe(&mut self, secs: f64) {
        for (b, le) in self.buckets.iter_mut().zip(LATENCY_BUCKETS) {
            if secs <= le {
                *b += 1;
            }
        }
        self.count += 1;
        self.sum_secs += secs;
    }
}

/// Tracks jobs; see the module docs.
pub struct JobTracker {
    jobs: HashMap<JobId, Entry>,
    stages: Vec<Arc<dyn StageControl>>,
    counts: JobCounts,
    timeline: Option<Arc<Timeline>>,
}

impl JobTracker {
    /// An empty tracker.
    pub fn new() -> Self {
        let latency = crate::ground::JobInput::KINDS
            .iter()
            .flat_map(|k| ["succeeded", "failed"].map(|o| JobLatency::new(k, o)))
            .collect();
        let counts = JobCounts { latency, ..JobCounts::default() };
        JobTracker { jobs: HashMap::new(), stages: Vec::new(), counts, timeline: None }
    }

    /// Records every job's span (submission to result) on `timeline`.
    pub fn with_timeline(mut self, timeline: Arc<Timeline>) -> Self {
        self.timeline = Some(timeline);
        self
    }

    fn finish(&mut self, id: JobId, result: JobResult) {
        let Some(e) = self.jobs.remove(&id) else { return };
        // Stop the job's other partitions: queued ones are dropped now, in-flight ones
        // at their next stage boundary; their reservations return as they drop.
        e.ctx.cancel.cancel();
        for s in &self.stages {
            s.purge(id);
        }
        if let Some(t) = &self.timeline {
            t.record_job(id.seq, e.ctx.submitted, result.is_ok());
        }
        let outcome = match &result {
            Ok(_) => {
                self.counts.succeeded += 1;
                Some("succeeded")
            }
            Err(JobError::Cancelled) => {
                self.counts.cancelled += 1;
                None
            }
            Err(_) => {
                self.counts.failed += 1;
                Some("failed")
            }
        };
        if let Some(outcome) = outcome {
            let secs = e.ctx.submitted.elapsed().as_secs_f64();
            match self.counts.latency.iter_mut().find(|l| l.kind == e.ctx.kind && l.outcome == outcome) {
                Some(l) => l.observe(secs),
                None => {
                    let mut l = JobLatency::new(e.ctx.kind, outcome);
                    l.observe(secs);
                    self.counts.latency.push(l);
                }
            }
        }
        match &result {
            Ok(o) => info!(
                job = %id,
                partitions = o.proofs.len(),
                total_ms = o.timings.total.as_millis() as u64,
                "job done"
            ),
            Err(err) => warn!(job = %id, error = %err, "job ended without a proof"),
        }
        // The submitter may have dropped its handle; that is fine.
        let _ = e.done.send(result);
    }
}

impl Default for JobTracker {
    fn default() -> Self {
        Self::new()
    }
}

impl Actor for JobTracker {
    type Context = Context<Self>;
}

/// Registers the stages whose queues are purged when a job ends.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetStages(pub Vec<Arc<dyn StageControl>>);

impl Handler<SetStages> for JobTracker {
    type Result = ();
    fn handle(&mut self, m: SetStages, _: &mut Context<Self>) {
        self.stages = m.0;
    }
}

/// A new job; sent before its first partition enters the pipeline.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Register {
    pub ctx: Arc<JobContext>,
    pub done: oneshot::Sender<JobResult>,
}

impl Handler<Register> for JobTracker {
    type Result = ();
    fn handle(&mut self, m: Register, _: &mut Context<Self>) {
        self.counts.submitted += 1;
        // The partition count may not be known yet (PoRep jobs: Ingest finds it);
        // the proof slots are sized when the first partition arrives.
        self.jobs.insert(
            m.ctx.id,
            Entry {
                ctx: m.ctx,
                proofs: Vec::new(),
                inputs: Vec::new(),
                remaining: 0,
                aggregating: false,
                timings: JobTimings::default(),
                done: m.done,
            },
        );
    }
}

impl Handler<PartitionFailed> for JobTracker {
    type Result = ();
    fn handle(&mut self, m: PartitionFailed, _: &mut Context<Self>) {
        // The first failure decides; later ones (other partitions) find no entry.
        self.finish(m.job, Err(JobError::Stage { stage: m.stage, partition: m.partition, error: m.error }));
    }
}

/// Cancel a job. Returns whether it was still in flight.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct Cancel(pub JobId);

impl Handler<Cancel> for JobTracker {
    type Result = bool;
    fn handle(&mut self, m: Cancel, _: &mut Context<Self>) -> bool {
        let found = self.jobs.contains_key(&m.0);
        self.finish(m.0, Err(JobError::Cancelled));
        found
    }
}

/// Ends every job in flight with [`JobError::Shutdown`].
#[derive(Message)]
#[rtype(result = "usize")]
pub struct FailAll;

impl Handler<FailAll> for JobTracker {
    type Result = usize;
    fn handle(&mut self, _: FailAll, _: &mut Context<Self>) -> usize {
        let ids: Vec<_> = self.jobs.keys().copied().collect();
        for id in &ids {
            self.finish(*id, Err(JobError::Shutdown));
        }
        ids.len()
    }
}

/// Job counters.
#[derive(Message)]
#[rtype(result = "JobCounts")]
pub struct Counts;

impl Handler<Counts> for JobTracker {
    type Result = MessageResult<Counts>;
    fn handle(&mut self, _: Counts, _: &mut Context<Self>) -> Self::Result {
        let mut c = self.counts.clone();
        c.in_flight = self.jobs.len() as u64;
        c.by_kind =
            crate::ground::JobInput::KINDS.iter().map(|&kind| KindJobs { kind, ..KindJobs::default() }).collect();
        for e in self.jobs.values() {
            if let Some(k) = c.by_kind.iter_mut().find(|k| k.kind == e.ctx.kind) {
                if e.ctx.is_started() {
                    k.in_progress += 1;
                } else {
                    k.pending += 1;
                }
            }
        }
        MessageResult(c)
    }
}

/// A finished partition (from Assemble, or Verify when enabled).
impl Handler<WorkItem<PartitionProof>> for JobTracker {
    type Result = ();
    fn handle(&mut self, item: WorkItem<PartitionProof>, actx: &mut Context<Self>) {
        let id = item.job.id;
        let Some(e) = self.jobs.get_mut(&id).filter(|e| !e.aggregating) else {
            // The job already ended (failed or cancelled) or has all its proofs;
            // drop the straggler.
            return;
        };
        if e.proofs.is_empty() {
            let n = e.ctx.partitions().expect("partition count is set before partitions exist");
            e.proofs = vec![None; n];
            if e.ctx.aggregation.get().is_some() {
                e.inputs = vec![Vec::new(); n];
            }
            e.remaining = n;
        }
        let Some(slot) = e.proofs.get_mut(item.partition as usize) else {
            warn!(job = %id, partition = item.partition, "partition out of range ignored");
            return;
        };
        if slot.is_some() {
            warn!(job = %id, partition = item.partition, "duplicate partition proof ignored");
            return;
        }
        *slot = Some(item.payload.proof);
        if let Some(i) = e.inputs.get_mut(item.partition as usize) {
            *i = item.payload.public_inputs;
        }
        e.remaining -= 1;
        for (acc, t) in e.timings.stages.iter_mut().zip(item.trace.stages.iter()) {
            acc.queue_wait += t.queue_wait;
            acc.busy += t.busy;
            acc.blocked += t.blocked;
        }
        e.timings.add_ops(&item.trace.ops);
        drop(item.reservation);
        if e.remaining == 0 {
            let mut timings = std::mem::take(&mut e.timings);
            timings.total = e.ctx.submitted.elapsed();
            let proofs: Vec<_> = e.proofs.iter_mut().map(|p| p.take().expect("all partitions present")).collect();
            let Some(agg) = e.ctx.aggregation.get() else {
                self.finish(id, Ok(JobOutput { id, proofs, aggregate: None, timings }));
                return;
            };
            // Non-interactive PoRep: SnarkPack over the partition proofs, seconds of
            // CPU for a 32GiB sector's 126, so on a blocking thread; the job stays
            // registered meanwhile (cancel, shutdown and status still reach it).
            e.aggregating = true;
            let (srs, comm_r, key) = (agg.srs.clone(), agg.comm_r, e.ctx.srs().clone());
            let inputs = std::mem::take(&mut e.inputs);
            let work = actix_rt::task::spawn_blocking(move || {
                let t = std::time::Instant::now();
                let r = cuzk_filecoin::aggregate_ni_porep(&srs, &key.vk, &comm_r, &proofs, &inputs);
                (r.map(|a| (proofs, a)), t.elapsed())
            });
            actx.spawn(work.into_actor(self).map(move |res, act, _| {
                let result = match res {
                    Ok((Ok((proofs, aggregate)), took)) => {
                        let mut timings = timings;
                        timings.add_ops(&[("aggregate", took)]);
                        timings.total = act.jobs.get(&id).map_or(timings.total, |e| e.ctx.submitted.elapsed());
                        Ok(JobOutput { id, proofs, aggregate: Some(aggregate), timings })
                    }
                    Ok((Err(e), _)) => Err(JobError::Aggregate(StageError::failed(e))),
                    Err(join) => {
                        Err(JobError::Aggregate(StageError::msg(format!("aggregation did not finish: {join}"))))
                    }
                };
                act.finish(id, result);
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Buckets are cumulative, as Prometheus reads them.
    #[test]
    fn latency_buckets_are_cumulative() {
        let mut l = JobLatency::new("porep", "succeeded");
        for secs in [0.1, 0.3, 0.3, 7.0, 5000.0] {
            l.observe(secs);
        }
        assert_eq!(l.buckets[0], 1); // <= 0.25
        assert_eq!(l.buckets[1], 3); // <= 0.5
        assert_eq!(l.buckets[4], 3); // <= 5
        assert_eq!(l.buckets[5], 4); // <= 10: 7.0 too
        assert_eq!(*l.buckets.last().unwrap(), 4); // 5000 s is only in +Inf
        assert_eq!(l.count, 5);
        assert!((l.sum_secs - 5007.7).abs() < 1e-9);
    }
}
