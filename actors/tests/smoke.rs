use std::sync::Arc;

use bellperson::groth16::{create_proof, prepare_verifying_key, verify_proof, Parameters};
use blstrs::{Bls12, Scalar};
use cuzk_actors::{Config, Engine, JobSpec};
use cuzk_synth::{SyntheticCircuit, SyntheticSpec};
use ff::Field;
use rand::SeedableRng;

#[test]
fn smoke() {
    let spec = SyntheticSpec { constraints: 1000, public_inputs: 3, a_density: 0.7, b_density: 0.3 };
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
    let srs = Arc::new(cuzk_srs::generate_random(SyntheticCircuit::new(spec, 0).unwrap(), &mut rng).unwrap());
    let engine = Engine::start(Config::default()).unwrap();
    let circuits: Vec<_> = (0..3).map(|i| SyntheticCircuit::new(spec, i).unwrap()).collect();
    let rs: Vec<_> = (0..3).map(|_| (Scalar::random(&mut rng), Scalar::random(&mut rng))).collect();
    let out = engine
        .submit_blocking(JobSpec::circuits(srs.clone(), circuits.clone()).with_randomness(rs.clone()))
        .unwrap()
        .wait_blocking()
        .unwrap();
    let params: Parameters<Bls12> = (&*srs).into();
    let pvk = prepare_verifying_key(&srs.vk);
    for (i, c) in circuits.into_iter().enumerate() {
        let inputs = c.public_inputs();
        let reference = create_proof(c, &params, rs[i].0, rs[i].1).unwrap();
        assert_eq!(out.proofs[i], reference, "partition {i}");
        assert!(verify_proof(&pvk, &out.proofs[i], &inputs).unwrap());
    }
    println!("{:?}", out.timings);
    engine.shutdown();
}
