//! The native witness generators (`src/native/`) against the circuits themselves:
//! for every partition of several sectors, the inputs, aux values, a/b/c and
//! densities it produces equal those of the circuit's own `synthesize` with the same
//! recording, value for value; the structure check counts its constraints.

mod common;

use cuzk_filecoin::{
    blank_circuit_of, generate_post_vanilla, generate_update_vanilla, parse_c1, partition_circuits, post_circuits,
    shape_only_c1, update_circuits, CircuitId, Partition, PostRequest, RegisteredPoStProof, RegisteredSealProof,
    RegisteredUpdateProof, UpdateRequest,
};
use cuzk_synth::{record_blank, RecordHint, SynthMode};

/// Records partition 0 of `c1`, then compares the native and the generic witness of
/// every partition (at most `max` of them).
fn native_equals_generic(c1: &[u8], max: usize, what: &str) {
    let id = CircuitId::Seal(parse_c1(c1, usize::MAX).unwrap().registered_proof());
    same_witness(id, || partition_circuits(parse_c1(c1, usize::MAX).unwrap()).unwrap(), max, what);
}

/// Records partition 0 of what `parse` makes (and checks that `id`'s blank circuit,
/// which the engine records beside the parameters' load, records the same), then
/// compares the native and the generic witness of every partition (at most `max`).
fn same_witness(id: CircuitId, parse: impl Fn() -> Vec<Partition>, max: usize, what: &str) {
    let (_, pre) = parse().remove(0).synthesize_with(SynthMode::Record).unwrap();
    let pre = pre.expect("recorded");
    let blank = record_blank(blank_circuit_of(id).unwrap(), RecordHint::default()).unwrap();
    assert!(blank.as_ref() == Some(&pre), "{what}: the blank circuit records another structure");
    let (generic, native) = (parse(), parse());
    for (k, (g, n)) in generic.into_iter().zip(native).enumerate().take(max) {
        assert!(n.has_native(), "{what}: PoRep partitions have a native generator");
        let (g, _) = g.synthesize_with(SynthMode::PrecompiledGeneric(&pre, None)).unwrap();
        let (n, _) = n.synthesize_with(SynthMode::Precompiled(&pre)).unwrap();
        assert_eq!(n.input, g.input, "{what} partition {k}: inputs");
        assert_eq!(n.aux.len(), g.aux.len(), "{what} partition {k}: aux count");
        if let Some(i) = n.aux.iter().zip(&g.aux).position(|(a, b)| a != b) {
            panic!("{what} partition {k}: aux {i} differs");
        }
        assert!(n == g, "{what} partition {k}: a/b/c or densities differ");
    }
}

#[test]
fn native_porep_witness_equals_the_circuit_on_sealed_2kib_sectors() {
    for seed in [1, 2, 3] {
        let c1 = common::c1_json(RegisteredSealProof::StackedDrg2KiBV1_1, seed);
        native_equals_generic(&c1, usize::MAX, &format!("2KiB seed {seed}"));
    }
    let c1 = common::c1_json(RegisteredSealProof::StackedDrg2KiBV1_2_Feat_NonInteractivePoRep, 1);
    native_equals_generic(&c1, 3, "2KiB NI-PoRep");
}

/// 8MiB and 512MiB sectors (the real circuits of those sizes: 2 and 11 layers,
/// arity-8 trees) from shape-only C1 outputs, whose values are fabricated but whose
/// witness the circuit computes all the same.
#[test]
fn native_porep_witness_equals_the_circuit_at_8mib_and_512mib() {
    for (proof, max) in [(RegisteredSealProof::StackedDrg8MiBV1_1, 2), (RegisteredSealProof::StackedDrg512MiBV1_1, 1)] {
        let c1 = serde_json::to_vec(&shape_only_c1(proof, [7; 32], 7, 1).unwrap()).unwrap();
        native_equals_generic(&c1, max, &format!("{proof:?}"));
    }
}

/// The first partition of 32GiB and 64GiB sectors (11 layers, arity-8 trees with
/// sub- and top-trees, about 130 million constraints): the witness alone is
/// compared, since recording such a circuit needs far more memory than the witness
/// (about 9 GB for both witnesses and two minutes on the 2-core build machine).
#[test]
fn native_porep_witness_equals_the_circuit_at_32gib_and_64gib() {
    for proof in [RegisteredSealProof::StackedDrg32GiBV1_1, RegisteredSealProof::StackedDrg64GiBV1_1] {
        let c1 = serde_json::to_vec(&shape_only_c1(proof, [7; 32], 7, 1).unwrap()).unwrap();
        let parse = || partition_circuits(parse_c1(&c1, usize::MAX).unwrap()).unwrap().remove(0);
        let t = std::time::Instant::now();
        let (n, _) = parse().synthesize_with(SynthMode::WitnessOnly { native: true }).unwrap();
        let tn = t.elapsed();
        let t = std::time::Instant::now();
        let (g, _) = parse().synthesize_with(SynthMode::WitnessOnly { native: false }).unwrap();
        let tg = t.elapsed();
        eprintln!("{proof:?} partition 0: {} aux; witness native {tn:.1?}, generic {tg:.1?}", g.aux.len());
        assert_eq!(n.input, g.input, "{proof:?}: inputs");
        assert_eq!(n.aux.len(), g.aux.len(), "{proof:?}: aux count");
        if let Some(i) = n.aux.iter().zip(&g.aux).position(|(a, b)| a != b) {
            panic!("{proof:?}: aux {i} differs");
        }
    }
}

/// WinningPoSt (one sector) and WindowPoSt (three sectors: two partitions, the
/// second padded) at 2KiB, from vanilla proofs of sealed sectors.
#[test]
fn native_post_witness_equals_the_circuit() {
    for (proof, sectors, seed) in
        [(RegisteredPoStProof::StackedDrgWinning2KiBV1, 1, 3), (RegisteredPoStProof::StackedDrgWindow2KiBV1_2, 3, 4)]
    {
        let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("cuzk-native-post-{}-{seed}", std::process::id()));
        let f = generate_post_vanilla(proof, sectors, seed, &dir).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let req = PostRequest {
            proof,
            randomness: f.randomness,
            prover_id: f.prover_id,
            vanilla_proofs: f.vanilla_proofs.clone(),
            partition: None,
        };
        let parts = post_circuits(req.clone()).unwrap();
        assert_eq!(parts.len(), if sectors == 1 { 1 } else { 2 }, "{proof:?}");
        let id = CircuitId::PoSt(proof);
        same_witness(id, || post_circuits(req.clone()).unwrap(), usize::MAX, &format!("{proof:?}"));
    }
}

/// SnapDeals at 2KiB (one partition), two updates of sealed sectors.
#[test]
fn native_update_witness_equals_the_circuit() {
    for seed in [5, 6] {
        let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("cuzk-native-update-{}-{seed}", std::process::id()));
        let f = generate_update_vanilla(RegisteredUpdateProof::StackedDrg2KiBV1, seed, &dir).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let req = UpdateRequest {
            proof: f.proof,
            vanilla_proofs: f.vanilla_proofs.clone(),
            comm_r_old: f.comm_r_old,
            comm_r_new: f.comm_r_new,
            comm_d_new: f.comm_d_new,
        };
        let (id, what) = (CircuitId::Update(f.proof), format!("SnapDeals 2KiB seed {seed}"));
        same_witness(id, || update_circuits(req.clone()).unwrap(), usize::MAX, &what);
    }
}
