//! Recorded circuit structures ([`Precompiled`]), one per parameter set, shared by
//! the Synthesize workers.
//!
//! A Groth16 proving key fixes the constraint matrices, so all partitions proved with
//! one key share one recording. The first partition of a key that asks for it
//! ([`ErasedCircuit::precompile`](crate::ground::ErasedCircuit::precompile)) records
//! while it synthesizes; partitions that arrive meanwhile synthesize the plain way
//! (nobody waits); later ones compute only their witness. A recording lives as long
//! as its key: slots are keyed by the key's address and dropped when the key is.
//! Its bytes are reserved from the host budget before recording (an estimate from
//! the domain size, trimmed to the real size after); when the budget has no room,
//! that key's partitions synthesize the plain way and try again 10 s later.
//!
//! With a directory set (`synthesize.recording_dir`, default the parameter cache),
//! a finished recording is also saved there, named by its key's identity (a hash
//! of the verifying key and the parameter sizes), and a new process loads it when
//! it first sees the key, so its first partitions are pre-compiled too. A file
//! that is damaged or belongs to other parameters is refused with a warning and
//! recorded again (`cuzk_synth::Precompiled::read_from` checks it).
//!
//! A recording is checked against its parameters before it is kept or saved, and
//! again when it is loaded: the sizes a Groth16 parameter set fixes (inputs, aux
//! variables, the A and B query sizes, the domain the constraints need;
//! `ProvingKey::check_shape`) must be the recorded circuit's. A circuit built from a
//! malformed input that does not fit them is refused (the partition fails with the
//! sizes; nothing is kept, and a later partition records again), so it cannot
//! become the recording every later job of the key would use; a saved file that
//! does not fit them is deleted and recorded again.
//!
//! A recording is also made before any partition needs it: when a parameter file
//! starts to load (`ParamCache::set_on_loading`, wired in `topology.rs`), its saved
//! recording is read, or else the circuit's blank instance is recorded
//! (`cuzk_synth::record_blank`: a Groth16 circuit's structure does not depend on its
//! witness), on a thread beside the load; the key is handed out with its recording
//! ready ([`RecordingCache::prepare`], [`RecordingCache::adopt`]). At 32GiB that
//! takes the recording (a minute or more) or the read (seconds) off the first
//! proof's critical path after the parameters'.

use std::{
    path::PathBuf,
    sync::{Arc, Mutex, Weak},
    time::{Duration, Instant},
};

use cuzk_filecoin::CircuitId;
use cuzk_srs::{KeyHeader, ProvingKey};
use cuzk_synth::{Precompiled, RecordHint};
use tracing::{info, warn};

use crate::{
    budget::{Ledger, Reservation},
    ground::{Plan, RecordingStore, StageError},
};

enum State {
    /// The recording is being read (by the worker that first saw the key) or made
    /// (beside an inserted key, [`RecordingCache::prepare_inserted`]); the gate opens
    /// once the state is set, and workers of the same key wait on it, not on the
    /// cache's lock (other keys never wait).
    Loading(Arc<Gate>),
    /// One partition is recording; `Reservation` holds the estimate.
    Recording(Reservation),
    Ready(Arc<Precompiled>, #[allow(dead_code)] Reservation),
    /// No budget room for a recording: plain synthesis until `Instant`, then retry.
    Backoff(Instant),
    /// Not recordable (too large for the compact encoding).
    Off,
}

/// Opens once; waiters block until then.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    cv: std::sync::Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        while !*open {
            open = self.cv.wait(open).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Opens its gate when dropped, after the slot's state is set or if its holder
/// panicked (the waiters then find the state still `Loading` and record instead).
struct Opener(Arc<Gate>);

impl Drop for Opener {
    fn drop(&mut self) {
        *self.0.open.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.0.cv.notify_all();
    }
}

struct Slot {
    key: Weak<ProvingKey>,
    /// The key's identity, naming its recording file.
    id: [u8; 32],
    state: State,
}

/// How long a key stays on plain synthesis after the budget had no room to record.
const BACKOFF: Duration = Duration::from_secs(10);

/// Upper estimate of a recording's bytes for `key`, reserved before recording:
/// 64 bytes per domain element. Measured on 2KiB PoRep: 5.6 entries of 8 bytes and
/// 3 row ends of 4 bytes per constraint, 57 bytes per constraint; its domain is
/// 1.56x its constraints, so the estimate is about 1.7x the real size.
fn estimate(key: &ProvingKey) -> u64 {
    recording_estimate(key.domain_size() as u64)
}

/// [`estimate`] for a domain of `domain_size` elements (sizing, before parameters exist).
pub fn recording_estimate(domain_size: u64) -> u64 {
    64 * domain_size
}

/// The identity of a parameter set: SHA-256 of its verifying key and sizes. A
/// recording depends only on the circuit, which the parameters are generated for.
fn key_id(key: &ProvingKey) -> [u8; 32] {
    header_id(&key.header())
}

/// [`key_id`] from a parameter file's header, before its points are read.
fn header_id(header: &KeyHeader) -> [u8; 32] {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    let mut vk = Vec::new();
    header.vk.write(&mut vk).expect("writing to a Vec");
    h.update(&vk);
    for n in header.lens {
        h.update((n as u64).to_le_bytes());
    }
    h.finalize().into()
}

/// A recording made or read beside its parameters' load ([`RecordingCache::prepare`]).
pub struct Prepared {
    id: [u8; 32],
    work: std::thread::JoinHandle<Option<(Precompiled, Reservation, bool)>>,
}

/// The recordings (see the module docs).
pub struct RecordingCache {
    enabled: bool,
    budget: Arc<Ledger>,
    slots: Mutex<Vec<Slot>>,
    /// Where recordings are saved and loaded; `None` = kept in memory only.
    dir: Option<PathBuf>,
    /// Tests: workers that have waited for a saved recording's read, and a hook run
    /// inside every read.
    #[cfg(test)]
    waiting: std::sync::atomic::AtomicUsize,
    #[cfg(test)]
    on_read: Option<Box<dyn Fn() + Send + Sync>>,
}

impl RecordingCache {
    pub fn new(enabled: bool, budget: Arc<Ledger>) -> Self {
        RecordingCache {
            enabled,
            budget,
            slots: Mutex::new(Vec::new()),
            dir: None,
            #[cfg(test)]
            waiting: Default::default(),
            #[cfg(test)]
            on_read: None,
        }
    }

    /// Saves recordings in `dir` and loads them from it.
    pub fn with_dir(mut self, dir: PathBuf) -> Self {
        self.dir = Some(dir);
        self
    }

    fn path(dir: &std::path::Path, id: &[u8; 32]) -> PathBuf {
        let hex: String = id[..8].iter().map(|b| format!("{b:02x}")).collect();
        dir.join(format!("cuzk-recording-{hex}.bin"))
    }

    /// The saved recording of `id`, read (its bytes reserved) when there is one and
    /// the budget has room for it.
    fn read_file(&self, id: &[u8; 32]) -> Option<(PathBuf, std::io::Result<Precompiled>, Reservation)> {
        let path = Self::path(self.dir.as_ref()?, id);
        let len = std::fs::metadata(&path).ok()?.len();
        #[cfg(test)]
        if let Some(hook) = &self.on_read {
            hook();
        }
        let Some(r) = self.budget.try_reserve(len) else {
            warn!(path = %path.display(), bytes = len, "no host-budget room to load the saved circuit recording");
            return None;
        };
        let read = std::fs::File::open(&path).and_then(|f| Precompiled::read_from(f, id));
        let mut r = r;
        if let Ok(pre) = &read {
            r.shrink_to((pre.heap_bytes() as u64).min(len));
        }
        Some((path, read, r))
    }

    /// The saved recording of `key` (identity `id`), charged to the budget; `None`
    /// (with a warning when a file was there) when there is none, no room, or it is
    /// refused. A file whose sizes do not match `key` is deleted.
    fn load(&self, key: &ProvingKey, id: &[u8; 32]) -> Option<State> {
        let t = Instant::now();
        let (path, read, r) = self.read_file(id)?;
        // Sound as a file, but not the circuit of these parameters: every partition
        // using it would fail.
        if let Some(Err(e)) = read.as_ref().ok().map(|pre| key.check_shape(&pre.shape())) {
            warn!(
                path = %path.display(),
                error = %e,
                "saved circuit recording does not match its parameters; deleted, recording again"
            );
            let _ = std::fs::remove_file(&path);
            return None;
        }
        match read {
            Ok(pre) => {
                info!(
                    path = %path.display(),
                    constraints = pre.constraints(),
                    ms = t.elapsed().as_millis() as u64,
                    "circuit recording loaded; partitions compute only their witness"
                );
                Some(State::Ready(Arc::new(pre), r))
            }
            Err(e) => {
                warn!(path = %path.display(), error = %e, "saved circuit recording refused; recording again");
                None
            }
        }
    }

    /// Saves `pre` for `id` in the background (to a temporary name, then renamed,
    /// so a reader never sees half a file). Only called after recording, which
    /// happens only when no valid file was loaded: a refused (damaged) file is
    /// replaced.
    fn save(&self, id: [u8; 32], pre: Arc<Precompiled>) {
        let Some(dir) = self.dir.clone() else { return };
        let path = Self::path(&dir, &id);
        let spawned = std::thread::Builder::new().name("cuzk-save-recording".into()).spawn(move || {
            let tmp = path.with_extension(format!("tmp{}", std::process::id()));
            let r = std::fs::create_dir_all(&dir)
                .and_then(|_| std::fs::File::create(&tmp))
                .and_then(|f| pre.write_to(f, &id))
                .and_then(|_| std::fs::rename(&tmp, &path));
            match r {
                Ok(()) => info!(path = %path.display(), "circuit recording saved for later processes"),
                Err(e) => {
                    let _ = std::fs::remove_file(&tmp);
                    warn!(path = %path.display(), error = %e, "could not save the circuit recording");
                }
            }
        });
        if let Err(e) = spawned {
            warn!(error = %e, "could not start saving the circuit recording");
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        // Keys that are gone take their recordings (and reservations) with them; this
        // also keeps a new key at a freed address from matching an old slot.
        slots.retain(|s| s.key.strong_count() > 0);
        slots
    }

    fn find<'a>(slots: &'a mut [Slot], key: &Arc<ProvingKey>) -> Option<&'a mut Slot> {
        slots.iter_mut().find(|s| std::ptr::eq(s.key.as_ptr(), Arc::as_ptr(key)))
    }

    /// What the next partition proved with `key` should do; claims the recording
    /// for the caller (and reserves its estimated bytes) when there is none yet.
    pub fn plan(&self, key: &Arc<ProvingKey>) -> Plan {
        if !self.enabled {
            return Plan::Plain;
        }
        loop {
            let mut slots = self.lock();
            let slot = match Self::find(&mut slots, key) {
                Some(s) => s,
                None => {
                    // First sight of this key: its saved recording, if there is one.
                    // Workers of this key wait for the read (seconds at 32GiB) rather
                    // than synthesize the plain way (tens of seconds); the cache's lock
                    // is not held meanwhile, so no other key's partition (a deadline
                    // job's) waits for a file it does not use.
                    let id = key_id(key);
                    let opener = Opener(Arc::default());
                    slots.push(Slot { key: Arc::downgrade(key), id, state: State::Loading(opener.0.clone()) });
                    drop(slots);
                    let state = self.load(key, &id).unwrap_or(State::Backoff(Instant::now()));
                    self.settle(key, &opener.0, state);
                    continue;
                }
            };
            return match &slot.state {
                State::Loading(gate) => {
                    let gate = gate.clone();
                    drop(slots);
                    #[cfg(test)]
                    self.waiting.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    gate.wait();
                    // Still loading once the gate opened: its holder panicked.
                    self.settle(key, &gate, State::Backoff(Instant::now()));
                    continue;
                }
                State::Ready(p, _) => Plan::Use(p.clone()),
                State::Recording(_) | State::Off => Plan::Plain,
                State::Backoff(until) if Instant::now() < *until => Plan::Plain,
                State::Backoff(_) => match self.budget.try_reserve(estimate(key)) {
                    Some(r) => {
                        slot.state = State::Recording(r);
                        Plan::Record
                    }
                    None => {
                        warn!(bytes = estimate(key), "no host-budget room to record the circuit yet; plain synthesis");
                        slot.state = State::Backoff(Instant::now() + BACKOFF);
                        Plan::Plain
                    }
                },
            };
        }
    }

    /// Sets `key`'s slot to `state` if it is still `Loading` behind `gate`.
    fn settle(&self, key: &Arc<ProvingKey>, gate: &Arc<Gate>, state: State) {
        if let Some(s) = Self::find(&mut self.lock(), key) {
            if matches!(&s.state, State::Loading(g) if Arc::ptr_eq(g, gate)) {
                s.state = state;
            }
        }
    }

    /// The claimed recording finished: keep it (its reservation trimmed to its size,
    /// or grown if the estimate was short and the budget has room) and save it.
    ///
    /// # Errors
    /// Its sizes do not match `key`: it is dropped, not saved, and the next
    /// partition of `key` records again.
    pub fn recorded(&self, key: &Arc<ProvingKey>, pre: Option<Precompiled>) -> Result<(), StageError> {
        let mut slots = self.lock();
        let Some(slot) = Self::find(&mut slots, key) else { return Ok(()) };
        if !matches!(slot.state, State::Recording(_)) {
            return Ok(());
        }
        let State::Recording(mut r) = std::mem::replace(&mut slot.state, State::Off) else { unreachable!() };
        let Some(pre) = pre else {
            warn!("circuit too large to pre-compile; its partitions use plain synthesis");
            return Ok(());
        };
        if let Err(e) = key.check_shape(&pre.shape()) {
            // Not this key's circuit (a malformed input): used by later partitions,
            // it would fail every one of them. Its reservation goes with it.
            slot.state = State::Backoff(Instant::now());
            warn!(error = %e, "circuit recording does not match its parameters; not kept, not saved");
            return Err(StageError::msg(format!("circuit recording refused, not saved: {e}")));
        }
        let bytes = pre.heap_bytes() as u64;
        if !self.fit(&mut r, bytes) {
            warn!(bytes, "no host-budget room for the recorded circuit; plain synthesis for now");
            slot.state = State::Backoff(Instant::now() + BACKOFF);
            return Ok(());
        }
        info!(
            bytes,
            constraints = pre.constraints(),
            nonzeros = pre.nonzeros(),
            "circuit structure recorded; later partitions compute only their witness"
        );
        let pre = Arc::new(pre);
        self.save(slot.id, pre.clone());
        slot.state = State::Ready(pre, r);
        Ok(())
    }

    /// Makes `r` hold `bytes`: trimmed, or grown if the budget has room (false
    /// when it has not).
    fn fit(&self, r: &mut Reservation, bytes: u64) -> bool {
        if bytes <= r.bytes() {
            r.shrink_to(bytes);
        } else if let Some(more) = self.budget.try_reserve(bytes - r.bytes()) {
            r.merge(more);
        } else {
            return false;
        }
        true
    }

    /// The claimed recording failed (the circuit's synthesis did): the next
    /// partition tries again.
    pub fn abandon(&self, key: &Arc<ProvingKey>) {
        if let Some(slot) = Self::find(&mut self.lock(), key) {
            slot.state = State::Backoff(Instant::now());
        }
    }

    /// Starts, on a thread beside the load of `proof`'s parameters (whose file
    /// header is `header`), what their first partitions would otherwise wait for:
    /// reading the saved recording, or recording the circuit's blank instance, its
    /// bytes reserved first. `None` when there is nothing to do: recording is off,
    /// the circuit is not pre-compiled (WinningPoSt), or the budget has no room.
    pub fn prepare(self: &Arc<Self>, proof: CircuitId, header: KeyHeader) -> Option<Prepared> {
        if !self.enabled || matches!(proof, CircuitId::PoSt(p) if cuzk_filecoin::post::is_winning(p)) {
            return None;
        }
        let id = header_id(&header);
        let this = self.clone();
        let work = std::thread::Builder::new()
            .name("cuzk-prepare-recording".into())
            .spawn(move || {
                let t = Instant::now();
                if let Some((path, read, r)) = this.read_file(&id) {
                    match read {
                        Ok(pre) => {
                            info!(path = %path.display(), ms = t.elapsed().as_millis() as u64, "circuit recording read while its parameters load");
                            return Some((pre, r, true));
                        }
                        Err(e) => warn!(path = %path.display(), error = %e, "saved circuit recording refused; recording again"),
                    }
                }
                let estimate = recording_estimate(header.domain_size() as u64);
                let Some(r) = this.budget.try_reserve(estimate) else {
                    warn!(bytes = estimate, "no host-budget room to record the circuit while its parameters load");
                    return None;
                };
                let hint = RecordHint { inputs: header.num_inputs(), aux: header.aux(), max_constraints: header.domain_size() };
                // PoRep: two challenges recorded, checked alike and copied to the rest
                // (seconds where recording every challenge took a minute at 32GiB);
                // a circuit that fails that check is recorded the whole way.
                if let CircuitId::Seal(seal) = proof {
                    match cuzk_filecoin::record_blank_porep(seal, hint) {
                        Ok(Some(pre)) => {
                            info!(%proof, ms = t.elapsed().as_millis() as u64, constraints = pre.constraints(), "circuit recorded (blank, one challenge copied) while its parameters load");
                            return Some((pre, r, false));
                        }
                        Ok(None) => return None,
                        Err(e) => warn!(%proof, error = %e, "recording one challenge and copying it failed; recording them all"),
                    }
                }
                let blank = match cuzk_filecoin::blank_circuit_of(proof) {
                    Ok(c) => c,
                    Err(e) => {
                        warn!(%proof, error = %e, "no blank circuit to record while the parameters load");
                        return None;
                    }
                };
                match cuzk_synth::record_blank(blank, hint) {
                    Ok(Some(pre)) => {
                        info!(%proof, ms = t.elapsed().as_millis() as u64, constraints = pre.constraints(), "circuit recorded (blank) while its parameters load");
                        Some((pre, r, false))
                    }
                    Ok(None) => None,
                    Err(e) => {
                        warn!(%proof, error = %e, "recording the blank circuit failed; its first partition records");
                        None
                    }
                }
            })
            .map_err(|e| warn!(error = %e, "could not start recording beside the parameters' load"))
            .ok()?;
        Some(Prepared { id, work })
    }

    /// Waits for `prepared` and keeps its recording as `key`'s, checked as a
    /// recording made by a partition is: the key must be the one whose header it
    /// was started from, and the recording's sizes the key's. A recording made
    /// here is saved; a refused saved file is deleted. Nothing changes when `key`
    /// already has a slot.
    pub fn adopt(&self, key: &Arc<ProvingKey>, prepared: Prepared) {
        let Some(state) = self.adopted(key, prepared) else { return };
        let mut slots = self.lock();
        if Self::find(&mut slots, key).is_none() {
            slots.push(Slot { key: Arc::downgrade(key), id: key_id(key), state });
        }
    }

    /// `prepared`'s recording, checked against `key` and charged to the budget
    /// (see [`RecordingCache::adopt`]); `None` when there is none or it is refused.
    fn adopted(&self, key: &Arc<ProvingKey>, prepared: Prepared) -> Option<State> {
        let Ok(Some((pre, mut r, from_file))) = prepared.work.join() else { return None };
        if prepared.id != key_id(key) {
            warn!("parameters changed while loading; the recording made beside them is dropped");
            return None;
        }
        if let Err(e) = key.check_shape(&pre.shape()) {
            warn!(error = %e, "circuit recording made beside the parameters does not match them; dropped");
            if let (true, Some(dir)) = (from_file, &self.dir) {
                let _ = std::fs::remove_file(Self::path(dir, &prepared.id));
            }
            return None;
        }
        let bytes = pre.heap_bytes() as u64;
        if !self.fit(&mut r, bytes) {
            warn!(bytes, "no host-budget room for the recorded circuit; its first partition records");
            return None;
        }
        let pre = Arc::new(pre);
        if !from_file {
            self.save(prepared.id, pre.clone());
        }
        Some(State::Ready(pre, r))
    }

    /// For parameters made in memory rather than loaded ([`ParamCache::insert`]):
    /// starts reading their saved recording or recording their blank circuit, as
    /// [`RecordingCache::prepare`] does beside a load, and returns at once; their
    /// partitions wait for it (seconds) rather than record it in the first of them
    /// with its values and synthesize the others the plain way (a minute or more at
    /// 32GiB). Nothing happens when the key already has a slot.
    ///
    /// [`ParamCache::insert`]: crate::services::ParamCache::insert
    pub fn prepare_inserted(self: &Arc<Self>, proof: CircuitId, key: &Arc<ProvingKey>) {
        if !self.enabled {
            return;
        }
        let opener = {
            let mut slots = self.lock();
            if Self::find(&mut slots, key).is_some() {
                return;
            }
            let opener = Opener(Arc::default());
            slots.push(Slot { key: Arc::downgrade(key), id: key_id(key), state: State::Loading(opener.0.clone()) });
            opener
        };
        let Some(prepared) = self.prepare(proof, key.header()) else {
            return self.settle(key, &opener.0, State::Backoff(Instant::now()));
        };
        let (this, key) = (self.clone(), key.clone());
        // Failing to start drops the closure and with it the opener: the gate opens
        // and the key's partitions record as if nothing had been prepared.
        let _ = std::thread::Builder::new().name("cuzk-prepare-inserted".into()).spawn(move || {
            let state = this.adopted(&key, prepared).unwrap_or(State::Backoff(Instant::now()));
            this.settle(&key, &opener.0, state);
        });
    }

    /// Drops the recordings of parameters that are gone, returning their bytes.
    pub fn purge(&self) {
        drop(self.lock());
    }

    /// Recordings finished and in use (made here or loaded from a file).
    pub fn ready(&self) -> usize {
        self.lock().iter().filter(|s| matches!(s.state, State::Ready(..))).count()
    }

    /// Bytes reserved for recordings now (finished or in progress).
    pub fn bytes(&self) -> u64 {
        self.lock()
            .iter()
            .map(|s| match &s.state {
                State::Ready(_, r) | State::Recording(r) => r.bytes(),
                _ => 0,
            })
            .sum()
    }
}

impl RecordingStore for RecordingCache {
    fn plan(&self, key: &Arc<ProvingKey>) -> Plan {
        RecordingCache::plan(self, key)
    }
    fn is_ready(&self, key: &Arc<ProvingKey>) -> bool {
        self.enabled && Self::find(&mut self.lock(), key).is_some_and(|s| matches!(s.state, State::Ready(..)))
    }
    fn recorded(&self, key: &Arc<ProvingKey>, pre: Option<Precompiled>) -> Result<(), StageError> {
        RecordingCache::recorded(self, key, pre)
    }
    fn abandon(&self, key: &Arc<ProvingKey>) {
        RecordingCache::abandon(self, key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuzk_synth::{synthesize_recording, SyntheticCircuit, SyntheticSpec};
    use rand::SeedableRng;

    const SPEC: SyntheticSpec = SyntheticSpec { constraints: 64, public_inputs: 1, a_density: 1.0, b_density: 1.0 };

    /// An empty directory of this process for the test `name`.
    fn fresh_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("cuzk-recordings-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// A fresh directory holding the saved recording of `key(SPEC)`, as an earlier
    /// process left it: the directory, the key and the recording.
    fn saved_recording(name: &str) -> (PathBuf, Arc<ProvingKey>, Precompiled) {
        let dir = fresh_dir(name);
        let k = key(SPEC);
        let pre = synthesize_recording(SyntheticCircuit::new(SPEC, 1).unwrap()).unwrap().1.unwrap();
        let id = key_id(&k);
        std::fs::create_dir_all(&dir).unwrap();
        pre.write_to(std::fs::File::create(RecordingCache::path(&dir, &id)).unwrap(), &id).unwrap();
        (dir, k, pre)
    }

    fn key(spec: SyntheticSpec) -> Arc<ProvingKey> {
        key_seeded(spec, 1)
    }

    fn key_seeded(spec: SyntheticSpec, seed: u64) -> Arc<ProvingKey> {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(seed);
        Arc::new(cuzk_srs::generate_random(SyntheticCircuit::new(spec, 0).unwrap(), &mut rng).unwrap())
    }

    #[test]
    fn one_recording_per_key_charged_and_released_with_it() {
        let ledger = Ledger::new("host", 1 << 30);
        let cache = RecordingCache::new(true, ledger.clone());
        let k = key(SPEC);
        assert!(matches!(cache.plan(&k), Plan::Record));
        assert!(matches!(cache.plan(&k), Plan::Plain), "one recording at a time; others go plain");
        assert_eq!(ledger.snapshot().used, estimate(&k), "the estimate is reserved while recording");
        let (_, pre) = synthesize_recording(SyntheticCircuit::new(SPEC, 1).unwrap()).unwrap();
        let bytes = pre.as_ref().unwrap().heap_bytes() as u64;
        cache.recorded(&k, pre).unwrap();
        assert!(matches!(cache.plan(&k), Plan::Use(_)));
        assert_eq!((cache.bytes(), ledger.snapshot().used), (bytes, bytes));
        // Another key records its own.
        let k2 = key(SPEC);
        assert!(matches!(cache.plan(&k2), Plan::Record));
        cache.abandon(&k2);
        assert!(matches!(cache.plan(&k2), Plan::Record), "a failed recording is retried");
        drop((k, k2));
        assert_eq!(cache.bytes(), 0, "recordings go with their keys");
        assert_eq!(ledger.snapshot().used, 0);

        let off = RecordingCache::new(false, ledger);
        assert!(matches!(off.plan(&key(SPEC)), Plan::Plain));
    }

    /// A recording saved by one cache (process) is loaded by the next one at the
    /// first partition of the same key; a damaged file is refused and redone.
    #[test]
    fn saved_recordings_are_loaded_by_the_next_process() {
        let dir = fresh_dir("saved");
        let ledger = Ledger::new("host", 1 << 30);
        let k = key(SPEC);
        let first = RecordingCache::new(true, ledger.clone()).with_dir(dir.clone());
        assert!(matches!(first.plan(&k), Plan::Record), "nothing saved yet");
        let (_, pre) = synthesize_recording(SyntheticCircuit::new(SPEC, 1).unwrap()).unwrap();
        first.recorded(&k, pre).unwrap();
        let path = RecordingCache::path(&dir, &key_id(&k));
        let t = Instant::now();
        while !path.exists() && t.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(path.exists(), "saved in the background to {}", path.display());
        drop(first);

        let next = RecordingCache::new(true, ledger.clone()).with_dir(dir.clone());
        assert!(matches!(next.plan(&k), Plan::Use(_)), "loaded: the first partition is pre-compiled");
        assert!(next.bytes() > 0, "the loaded recording is charged");
        let other = key_seeded(SPEC, 2);
        assert!(matches!(next.plan(&other), Plan::Record), "other parameters do not use this file");

        let mut bytes = std::fs::read(&path).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        let damaged = RecordingCache::new(true, ledger.clone()).with_dir(dir.clone());
        assert!(matches!(damaged.plan(&k), Plan::Record), "a damaged file is refused and recorded again");
        let (_, pre) = synthesize_recording(SyntheticCircuit::new(SPEC, 3).unwrap()).unwrap();
        damaged.recorded(&k, pre).unwrap();
        // The new recording replaces the damaged file.
        let id = key_id(&k);
        let valid = || std::fs::File::open(&path).and_then(|f| Precompiled::read_from(f, &id)).is_ok();
        let t = Instant::now();
        while !valid() && t.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(valid(), "the damaged file was replaced");
        let after = RecordingCache::new(true, ledger).with_dir(dir.clone());
        assert!(matches!(after.plan(&k), Plan::Use(_)));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Makes every read of a saved recording stop until the returned sender sends;
    /// the receiver hears each read start.
    fn hold_reads(cache: &mut RecordingCache) -> (std::sync::mpsc::Receiver<()>, std::sync::mpsc::Sender<()>) {
        let (entered_tx, entered) = std::sync::mpsc::channel::<()>();
        let (release, release_rx) = std::sync::mpsc::channel::<()>();
        let (entered_tx, release_rx) = (Mutex::new(entered_tx), Mutex::new(release_rx));
        cache.on_read = Some(Box::new(move || {
            entered_tx.lock().unwrap().send(()).unwrap();
            release_rx.lock().unwrap().recv().unwrap();
        }));
        (entered, release)
    }

    /// Waits (two minutes at most) until `n` workers have waited for a recording
    /// being read or made; returns how many have.
    fn wait_for_waiters(cache: &RecordingCache, n: usize) -> usize {
        let t = Instant::now();
        let seen = || cache.waiting.load(std::sync::atomic::Ordering::SeqCst);
        while seen() < n && t.elapsed() < Duration::from_secs(120) {
            std::thread::sleep(Duration::from_millis(5));
        }
        seen()
    }

    /// Parameters made in memory (`ParamCache::insert`) get their recording read
    /// (or made) beside them, as a load does; their first partitions wait for it
    /// and use it, none records. Recording off: nothing is started.
    #[test]
    fn an_inserted_keys_recording_is_prepared_and_its_partitions_wait_for_it() {
        let (dir, k, pre) = saved_recording("inserted");
        let ledger = Ledger::new("host", 1 << 30);
        // Not a Filecoin key: only its saved file can be read (as in the test above).
        let proof = CircuitId::Seal(cuzk_filecoin::RegisteredSealProof::StackedDrg2KiBV1_1);

        let mut cache = RecordingCache::new(true, ledger.clone()).with_dir(dir.clone());
        let (entered, release) = hold_reads(&mut cache);
        let cache = Arc::new(cache);
        cache.prepare_inserted(proof, &k);
        entered.recv().unwrap();
        let partitions: Vec<_> = (0..2)
            .map(|_| {
                let (cache, k) = (cache.clone(), k.clone());
                std::thread::spawn(move || cache.plan(&k))
            })
            .collect();
        let waiting = wait_for_waiters(&cache, 2);
        release.send(()).unwrap();
        assert_eq!(waiting, 2, "both partitions wait for the recording under way");
        for p in partitions {
            assert!(matches!(p.join().unwrap(), Plan::Use(p) if *p == pre), "and use it");
        }
        assert!(cache.bytes() > 0 && cache.ready() == 1, "kept and charged");
        // Inserted again (the same key): nothing new starts.
        cache.prepare_inserted(proof, &k);
        assert_eq!(cache.ready(), 1);

        let off = Arc::new(RecordingCache::new(false, ledger).with_dir(dir.clone()));
        off.prepare_inserted(proof, &k);
        assert!(matches!(off.plan(&k), Plan::Plain));
        assert_eq!(off.bytes(), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Reading a key's saved recording holds up that key's partitions, which wait
    /// for it and then use it, and no other key's: a deadline job's partition plans
    /// while a large recording is still being read.
    #[test]
    fn a_saved_recording_being_read_holds_only_its_own_key() {
        use std::sync::mpsc;
        let (dir, big, _) = saved_recording("reading");
        let ledger = Ledger::new("host", 1 << 30);

        let mut cache = RecordingCache::new(true, ledger).with_dir(dir.clone());
        let (entered, release) = hold_reads(&mut cache);
        let cache = Arc::new(cache);
        let reader = {
            let (cache, big) = (cache.clone(), big.clone());
            std::thread::spawn(move || matches!(cache.plan(&big), Plan::Use(_)))
        };
        entered.recv().unwrap();
        let same_key = {
            let (cache, big) = (cache.clone(), big.clone());
            std::thread::spawn(move || matches!(cache.plan(&big), Plan::Use(_)))
        };
        // Another key plans while the read is stopped (the other key has no file, so
        // its read never reaches the hook).
        let urgent = key_seeded(SPEC, 2);
        let (done_tx, done) = mpsc::channel();
        {
            let cache = cache.clone();
            std::thread::spawn(move || done_tx.send(matches!(cache.plan(&urgent), Plan::Record)).unwrap());
        }
        let planned = done.recv_timeout(Duration::from_secs(120));
        // The same key's second worker is waiting for the read, not planning plain.
        let waiting = wait_for_waiters(&cache, 1);
        release.send(()).unwrap();
        assert_eq!(planned, Ok(true), "another key's plan waited for this key's file");
        assert_eq!(waiting, 1, "the same key's worker waits for the read");
        assert!(reader.join().unwrap(), "the reader uses the recording it read");
        assert!(same_key.join().unwrap(), "the waiting worker uses the recording read for it");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A saved recording is read beside its parameters' load and kept for the key
    /// it was started for, with no partition involved; a key other than the one
    /// whose header started it, or a key that already has a recording, changes
    /// nothing. Reading nothing (no file, recording off) reserves nothing.
    #[test]
    fn a_recording_read_beside_the_load_is_the_keys() {
        let (dir, k, pre) = saved_recording("beside");
        let ledger = Ledger::new("host", 1 << 30);
        // Not a Filecoin key: only the file can be read here (its blank circuit is
        // not this one), which is the restart's case.
        let proof = CircuitId::Seal(cuzk_filecoin::RegisteredSealProof::StackedDrg2KiBV1_1);

        let cache = Arc::new(RecordingCache::new(true, ledger.clone()).with_dir(dir.clone()));
        let p = cache.prepare(proof, k.header()).expect("started");
        cache.adopt(&k, p);
        assert!(cache.is_ready(&k), "kept as the key's recording");
        assert!(matches!(cache.plan(&k), Plan::Use(p) if *p == pre));
        let held = cache.bytes();
        assert!(held > 0 && ledger.snapshot().used >= held, "charged");
        // Again for the same key: it has its recording, nothing changes.
        let p = cache.prepare(proof, k.header()).unwrap();
        cache.adopt(&k, p);
        assert_eq!((cache.bytes(), cache.ready()), (held, 1));

        // Started from another key's header: dropped, its reservation returned.
        let other = key_seeded(SPEC, 2);
        let fresh = Arc::new(RecordingCache::new(true, ledger.clone()).with_dir(dir.clone()));
        let before = ledger.snapshot().used;
        let p = fresh.prepare(proof, k.header()).unwrap();
        fresh.adopt(&other, p);
        assert!(!fresh.is_ready(&other) && !fresh.is_ready(&k));
        assert_eq!(ledger.snapshot().used, before, "nothing left reserved");

        // Recording off, or WinningPoSt: nothing started.
        let off = Arc::new(RecordingCache::new(false, ledger.clone()).with_dir(dir.clone()));
        assert!(off.prepare(proof, k.header()).is_none());
        let winning = CircuitId::PoSt(cuzk_filecoin::RegisteredPoStProof::StackedDrgWinning2KiBV1);
        assert!(cache.prepare(winning, k.header()).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A recording whose sizes are not its parameters' (a circuit built from a
    /// malformed input: a shortened Merkle path keeps the public inputs) is refused
    /// before it is kept or saved; a saved file of the key's identity whose sizes do
    /// not fit (as an older build could have saved it) is discarded at load, deleted
    /// and recorded again.
    #[test]
    fn recordings_that_do_not_fit_their_parameters_are_refused() {
        let short = SyntheticSpec { constraints: 48, ..SPEC };
        let dir = fresh_dir("mismatch");
        let ledger = Ledger::new("host", 1 << 30);
        let k = key(SPEC);
        let path = RecordingCache::path(&dir, &key_id(&k));
        let recording = |s: SyntheticSpec| synthesize_recording(SyntheticCircuit::new(s, 1).unwrap()).unwrap().1;

        let cache = RecordingCache::new(true, ledger.clone()).with_dir(dir.clone());
        assert!(matches!(cache.plan(&k), Plan::Record));
        let bad = recording(short).unwrap();
        let (bad_aux, good_aux) = (bad.shape().aux, k.l.len());
        assert_ne!(bad_aux, good_aux);
        assert_eq!(bad.shape().inputs, k.num_inputs(), "same public inputs: only the sizes tell");
        let e = cache.recorded(&k, Some(bad)).unwrap_err().to_string();
        let sizes = format!("L points (aux variables): parameters have {good_aux}, the circuit needs {bad_aux}");
        assert!(e.contains("recording refused, not saved") && e.contains(&sizes), "{e}");
        assert_eq!((cache.bytes(), ledger.snapshot().used), (0, 0), "nothing kept, the estimate returned");
        assert!(matches!(cache.plan(&k), Plan::Record), "the next partition records again");
        std::thread::sleep(Duration::from_millis(200));
        assert!(!path.exists(), "nothing saved");
        // The key's real circuit is recorded and saved as usual.
        cache.recorded(&k, recording(SPEC)).unwrap();
        assert!(matches!(cache.plan(&k), Plan::Use(_)));
        let t = Instant::now();
        while !path.exists() && t.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(path.exists());
        drop(cache);

        // A file with the key's identity and a valid checksum, of another circuit.
        recording(short).unwrap().write_to(std::fs::File::create(&path).unwrap(), &key_id(&k)).unwrap();
        let next = RecordingCache::new(true, ledger.clone()).with_dir(dir.clone());
        assert!(matches!(next.plan(&k), Plan::Record), "a file of the wrong sizes is not used: recorded again");
        assert!(!path.exists(), "and deleted");
        assert_eq!(ledger.snapshot().used, estimate(&k), "only the new recording's estimate is held");
        drop(next);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn no_budget_room_means_plain_synthesis() {
        let k = key(SPEC);
        let ledger = Ledger::new("host", estimate(&k) - 1);
        let cache = RecordingCache::new(true, ledger.clone());
        assert!(matches!(cache.plan(&k), Plan::Plain), "no room for the estimate");
        assert!(matches!(cache.plan(&k), Plan::Plain), "and no retry before the back-off");
        assert_eq!((cache.bytes(), ledger.snapshot().used), (0, 0));
    }
}
