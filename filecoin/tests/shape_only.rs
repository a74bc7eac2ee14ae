//! Shape-only C1 outputs (`shape_only_c1`) have exactly the structure of real ones:
//! the parser's shape check accepts them for every registered proof, their replica
//! id is bound to the prover and sector, and their circuit is the real circuit.

mod common;

use cuzk_filecoin::{
    blank_circuit_of, check_replica_id, is_non_interactive, parse_c1, partition_circuits, proof_from_number,
    shape_only_c1, CircuitId, RegisteredSealProof,
};
use cuzk_synth::{record_blank, RecordHint, SynthMode};

const PROVER: [u8; 32] = [7; 32];

/// Every registered seal proof's shape-only C1 passes the full shape check (32GiB
/// and 64GiB included). Non-interactive PoRep at 32GiB and 64GiB is left out here
/// only for its size: hundreds of megabytes of JSON.
#[test]
fn shape_only_c1s_pass_the_shape_check_of_every_registered_proof() {
    for n in 0..20 {
        let proof = proof_from_number(n).unwrap();
        let size = u64::from(proof.sector_size());
        if is_non_interactive(proof) && size >= 32 << 30 {
            continue;
        }
        let out = shape_only_c1(proof, PROVER, 7, n).unwrap_or_else(|e| panic!("{proof:?}: {e}"));
        let json = serde_json::to_vec(&out).unwrap();
        let c1 = parse_c1(&json, usize::MAX).unwrap_or_else(|e| panic!("{proof:?}: {e}"));
        assert_eq!(c1.registered_proof(), proof);
        check_replica_id(&c1, &PROVER, 7).unwrap_or_else(|e| panic!("{proof:?}: {e}"));
        // Bound to its sector: another sector number is refused.
        assert!(check_replica_id(&c1, &PROVER, 8).is_err(), "{proof:?}");
    }
}

/// At 2KiB the shape-only circuit has the real one's constraints, inputs and
/// auxiliary variables, one partition after another.
#[test]
fn a_shape_only_circuit_is_the_real_circuit() {
    for proof in
        [RegisteredSealProof::StackedDrg2KiBV1_1, RegisteredSealProof::StackedDrg2KiBV1_2_Feat_NonInteractivePoRep]
    {
        let real = parse_c1(&common::c1_json(proof, 1), usize::MAX).unwrap();
        let fake = serde_json::to_vec(&shape_only_c1(proof, PROVER, 7, 1).unwrap()).unwrap();
        let fake = parse_c1(&fake, usize::MAX).unwrap();
        let (real, fake) = (partition_circuits(real).unwrap(), partition_circuits(fake).unwrap());
        assert_eq!(real.len(), fake.len(), "{proof:?}");
        for (r, f) in real.into_iter().zip(fake).take(2) {
            let (ra, rp) = r.synthesize_with(SynthMode::Record).unwrap();
            let (fa, fp) = f.synthesize_with(SynthMode::Record).unwrap();
            let (rp, fp) = (rp.unwrap(), fp.unwrap());
            assert_eq!(rp.constraints(), fp.constraints(), "{proof:?}");
            assert_eq!(rp.nonzeros(), fp.nonzeros(), "{proof:?}");
            assert_eq!((ra.input.len(), ra.aux.len()), (fa.input.len(), fa.aux.len()), "{proof:?}");
        }
    }
}

/// The blank circuit (what the parameters are made for) records exactly what a real
/// sector's partitions record, so the engine can record it while the parameters
/// load, before any partition reaches synthesis.
#[test]
fn the_blank_circuit_records_what_a_real_partition_does() {
    for proof in
        [RegisteredSealProof::StackedDrg2KiBV1_1, RegisteredSealProof::StackedDrg2KiBV1_2_Feat_NonInteractivePoRep]
    {
        let blank = blank_circuit_of(CircuitId::Seal(proof)).unwrap();
        let blank = record_blank(blank, RecordHint::default()).unwrap().expect("2KiB fits the encoding");
        let real = parse_c1(&common::c1_json(proof, 1), usize::MAX).unwrap();
        for (k, part) in partition_circuits(real).unwrap().into_iter().enumerate().take(2) {
            let (_, pre) = part.synthesize_with(SynthMode::Record).unwrap();
            assert!(pre.as_ref() == Some(&blank), "{proof:?} partition {k}: the blank recording differs");
        }
    }
}

/// The blank PoRep circuit recorded with one challenge copied to the others
/// (`record_blank_porep`, what the engine does beside a parameter load) is the
/// sequential recording, matrix for matrix and coefficient for coefficient: at
/// every size whose recording CI can hold (512MiB: 4.4M constraints), interactive
/// and non-interactive. (32GiB and 64GiB share the challenge gadgets with other
/// tree arities; `synth_bench BLANK=1 REPLICATED=1` compares them where memory
/// allows.)
#[test]
fn a_replicated_challenge_records_what_every_challenge_does() {
    use cuzk_filecoin::record_blank_porep;
    for proof in [
        RegisteredSealProof::StackedDrg2KiBV1_1,
        RegisteredSealProof::StackedDrg2KiBV1_2_Feat_NonInteractivePoRep,
        RegisteredSealProof::StackedDrg8MiBV1_1,
        RegisteredSealProof::StackedDrg512MiBV1_1,
    ] {
        let hint = RecordHint::default();
        let want = record_blank(blank_circuit_of(CircuitId::Seal(proof)).unwrap(), hint).unwrap().unwrap();
        let got = record_blank_porep(proof, hint).unwrap().expect("fits the encoding");
        assert!(got == want, "{proof:?}: the replicated recording differs from the sequential one");
        assert_eq!(got.shape(), want.shape());
    }
}
