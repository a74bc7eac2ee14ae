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
    #[error(
        "C1 output's replica_id is not the one of prover id {prover_id}, sector {sector_id}, its ticket and \
         comm_d: the C1 is for another sector or miner, or its values are wrong"
    )]
    ReplicaId { prover_id: String, sector_id: u64 },
    // The vanilla proofs' shape, checked against the registered proof before any
    // circuit is built (`c1.rs`, `check_vanilla`). `which` names the Merkle proof,
    // column or parent list, e.g. "comm_c proof of DRG parent 3's column".
    #[error(
        "C1 output for {proof:?}: partition {partition} has {got} challenge proofs; the proof type has {want} per \
         partition"
    )]
    ChallengeCount { proof: RegisteredSealProof, partition: usize, got: usize, want: usize },
    #[error(
        "C1 output: partition {partition}, challenge {challenge}: {which} has a path of {got} levels; want {want}"
    )]
    PathLength { partition: usize, challenge: usize, which: String, got: usize, want: usize },
    #[error(
        "C1 output: partition {partition}, challenge {challenge}: {which}, level {level}: {got} sibling hashes; \
         want {want} (the tree's arity there is {})",
        want + 1
    )]
    PathArity { partition: usize, challenge: usize, which: String, level: usize, got: usize, want: usize },
    #[error(
        "C1 output: partition {partition}, challenge {challenge}: {which}, level {level}: position {got}; want \
         below {want} (the tree's arity there)"
    )]
    PathIndex { partition: usize, challenge: usize, which: String, level: usize, got: usize, want: usize },
    #[error(
        "C1 output: partition {partition}, challenge {challenge}: {which} is not the {want} proof this sector \
         shape's tree gives (its levels are split between base, sub and top trees otherwise)"
    )]
    PathKind { partition: usize, challenge: usize, which: String, want: &'static str },
    #[error("C1 output: partition {partition}, challenge {challenge}: {which} has {got} layers; want {want}")]
    ColumnLayers { partition: usize, challenge: usize, which: String, got: usize, want: usize },
    #[error("C1 output: partition {partition}, challenge {challenge}: {which}: {got} parents; want {want}")]
    Parents { partition: usize, challenge: usize, which: String, got: usize, want: usize },
    #[error(
        "C1 output: partition {partition}, challenge {challenge}: {got} labeling proofs; want {want} (one per layer)"
    )]
    LabelingLayers { partition: usize, challenge: usize, got: usize, want: usize },
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
    /// A parameter file whose digest is not Filecoin's published one.
    #[error(transparent)]
    Digest(#[from] crate::digest::DigestError),
}

/// Why vanilla proofs (PoSt, SnapDeals) were refused before any circuit was built.
#[derive(Debug, Error)]
pub enum VanillaError {
    #[error("{kind}: {got} vanilla proofs; want {want}")]
    Count { kind: &'static str, got: usize, want: String },
    #[error("{kind}: vanilla proof {index} ({len} bytes) is not a {what} of {proof}: {msg} (truncated, corrupted, or of another sector size)")]
    Decode { kind: &'static str, index: usize, len: usize, what: &'static str, proof: String, msg: String },
    #[error("{kind}: {msg}")]
    Invalid { kind: &'static str, msg: String },
}
