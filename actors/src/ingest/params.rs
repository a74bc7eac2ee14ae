//! Parameters of Filecoin proof types, found in the parameter cache by Filecoin's file
//! names and kept resident once loaded.

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Instant,
};

use cuzk_srs::{LoadOptions, ProvingKey};
use cuzk_synth::porep::{parameter_files, RegisteredSealProof};
use tracing::info;

use crate::error::StageError;

/// Loads parameters on first use and keeps them.
pub struct ParamCache {
    dir: PathBuf,
    opts: LoadOptions,
    loaded: Mutex<HashMap<PathBuf, Arc<ProvingKey>>>,
}

impl ParamCache {
    /// A cache reading from `dir`.
    pub fn new(dir: PathBuf, opts: LoadOptions) -> Self {
        ParamCache { dir, opts, loaded: Mutex::new(HashMap::new()) }
    }

    /// The directory parameters are read from.
    pub fn dir(&self) -> &PathBuf {
        &self.dir
    }

    /// The parameters of `proof`, loading them if needed.
    ///
    /// # Errors
    /// When the file is missing (the error names the expected path and how to get
    /// it) or invalid.
    pub fn get(&self, proof: RegisteredSealProof) -> Result<Arc<ProvingKey>, StageError> {
        let (path, _) = parameter_files(&self.dir, proof).map_err(StageError::failed)?;
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = loaded.get(&path) {
            return Ok(k.clone());
        }
        if !path.exists() {
            return Err(StageError::msg(format!(
                "parameters for {proof:?} not found: expected {} (set ingest.param_cache or \
                 FIL_PROOFS_PARAMETER_CACHE; test parameters: `cuzk srs gen --porep <size> --cache {}`)",
                path.display(),
                self.dir.display()
            )));
        }
        let t = Instant::now();
        let key = Arc::new(ProvingKey::load(&path, self.opts).map_err(StageError::failed)?);
        info!(file = %path.display(), ms = t.elapsed().as_millis() as u64, bytes = key.heap_bytes(), "parameters loaded");
        loaded.insert(path, key.clone());
        Ok(key)
    }
}
