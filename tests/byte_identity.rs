//! For fixed r and s, the pipeline's proof bytes equal bellperson's native prover's,
//! and every proof verifies.

mod common;

use bellperson::{
    gadgets::{
        boolean::{AllocatedBit, Boolean},
        multipack,
        sha256::sha256,
    },
    Circuit, ConstraintSystem, SynthesisError,
};
use blstrs::Scalar;
use common::*;
use cuzk::{prove_circuits, Engine, SyntheticCircuit};

fn check_synthetic(engine: &Engine, constraints: usize, inputs: usize, a: f64, b: f64) {
    let spec = spec(constraints, inputs, a, b);
    let srs = params(spec);
    let circuits: Vec<_> = (0..3).map(|i| SyntheticCircuit::new(spec, 100 + i).unwrap()).collect();
    let rs = randomness(3, constraints as u64);
    let out = prove_circuits(engine, srs.clone(), circuits.clone(), Some(rs.clone())).unwrap();
    for (i, c) in circuits.into_iter().enumerate() {
        let public = c.public_inputs();
        let want = reference(c, &srs, rs[i].0, rs[i].1);
        assert_eq!(bytes(&out.proofs[i]), bytes(&want), "{spec:?} partition {i}");
        assert!(verifies(&srs, &out.proofs[i], &public), "{spec:?} partition {i}");
    }
}

#[test]
fn synthetic_circuits_match_bellperson() {
    let engine = Engine::start(small_config()).unwrap();
    // sizes: powers of two and not; 0, 1 and many public inputs; dense, sparse, mixed.
    for (n, p, a, b) in [
        (1 << 10, 2, 1.0, 1.0),
        (1000, 0, 1.0, 1.0),
        (3001, 1, 0.1, 0.05),
        (1 << 12, 40, 0.5, 0.0),
        (700, 300, 0.0, 1.0),
        (5, 3, 1.0, 1.0),
    ] {
        check_synthetic(&engine, n, p, a, b);
    }
    engine.shutdown();
}

/// SHA-256 of a 64-byte message (two compression blocks after padding), with the
/// digest exposed as public inputs — a circuit built from bellperson's gadgets.
#[derive(Clone)]
struct Sha256Circuit {
    preimage: [u8; 64],
}

impl Circuit<Scalar> for Sha256Circuit {
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
        let bits: Vec<Boolean> = self
            .preimage
            .iter()
            .flat_map(|byte| (0..8).rev().map(move |i| (byte >> i) & 1 == 1))
            .enumerate()
            .map(|(i, b)| AllocatedBit::alloc(cs.namespace(|| format!("bit {i}")), Some(b)).map(Boolean::from))
            .collect::<Result<_, _>>()?;
        let hash = sha256(cs.namespace(|| "sha256"), &bits)?;
        multipack::pack_into_inputs(cs.namespace(|| "pack"), &hash)
    }
}

#[test]
fn sha256_gadget_circuit_matches_bellperson() {
    use sha2::Digest;
    let engine = Engine::start(small_config()).unwrap();
    let srs = params_for(Sha256Circuit { preimage: [0; 64] }, 3);
    let circuits: Vec<_> = (0..2u8).map(|k| Sha256Circuit { preimage: [k.wrapping_mul(37); 64] }).collect();
    let rs = randomness(2, 99);
    let out = prove_circuits(&engine, srs.clone(), circuits.clone(), Some(rs.clone())).unwrap();
    for (i, c) in circuits.into_iter().enumerate() {
        let digest = sha2::Sha256::digest(c.preimage);
        let bits: Vec<bool> = digest.iter().flat_map(|b| (0..8).rev().map(move |j| (b >> j) & 1 == 1)).collect();
        let public = multipack::compute_multipacking::<Scalar>(&bits);
        let want = reference(c, &srs, rs[i].0, rs[i].1);
        assert_eq!(bytes(&out.proofs[i]), bytes(&want), "partition {i}");
        assert!(verifies(&srs, &out.proofs[i], &public), "partition {i}");
    }
    engine.shutdown();
}
