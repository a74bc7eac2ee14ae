//! Verify (on by default, `[verify] enabled`): checks every partition proof with
//! bellperson's verifier before it is returned, so a wrong proof fails its job
//! instead of reaching the chain.
//! This stage is the worked example of `docs/adding-a-stage.md`.

mod config;

pub use config::VerifyConfig;

use bellperson::groth16::{prepare_verifying_key, verify_proof};

use crate::{
    ground::{PartitionProof, StageError, StageName},
    runtime::{Stage, WorkItem},
};

/// The Verify stage.
pub struct Verify;

impl Stage for Verify {
    type In = PartitionProof;
    type Out = PartitionProof;
    const NAME: StageName = StageName::Verify;

    fn process(&self, item: WorkItem<PartitionProof>) -> Result<Vec<WorkItem<PartitionProof>>, StageError> {
        let pvk = prepare_verifying_key(&item.job.srs().vk);
        match verify_proof(&pvk, &item.payload.proof, &item.payload.public_inputs) {
            Ok(true) => Ok(vec![item]),
            Ok(false) => Err(StageError::msg("proof does not verify")),
            Err(e) => Err(StageError::msg(format!("verifier error: {e}"))),
        }
    }
}
