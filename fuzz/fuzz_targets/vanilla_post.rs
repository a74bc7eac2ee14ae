//! `post_circuits` with the input as one vanilla PoSt proof (a bincode
//! `FallbackPoStSectorProof`); the first byte picks the proof type (2KiB and 32GiB,
//! WinningPoSt and WindowPoSt: two tree shapes). An answer, never a panic; a
//! refusal names the proof kind and the problem.
#![no_main]

use cuzk_filecoin::{post::post_kind, post_circuits, PostRequest, RegisteredPoStProof as P};
use libfuzzer_sys::fuzz_target;

const PROOFS: [P; 4] = [
    P::StackedDrgWinning2KiBV1,
    P::StackedDrgWindow2KiBV1_2,
    P::StackedDrgWinning32GiBV1,
    P::StackedDrgWindow32GiBV1_2,
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, proof)) = data.split_first() else { return };
    let proof_type = PROOFS[usize::from(pick) % PROOFS.len()];
    let req = PostRequest {
        proof: proof_type,
        randomness: [1; 32],
        prover_id: [2; 32],
        vanilla_proofs: vec![proof.to_vec()],
        partition: Some(0),
    };
    if let Err(e) = post_circuits(req) {
        let msg = e.to_string();
        assert!(msg.starts_with(post_kind(proof_type)) && msg.len() > 20, "{msg}");
    }
});
