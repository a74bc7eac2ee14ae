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

/// Where the part of an inner-product SRS file that is read lies: for each of its
/// four vectors (G1 α, G1 β, G2 α, G2 β powers), the offset of its first point, the
/// points kept (at most `IPP_SRS_MAX_LEN`) and a point's size in the file.
struct IppPlan {
    vectors: [(u64, usize, usize); 4],
}

impl IppPlan {
    /// Reads the four vector headers (at most 16 bytes) and checks them against the
    /// file's size: bellperson indexes without bounds checks on lengths it reads.
    fn read(file: &std::fs::File, path: &Path) -> Result<IppPlan, PorepError> {
        use std::os::unix::fs::FileExt;
        let bad = |e: std::io::Error| PorepError::IppSrs(format!("{}: {e}", path.display()));
        let size = file.metadata().map_err(bad)?.len();
        let g1 = std::mem::size_of::<<blstrs::G1Affine as group::GroupEncoding>::Repr>();
        let g2 = std::mem::size_of::<<blstrs::G2Affine as group::GroupEncoding>::Repr>();
        let mut off = 0u64;
        let mut vectors = [(0, 0, 0); 4];
        for (v, point) in vectors.iter_mut().zip([g1, g1, g2, g2]) {
            let mut len = [0u8; 4];
            file.read_exact_at(&mut len, off).map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => {
                    PorepError::IppSrs(format!("{}: truncated ({size} bytes)", path.display()))
                }
                _ => bad(e),
            })?;
            let len = u64::from(u32::from_be_bytes(len));
            *v = (off + 4, usize::try_from(len).unwrap_or(usize::MAX).min(IPP_SRS_MAX_LEN), point);
            off = off.saturating_add(4).saturating_add(len.saturating_mul(point as u64));
            if off > size {
                return Err(PorepError::IppSrs(format!("{}: truncated ({size} bytes)", path.display())));
            }
        }
        Ok(IppPlan { vectors })
    }

    /// Bytes of the compact copy that is decoded (headers and kept points).
    fn compact_len(&self) -> usize {
        self.vectors.iter().map(|&(_, n, point)| 4 + n * point).sum()
    }

    /// Bytes the decoded SRS holds in memory.
    fn decoded_bytes(&self) -> u64 {
        let g1 = std::mem::size_of::<blstrs::G1Affine>();
        let g2 = std::mem::size_of::<blstrs::G2Affine>();
        self.vectors.iter().zip([g1, g1, g2, g2]).map(|(&(_, n, _), sz)| (n * sz) as u64).sum()
    }
}

/// Host memory [`load_ipp_srs`] needs for the file at `path`, read from its headers
/// alone: `(kept, transient)`: the decoded SRS, and the compact copy of the file's
/// used part that exists only while loading. Reserve both before loading.
///
/// # Errors
/// [`PorepError::IppSrs`] naming the file when it is missing or truncated.
pub fn ipp_srs_load_bytes(path: &Path) -> Result<(u64, u64), PorepError> {
    let file = std::fs::File::open(path).map_err(|e| PorepError::IppSrs(format!("{}: {e}", path.display())))?;
    let plan = IppPlan::read(&file, path)?;
    Ok((plan.decoded_bytes(), plan.compact_len() as u64))
}

/// Reads the inner-product SRS at `path`: the first `IPP_SRS_MAX_LEN` elements of
/// each vector, as filecoin-proofs does. Only those are read from the file (about
/// 9.4 MB of the production file's GBs), into a compact anonymous map that bellperson
/// decodes (a file map would kill the process with SIGBUS if the file were truncated
/// while mapped); [`ipp_srs_load_bytes`] says what it takes.
///
/// # Errors
/// [`PorepError::IppSrs`] naming the file when it is missing or malformed.
pub fn load_ipp_srs(path: &Path) -> Result<IppSrs, PorepError> {
    use std::os::unix::fs::FileExt;
    let bad = |e: std::io::Error| PorepError::IppSrs(format!("{}: {e}", path.display()));
    let file = std::fs::File::open(path).map_err(bad)?;
    let plan = IppPlan::read(&file, path)?;
    let mut anon = memmap2_05::MmapMut::map_anon(plan.compact_len()).map_err(bad)?;
    let mut at = 0;
    for &(off, n, point) in &plan.vectors {
        let n32 = u32::try_from(n).unwrap_or(u32::MAX);
        anon[at..at + 4].copy_from_slice(&n32.to_be_bytes());
        at += 4;
        file.read_exact_at(&mut anon[at..at + n * point], off).map_err(bad)?;
        at += n * point;
    }
    let map = anon.make_read_only().map_err(bad)?;
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
    std::fs::rename(&tmp, path).map_err(bad)?;
    // Under the production file's name: marked as test parameters, so the digest
    // check uses it as such (`digest::mark_generated`) instead of refusing it.
    crate::digest::mark_generated(path).map_err(|e| PorepError::IppSrs(e.to_string()))
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

    /// A file whose vectors are longer than what is read (as the production file's):
    /// only the kept prefix of each is read, the result is what bellperson makes of
    /// the whole file, and the memory the headers announce is what it holds.
    #[test]
    fn only_the_read_prefix_is_loaded_and_it_is_what_bellperson_reads() {
        use group::GroupEncoding;
        let dir = std::env::temp_dir().join(format!("cuzk-ipp-long-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(IPP_SRS_FILE);
        let long = IPP_SRS_MAX_LEN + 3;
        let mut bytes = Vec::new();
        let g1 = blstrs::G1Affine::generator().to_bytes();
        let g2 = blstrs::G2Affine::generator().to_bytes();
        for point in [g1.as_ref(), g1.as_ref(), g2.as_ref(), g2.as_ref()] {
            bytes.extend_from_slice(&(long as u32).to_be_bytes());
            for i in 0..long {
                // Beyond the read prefix: bytes that are no point (never decoded).
                if i < IPP_SRS_MAX_LEN {
                    bytes.extend_from_slice(point);
                } else {
                    bytes.extend(std::iter::repeat_n(0xa5, point.len()));
                }
            }
        }
        std::fs::write(&path, &bytes).unwrap();
        let srs = load_ipp_srs(&path).unwrap();
        assert_eq!(srs.g_alpha_powers.len(), IPP_SRS_MAX_LEN);
        assert_eq!(srs.h_beta_powers.len(), IPP_SRS_MAX_LEN);
        let (kept, transient) = ipp_srs_load_bytes(&path).unwrap();
        assert_eq!(kept, ipp_srs_bytes(&srs));
        assert!(transient < bytes.len() as u64, "{transient} of {}", bytes.len());
        let mut whole = memmap2_05::MmapMut::map_anon(bytes.len()).unwrap();
        whole.copy_from_slice(&bytes);
        let reference = IppSrs::read_mmap(&whole.make_read_only().unwrap(), IPP_SRS_MAX_LEN).unwrap();
        assert!(
            srs.g_alpha_powers == reference.g_alpha_powers
                && srs.g_beta_powers == reference.g_beta_powers
                && srs.h_alpha_powers == reference.h_alpha_powers
                && srs.h_beta_powers == reference.h_beta_powers
        );
        // A header that promises more than the file holds is refused before any read.
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        let e = ipp_srs_load_bytes(&path).unwrap_err().to_string();
        assert!(e.contains("truncated"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
