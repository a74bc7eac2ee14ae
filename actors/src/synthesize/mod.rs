//! Synthesize: runs a partition's circuit into an [`Assignment`] (a/b/c evaluations,
//! input/aux assignments, A/B densities). Reserves the partition's whole host-memory
//! estimate first; the reservation then travels with the partition.

mod config;

pub use config::SynthesizeConfig;
use cuzk_srs::ProvingKey;
pub use cuzk_synth::Assignment;

use crate::{
    error::StageError,
    ingest::PartitionCircuit,
    job::StageName,
    runtime::{Stage, WorkItem},
};

/// The Synthesize stage.
pub struct Synthesize;

/// Host bytes one partition proved against `srs` holds at its peak, from the
/// parameter sizes alone (known before synthesis): a/b/c padded to the domain, the
/// assignment, the compacted MSM scalars, the H coefficients and NTT twiddles.
pub fn partition_bytes(srs: &ProvingKey) -> u64 {
    let m = srs.domain_size() as u64;
    let inputs = srs.num_inputs() as u64;
    let aux = srs.l.len() as u64;
    let scalars = srs.l.len() as u64 + srs.a.len() as u64 + srs.b_g1.len() as u64;
    // a, b, c padded to m; H (m) and its byte form (m); twiddles (m/2).
    let ntt = 3 * m + 2 * m + m / 2;
    32 * (ntt + inputs + aux + scalars) + 3 * (inputs + aux) / 8 + (64 << 10)
}

impl Stage for Synthesize {
    type In = PartitionCircuit;
    type Out = Assignment;
    const NAME: StageName = StageName::Synthesize;

    fn reservation_bytes(&self, item: &WorkItem<PartitionCircuit>) -> Result<u64, StageError> {
        Ok(partition_bytes(item.job.srs()))
    }

    fn process(&self, item: WorkItem<PartitionCircuit>) -> Result<Vec<WorkItem<Assignment>>, StageError> {
        let (circuit, base) = item.take();
        let assignment = circuit.0.synthesize().map_err(StageError::failed)?;
        // Fail here, with the sizes, rather than deep inside an MSM.
        base.job.srs().check_shape(&assignment.shape()).map_err(StageError::failed)?;
        Ok(vec![base.with(assignment)])
    }
}
