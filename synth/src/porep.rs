//! Filecoin PoRep commit phase 2 inputs: the C1 output, in either format operators
//! have, validated and turned into one circuit per partition.
//!
//! Formats (detected from the first key of the JSON object):
//! - filecoin-proofs-api's `SealCommitPhase1Output` JSON, as filecoin-ffi writes it;
//! - the Lotus/Curio wrapper `{"SectorNum", "Phase1Out" (base64 of that JSON),
//!   "SectorSize"}`. It has no prover id, so the prover id is always a parameter.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use filecoin_hashers::{Domain, Hasher};
use filecoin_proofs::{
    as_safe_commitment, parameters::setup_params, DefaultPieceDomain, DefaultPieceHasher, MerkleTreeTrait,
    SectorShapeBase, SectorShapeSub8, SectorShapeTop2,
};
use filecoin_proofs_api::seal::SealCommitPhase1Output;
pub use filecoin_proofs_api::RegisteredSealProof;
use serde::Deserialize;
use storage_proofs_core::compound_proof::{self, CompoundProof};
use storage_proofs_porep::stacked::{self, StackedCompound, StackedDrg};
use thiserror::Error;

use crate::{synthesize_in, Assignment, Precompiled, SynthError, SynthMode};

/// Why a C1 input was refused.
#[derive(Debug, Error)]
pub enum PorepError {
    #[error("C1 input is {len} bytes, above the limit of {max} bytes")]
    TooLarge { len: usize, max: usize },
    #[error("C1 input is empty")]
    Empty,
    #[error("C1 input is not valid {what} JSON: {source}")]
    Json {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("Phase1Out is not valid base64: {0}")]
    Base64(#[from] base64::DecodeError),
    #[error("wrapper says SectorSize {wrapper} but the C1 output inside is for {proof:?} ({inner} bytes)")]
    SectorSizeMismatch { wrapper: u64, proof: RegisteredSealProof, inner: u64 },
    #[error("C1 output has an all-zero {0}")]
    Zero(&'static str),
    #[error("C1 output for {proof:?} has vanilla proofs for {got} partitions; the proof type has {want}")]
    Partitions { proof: RegisteredSealProof, got: usize, want: usize },
    #[error("C1 output for {proof:?} carries vanilla proofs of another sector shape")]
    WrongShape { proof: RegisteredSealProof },
    #[error("{0:?} is not supported: {1}")]
    Unsupported(RegisteredSealProof, &'static str),
    #[error("building the partition circuits failed: {0}")]
    Circuit(String),
    #[error(
        "inner-product SRS for non-interactive PoRep not usable: {0} (production: the Filecoin \
         parameter set's {name}; tests: `cuzk srs gen --porep <size>` writes a fake one)",
        name = IPP_SRS_FILE
    )]
    IppSrs(String),
    #[error("aggregating the partition proofs failed: {0}")]
    Aggregate(String),
}

/// Which of the two formats the input was in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum C1Format {
    /// filecoin-proofs-api `SealCommitPhase1Output` JSON.
    Plain,
    /// Lotus/Curio wrapper, with its sector number.
    Wrapper { sector_num: u64 },
}

/// A parsed, validated C1 output.
pub struct ParsedC1 {
    pub format: C1Format,
    pub output: SealCommitPhase1Output,
}

impl ParsedC1 {
    /// The registered seal proof (sector size and API version).
    pub fn registered_proof(&self) -> RegisteredSealProof {
        self.output.registered_proof
    }

    /// Number of partitions (= SNARKs in the proof; aggregated into one for NI-PoRep).
    pub fn partitions(&self) -> usize {
        usize::from(self.output.registered_proof.partitions())
    }

    /// Whether the proof is non-interactive PoRep (API v1.2): its partition proofs
    /// are aggregated with SnarkPack into the returned proof.
    pub fn is_non_interactive(&self) -> bool {
        is_non_interactive(self.output.registered_proof)
    }
}

/// Whether `proof` is a non-interactive PoRep type (`*_V1_2_Feat_NonInteractivePoRep`).
pub fn is_non_interactive(proof: RegisteredSealProof) -> bool {
    proof.feature_enabled(storage_proofs_core::api_version::ApiFeature::NonInteractivePoRep)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wrapper {
    #[serde(rename = "SectorNum")]
    sector_num: u64,
    #[serde(rename = "Phase1Out")]
    phase1_out: String,
    #[serde(rename = "SectorSize")]
    sector_size: u64,
}

/// The first key of a JSON object, without parsing the rest (a 32GiB C1 is tens of
/// megabytes; it is parsed once, by the format it turns out to be).
fn first_key(bytes: &[u8]) -> Option<&str> {
    let s = bytes.iter().position(|b| !b.is_ascii_whitespace())?;
    if bytes[s] != b'{' {
        return None;
    }
    let rest = &bytes[s + 1..];
    let q = rest.iter().position(|b| !b.is_ascii_whitespace())?;
    if rest[q] != b'"' {
        return None;
    }
    let key = &rest[q + 1..];
    let end = key.iter().position(|b| *b == b'"')?;
    std::str::from_utf8(&key[..end]).ok()
}

/// Parses and validates a C1 output of at most `max_bytes`.
///
/// # Errors
/// A [`PorepError`] naming what is wrong: size, JSON (with line and column), base64,
/// sector size, zero commitments or seed, partition count, unsupported proof type.
pub fn parse_c1(bytes: &[u8], max_bytes: usize) -> Result<ParsedC1, PorepError> {
    if bytes.len() > max_bytes {
        return Err(PorepError::TooLarge { len: bytes.len(), max: max_bytes });
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(PorepError::Empty);
    }
    let parsed = match first_key(bytes) {
        Some("SectorNum" | "Phase1Out" | "SectorSize") => {
            let w: Wrapper = serde_json::from_slice(bytes)
                .map_err(|source| PorepError::Json { what: "Lotus/Curio wrapper", source })?;
            let inner = base64::engine::general_purpose::STANDARD.decode(w.phase1_out.trim())?;
            let output: SealCommitPhase1Output = serde_json::from_slice(&inner)
                .map_err(|source| PorepError::Json { what: "SealCommitPhase1Output (inside Phase1Out)", source })?;
            let inner_size = u64::from(output.registered_proof.sector_size());
            if inner_size != w.sector_size {
                return Err(PorepError::SectorSizeMismatch {
                    wrapper: w.sector_size,
                    proof: output.registered_proof,
                    inner: inner_size,
                });
            }
            ParsedC1 { format: C1Format::Wrapper { sector_num: w.sector_num }, output }
        }
        _ => {
            let output: SealCommitPhase1Output = serde_json::from_slice(bytes)
                .map_err(|source| PorepError::Json { what: "SealCommitPhase1Output", source })?;
            ParsedC1 { format: C1Format::Plain, output }
        }
    };
    validate(&parsed)?;
    Ok(parsed)
}

fn validate(c1: &ParsedC1) -> Result<(), PorepError> {
    let o = &c1.output;
    let proof = o.registered_proof;
    for (name, v) in [("comm_r", &o.comm_r), ("comm_d", &o.comm_d), ("seed", &o.seed)] {
        if *v == [0; 32] {
            return Err(PorepError::Zero(name));
        }
    }
    let want = c1.partitions();
    let got = vanilla_partitions(o);
    if got != want {
        return Err(PorepError::Partitions { proof, got, want });
    }
    Ok(())
}

fn vanilla_partitions(o: &SealCommitPhase1Output) -> usize {
    use filecoin_proofs_api::seal::VanillaSealProof::*;
    match &o.vanilla_proofs {
        StackedDrg2KiBV1(v) | StackedDrg8MiBV1(v) | StackedDrg512MiBV1(v) => nonempty(v),
        StackedDrg32GiBV1(v) => nonempty(v),
        StackedDrg64GiBV1(v) => nonempty(v),
    }
}

fn nonempty<T>(v: &[Vec<T>]) -> usize {
    if v.iter().any(Vec::is_empty) {
        0
    } else {
        v.len()
    }
}

type SynthFn = Box<dyn FnOnce(SynthMode<'_>) -> Result<(Assignment, Option<Precompiled>), SynthError> + Send>;

/// One partition, ready to synthesize (its circuit type erased).
pub struct PorepPartition(SynthFn);

impl PorepPartition {
    /// Synthesizes the partition's circuit.
    ///
    /// # Errors
    /// The circuit's synthesis error.
    pub fn synthesize(self) -> Result<Assignment, SynthError> {
        (self.0)(SynthMode::Plain).map(|(a, _)| a)
    }

    /// Synthesizes the partition's circuit in `mode`; the recording is returned for
    /// [`SynthMode::Record`] (`None` if the circuit was too large to record).
    ///
    /// # Errors
    /// The circuit's synthesis error, or a structure mismatch in
    /// [`SynthMode::Precompiled`].
    pub fn synthesize_with(self, mode: SynthMode<'_>) -> Result<(Assignment, Option<Precompiled>), SynthError> {
        (self.0)(mode)
    }
}

fn circuits<Tree: 'static + MerkleTreeTrait<Hasher = filecoin_proofs::DefaultTreeHasher>>(
    c1: ParsedC1,
) -> Result<Vec<PorepPartition>, PorepError> {
    let err = |e: anyhow::Error| PorepError::Circuit(format!("{e:#}"));
    let proof = c1.output.registered_proof;
    let o = c1.output;
    let vanilla: Vec<Vec<_>> = o.vanilla_proofs.try_into().map_err(|_| PorepError::WrongShape { proof })?;
    let config = proof.as_v1_config();
    let comm_r = as_safe_commitment::<<Tree::Hasher as Hasher>::Domain, _>(&o.comm_r, "comm_r").map_err(err)?;
    let comm_d = DefaultPieceDomain::try_from_bytes(&o.comm_d).map_err(err)?;
    let public_inputs = stacked::PublicInputs::<<Tree::Hasher as Hasher>::Domain, DefaultPieceDomain> {
        replica_id: o.replica_id,
        tau: Some(stacked::Tau { comm_d, comm_r }),
        k: None,
        seed: Some(o.seed),
    };
    let setup = compound_proof::SetupParams {
        vanilla_params: setup_params(&config).map_err(err)?,
        partitions: Some(usize::from(config.partitions)),
        priority: false,
    };
    let public_params = <StackedCompound<Tree, DefaultPieceHasher> as CompoundProof<
        StackedDrg<'_, Tree, DefaultPieceHasher>,
        _,
    >>::setup(&setup)
    .map_err(err)?;
    vanilla
        .iter()
        .enumerate()
        .map(|(k, v)| {
            let circuit = StackedCompound::<Tree, DefaultPieceHasher>::circuit(
                &public_inputs,
                (),
                v,
                &public_params.vanilla_params,
                Some(k),
            )
            .map_err(err)?;
            Ok(PorepPartition(Box::new(move |mode| synthesize_in(circuit, mode))))
        })
        .collect()
}

/// One circuit per partition, in partition order.
///
/// # Errors
/// [`PorepError::WrongShape`] when the vanilla proofs do not match the proof type,
/// [`PorepError::Circuit`] when filecoin-proofs refuses them.
pub fn partition_circuits(c1: ParsedC1) -> Result<Vec<PorepPartition>, PorepError> {
    match u64::from(c1.output.registered_proof.sector_size()) {
        2048 | 8_388_608 | 536_870_912 => circuits::<SectorShapeBase>(c1),
        34_359_738_368 => circuits::<SectorShapeSub8>(c1),
        68_719_476_736 => circuits::<SectorShapeTop2>(c1),
        _ => Err(PorepError::Unsupported(c1.output.registered_proof, "unknown sector size")),
    }
}

/// The parameter and verifying-key files filecoin-proofs uses for `proof`, inside
/// `cache_dir` (Filecoin's names: `v28-<circuit identifier>.params` / `.vk`).
///
/// # Errors
/// When filecoin-proofs cannot name the circuit.
pub fn parameter_files(cache_dir: &Path, proof: RegisteredSealProof) -> Result<(PathBuf, PathBuf), PorepError> {
    let id = proof.circuit_identifier().map_err(|e| PorepError::Circuit(format!("{e:#}")))?;
    let v = storage_proofs_core::parameter_cache::VERSION;
    Ok((cache_dir.join(format!("v{v}-{id}.params")), cache_dir.join(format!("v{v}-{id}.vk"))))
}

/// The parameter cache directory filecoin-proofs uses: `FIL_PROOFS_PARAMETER_CACHE`,
/// else `/var/tmp/filecoin-proof-parameters`.
pub fn default_parameter_cache() -> PathBuf {
    std::env::var_os("FIL_PROOFS_PARAMETER_CACHE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/filecoin-proof-parameters"))
}

/// The blank (witness-free) circuit of a proof type: what its parameters are made for.
pub enum BlankPorep {
    Base(stacked::StackedCircuit<SectorShapeBase, DefaultPieceHasher>),
    Sub8(stacked::StackedCircuit<SectorShapeSub8, DefaultPieceHasher>),
    Top2(stacked::StackedCircuit<SectorShapeTop2, DefaultPieceHasher>),
}

impl bellperson::Circuit<blstrs::Scalar> for BlankPorep {
    fn synthesize<CS: bellperson::ConstraintSystem<blstrs::Scalar>>(
        self,
        cs: &mut CS,
    ) -> Result<(), bellperson::SynthesisError> {
        match self {
            BlankPorep::Base(c) => c.synthesize(cs),
            BlankPorep::Sub8(c) => c.synthesize(cs),
            BlankPorep::Top2(c) => c.synthesize(cs),
        }
    }
}

fn blank<Tree: 'static + MerkleTreeTrait>(
    proof: RegisteredSealProof,
) -> Result<stacked::StackedCircuit<Tree, DefaultPieceHasher>, PorepError> {
    let err = |e: anyhow::Error| PorepError::Circuit(format!("{e:#}"));
    let config = proof.as_v1_config();
    let setup = compound_proof::SetupParams {
        vanilla_params: setup_params(&config).map_err(err)?,
        partitions: Some(usize::from(config.partitions)),
        priority: false,
    };
    let pp = <StackedCompound<Tree, DefaultPieceHasher> as CompoundProof<
        StackedDrg<'_, Tree, DefaultPieceHasher>,
        _,
    >>::setup(&setup)
    .map_err(err)?;
    Ok(<StackedCompound<Tree, DefaultPieceHasher> as CompoundProof<_, _>>::blank_circuit(&pp.vanilla_params))
}

/// The blank circuit of `proof`.
///
/// # Errors
/// [`PorepError::Unsupported`] for an unknown sector size; setup errors.
pub fn blank_circuit(proof: RegisteredSealProof) -> Result<BlankPorep, PorepError> {
    Ok(match u64::from(proof.sector_size()) {
        2048 | 8_388_608 | 536_870_912 => BlankPorep::Base(blank(proof)?),
        34_359_738_368 => BlankPorep::Sub8(blank(proof)?),
        68_719_476_736 => BlankPorep::Top2(blank(proof)?),
        _ => return Err(PorepError::Unsupported(proof, "unknown sector size")),
    })
}

/// What [`generate_c1`] produced: the C1 output in both formats and everything
/// needed to verify the proof made from it.
pub struct C1Fixture {
    pub registered_proof: RegisteredSealProof,
    /// The miner's actor id; `prover_id` is derived from it as Lotus does.
    pub miner_id: u64,
    pub prover_id: [u8; 32],
    pub sector_id: u64,
    pub ticket: [u8; 32],
    pub seed: [u8; 32],
    pub comm_r: [u8; 32],
    pub comm_d: [u8; 32],
    /// filecoin-proofs-api `SealCommitPhase1Output` JSON.
    pub c1_json: Vec<u8>,
    /// The Lotus/Curio wrapper around it.
    pub wrapper_json: Vec<u8>,
}

/// Seals random data with filecoin-proofs (pre-commit 1 and 2, commit 1) in
/// `work_dir` and returns the C1 output. Deterministic for a given `seed`. Meant for
/// small sectors (2KiB, 8MiB) in tests and benchmarks.
///
/// # Errors
/// [`PorepError::Circuit`] with filecoin-proofs' message.
pub fn generate_c1(proof: RegisteredSealProof, seed: u64, work_dir: &Path) -> Result<C1Fixture, PorepError> {
    use filecoin_proofs_api::{seal, PaddedBytesAmount, SectorId, UnpaddedBytesAmount};
    use rand_core::{RngCore, SeedableRng};
    let err = |e: anyhow::Error| PorepError::Circuit(format!("{e:#}"));
    let io = |e: std::io::Error| PorepError::Circuit(format!("{}: {e}", work_dir.display()));
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(seed);
    let mut bytes32 = || {
        let mut b = [0u8; 32];
        rng.fill_bytes(&mut b);
        b[31] &= 0x3f; // a valid field element, as Lotus produces
        b
    };
    let (ticket, seed_c) = (bytes32(), bytes32());
    // The miner f0<1000 + seed>, so that a daemon given its miner id derives the same
    // prover id (LEB128) as the sealing did.
    let miner_id = 1000 + seed;
    let prover_id = prover_id_from_actor(miner_id);
    let sector_id = 1000 + seed % 1000;
    let sector_size = u64::from(proof.sector_size());
    let unpadded = UnpaddedBytesAmount::from(PaddedBytesAmount(sector_size));
    let mut data = vec![0u8; u64::from(unpadded) as usize];
    rand_chacha::ChaCha20Rng::seed_from_u64(seed ^ 0x5eed).fill_bytes(&mut data);

    std::fs::create_dir_all(work_dir).map_err(io)?;
    let cache = work_dir.join("cache");
    let _ = std::fs::remove_dir_all(&cache);
    std::fs::create_dir_all(&cache).map_err(io)?;
    let staged = work_dir.join("staged");
    let sealed = work_dir.join("sealed");
    let mut staged_file =
        std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&staged).map_err(io)?;
    let (piece, _) = seal::write_and_preprocess(proof, &data[..], &mut staged_file, unpadded).map_err(err)?;
    drop(staged_file);
    std::fs::File::create(&sealed).map_err(io)?;
    let pieces = [piece];
    let sid = SectorId::from(sector_id);
    let pc1 =
        seal::seal_pre_commit_phase1(proof, &cache, &staged, &sealed, prover_id, sid, ticket, &pieces).map_err(err)?;
    let pc2 = seal::seal_pre_commit_phase2(pc1, &cache, &sealed).map_err(err)?;
    let (comm_r, comm_d) = (pc2.comm_r, pc2.comm_d);
    if proof.feature_enabled(storage_proofs_core::api_version::ApiFeature::SyntheticPoRep) {
        // Synthetic PoRep (API v1.2): the synthetic challenges' proofs are generated
        // after pre-commit; commit phase 1 then selects its challenges from them.
        seal::generate_synth_proofs(&cache, &sealed, prover_id, sid, ticket, pc2.clone(), &pieces).map_err(err)?;
    }
    let c1 = seal::seal_commit_phase1(&cache, &sealed, prover_id, sid, ticket, seed_c, pc2, &pieces).map_err(err)?;
    let c1_json = serde_json::to_vec(&c1).map_err(|e| PorepError::Circuit(e.to_string()))?;
    let wrapper_json = serde_json::to_vec(&serde_json::json!({
        "SectorNum": sector_id,
        "Phase1Out": base64::engine::general_purpose::STANDARD.encode(&c1_json),
        "SectorSize": sector_size,
    }))
    .map_err(|e| PorepError::Circuit(e.to_string()))?;
    Ok(C1Fixture {
        registered_proof: proof,
        miner_id,
        prover_id,
        sector_id,
        ticket,
        seed: seed_c,
        comm_r,
        comm_d,
        c1_json,
        wrapper_json,
    })
}

/// Checks a PoRep proof (partition proofs back to back) with filecoin-proofs'
/// `verify_seal`, which reads the verifying key from `FIL_PROOFS_PARAMETER_CACHE`.
///
/// # Errors
/// filecoin-proofs' error (for example a missing `.vk` file).
#[allow(clippy::too_many_arguments)]
pub fn verify_seal(
    proof: RegisteredSealProof,
    comm_r: [u8; 32],
    comm_d: [u8; 32],
    prover_id: [u8; 32],
    sector_id: u64,
    ticket: [u8; 32],
    seed: [u8; 32],
    proof_bytes: &[u8],
) -> Result<bool, PorepError> {
    filecoin_proofs_api::seal::verify_seal(
        proof,
        comm_r,
        comm_d,
        prover_id,
        filecoin_proofs_api::SectorId::from(sector_id),
        ticket,
        seed,
        proof_bytes,
    )
    .map_err(|e| PorepError::Circuit(format!("{e:#}")))
}

/// A Filecoin miner's actor id as the 32-byte prover id, the way Lotus/Curio derive
/// it: unsigned LEB128 of the id, zero-padded.
pub fn prover_id_from_actor(actor_id: u64) -> [u8; 32] {
    let mut out = [0u8; 32];
    let (mut v, mut i) = (actor_id, 0);
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        out[i] = if v == 0 { byte } else { byte | 0x80 };
        i += 1;
        if v == 0 {
            return out;
        }
    }
}

/// filecoin-ffi's numbering (`abi.RegisteredSealProof`): 0-4 v1, 5-9 v1.1, 10-14 v1.1
/// synthetic PoRep, 15-19 v1.2 non-interactive, each in the order 2KiB, 8MiB, 512MiB,
/// 32GiB, 64GiB.
const SEAL_PROOFS: [RegisteredSealProof; 20] = {
    use RegisteredSealProof::*;
    [
        StackedDrg2KiBV1,
        StackedDrg8MiBV1,
        StackedDrg512MiBV1,
        StackedDrg32GiBV1,
        StackedDrg64GiBV1,
        StackedDrg2KiBV1_1,
        StackedDrg8MiBV1_1,
        StackedDrg512MiBV1_1,
        StackedDrg32GiBV1_1,
        StackedDrg64GiBV1_1,
        StackedDrg2KiBV1_1_Feat_SyntheticPoRep,
        StackedDrg8MiBV1_1_Feat_SyntheticPoRep,
        StackedDrg512MiBV1_1_Feat_SyntheticPoRep,
        StackedDrg32GiBV1_1_Feat_SyntheticPoRep,
        StackedDrg64GiBV1_1_Feat_SyntheticPoRep,
        StackedDrg2KiBV1_2_Feat_NonInteractivePoRep,
        StackedDrg8MiBV1_2_Feat_NonInteractivePoRep,
        StackedDrg512MiBV1_2_Feat_NonInteractivePoRep,
        StackedDrg32GiBV1_2_Feat_NonInteractivePoRep,
        StackedDrg64GiBV1_2_Feat_NonInteractivePoRep,
    ]
};

/// The registered seal proof with filecoin-ffi's numeric id.
pub fn proof_from_number(n: u64) -> Option<RegisteredSealProof> {
    SEAL_PROOFS.get(usize::try_from(n).ok()?).copied()
}

/// filecoin-ffi's numeric id of a registered seal proof (inverse of [`proof_from_number`]).
pub fn proof_number(p: RegisteredSealProof) -> u64 {
    SEAL_PROOFS.iter().position(|&q| q == p).map_or(u64::MAX, |i| i as u64)
}

/// Parses a sector size as operators write it ("2KiB", "32GiB", or bytes) into the
/// latest interactive registered proof for that size (API v1.1).
///
/// # Errors
/// When the size is not a Filecoin sector size.
pub fn proof_for_sector_size(s: &str) -> Result<RegisteredSealProof, String> {
    use RegisteredSealProof::*;
    Ok(match s.trim().to_ascii_lowercase().as_str() {
        "2kib" | "2048" => StackedDrg2KiBV1_1,
        "8mib" | "8388608" => StackedDrg8MiBV1_1,
        "512mib" | "536870912" => StackedDrg512MiBV1_1,
        "32gib" | "34359738368" => StackedDrg32GiBV1_1,
        "64gib" | "68719476736" => StackedDrg64GiBV1_1,
        _ => return Err(format!("`{s}` is not a Filecoin sector size (2KiB, 8MiB, 512MiB, 32GiB, 64GiB)")),
    })
}

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
    let file = std::fs::File::open(path).map_err(bad)?;
    // SAFETY: read-only map of a parameter file nobody writes while we run (the same
    // assumption filecoin-proofs makes for this file).
    let map = unsafe { memmap2_05::MmapOptions::new().map(&file) }.map_err(bad)?;
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
