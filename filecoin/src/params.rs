//! Where Filecoin's parameter files are: the cache directory filecoin-proofs reads and
//! the names it gives each circuit's `.params` and `.vk` files, so an operator's
//! existing cache works unchanged.

use std::path::{Path, PathBuf};

use crate::{CircuitId, PorepError};

/// The parameter and verifying-key files filecoin-proofs uses for a circuit (a
/// registered seal, PoSt or update proof), inside `cache_dir` (Filecoin's names:
/// `v28-<circuit identifier>.params` / `.vk`).
///
/// # Errors
/// When filecoin-proofs cannot name the circuit.
pub fn parameter_files(cache_dir: &Path, circuit: impl Into<CircuitId>) -> Result<(PathBuf, PathBuf), PorepError> {
    let id = circuit.into().identifier()?;
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
