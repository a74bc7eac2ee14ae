//! PrepareMsm: compacts the assignment by density into the scalar vectors the MSMs
//! consume, in canonical form, and (by default) runs the B_G2 MSM on the CPU so the
//! accelerator never waits for it.

mod config;
mod messages;

use std::time::Instant;

pub use config::{BG2Placement, PrepareMsmConfig};
use cuzk_gpu::{cpu::msm_g2, HostPartition, ScalarBytes};
pub use messages::PreparedPartition;
use rayon::prelude::*;

use crate::{
    error::StageError,
    job::StageName,
    runtime::{Stage, WorkItem},
    synthesize::Assignment,
};

/// The PrepareMsm stage.
pub struct PrepareMsm {
    pub b_g2_on_cpu: bool,
}

fn canonical(v: &[blstrs::Scalar]) -> Vec<ScalarBytes> {
    v.par_iter().map(|s| s.to_bytes_le()).collect()
}

/// Splits an assignment into the backend's inputs. The scalar vectors line up with
/// the parameter vectors: `l` ↔ every aux; `a` ↔ every input, then aux in A;
/// `b` ↔ inputs in B, then aux in B.
pub fn prepare(asg: Assignment) -> (HostPartition, Vec<blstrs::Scalar>) {
    let domain_log2 = asg.shape().domain_log2();
    let Assignment { a, b, c, input, aux, a_aux_density, b_input_density, b_aux_density } = asg;
    let (l_scalars, (a_scalars, b_scalars)) = rayon::join(
        || canonical(&aux),
        || {
            rayon::join(
                || {
                    let mut v = canonical(&input);
                    v.extend(canonical(&a_aux_density.compact(&aux)));
                    v
                },
                || {
                    let mut v = canonical(&b_input_density.compact(&input));
                    v.extend(canonical(&b_aux_density.compact(&aux)));
                    v
                },
            )
        },
    );
    let public_inputs = input[1..].to_vec();
    (HostPartition { a, b, c, domain_log2, l_scalars, a_scalars, b_scalars }, public_inputs)
}

impl Stage for PrepareMsm {
    type In = Assignment;
    type Out = PreparedPartition;
    const NAME: StageName = StageName::PrepareMsm;

    fn process(&self, item: WorkItem<Assignment>) -> Result<Vec<WorkItem<PreparedPartition>>, StageError> {
        let (asg, mut base) = item.take();
        let (host, public_inputs) = prepare(asg);
        let b_g2 = if self.b_g2_on_cpu {
            let srs = base.job.srs();
            if srs.b_g2.len() != host.b_scalars.len() {
                return Err(StageError::msg(format!(
                    "B_G2 points: parameters have {}, the partition has {} B scalars",
                    srs.b_g2.len(),
                    host.b_scalars.len()
                )));
            }
            let t = Instant::now();
            let r = msm_g2(&srs.b_g2, &host.b_scalars);
            base.trace.add_ops(&[("msm_b_g2_cpu", t.elapsed())]);
            Some(r)
        } else {
            None
        };
        Ok(vec![base.with(PreparedPartition { host, b_g2, public_inputs })])
    }
}
