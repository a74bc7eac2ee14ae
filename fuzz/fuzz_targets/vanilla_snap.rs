//! `update_circuits` with the input as the vanilla partition proof of a 2KiB
//! SnapDeals update (a bincode `PartitionProof`; 2KiB has one partition). An answer,
//! never a panic; a refusal names the proof kind and the problem.
#![no_main]

use cuzk_filecoin::{update_circuits, RegisteredUpdateProof, UpdateRequest};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let req = UpdateRequest {
        proof: RegisteredUpdateProof::StackedDrg2KiBV1,
        vanilla_proofs: vec![data.to_vec()],
        comm_r_old: [1; 32],
        comm_r_new: [2; 32],
        comm_d_new: [3; 32],
    };
    if let Err(e) = update_circuits(req) {
        let msg = e.to_string();
        assert!(msg.starts_with("snap_deals: ") && msg.len() > 20, "{msg}");
    }
});
