//! SnarkPack aggregation of non-interactive PoRep partition proofs, and the
//! inner-product SRS it reads.

use std::path::{Path, PathBuf};

use crate::PorepError;

/// The inner-product SRS file filecoin-proofs reads for SnarkPack aggregation (one
/// file for every proof type; the same name in the parameter cache).
pub const IPP_SRS_FILE: &str = "v28-fil-inner-product-v1.srs";

/// How many SRS elements are read, as filecoin-proofs does (`read_cached_srs_key`):
/// enough for 2^14 proofs; the production file holds more.
const IPP_SRS_MAX_LEN: usize = (2 << 14) + 1;

/// The inner-product SRS path inside `cache_dir`.
pub fn ipp_srs_file(cache_dir: &Path) -> PathBuf {
    cache_dir.join(IPP_SRS_FILE)
}

/// SnarkPack's generic SRS (both groups, powers of α and β).
pub type IppSrs = bellperson::groth16::aggregate::GenericSRS<blstrs::Bls12>;

/// Reads the inner-product SRS at `path` (memory-mapped; the first
/// `IPP_SRS_MAX_LEN` elements, as filecoin-proofs).
///
/// # Errors
/// [`PorepError::IppSrs`] naming the file when it is missing or malformed.
pub fn load_ipp_srs(path: &Path) -> Result<IppSrs, PorepError> {
    let bad = |e: std::io::Error| PorepError::IppSrs(format!("{}: {e}", path.display()));
    // bellperson reads the SRS from a map. The file is copied into an anonymous one,
    // not mapped: a file truncated while mapped would kill the process with SIGBUS.
    let mut file = std::fs::File::open(path).map_err(bad)?;
    let len = usize::try_from(file.metadata().map_err(bad)?.len()).unwrap_or(usize::MAX);
    let mut anon = memmap2_05::MmapMut::map_anon(len.max(1)).map_err(bad)?;
    std::io::Read::read_exact(&mut file, &mut anon[..len]).map_err(bad)?;
    let map = anon.make_read_only().map_err(bad)?;
    // bellperson indexes the map without bounds checks on lengths it reads from the
    // file: check the four vector headers against the file size first.
    let g1 = std::mem::size_of::<<blstrs::G1Affine as group::GroupEncoding>::Repr>();
    let g2 = std::mem::size_of::<<blstrs::G2Affine as group::GroupEncoding>::Repr>();
    let mut off = 0usize;
    for point in [g1, g1, g2, g2] {
        let len = map
            .get(off..off + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .ok_or_else(|| bad(std::io::ErrorKind::UnexpectedEof.into()))?;
        off = off.saturating_add(4).saturating_add(len.saturating_mul(point));
        if off > map.len() {
            return Err(PorepError::IppSrs(format!("{}: truncated ({} bytes)", path.display(), map.len())));
        }
    }
    IppSrs::read_mmap(&map, IPP_SRS_MAX_LEN).map_err(bad)
}

/// Bytes an SRS read by [`load_ipp_srs`] takes in memory.
pub fn ipp_srs_bytes(srs: &IppSrs) -> u64 {
    let g1 = std::mem::size_of::<blstrs::G1Affine>();
    let g2 = std::mem::size_of::<blstrs::G2Affine>();
    ((srs.g_alpha_powers.len() + srs.g_beta_powers.len()) * g1
        + (srs.h_alpha_powers.len() + srs.h_beta_powers.len()) * g2) as u64
}

/// Writes a fake (toxic-waste) inner-product SRS for `max_proofs` proofs to `path`,
/// for tests and benchmarks: filecoin-proofs' verifier reads it like the real one.
///
/// # Errors
/// I/O errors, naming the file.
pub fn write_fake_ipp_srs(path: &Path, max_proofs: usize, seed: u64) -> Result<(), PorepError> {
    use rand_core::SeedableRng;
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(seed);
    let srs: IppSrs = bellperson::groth16::aggregate::setup_fake_srs(&mut rng, max_proofs.next_power_of_two());
    let bad = |e: std::io::Error| PorepError::IppSrs(format!("{}: {e}", path.display()));
    let tmp = path.with_extension(format!("srs.tmp{}", std::process::id()));
    let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp).map_err(bad)?);
    srs.write(&mut f).map_err(bad)?;
    std::io::Write::flush(&mut f).map_err(bad)?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(bad)
}

/// Aggregates a non-interactive PoRep's partition proofs (in partition order) into
/// the proof `seal_commit_phase2` returns, as filecoin-proofs'
/// `aggregate_seal_commit_proofs` does for one sector: pad to a power of two (at
/// least 2) by repeating the last proof, SnarkPack v2 with the SHA-256 of `comm_r`
/// in the transcript. Then verifies the aggregate against the partitions' public
/// inputs (padded the same way) and `vk`, as `seal_commit_phase2` does. That catches
/// a bad partition proof or wrong inputs; it uses the same SRS, so it cannot tell
/// whether the SRS is the one the chain's verifier uses.
///
/// # Errors
/// [`PorepError::IppSrs`] when the SRS is too small for the proof count,
/// [`PorepError::Aggregate`] with bellperson's error or when the aggregate does not
/// verify.
pub fn aggregate_ni_porep(
    srs: &IppSrs,
    vk: &bellperson::groth16::VerifyingKey<blstrs::Bls12>,
    comm_r: &[u8; 32],
    proofs: &[bellperson::groth16::Proof<blstrs::Bls12>],
    inputs: &[Vec<blstrs::Scalar>],
) -> Result<Vec<u8>, PorepError> {
    use bellperson::groth16::{
        aggregate::{aggregate_proofs, verify_aggregate_proof, AggregateVersion},
        prepare_verifying_key,
    };
    use sha2::Digest;
    let (Some(last), Some(last_inputs)) = (proofs.last(), inputs.last()) else {
        return Err(PorepError::Aggregate("no partition proofs".into()));
    };
    if inputs.len() != proofs.len() {
        return Err(PorepError::Aggregate(format!("{} proofs but {} input sets", proofs.len(), inputs.len())));
    }
    let target = if proofs.len() == 1 { 2 } else { proofs.len().next_power_of_two() };
    let mut padded = proofs.to_vec();
    padded.resize(target, last.clone());
    // specialize_prover asserts 2·n elements of each vector: check, do not panic.
    let have = [srs.g_alpha_powers.len(), srs.g_beta_powers.len(), srs.h_alpha_powers.len(), srs.h_beta_powers.len()]
        .into_iter()
        .min()
        .unwrap_or(0);
    if have < 2 * target {
        return Err(PorepError::IppSrs(format!("it has {have} powers, {target} proofs need {}", 2 * target)));
    }
    let prover_srs = srs.specialize_prover(target);
    let transcript: [u8; 32] = sha2::Sha256::digest(comm_r).into();
    let agg = aggregate_proofs::<blstrs::Bls12>(&prover_srs, &transcript, &padded, AggregateVersion::V2)
        .map_err(|e| PorepError::Aggregate(e.to_string()))?;
    let mut padded_inputs = inputs.to_vec();
    padded_inputs.resize(target, last_inputs.clone());
    let ok = verify_aggregate_proof(
        &srs.specialize_vk(target),
        &prepare_verifying_key(vk),
        rand::rngs::OsRng,
        &padded_inputs,
        &agg,
        &transcript,
        AggregateVersion::V2,
    )
    .map_err(|e| PorepError::Aggregate(format!("verifying the aggregate: {e}")))?;
    if !ok {
        return Err(PorepError::Aggregate(format!(
            "the aggregate does not verify against the partitions' public inputs and verifying key (a bad \
             partition proof, or a corrupt {IPP_SRS_FILE})"
        )));
    }
    let mut out = Vec::new();
    agg.write(&mut out).map_err(|e| PorepError::Aggregate(e.to_string()))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use group::{prime::PrimeCurveAffine, Group};

    fn proofs(n: usize) -> Vec<bellperson::groth16::Proof<blstrs::Bls12>> {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(3);
        use rand_core::SeedableRng;
        (0..n)
            .map(|_| bellperson::groth16::Proof {
                a: blstrs::G1Projective::random(&mut rng).into(),
                b: blstrs::G2Affine::generator(),
                c: blstrs::G1Projective::random(&mut rng).into(),
            })
            .collect()
    }

    fn fake_vk(inputs: usize) -> bellperson::groth16::VerifyingKey<blstrs::Bls12> {
        let (g1, g2) = (blstrs::G1Affine::generator(), blstrs::G2Affine::generator());
        bellperson::groth16::VerifyingKey {
            alpha_g1: g1,
            beta_g1: g1,
            beta_g2: g2,
            gamma_g2: g2,
            delta_g1: g1,
            delta_g2: g2,
            ic: vec![g1; inputs + 1],
        }
    }

    #[test]
    fn ipp_srs_errors_name_the_problem() {
        let dir = std::env::temp_dir().join(format!("cuzk-ipp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = ipp_srs_file(&dir);
        let e = load_ipp_srs(&path).unwrap_err().to_string();
        assert!(e.contains(IPP_SRS_FILE) && e.contains("srs gen"), "{e}");

        // Room for 4 proofs: 13 pad to 16 and need 32 powers.
        write_fake_ipp_srs(&path, 4, 1).unwrap();
        let srs = load_ipp_srs(&path).unwrap();
        assert_eq!(srs.g_alpha_powers.len(), 8);
        let vk = fake_vk(2);
        let inputs = |n| vec![vec![blstrs::Scalar::from(5u64), blstrs::Scalar::from(7u64)]; n];
        let e = aggregate_ni_porep(&srs, &vk, &[1; 32], &proofs(13), &inputs(13)).unwrap_err().to_string();
        assert!(e.contains("16 proofs need 32"), "{e}");
        let e = aggregate_ni_porep(&srs, &vk, &[1; 32], &proofs(3), &inputs(2)).unwrap_err().to_string();
        assert!(e.contains("3 proofs but 2 input sets"), "{e}");
        // 3 proofs pad to 4 and fit; they are not valid Groth16 proofs, so the
        // aggregate must not verify (the valid path: tests/porep.rs, tests/gpu.rs).
        let e = aggregate_ni_porep(&srs, &vk, &[1; 32], &proofs(3), &inputs(3)).unwrap_err().to_string();
        assert!(e.contains("does not verify") && e.contains(IPP_SRS_FILE), "{e}");

        // Truncated: refused with the file named, no panic.
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        let e = load_ipp_srs(&path).unwrap_err().to_string();
        assert!(e.contains("truncated") && e.contains(IPP_SRS_FILE), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
