//! The C1 output (PoRep commit phase 1), in either format operators have, parsed and
//! checked before any circuit is built.
//!
//! Formats (detected from the first key of the JSON object):
//! - filecoin-proofs-api's `SealCommitPhase1Output` JSON, as filecoin-ffi writes it;
//! - the Lotus/Curio wrapper `{"SectorNum", "Phase1Out" (base64 of that JSON),
//!   "SectorSize"}`. It has no prover id, so the prover id is always a parameter.

use base64::Engine as _;
use filecoin_proofs_api::seal::SealCommitPhase1Output;
use serde::Deserialize;

use crate::{is_non_interactive, PorepError, RegisteredSealProof};

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
