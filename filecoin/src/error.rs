//! Why a Filecoin input or operation was refused.

use thiserror::Error;

use crate::{RegisteredSealProof, IPP_SRS_FILE};

/// Why a C1 input, a parameter file or an aggregation was refused.
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
