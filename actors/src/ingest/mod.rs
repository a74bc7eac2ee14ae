//! Ingest: the first stage. Splits a job into one work item per partition; each
//! partition then flows through the pipeline on its own.

mod config;

use std::sync::Arc;

pub use config::{IngestConfig, KindPriority};
use cuzk_filecoin::{
    check_replica_id, parse_c1, partition_circuits, post_circuits, update_circuits, CircuitId, Partition,
};
use cuzk_synth::{Assignment, Precompiled, SynthError, SynthMode};

use crate::{
    ground::{Aggregation, ErasedCircuit, JobInput, ParameterSource, PartitionCircuit, PorepC1, StageError, StageName},
    runtime::{Stage, WorkItem},
};

/// The Ingest stage.
pub struct Ingest {
    /// The parameter cache (`services::params`).
    pub params: Arc<dyn ParameterSource>,
    pub max_input_bytes: usize,
    /// Jobs at or above this priority (`[ingest.priority] express`) load their
    /// parameters as deadline work (`ParameterSource::params`).
    pub urgent_at: i32,
}

/// A Filecoin partition as an erased circuit.
struct Filecoin {
    partition: Partition,
    precompile: bool,
}

impl ErasedCircuit for Filecoin {
    fn synthesize_with(self: Box<Self>, mode: SynthMode<'_>) -> Result<(Assignment, Option<Precompiled>), SynthError> {
        self.partition.synthesize_with(mode)
    }

    fn precompile(&self) -> bool {
        self.precompile
    }

    fn has_native(&self) -> bool {
        self.partition.has_native()
    }
}

/// Erases Filecoin partitions. PoRep, WindowPoSt and SnapDeals synthesis (SHA-256
/// and Poseidon gadgets) is most of a partition's CPU time and every partition of a
/// circuit has the same structure, so they are pre-compiled. WinningPoSt is not:
/// its deadline is seconds, and the first proof would pay for the recording.
fn erase(parts: Vec<Partition>, precompile: bool) -> Vec<Box<dyn ErasedCircuit>> {
    parts.into_iter().map(|partition| Box::new(Filecoin { partition, precompile }) as Box<dyn ErasedCircuit>).collect()
}

impl Stage for Ingest {
    type In = JobInput;
    type Out = PartitionCircuit;
    const NAME: StageName = StageName::Ingest;

    fn process(&self, item: WorkItem<JobInput>) -> Result<Vec<WorkItem<PartitionCircuit>>, StageError> {
        let (input, base) = item.take();
        let urgent = base.job.priority >= self.urgent_at;
        let params = |circuit| self.params.params(circuit, urgent);
        let circuits: Vec<Box<dyn ErasedCircuit>> = match input {
            JobInput::Circuits(circuits) => {
                if Some(circuits.len()) != base.job.partitions() {
                    return Err(StageError::msg(format!(
                        "job declares {:?} partitions but carries {} circuits",
                        base.job.partitions(),
                        circuits.len()
                    )));
                }
                circuits
            }
            JobInput::PoRep(p) => {
                let c1 = match p.c1 {
                    PorepC1::Raw(bytes) => parse_c1(&bytes, self.max_input_bytes).map_err(StageError::failed)?,
                    PorepC1::Parsed(c1) => *c1,
                };
                check_replica_id(&c1, &p.prover_id, p.sector_id).map_err(StageError::failed)?;
                if c1.is_non_interactive() {
                    // Found before any partition is proved: a missing SRS fails the
                    // job now, not after minutes of GPU work. Loaded before the
                    // parameters, so that waiting for room for it never happens while
                    // this job holds parameters nobody can evict.
                    let agg = Aggregation { srs: self.params.ipp_srs()?, comm_r: c1.output.comm_r };
                    let _ = base.job.aggregation.set(agg);
                }
                let srs = params(CircuitId::Seal(c1.registered_proof()))?;
                base.job.set_shape(srs, c1.partitions()).map_err(StageError::msg)?;
                erase(partition_circuits(c1).map_err(StageError::failed)?, true)
            }
            // The vanilla proofs are checked (and the circuits built) before the
            // parameters are found, so a bad input fails at once, without a load.
            JobInput::PoSt(req) => {
                let circuit = CircuitId::PoSt(req.proof);
                let winning = cuzk_filecoin::post::is_winning(req.proof);
                let parts = post_circuits(req).map_err(StageError::failed)?;
                base.job.set_shape(params(circuit)?, parts.len()).map_err(StageError::msg)?;
                erase(parts, !winning)
            }
            JobInput::Update(req) => {
                let circuit = CircuitId::Update(req.proof);
                let parts = update_circuits(req).map_err(StageError::failed)?;
                base.job.set_shape(params(circuit)?, parts.len()).map_err(StageError::msg)?;
                erase(parts, true)
            }
            JobInput::Prepared(p) => {
                if p.partitions.is_empty() {
                    return Err(StageError::msg(format!("{}: no partitions", p.circuit)));
                }
                let winning = matches!(p.circuit, CircuitId::PoSt(q) if cuzk_filecoin::post::is_winning(q));
                base.job.set_shape(params(p.circuit)?, p.partitions.len()).map_err(StageError::msg)?;
                erase(p.partitions, !winning)
            }
        };
        Ok(circuits
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                let mut w = WorkItem::new(base.job.clone(), i as u32, PartitionCircuit(c));
                w.trace = base.trace.clone();
                w
            })
            .collect())
    }
}
