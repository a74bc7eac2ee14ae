//! What a stage needs from the engine's shared services, as traits. A stage holds an
//! `Arc<dyn …>` of these and imports no service; the wiring (`topology.rs`) hands it
//! the implementation from `services/`.

use std::sync::Arc;

use cuzk_filecoin::{CircuitId, IppSrs};
use cuzk_srs::ProvingKey;
use cuzk_synth::Precompiled;

use crate::ground::error::StageError;

/// Where Ingest finds a Filecoin proof's parameters (`services::params::ParamCache`).
pub trait ParameterSource: Send + Sync {
    /// The parameters of `circuit` (a PoRep, PoSt or update circuit), loaded (and
    /// charged to the host budget) when they are not resident. `urgent`: for a
    /// deadline job, whose load may use the budget's deadline reserve and goes
    /// ahead of bulk work waiting for room.
    ///
    /// # Errors
    /// A missing or corrupt file, or no room in the budget, named in the error.
    fn params(&self, circuit: CircuitId, urgent: bool) -> Result<Arc<ProvingKey>, StageError>;

    /// SnarkPack's inner-product SRS, for non-interactive PoRep.
    ///
    /// # Errors
    /// As [`ParameterSource::params`].
    fn ipp_srs(&self) -> Result<Arc<IppSrs>, StageError>;
}

/// How Synthesize runs a partition of a pre-compilable circuit.
pub enum Plan {
    /// Generic synthesis.
    Plain,
    /// Generic synthesis that records the circuit's structure.
    Record,
    /// Witness only, against this recording.
    Use(Arc<Precompiled>),
}

/// The recordings of circuit structures, by parameter set
/// (`services::recordings::RecordingCache`).
pub trait RecordingStore: Send + Sync {
    /// What the next partition proved against `key` should do; [`Plan::Record`]
    /// claims the recording for the caller.
    fn plan(&self, key: &Arc<ProvingKey>) -> Plan;
    /// Whether a recording for `key` is held now ([`RecordingStore::plan`] would
    /// give [`Plan::Use`]), without claiming anything.
    fn is_ready(&self, key: &Arc<ProvingKey>) -> bool;
    /// The claimed recording is done (`None`: the circuit could not be recorded).
    ///
    /// # Errors
    /// The recording's sizes do not match `key` (the circuit is not the one the
    /// parameters were made for, e.g. built from a malformed input): it is neither
    /// kept nor saved, a later partition records again, and the error names the
    /// sizes that differ.
    fn recorded(&self, key: &Arc<ProvingKey>, pre: Option<Precompiled>) -> Result<(), StageError>;
    /// The claimed recording failed: a later partition tries again.
    fn abandon(&self, key: &Arc<ProvingKey>);
}
