//! supraseal-c2 (bellperson `cuda-supraseal`) on a stream of synthetic proofs.
//!
//! `supraseal-bench PARAMS CONSTRAINTS PUBLIC_INPUTS A_DENSITY B_DENSITY COUNT BATCH SEED`
//!
//! One untimed warm-up proof (parameter upload, kernel JIT), then COUNT proofs in
//! calls of BATCH circuits each, timed end to end including synthesis, as `cuzk
//! bench` times its stream. The r, s of proof i are cuzk's (`job_seed`), so both
//! provers produce the same bytes; the SHA-256 of all proofs is printed to check.

#![deny(unsafe_code)]

use std::time::Instant;

use bellperson::groth16::{create_proof_batch, prepare_verifying_key, verify_proof, SuprasealParameters, VerifyingKey};
use blstrs::{Bls12, Scalar};
use cuzk_synth::{SyntheticCircuit, SyntheticSpec};
use ff::Field;
use rand::SeedableRng;
use sha2::Digest;

fn job_seed(seed: u64, i: usize) -> u64 {
    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(i as u64)
}

fn rs(seed: u64, i: usize) -> (Scalar, Scalar) {
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(job_seed(seed, i));
    (Scalar::random(&mut rng), Scalar::random(&mut rng))
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 9 {
        eprintln!("usage: {} PARAMS CONSTRAINTS PUBLIC_INPUTS A_DENSITY B_DENSITY COUNT BATCH SEED", a[0]);
        std::process::exit(2);
    }
    let params_path = std::path::PathBuf::from(&a[1]);
    let spec = SyntheticSpec {
        constraints: a[2].parse().unwrap(),
        public_inputs: a[3].parse().unwrap(),
        a_density: a[4].parse().unwrap(),
        b_density: a[5].parse().unwrap(),
    };
    let (count, batch, seed): (usize, usize, u64) = (a[6].parse().unwrap(), a[7].parse().unwrap(), a[8].parse().unwrap());
    let t = Instant::now();
    let params = SuprasealParameters::<Bls12>::new(params_path.clone()).expect("supraseal parameters");
    eprintln!("supraseal: parameters loaded in {:?}", t.elapsed());
    // Only the verifying key (the file's head): decoding the whole file beside
    // supraseal's own pinned copy would hold the points twice (96 GB at 2^27).
    let vk = std::fs::File::open(&params_path)
        .and_then(|f| VerifyingKey::<Bls12>::read(std::io::BufReader::new(f)))
        .expect("verifying key");
    let pvk = prepare_verifying_key(&vk);

    let t = Instant::now();
    let (r, s) = rs(seed ^ 0xdead, 0);
    create_proof_batch(vec![SyntheticCircuit { spec, seed: 1 << 40 }], &params, vec![r], vec![s]).expect("warm-up");
    eprintln!("supraseal: warm-up proof {:?}", t.elapsed());

    let start = Instant::now();
    let mut proofs = Vec::with_capacity(count);
    let mut i = 0;
    while i < count {
        let n = batch.min(count - i);
        let circuits: Vec<_> = (i..i + n).map(|j| SyntheticCircuit { spec, seed: seed.wrapping_add(j as u64) }).collect();
        let (rv, sv): (Vec<_>, Vec<_>) = (i..i + n).map(|j| rs(seed, j)).unzip();
        proofs.extend(create_proof_batch(circuits, &params, rv, sv).expect("proof"));
        i += n;
    }
    let wall = start.elapsed();
    let mut ok = 0;
    let mut h = sha2::Sha256::new();
    for (j, p) in proofs.iter().enumerate() {
        let inputs = SyntheticCircuit { spec, seed: seed.wrapping_add(j as u64) }.public_inputs();
        ok += usize::from(verify_proof(&pvk, p, &inputs).unwrap_or(false));
        let mut b = Vec::new();
        p.write(&mut b).unwrap();
        h.update(&b);
    }
    println!(
        "supraseal: {count} proofs of {} constraints (batch {batch}) in {:.2} s = {:.1} proofs/min ({:.3} s/proof), {ok} verified, digest {:x}",
        spec.constraints,
        wall.as_secs_f64(),
        count as f64 * 60.0 / wall.as_secs_f64(),
        wall.as_secs_f64() / count as f64,
        h.finalize()
    );
}
