//! Parameter integrity: Filecoin's parameter (`.params`), verifying-key (`.vk`) and
//! inner-product SRS (`.srs`) files checked against the digests Filecoin publishes
//! (storage-proofs-core's `parameters.json` and `srs-inner-product.json`), the way
//! the fetch tools (`paramfetch`, `lotus`/`curio fetch-params`) and filecoin-proofs'
//! `verify_production_params` check them: blake2b-512 of the whole file, in hex, its
//! first 32 characters.
//!
//! The engine proves with a `.params` file and checks each proof against the
//! verifying key inside that same file, so a corrupt or substituted file can make
//! proofs that pass cuzk's own check and fail on chain. The digest check closes that:
//! a file whose name is in the manifest and whose digest differs is refused, and
//! nothing is proved with it. A file whose name is not there (synthetic circuits'
//! parameters) is used unchecked, and the log says so once per file.
//!
//! Test parameters for Filecoin's circuits (`cuzk srs gen --porep/--circuit`, timing
//! parameters, the fake SRS) are written under the published names, so their digests
//! differ from the published ones. Whatever writes them marks them
//! ([`mark_generated`]): the sidecar record says "generated" for the file's exact size
//! and modification time. A marked file is used as test parameters
//! ([`DigestStatus::Test`], logged once per file); once it changes (a fetched file
//! put in its place, or a write), the mark no longer applies and it is checked.
//!
//! Hashing a 47 GiB file takes about a minute, so a successful hash is remembered:
//! in memory, and in a sidecar `<file>.cuzk-digest` beside the file holding the
//! file's size, modification time and digest. Either is reused while the file's size
//! and modification time are unchanged; where the sidecar cannot be written (a
//! read-only parameter directory), the check is remembered in memory only.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    io::Read,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Mutex,
    },
    time::UNIX_EPOCH,
};

use tracing::{debug, error, info, warn};

/// The extension added to a checked file's name for its sidecar record.
pub const SIDECAR_EXT: &str = "cuzk-digest";

/// Hex characters of a published digest (blake2b-512 truncated to 128 bits).
const PUBLISHED_HEX: usize = 32;

/// Expected digests by file name (the name alone, as in `parameters.json`).
#[derive(Clone, Debug, Default)]
pub struct Manifest {
    digests: HashMap<String, String>,
}

impl Manifest {
    /// An empty manifest (every file unknown); [`Manifest::insert`] adds entries.
    pub fn new() -> Self {
        Self::default()
    }

    /// Filecoin's published digests: every `.params` and `.vk` in storage-proofs-core's
    /// `parameters.json` and the SRS in `srs-inner-product.json`.
    pub fn filecoin() -> Self {
        use storage_proofs_core::parameter_cache::{PARAMETERS, SRS_PARAMETERS};
        let mut m = Manifest::new();
        for (name, data) in PARAMETERS.iter().chain(SRS_PARAMETERS.iter()) {
            m.insert(name.clone(), data.digest.clone());
        }
        m
    }

    /// Adds (or replaces) the expected digest of the file named `name`.
    pub fn insert(&mut self, name: impl Into<String>, digest: impl Into<String>) {
        self.digests.insert(name.into(), digest.into().to_ascii_lowercase());
    }

    /// The expected digest of the file named `name`, if it is known.
    pub fn expected(&self, name: &str) -> Option<&str> {
        self.digests.get(name).map(String::as_str)
    }

    /// Number of files known.
    pub fn len(&self) -> usize {
        self.digests.len()
    }

    /// Whether no file is known.
    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }
}

/// What became of a file's check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DigestStatus {
    /// In the manifest, and its digest is the published one.
    Checked,
    /// Not in the manifest (synthetic circuits' parameters): used unchecked.
    Unknown,
    /// Under a published name, marked as test parameters by what generated them
    /// ([`mark_generated`]): used, never Filecoin's.
    Test,
    /// In the manifest with another digest: refused.
    Mismatch,
    /// Checks are turned off (`[srs] check_digests = false`).
    Off,
}

impl DigestStatus {
    /// The status as metrics and logs name it.
    pub fn as_str(self) -> &'static str {
        match self {
            DigestStatus::Checked => "checked",
            DigestStatus::Unknown => "unknown",
            DigestStatus::Test => "test",
            DigestStatus::Mismatch => "mismatch",
            DigestStatus::Off => "off",
        }
    }
}

/// A file's size and modification time: what a remembered digest is valid for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub len: u64,
    /// Nanoseconds since the Unix epoch.
    pub mtime_ns: u128,
}

impl Stamp {
    /// The stamp of the file at `path` now.
    ///
    /// # Errors
    /// When the file cannot be read.
    pub fn of(path: &Path) -> std::io::Result<Stamp> {
        let m = std::fs::metadata(path)?;
        let mtime_ns = m.modified()?.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        Ok(Stamp { len: m.len(), mtime_ns })
    }
}

/// The result of [`DigestChecker::check`] for a file that may be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileCheck {
    pub status: DigestStatus,
    /// The file as checked ([`DigestStatus::Checked`], [`DigestStatus::Test`]): compare after reading it
    /// with [`DigestChecker::unchanged`].
    pub stamp: Option<Stamp>,
}

/// A file that must not be used, or could not be checked.
#[derive(Debug, thiserror::Error)]
pub enum DigestError {
    /// The file is in the manifest and its digest is another.
    #[error(
        "{path}: digest mismatch: Filecoin's published digest is {expected}, the file's is {actual} \
         (blake2b-512, first 128 bits): the file is corrupt or not Filecoin's and is not used; fetch it \
         again (curio/lotus fetch-params); test parameters: generate them again with `cuzk srs gen` \
         (which marks them) or set `[srs] check_digests = false`"
    )]
    Mismatch { path: PathBuf, expected: String, actual: String },
    /// The file changed while it was hashed or loaded.
    #[error("{path}: the file changed while it was checked or loaded; try again once it is no longer being written")]
    Changed { path: PathBuf },
    /// The file could not be read.
    #[error("{path}: checking its digest: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What a checker remembers of a file it hashed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    stamp: Stamp,
    /// blake2b-512 in hex (all 128 characters).
    digest: String,
    /// Written by [`mark_generated`]: test parameters under a published name.
    generated: bool,
}

impl Record {
    const MAGIC: &'static str = "cuzk-digest v1 blake2b-512";

    const GENERATED: &'static str = "generated";

    fn encode(&self) -> String {
        let mark = if self.generated { [" ", Self::GENERATED].concat() } else { String::new() };
        format!("{} {} {} {}{mark}\n", Self::MAGIC, self.stamp.len, self.stamp.mtime_ns, self.digest)
    }

    fn decode(text: &str) -> Option<Record> {
        let rest = text.trim_end().strip_prefix(Self::MAGIC)?;
        let mut it = rest.split_ascii_whitespace();
        let len = it.next()?.parse().ok()?;
        let mtime_ns = it.next()?.parse().ok()?;
        let digest = it.next()?.to_string();
        let generated = match it.next() {
            None => false,
            Some(Self::GENERATED) => true,
            Some(_) => return None,
        };
        (digest.len() == 128 && digest.bytes().all(|b| b.is_ascii_hexdigit()) && it.next().is_none())
            .then_some(Record { stamp: Stamp { len, mtime_ns }, digest, generated })
    }

    /// The sidecar record of `path`, if it has a readable one.
    fn read(path: &Path) -> Option<Record> {
        Record::decode(&std::fs::read_to_string(sidecar_path(path)).ok()?)
    }
}

/// The sidecar record of `path`: `<file>.cuzk-digest` beside it.
pub fn sidecar_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".");
    name.push(SIDECAR_EXT);
    path.with_file_name(name)
}

/// blake2b-512 of the file at `path`, streamed, in hex (128 characters); the
/// published digest is its first 32.
///
/// # Errors
/// When the file cannot be read.
pub fn file_digest(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut state = blake2b_simd::Params::new().to_state();
    let mut buf = vec![0u8; 4 << 20];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                state.update(&buf[..n]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(state.finalize().to_hex().to_string())
}

/// Marks the file at `path` as test parameters written under a published name (for
/// what generates them: `cuzk srs gen`, test fixtures): its sidecar record says
/// "generated" for its current size and modification time, and a [`DigestChecker`]
/// uses it as [`DigestStatus::Test`] until it changes. The file is not hashed.
///
/// # Errors
/// When the file's metadata cannot be read or the record cannot be written (then
/// the file would be refused as a digest mismatch).
pub fn mark_generated(path: &Path) -> Result<(), DigestError> {
    let io = |source| DigestError::Io { path: path.to_path_buf(), source };
    let stamp = Stamp::of(path).map_err(io)?;
    if Record::read(path).is_some_and(|r| r.generated && r.stamp == stamp) {
        return Ok(());
    }
    // Not hashed (a 32GiB timing file is 47 GB): what a generator wrote is never
    // Filecoin's, whatever its digest; the record stands for its size and mtime.
    let record = Record { stamp, digest: "0".repeat(128), generated: true };
    write_atomically(&sidecar_path(path), record.encode().as_bytes()).map_err(io)
}

/// Checks files against a [`Manifest`] and remembers what it hashed (see the module
/// docs). One per engine; shared by every load.
pub struct DigestChecker {
    manifest: Manifest,
    enabled: bool,
    /// Digests hashed or read from a sidecar, by path.
    memo: Mutex<HashMap<PathBuf, Record>>,
    /// The last outcome per file, for status and metrics.
    outcomes: Mutex<BTreeMap<PathBuf, DigestStatus>>,
    /// Files already logged as unknown or test parameters (logged once each).
    told: Mutex<HashSet<PathBuf>>,
    /// Files hashed (a sidecar or memory hit does not count).
    hashed: AtomicU64,
}

impl std::fmt::Debug for DigestChecker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DigestChecker")
            .field("known_files", &self.manifest.len())
            .field("enabled", &self.enabled)
            .finish()
    }
}

impl DigestChecker {
    /// A checker of Filecoin's published digests; `enabled = false` checks nothing
    /// (every file is reported [`DigestStatus::Off`]).
    pub fn filecoin(enabled: bool) -> Self {
        Self::with_manifest(if enabled { Manifest::filecoin() } else { Manifest::new() }, enabled)
    }

    /// A checker of `manifest` (tests register files of their own).
    pub fn with_manifest(manifest: Manifest, enabled: bool) -> Self {
        DigestChecker {
            manifest,
            enabled,
            memo: Mutex::new(HashMap::new()),
            outcomes: Mutex::new(BTreeMap::new()),
            told: Mutex::new(HashSet::new()),
            hashed: AtomicU64::new(0),
        }
    }

    /// Whether files are checked at all.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Files hashed so far (a digest reused from memory or a sidecar is not hashed).
    pub fn hashed(&self) -> u64 {
        self.hashed.load(Ordering::Relaxed)
    }

    /// The last outcome of every file checked, by path.
    pub fn outcomes(&self) -> Vec<(PathBuf, DigestStatus)> {
        lock(&self.outcomes).iter().map(|(p, s)| (p.clone(), *s)).collect()
    }

    fn record(&self, path: &Path, status: DigestStatus) {
        lock(&self.outcomes).insert(path.to_path_buf(), status);
    }

    /// Checks the file at `path` before it is used: `Ok` when it may be used (its
    /// digest is the published one, it is not in the manifest, or checks are off),
    /// an error when it must not be.
    ///
    /// # Errors
    /// [`DigestError::Mismatch`] naming the file and both digests; [`DigestError::Io`]
    /// when a known file cannot be read; [`DigestError::Changed`] when it changed
    /// while hashed.
    pub fn check(&self, path: &Path) -> Result<FileCheck, DigestError> {
        if !self.enabled {
            self.record(path, DigestStatus::Off);
            return Ok(FileCheck { status: DigestStatus::Off, stamp: None });
        }
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let Some(expected) = self.manifest.expected(name) else {
            self.record(path, DigestStatus::Unknown);
            if lock(&self.told).insert(path.to_path_buf()) {
                warn!(
                    file = %path.display(),
                    "not in Filecoin's parameters.json: not checked (test parameters)"
                );
            }
            return Ok(FileCheck { status: DigestStatus::Unknown, stamp: None });
        };
        let io = |source| DigestError::Io { path: path.to_path_buf(), source };
        let stamp = match Stamp::of(path) {
            Ok(s) => s,
            // A missing file is the loader's to report, with how to get it; nothing
            // is read from it, so nothing is used unchecked.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(FileCheck { status: DigestStatus::Unknown, stamp: None })
            }
            Err(e) => return Err(io(e)),
        };
        let record = match self.remembered(path, stamp) {
            Some(r) => r,
            None => self.hash(path, stamp)?,
        };
        let actual = &record.digest[..PUBLISHED_HEX];
        if record.generated {
            self.record(path, DigestStatus::Test);
            if lock(&self.told).insert(path.to_path_buf()) {
                warn!(
                    file = %path.display(),
                    "TEST PARAMETERS under Filecoin's name (marked by `cuzk srs gen`): not Filecoin's; \
                     proofs made with them never verify on chain"
                );
            }
            return Ok(FileCheck { status: DigestStatus::Test, stamp: Some(stamp) });
        }
        if actual != expected {
            self.record(path, DigestStatus::Mismatch);
            let e = DigestError::Mismatch {
                path: path.to_path_buf(),
                expected: expected.to_string(),
                actual: actual.to_string(),
            };
            error!(file = %path.display(), expected, actual, "parameter file digest mismatch: not used");
            return Err(e);
        }
        self.record(path, DigestStatus::Checked);
        debug!(file = %path.display(), digest = actual, "parameter file digest checked");
        Ok(FileCheck { status: DigestStatus::Checked, stamp: Some(stamp) })
    }

    /// Whether the file at `path` is still the one `check` passed (same size and
    /// modification time): call after reading it.
    ///
    /// # Errors
    /// [`DigestError::Changed`] when it is not; [`DigestError::Io`] when it is gone.
    pub fn unchanged(&self, path: &Path, check: &FileCheck) -> Result<(), DigestError> {
        let Some(was) = check.stamp else {
            // A published file that was missing at its check and is there now was
            // loaded unchecked: refused.
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if self.enabled && self.manifest.expected(name).is_some() && path.exists() {
                return Err(DigestError::Changed { path: path.to_path_buf() });
            }
            return Ok(());
        };
        let now = Stamp::of(path).map_err(|source| DigestError::Io { path: path.to_path_buf(), source })?;
        if now != was {
            lock(&self.memo).remove(path);
            return Err(DigestError::Changed { path: path.to_path_buf() });
        }
        Ok(())
    }

    /// A digest remembered for the file as it is now: in memory, else its sidecar.
    fn remembered(&self, path: &Path, stamp: Stamp) -> Option<Record> {
        if let Some(r) = lock(&self.memo).get(path).filter(|r| r.stamp == stamp) {
            return Some(r.clone());
        }
        let r = Record::read(path).filter(|r| r.stamp == stamp)?;
        debug!(file = %path.display(), "digest reused from its sidecar record");
        lock(&self.memo).insert(path.to_path_buf(), r.clone());
        Some(r)
    }

    /// Hashes the file, remembers the digest (memory, then the sidecar if it can be
    /// written).
    fn hash(&self, path: &Path, stamp: Stamp) -> Result<Record, DigestError> {
        let io = |source| DigestError::Io { path: path.to_path_buf(), source };
        info!(file = %path.display(), bytes = stamp.len, "checking the parameter file's digest (once; remembered beside it)");
        let t = std::time::Instant::now();
        let digest = file_digest(path).map_err(io)?;
        self.hashed.fetch_add(1, Ordering::Relaxed);
        if Stamp::of(path).map_err(io)? != stamp {
            return Err(DigestError::Changed { path: path.to_path_buf() });
        }
        info!(file = %path.display(), ms = t.elapsed().as_millis() as u64, "parameter file hashed");
        let record = Record { stamp, digest, generated: false };
        lock(&self.memo).insert(path.to_path_buf(), record.clone());
        let sidecar = sidecar_path(path);
        if let Err(e) = write_atomically(&sidecar, record.encode().as_bytes()) {
            info!(
                sidecar = %sidecar.display(),
                error = %e,
                "cannot write the digest record: the check is remembered in memory only (hashed again after a restart)"
            );
        }
        Ok(record)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Writes `bytes` to a temporary name beside `path`, then renames it over `path`.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_os_string();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let res = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Dir(PathBuf);
    impl Dir {
        fn new(tag: &str) -> Dir {
            let d = std::env::temp_dir().join(format!("cuzk-digest-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            Dir(d)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A file of `n` bytes and a manifest that publishes its digest under its name.
    fn published(dir: &Path, name: &str, n: usize) -> (PathBuf, Manifest) {
        let path = dir.join(name);
        let bytes: Vec<u8> = (0..n).map(|i| (i * 31 % 251) as u8).collect();
        std::fs::write(&path, bytes).unwrap();
        let mut m = Manifest::new();
        m.insert(name, &file_digest(&path).unwrap()[..PUBLISHED_HEX]);
        (path, m)
    }

    fn set_mtime(path: &Path, secs: u64) {
        let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        f.set_modified(UNIX_EPOCH + std::time::Duration::from_secs(secs)).unwrap();
    }

    #[test]
    fn filecoin_manifest_has_the_files_cuzk_names() {
        let m = Manifest::filecoin();
        // The names cuzk gives a 32GiB PoRep set are the published ones.
        let (params, vk) =
            crate::parameter_files(Path::new("/p"), crate::RegisteredSealProof::StackedDrg32GiBV1_1).unwrap();
        let name = |p: &Path| p.file_name().unwrap().to_str().unwrap().to_string();
        assert_eq!(m.expected(&name(&params)), Some("6a388072a518cf46ebd661f5cc46900a"));
        assert!(m.expected(&name(&vk)).is_some());
        assert!(m.expected(crate::IPP_SRS_FILE).is_some(), "the SnarkPack SRS");
        assert!(m.len() > 40, "{} entries", m.len());
    }

    /// A published file that is missing is left to its loader (which says how to get
    /// it); if it appears before the load, the load is refused as unchecked.
    #[test]
    fn a_missing_file_is_the_loaders_to_report_and_one_that_appears_is_refused() {
        let d = Dir::new("missing");
        let (path, m) = published(&d.0, "v28-missing.params", 1000);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let c = DigestChecker::with_manifest(m, true);
        let missing = c.check(&path).unwrap();
        assert_eq!(missing.status, DigestStatus::Unknown);
        c.unchanged(&path, &missing).unwrap();
        std::fs::write(&path, bytes).unwrap();
        assert!(matches!(c.unchanged(&path, &missing), Err(DigestError::Changed { .. })));
        assert_eq!(c.check(&path).unwrap().status, DigestStatus::Checked);
    }

    #[test]
    fn published_digest_passes_and_a_flipped_byte_fails_naming_the_file() {
        let d = Dir::new("flip");
        let name = "v28-test-circuit.params";
        let (path, m) = published(&d.0, name, 300_000);
        let c = DigestChecker::with_manifest(m.clone(), true);
        let ok = c.check(&path).unwrap();
        assert_eq!(ok.status, DigestStatus::Checked);
        assert_eq!(c.hashed(), 1);
        c.unchanged(&path, &ok).unwrap();

        // One byte flipped in the middle; the modification time moves with the write.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[150_000] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        set_mtime(&path, 1_000_000);
        let e = c.check(&path).unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, DigestError::Mismatch { .. }), "{text}");
        assert!(text.contains(name) && text.contains(m.expected(name).unwrap()), "{text}");
        assert!(text.contains(&file_digest(&path).unwrap()[..PUBLISHED_HEX]), "{text}");
        assert_eq!(c.outcomes(), vec![(path.clone(), DigestStatus::Mismatch)]);
        // A fresh checker (a restart, reading the sidecar) refuses it too.
        let e = DigestChecker::with_manifest(m, true).check(&path).unwrap_err();
        assert!(matches!(e, DigestError::Mismatch { .. }), "{e}");
    }

    #[test]
    fn a_file_not_in_the_manifest_is_unknown_and_used_unchecked() {
        let d = Dir::new("unknown");
        let (path, m) = published(&d.0, "v28-known.params", 1000);
        let other = d.0.join("v28-generated-test.params");
        std::fs::copy(&path, &other).unwrap();
        let c = DigestChecker::with_manifest(m.clone(), true);
        assert_eq!(c.check(&other).unwrap(), FileCheck { status: DigestStatus::Unknown, stamp: None });
        assert_eq!(c.hashed(), 0, "an unknown file is not hashed");
        assert!(!sidecar_path(&other).exists());
        // Off: nothing checked, even a known file with the wrong bytes.
        std::fs::write(&path, b"not the published bytes").unwrap();
        let off = DigestChecker::with_manifest(m, false);
        assert_eq!(off.check(&path).unwrap().status, DigestStatus::Off);
        assert_eq!(off.hashed(), 0);
    }

    #[test]
    fn the_sidecar_is_reused_and_invalidated_by_size_or_mtime() {
        let d = Dir::new("sidecar");
        let (path, m) = published(&d.0, "v28-sidecar.vk", 50_000);
        set_mtime(&path, 2_000_000);
        let first = DigestChecker::with_manifest(m.clone(), true);
        first.check(&path).unwrap();
        first.check(&path).unwrap();
        assert_eq!(first.hashed(), 1, "remembered in memory");
        let text = std::fs::read_to_string(sidecar_path(&path)).unwrap();
        assert!(text.starts_with(Record::MAGIC) && text.contains(" 50000 "), "{text}");

        // A restart: the sidecar answers, nothing is hashed.
        let second = DigestChecker::with_manifest(m.clone(), true);
        assert_eq!(second.check(&path).unwrap().status, DigestStatus::Checked);
        assert_eq!(second.hashed(), 0, "reused from the sidecar");

        // The sidecar says the file is good, but the file changed (same size, other
        // mtime): hashed again and refused.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[7] ^= 0x80;
        std::fs::write(&path, &bytes).unwrap();
        set_mtime(&path, 2_000_001);
        let third = DigestChecker::with_manifest(m.clone(), true);
        assert!(matches!(third.check(&path), Err(DigestError::Mismatch { .. })));
        assert_eq!(third.hashed(), 1);
        // Same mtime, other size (bytes appended, mtime put back): hashed again.
        bytes[7] ^= 0x80;
        bytes.push(0);
        std::fs::write(&path, &bytes).unwrap();
        set_mtime(&path, 2_000_001);
        assert!(matches!(third.check(&path), Err(DigestError::Mismatch { .. })));
        assert_eq!(third.hashed(), 2, "a size change invalidates the memory too");
        // The good bytes back: hashed again, passes, and the sidecar is rewritten.
        bytes.pop();
        std::fs::write(&path, &bytes).unwrap();
        set_mtime(&path, 2_000_002);
        assert_eq!(third.check(&path).unwrap().status, DigestStatus::Checked);
        assert_eq!(third.hashed(), 3);
        assert_eq!(DigestChecker::with_manifest(m.clone(), true).check(&path).unwrap().status, DigestStatus::Checked);

        // A forged or stale sidecar for another stamp is ignored.
        std::fs::write(sidecar_path(&path), "cuzk-digest v1 blake2b-512 1 2 00\n").unwrap();
        let fourth = DigestChecker::with_manifest(m, true);
        fourth.check(&path).unwrap();
        assert_eq!(fourth.hashed(), 1);
    }

    #[test]
    fn without_a_writable_directory_the_check_is_kept_in_memory() {
        let d = Dir::new("ro");
        let (path, m) = published(&d.0, "v28-ro.params", 10_000);
        // The sidecar's place is taken by a directory: it cannot be written.
        std::fs::create_dir_all(sidecar_path(&path)).unwrap();
        let c = DigestChecker::with_manifest(m, true);
        assert_eq!(c.check(&path).unwrap().status, DigestStatus::Checked);
        assert_eq!(c.check(&path).unwrap().status, DigestStatus::Checked);
        assert_eq!(c.hashed(), 1, "remembered in memory");
    }

    #[test]
    fn generated_test_parameters_are_used_while_unchanged() {
        let d = Dir::new("generated");
        let (path, mut m) = published(&d.0, "v28-generated.params", 20_000);
        // Published under this name: other bytes (test parameters written there).
        m.insert("v28-generated.params", "0".repeat(PUBLISHED_HEX));
        let c = DigestChecker::with_manifest(m.clone(), true);
        assert!(matches!(c.check(&path), Err(DigestError::Mismatch { .. })), "unmarked: refused");
        mark_generated(&path).unwrap();
        let c = DigestChecker::with_manifest(m.clone(), true);
        let ok = c.check(&path).unwrap();
        assert_eq!(ok.status, DigestStatus::Test);
        assert_eq!(c.hashed(), 0, "the mark answers");
        c.unchanged(&path, &ok).unwrap();
        mark_generated(&path).unwrap();
        // Changed after it was marked: the mark no longer applies.
        set_mtime(&path, 4_000_000);
        let c = DigestChecker::with_manifest(m, true);
        assert!(matches!(c.check(&path), Err(DigestError::Mismatch { .. })));
        assert_eq!(c.hashed(), 1);
    }

    #[test]
    fn a_file_changed_after_its_check_is_caught() {
        let d = Dir::new("changed");
        let (path, m) = published(&d.0, "v28-changed.params", 10_000);
        let c = DigestChecker::with_manifest(m, true);
        let ok = c.check(&path).unwrap();
        set_mtime(&path, 3_000_000);
        assert!(matches!(c.unchanged(&path, &ok), Err(DigestError::Changed { .. })));
    }
}
