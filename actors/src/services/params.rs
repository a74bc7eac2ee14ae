//! Parameters of Filecoin proof types, found in the parameter cache by Filecoin's file
//! names and kept resident once loaded. Their memory is reserved from the host
//! budget, the same budget partitions in flight draw on; parameters no job is using
//! are evicted (least recently used first) when a new set needs the room.
//!
//! Before a file is read, its digest is checked against Filecoin's published ones
//! (`cuzk_filecoin::digest`): a `.params`, its `.vk` beside it, or the SnarkPack SRS
//! whose digest is not the published one is refused, so nothing is proved (or
//! self-verified) with a corrupt file; test parameters (marked by what generated
//! them, or not in the manifest) are used, and the log says so.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Instant,
};

use cuzk_filecoin::DigestChecker;
use cuzk_filecoin::{
    ipp_srs_bytes, ipp_srs_file, ipp_srs_load_bytes, load_ipp_srs, parameter_files, CircuitId, IppSrs,
};
use cuzk_srs::{LoadOptions, ProvingKey};
use tracing::{info, warn};

use crate::{
    budget::{Class, Grant, Ledger, Reservation},
    ground::{ParameterSource, StageError},
};

struct Resident {
    proof: CircuitId,
    key: Arc<ProvingKey>,
    /// Bytes reserved from the host budget for it.
    bytes: u64,
    last_used: Instant,
    /// Inserted in memory ([`ParamCache::insert`]), no file behind it: never evicted
    /// to make room, since it could not be loaded back.
    in_memory: bool,
    _reservation: Reservation,
}

/// Loads parameters on first use and keeps them (see the module docs).
pub struct ParamCache {
    dir: PathBuf,
    opts: LoadOptions,
    budget: Arc<Ledger>,
    loaded: Mutex<HashMap<PathBuf, Resident>>,
    /// The inner-product SRS (non-interactive PoRep), loaded on first use and kept;
    /// charged to the budget like parameters, never evicted (tens of MB).
    ipp: Mutex<Option<(Arc<IppSrs>, Reservation)>>,
    /// One lock per file, held while that file loads, so that the map lock is never
    /// held through a load that takes minutes (hits, status and eviction go on
    /// meanwhile) and a file is loaded once however many jobs ask for it. Per file,
    /// not one for all: a WinningPoSt whose parameters are not resident must not wait
    /// for a 32GiB PoRep set to load and its circuit to record (a minute or more).
    loading: Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>,
    /// Run after parameters are evicted: what other caches keyed by them (the
    /// recorded circuits) hold for the evicted set is freed at once, not lazily.
    on_evict: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// Run after a set is loaded (the backend prefetches it to its devices).
    on_load: std::sync::OnceLock<LoadHook>,
    /// Run as a set starts to load, with its file's header: what it starts runs
    /// beside the load and is finished before the key is handed out (the circuit's
    /// recording, made or read while the points load).
    on_loading: std::sync::OnceLock<LoadingHook>,
    /// Run as a set made in memory is inserted: what the loading hook does beside a
    /// load, started on a thread of its own (the recording cache makes the set's
    /// partitions wait for it).
    on_insert: std::sync::OnceLock<InsertHook>,
    /// Checks every file against Filecoin's published digests before it is read.
    digests: Arc<DigestChecker>,
}

/// What [`ParamCache::set_on_load`] keeps.
type LoadHook = Box<dyn Fn(&Arc<ProvingKey>) + Send + Sync>;

/// Work a [`LoadingHook`] started beside a load, finished with the loaded key.
pub type BesideLoad = Box<dyn FnOnce(&Arc<ProvingKey>) + Send>;

/// What [`ParamCache::set_on_insert`] keeps.
type InsertHook = Box<dyn Fn(CircuitId, &Arc<ProvingKey>) + Send + Sync>;

/// What [`ParamCache::set_on_loading`] keeps.
type LoadingHook = Box<dyn Fn(CircuitId, cuzk_srs::KeyHeader) -> Option<BesideLoad> + Send + Sync>;

impl ParamCache {
    /// A cache reading from `dir`, charging `budget` for what it keeps, checking
    /// files against Filecoin's published digests ([`ParamCache::with_digests`] to
    /// choose otherwise).
    pub fn new(dir: PathBuf, opts: LoadOptions, budget: Arc<Ledger>) -> Self {
        ParamCache {
            dir,
            opts,
            budget,
            loaded: Mutex::new(HashMap::new()),
            ipp: Mutex::new(None),
            loading: Mutex::new(HashMap::new()),
            on_evict: std::sync::OnceLock::new(),
            on_load: std::sync::OnceLock::new(),
            on_loading: std::sync::OnceLock::new(),
            on_insert: std::sync::OnceLock::new(),
            digests: Arc::new(DigestChecker::filecoin(true)),
        }
    }

    /// The same cache checking files with `digests` (`[srs] check_digests`; tests
    /// register files of their own).
    pub fn with_digests(mut self, digests: Arc<DigestChecker>) -> Self {
        self.digests = digests;
        self
    }

    /// What checks the files' digests, and what it found for each file.
    pub fn digests(&self) -> &Arc<DigestChecker> {
        &self.digests
    }

    /// Sets the hook run after each load (once; later calls are ignored). It runs on
    /// the loading thread, before the caller gets the key: keep it short.
    pub fn set_on_load(&self, f: impl Fn(&Arc<ProvingKey>) + Send + Sync + 'static) {
        let _ = self.on_load.set(Box::new(f));
    }

    /// Sets the hook run as a file starts to load (once; later calls are ignored),
    /// with the file's header ([`ProvingKey::read_header`]): it starts work on a
    /// thread of its own and returns how to finish it with the key, which the
    /// loading thread does before anyone gets the key. A load then takes the longer
    /// of the two, not their sum.
    pub fn set_on_loading(
        &self,
        f: impl Fn(CircuitId, cuzk_srs::KeyHeader) -> Option<BesideLoad> + Send + Sync + 'static,
    ) {
        let _ = self.on_loading.set(Box::new(f));
    }

    /// Sets the hook run as a set made in memory is inserted (once; later calls are
    /// ignored), before the key is in the cache; it must return at once.
    pub fn set_on_insert(&self, f: impl Fn(CircuitId, &Arc<ProvingKey>) + Send + Sync + 'static) {
        let _ = self.on_insert.set(Box::new(f));
    }

    /// Sets the hook run after evictions (once; later calls are ignored).
    pub fn set_on_evict(&self, f: impl Fn() + Send + Sync + 'static) {
        let _ = self.on_evict.set(Box::new(f));
    }

    fn evicted(&self) {
        if let Some(f) = self.on_evict.get() {
            f();
        }
    }

    /// Loads `proofs` one after another on a thread of its own, so the engine serves
    /// jobs while they load; a failure is logged and the next one is tried.
    ///
    /// # Errors
    /// When the thread cannot be started.
    pub fn preload(self: &Arc<Self>, proofs: Vec<CircuitId>) -> std::io::Result<()> {
        if proofs.is_empty() {
            return Ok(());
        }
        let cache = self.clone();
        std::thread::Builder::new().name("cuzk-preload".into()).spawn(move || {
            for proof in proofs {
                if let Err(e) = cache.get(proof) {
                    warn!(circuit = %proof, error = %e, "preloading parameters failed");
                }
            }
        })?;
        Ok(())
    }

    /// The directory parameters are read from.
    pub fn dir(&self) -> &PathBuf {
        &self.dir
    }

    /// What is resident: proof type, bytes, and how many holders besides the cache
    /// (jobs using it).
    pub fn resident(&self) -> Vec<(CircuitId, u64, usize)> {
        self.lock().values().map(|r| (r.proof, r.bytes, Arc::strong_count(&r.key) - 1)).collect()
    }

    /// Whether `proof`'s parameter file is resident (proof types that share a file,
    /// like v1.1 and its synthetic-PoRep variant, share the answer).
    pub fn is_resident(&self, proof: impl Into<CircuitId>) -> bool {
        parameter_files(&self.dir, proof).is_ok_and(|(path, _)| self.lock().contains_key(&path))
    }

    /// Drops `proof`'s parameters from the cache and returns their bytes to the
    /// budget: `Ok(Some(bytes))`, `Ok(None)` if they were not resident.
    ///
    /// # Errors
    /// When jobs are using them (the memory would still be in use, so the budget
    /// must not get it back): the message says how many.
    pub fn evict(&self, proof: impl Into<CircuitId>) -> Result<Option<u64>, String> {
        let proof = proof.into();
        let (path, _) = parameter_files(&self.dir, proof).map_err(|e| e.to_string())?;
        let mut map = self.lock();
        let Some(r) = map.get(&path) else { return Ok(None) };
        let users = Arc::strong_count(&r.key) - 1;
        if users > 0 {
            return Err(format!("{proof} parameters are in use by {users} job(s); evict them when idle"));
        }
        let freed = map.remove(&path).map(|r| r.bytes);
        drop(map);
        self.evicted();
        Ok(freed)
    }

    /// Bytes of parameters resident now (the inner-product SRS included).
    pub fn resident_bytes(&self) -> u64 {
        let ipp = self.ipp.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map_or(0, |(_, r)| r.bytes());
        self.lock().values().map(|r| r.bytes).sum::<u64>() + ipp
    }

    /// Reserves `bytes` from the host budget for something the cache will keep,
    /// evicting idle parameters to make room and otherwise waiting for partitions
    /// to free memory.
    fn reserve_room(&self, bytes: u64, class: Class) -> Result<Reservation, StageError> {
        Ok(loop {
            match self.budget.reserve_as(bytes, class)? {
                Grant::Now(r) => break r,
                // Withdraw the request (dropping the receiver) and make room if we can.
                Grant::Later(_) if Self::evict_one_idle(&mut self.lock()) => {
                    self.evicted();
                    continue;
                }
                Grant::Later(mut rx) => {
                    // Wait for partitions to free memory, evicting parameters that
                    // become idle meanwhile (they would otherwise hold it forever).
                    warn!(bytes, "waiting for host memory to load parameters");
                    break loop {
                        match rx.try_recv() {
                            Ok(r) => break r,
                            Err(tokio::sync::oneshot::error::TryRecvError::Closed) => {
                                return Err(StageError::msg("host budget closed"))
                            }
                            Err(tokio::sync::oneshot::error::TryRecvError::Empty) => {}
                        }
                        if Self::evict_one_idle(&mut self.lock()) {
                            self.evicted();
                        }
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    };
                }
            }
        })
    }

    /// The inner-product SRS that non-interactive PoRep aggregates with, loading it
    /// on first use (`v28-fil-inner-product-v1.srs` in the cache directory).
    ///
    /// # Errors
    /// When the file is missing or malformed (the error names it), or when the host
    /// budget cannot hold it.
    pub fn ipp_srs(&self) -> Result<Arc<IppSrs>, StageError> {
        let resident = || self.ipp.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|(s, _)| s.clone());
        if let Some(srs) = resident() {
            return Ok(srs);
        }
        let path = ipp_srs_file(&self.dir);
        let lock = self.load_lock(&path);
        let _loading = lock.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(srs) = resident() {
            return Ok(srs);
        }
        let t = Instant::now();
        let checked = self.digests.check(&path).map_err(StageError::failed)?;
        // Reserved before anything is read (the sizes come from the file's headers):
        // what the SRS keeps, and the compact copy that exists while it loads.
        let (kept, transient) = ipp_srs_load_bytes(&path).map_err(StageError::failed)?;
        let reservation = self.reserve_room(kept, Class::Bulk)?;
        let loading = self.reserve_room(transient, Class::Bulk)?;
        let srs = load_ipp_srs(&path).map_err(StageError::failed)?;
        self.digests.unchanged(&path, &checked).map_err(StageError::failed)?;
        drop(loading);
        let bytes = ipp_srs_bytes(&srs);
        info!(file = %path.display(), ms = t.elapsed().as_millis() as u64, bytes, "inner-product SRS loaded");
        let srs = Arc::new(srs);
        *self.ipp.lock().unwrap_or_else(|e| e.into_inner()) = Some((srs.clone(), reservation));
        Ok(srs)
    }

    /// The resident key for `path`, marked as used now.
    fn hit(&self, path: &PathBuf) -> Option<Arc<ProvingKey>> {
        self.lock().get_mut(path).map(|r| {
            r.last_used = Instant::now();
            r.key.clone()
        })
    }

    /// The lock that loading `path` holds.
    fn load_lock(&self, path: &Path) -> Arc<Mutex<()>> {
        let mut locks = self.loading.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(path.to_path_buf()).or_default().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Resident>> {
        self.loaded.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drops the least recently used parameters no job holds; whether one was dropped.
    fn evict_one_idle(map: &mut HashMap<PathBuf, Resident>) -> bool {
        let idle = map
            .iter()
            .filter(|(_, r)| Arc::strong_count(&r.key) == 1 && !r.in_memory)
            .min_by_key(|(_, r)| r.last_used)
            .map(|(p, _)| p.clone());
        match idle {
            Some(p) => {
                info!(file = %p.display(), "evicting idle parameters to make room");
                map.remove(&p);
                true
            }
            None => false,
        }
    }

    /// The parameters of `proof`, loading them if needed. Blocks while the host budget
    /// has no room (it is freed as partitions finish); runs on a worker thread.
    ///
    /// # Errors
    /// When the file is missing (the error names the expected path and how to get
    /// it), invalid, or larger than the whole host budget.
    pub fn get(&self, proof: impl Into<CircuitId>) -> Result<Arc<ProvingKey>, StageError> {
        self.get_as(proof, Class::Bulk)
    }

    /// [`ParamCache::get`] for work of `class`: a deadline job's parameters
    /// ([`Class::Urgent`]) may use the budget's deadline reserve and are granted
    /// room before bulk work that waits for it (a PoRep partition, another set).
    ///
    /// # Errors
    /// As [`ParamCache::get`].
    pub fn get_as(&self, proof: impl Into<CircuitId>, class: Class) -> Result<Arc<ProvingKey>, StageError> {
        let proof = proof.into();
        let (path, vk) = parameter_files(&self.dir, proof).map_err(StageError::failed)?;
        if let Some(k) = self.hit(&path) {
            return Ok(k);
        }
        let lock = self.load_lock(&path);
        let _loading = lock.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = self.hit(&path) {
            // Loaded by another worker while this one waited.
            return Ok(k);
        }
        let bytes = match std::fs::metadata(&path) {
            // Decoded points take as many bytes as their uncompressed encoding.
            Ok(m) => m.len(),
            Err(_) => {
                return Err(StageError::msg(format!(
                    "parameters for {proof} not found: expected {} (set ingest.param_cache or \
                     FIL_PROOFS_PARAMETER_CACHE; test parameters: `cuzk srs gen --{} <size> --cache {}`)",
                    path.display(),
                    match proof {
                        CircuitId::Seal(_) => "porep",
                        CircuitId::PoSt(p) if cuzk_filecoin::post::is_winning(p) => "winning-post",
                        CircuitId::PoSt(_) => "window-post",
                        CircuitId::Update(_) => "snap-deals",
                    },
                    self.dir.display()
                )))
            }
        };
        // The digests before anything is reserved or read: the `.params` proved with
        // and self-verified against, and the `.vk` filecoin-proofs' verifiers read.
        let checked = self.digests.check(&path).map_err(StageError::failed)?;
        if vk.exists() {
            self.digests.check(&vk).map_err(StageError::failed)?;
        }
        let reservation = self.reserve_room(bytes, class)?;
        let t = Instant::now();
        // A header that does not read is left to the load to report.
        let beside = match (self.on_loading.get(), ProvingKey::read_header(&path)) {
            (Some(f), Ok(header)) => f(proof, header),
            _ => None,
        };
        let key = Arc::new(ProvingKey::load(&path, self.opts).map_err(StageError::failed)?);
        self.digests.unchanged(&path, &checked).map_err(StageError::failed)?;
        info!(file = %path.display(), ms = t.elapsed().as_millis() as u64, bytes = key.heap_bytes(), "parameters loaded");
        let resident = Resident {
            proof,
            key: key.clone(),
            bytes,
            last_used: Instant::now(),
            in_memory: false,
            _reservation: reservation,
        };
        if let Some(f) = self.on_load.get() {
            f(&key);
        }
        // Before the key is in the map: a job that finds it there finds its
        // recording too, and does not start another.
        if let Some(finish) = beside {
            finish(&key);
        }
        self.lock().insert(path, resident);
        Ok(key)
    }

    /// Makes `key` the parameters of `proof` without a file: what a benchmark does
    /// with TEST-ONLY timing parameters generated in memory (`cuzk_srs::generate_timing`;
    /// the host that times a 32GiB PoRep has no disk room for a 47 GiB file). Charged
    /// to the host budget like a load, never evicted to make room (only by
    /// [`ParamCache::evict`]), and handed to the load hook (device prefetch).
    ///
    /// # Errors
    /// When `proof` already has resident parameters, or the budget cannot hold these.
    pub fn insert(&self, proof: impl Into<CircuitId>, key: Arc<ProvingKey>) -> Result<(), StageError> {
        let proof = proof.into();
        let (path, _) = parameter_files(&self.dir, proof).map_err(StageError::failed)?;
        let lock = self.load_lock(&path);
        let _loading = lock.lock().unwrap_or_else(|e| e.into_inner());
        if self.lock().contains_key(&path) {
            return Err(StageError::msg(format!("{proof} already has resident parameters ({})", path.display())));
        }
        let bytes = key.heap_bytes();
        let reservation = self.reserve_room(bytes, Class::Bulk)?;
        // Before the key is in the map, as with a load: a job that finds the key
        // finds its recording under way.
        if let Some(f) = self.on_insert.get() {
            f(proof, &key);
        }
        let resident = Resident {
            proof,
            key: key.clone(),
            bytes,
            last_used: Instant::now(),
            in_memory: true,
            _reservation: reservation,
        };
        self.lock().insert(path, resident);
        info!(circuit = %proof, bytes, "parameters inserted in memory");
        if let Some(f) = self.on_load.get() {
            f(&key);
        }
        Ok(())
    }
}

impl ParameterSource for ParamCache {
    fn params(&self, circuit: CircuitId, urgent: bool) -> Result<Arc<ProvingKey>, StageError> {
        self.get_as(circuit, if urgent { Class::Urgent } else { Class::Bulk })
    }
    fn ipp_srs(&self) -> Result<Arc<IppSrs>, StageError> {
        ParamCache::ipp_srs(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuzk_filecoin::RegisteredSealProof;
    use cuzk_synth::{SyntheticCircuit, SyntheticSpec};
    use rand::SeedableRng;

    fn write_key(dir: &std::path::Path, proof: RegisteredSealProof, constraints: usize) -> u64 {
        let spec = SyntheticSpec { constraints, public_inputs: 1, a_density: 1.0, b_density: 1.0 };
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        let key = cuzk_srs::generate_random(SyntheticCircuit::new(spec, 0).unwrap(), &mut rng).unwrap();
        let (path, _) = parameter_files(dir, proof).unwrap();
        key.write(&path).unwrap();
        // Test parameters under Filecoin's names.
        cuzk_filecoin::digest::mark_generated(&path).unwrap();
        std::fs::metadata(&path).unwrap().len()
    }

    #[test]
    fn charged_to_the_budget_and_idle_ones_evicted() {
        let dir = std::env::temp_dir().join(format!("cuzk-params-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = RegisteredSealProof::StackedDrg2KiBV1_1;
        let b = RegisteredSealProof::StackedDrg8MiBV1_1;
        let (sa, sb) = (write_key(&dir, a, 300), write_key(&dir, b, 400));
        // Room for one set at a time.
        let ledger = Ledger::new("host", sa.max(sb) + sa.min(sb) / 2);
        let cache = ParamCache::new(dir.clone(), LoadOptions::default(), ledger.clone());
        let evictions = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let n = evictions.clone();
        cache.set_on_evict(move || {
            n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        let evicted = || evictions.load(std::sync::atomic::Ordering::Relaxed);

        let ka = cache.get(a).unwrap();
        assert_eq!(ledger.snapshot().used, sa);
        assert!(Arc::ptr_eq(&ka, &cache.get(a).unwrap()), "second get is the resident copy");
        drop(ka);
        // a is idle: loading b evicts it.
        let kb = cache.get(b).unwrap();
        assert_eq!(ledger.snapshot().used, sb);
        assert_eq!(evicted(), 1, "the eviction hook runs (recordings keyed by `a` go now)");
        // b is in use: a waits until b goes idle, then b is evicted.
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            drop(kb);
        });
        let ka = cache.get(a).unwrap();
        t.join().unwrap();
        assert_eq!(ledger.snapshot().used, sa);
        assert_eq!(cache.resident_bytes(), sa, "resident bytes are what the budget was charged");
        // Explicit eviction: refused while a job holds the key, then the bytes return.
        let e = cache.evict(a).unwrap_err();
        assert!(e.contains("in use by 1 job"), "{e}");
        drop(ka);
        assert_eq!(cache.evict(a).unwrap(), Some(sa));
        assert_eq!(ledger.snapshot().used, 0);
        assert_eq!(evicted(), 3, "idle eviction of b, then the explicit one");
        assert_eq!(cache.evict(a).unwrap(), None);
        // Larger than the whole budget: an error, at once.
        let small = ParamCache::new(dir.clone(), LoadOptions::default(), Ledger::new("host", 10));
        let e = small.get(a).unwrap_err().to_string();
        assert!(e.contains("whole host budget"), "{e}");
        // Missing: the error names the file.
        let e = cache.get(RegisteredSealProof::StackedDrg512MiBV1_1).unwrap_err().to_string();
        assert!(e.contains("not found") && e.contains(".params"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Parameters, their verifying key and the SRS are loaded only when their digest
    /// is the one the manifest publishes; a substituted file (valid, loads without
    /// the check) is refused with an error naming it; unknown files load unchecked.
    #[test]
    fn files_are_checked_against_the_published_digests() {
        use cuzk_filecoin::{digest::file_digest, DigestStatus, Manifest};
        let dir = std::env::temp_dir().join(format!("cuzk-params-digest-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let p = RegisteredSealProof::StackedDrg2KiBV1_1;
        let (params, vk) = parameter_files(&dir, p).unwrap();
        let name = |f: &std::path::Path| f.file_name().unwrap().to_str().unwrap().to_string();
        let published = |f: &std::path::Path| file_digest(f).unwrap()[..32].to_string();
        write_key(&dir, p, 300);
        std::fs::write(&vk, b"the published verifying key").unwrap();
        let srs = ipp_srs_file(&dir);
        cuzk_filecoin::write_fake_ipp_srs(&srs, 4, 1).unwrap();
        let mut m = Manifest::new();
        for f in [&params, &vk, &srs] {
            m.insert(name(f), published(f));
            // These play Filecoin's published files: not marked as generated (a
            // marked file is test parameters, whatever its digest).
            let _ = std::fs::remove_file(cuzk_filecoin::digest::sidecar_path(f));
        }
        let cache_with = |m: &Manifest| {
            ParamCache::new(dir.clone(), LoadOptions::default(), Ledger::new("host", 1 << 30))
                .with_digests(Arc::new(DigestChecker::with_manifest(m.clone(), true)))
        };
        let cache = cache_with(&m);
        cache.get(p).unwrap();
        cache.ipp_srs().unwrap();
        let mut seen = cache.digests().outcomes();
        seen.sort();
        let mut want = vec![
            (params.clone(), DigestStatus::Checked),
            (vk.clone(), DigestStatus::Checked),
            (srs.clone(), DigestStatus::Checked),
        ];
        want.sort();
        assert_eq!(seen, want);

        // Other parameters of the same circuit under the same name: a valid file that
        // loads, but not the published one.
        let spec = SyntheticSpec { constraints: 300, public_inputs: 1, a_density: 1.0, b_density: 1.0 };
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(2);
        let other = cuzk_srs::generate_random(SyntheticCircuit::new(spec, 0).unwrap(), &mut rng).unwrap();
        other.write(&params).unwrap();
        let e = cache_with(&m).get(p).unwrap_err().to_string();
        assert!(e.contains("digest mismatch") && e.contains(&name(&params)), "{e}");
        assert!(e.contains(m.expected(&name(&params)).unwrap()) && e.contains(&published(&params)), "{e}");
        // The unchecked cache loads it: the check is what refused it.
        let unchecked = ParamCache::new(dir.clone(), LoadOptions::default(), Ledger::new("host", 1 << 30))
            .with_digests(Arc::new(DigestChecker::with_manifest(m.clone(), false)));
        unchecked.get(p).unwrap();
        m.insert(name(&params), published(&params));

        // A wrong verifying key beside good parameters: refused too.
        std::fs::write(&vk, b"another verifying key").unwrap();
        let e = cache_with(&m).get(p).unwrap_err().to_string();
        assert!(e.contains("digest mismatch") && e.contains(&name(&vk)), "{e}");
        std::fs::write(&vk, b"the published verifying key").unwrap();

        // Another SRS under the SRS's name (copied there: not marked as generated).
        let other_srs = dir.join("other.srs");
        cuzk_filecoin::write_fake_ipp_srs(&other_srs, 4, 2).unwrap();
        std::fs::copy(&other_srs, &srs).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&srs).unwrap();
        f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000)).unwrap();
        drop(f);
        let e = cache_with(&m).ipp_srs().unwrap_err().to_string();
        assert!(e.contains("digest mismatch") && e.contains(cuzk_filecoin::IPP_SRS_FILE), "{e}");
        unchecked.ipp_srs().unwrap();

        // Test parameters (names not in the manifest): loaded, reported unknown.
        let cache = cache_with(&Manifest::new());
        cache.get(p).unwrap();
        assert!(cache.digests().outcomes().iter().all(|(_, s)| *s == DigestStatus::Unknown));
        assert_eq!(cache.digests().hashed(), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `f` on a thread of its own, its result; a failure rather than a hang when it
    /// does not return (what a lock shared by every load would do below).
    fn returns<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(f()));
        rx.recv_timeout(std::time::Duration::from_secs(120)).unwrap_or_else(|_| panic!("{what} never returned"))
    }

    /// A load holds only its own file: while one set is loading (here held there by
    /// the loading hook, as a 32GiB load and its recording hold it for a minute or
    /// more), another set loads and is served, and a second job asking for the
    /// loading set waits for that load and gets the same key, loaded once.
    #[test]
    fn a_load_does_not_hold_other_files() {
        let dir = std::env::temp_dir().join(format!("cuzk-params-locks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let slow = RegisteredSealProof::StackedDrg8MiBV1_1;
        let fast = RegisteredSealProof::StackedDrg2KiBV1_1;
        write_key(&dir, slow, 400);
        write_key(&dir, fast, 300);
        let cache = Arc::new(ParamCache::new(dir.clone(), LoadOptions::default(), Ledger::new("host", 1 << 30)));
        let (started_tx, started) = std::sync::mpsc::channel();
        let (release, release_rx) = std::sync::mpsc::channel::<()>();
        let release_rx = Mutex::new(release_rx);
        let loads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let n = loads.clone();
        cache.set_on_loading(move |proof, _| {
            n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if proof == CircuitId::Seal(slow) {
                started_tx.send(()).unwrap();
                release_rx.lock().unwrap().recv().unwrap();
            }
            None
        });
        let c = cache.clone();
        let first = std::thread::spawn(move || c.get(slow).unwrap());
        started.recv().unwrap();
        // The slow set is mid-load: another set loads meanwhile.
        let c = cache.clone();
        let k = returns("loading another set while one loads", move || c.get(fast).unwrap());
        assert_eq!(k.vk.ic.len(), 2);
        assert!(cache.is_resident(fast) && !cache.is_resident(slow));
        // A second job for the slow set waits for its load, not a load of its own.
        let c = cache.clone();
        let second = std::thread::spawn(move || c.get(slow).unwrap());
        release.send(()).unwrap();
        let (a, b) = (first.join().unwrap(), second.join().unwrap());
        assert!(Arc::ptr_eq(&a, &b), "the same key");
        assert_eq!(loads.load(std::sync::atomic::Ordering::Relaxed), 2, "each file loaded once");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A deadline job's parameters are room the budget grants first: with a bulk
    /// request waiting for room ahead of it and only the deadline reserve free, an
    /// urgent load goes through at once; a bulk one would queue behind the waiter.
    #[test]
    fn a_deadline_jobs_parameters_go_ahead_of_bulk_waiters() {
        let dir = std::env::temp_dir().join(format!("cuzk-params-urgent-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = RegisteredSealProof::StackedDrg2KiBV1_1;
        let size = write_key(&dir, p, 300);
        // Capacity 10·size, of which 2·size kept for deadline work.
        let ledger = Ledger::with_reserve("host", 10 * size, 2 * size);
        let cache = Arc::new(ParamCache::new(dir.clone(), LoadOptions::default(), ledger.clone()));
        let Grant::Now(held) = ledger.reserve(7 * size).unwrap() else { panic!("room for the held partition") };
        // A bulk request that does not fit the bulk share waits, first in line.
        let Grant::Later(waiter) = ledger.reserve(2 * size).unwrap() else { panic!("the bulk request must wait") };
        let c = cache.clone();
        let key = returns("an urgent load with bulk work waiting", move || c.get_as(p, Class::Urgent).unwrap());
        assert_eq!(ledger.snapshot().used, 8 * size, "charged: the partition and the parameters");
        assert!(cache.is_resident(p));
        // The bulk waiter is still waiting; it gets its room when the partition goes.
        drop(held);
        let _room = returns("the bulk waiter", move || waiter.blocking_recv().unwrap());
        drop(key);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn inserted_in_memory_without_a_file() {
        let dir = std::env::temp_dir().join(format!("cuzk-params-mem-{}", std::process::id()));
        let p = RegisteredSealProof::StackedDrg2KiBV1_1;
        let shape = cuzk_core::CircuitShape { constraints: 500, inputs: 3, aux: 480, a_query: 400, b_query: 50 };
        let key = Arc::new(cuzk_srs::generate_timing(&shape, 1));
        let bytes = key.heap_bytes();
        let ledger = Ledger::new("host", bytes * 2);
        let cache = ParamCache::new(dir.clone(), LoadOptions::default(), ledger.clone());
        cache.insert(p, key.clone()).unwrap();
        assert_eq!(ledger.snapshot().used, bytes, "charged to the host budget");
        assert!(Arc::ptr_eq(&cache.get(p).unwrap(), &key), "served without a file");
        assert!(cache.is_resident(p));
        let e = cache.insert(p, key.clone()).unwrap_err().to_string();
        assert!(e.contains("already has resident parameters"), "{e}");
        assert!(!ParamCache::evict_one_idle(&mut cache.lock()), "never evicted to make room: no file to reload");
        drop(key);
        assert_eq!(cache.evict(p).unwrap(), Some(bytes));
        assert_eq!(ledger.snapshot().used, 0);
        let e = cache.get(p).unwrap_err().to_string();
        assert!(e.contains("not found"), "{e}");
        // Larger than the whole budget: refused at once.
        let small = ParamCache::new(dir, LoadOptions::default(), Ledger::new("host", 10));
        assert!(small.insert(p, Arc::new(cuzk_srs::generate_timing(&shape, 1))).is_err());
    }
}
