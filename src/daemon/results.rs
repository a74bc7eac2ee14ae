//! Finished jobs' results on disk, so that a restart loses no proof: one JSON file per
//! job, named by its job id, written atomically (temporary file, fsync, rename, fsync
//! of the directory) before any client is told the job ended.

use std::{
    io::Write,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering::Relaxed},
        Mutex,
    },
    time::{Duration, SystemTime},
};

use serde::{Deserialize, Serialize};
use tracing::{error, info, warn};

use super::proto::AwaitProofResponse;

/// What a job proves. A request id that is reused for other inputs is refused rather
/// than answered with another input's proof.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct JobKey {
    /// `cuzk.v1.ProofKind`, or -1 for cuzk.ext.v1 synthetic jobs.
    pub kind: i32,
    pub miner_id: u64,
    pub sector_number: u64,
    pub registered_proof: u64,
    /// SHA-256 (hex) of every input field of the request (C1, vanilla proofs,
    /// randomness, partition, commitments): the same sector with a new C1, or a PoSt
    /// with new randomness or another partition, is other inputs. Empty in results
    /// stored before it existed (such a record is never served for a request id).
    #[serde(default)]
    pub inputs: String,
}

impl std::fmt::Display for JobKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "kind {} miner {} sector {} registered proof {} inputs {}",
            self.kind,
            self.miner_id,
            self.sector_number,
            self.registered_proof,
            if self.inputs.is_empty() { "unknown" } else { &self.inputs[..self.inputs.len().min(16)] }
        )
    }
}

/// One finished job, as stored.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct Record {
    pub job_id: String,
    pub request_id: String,
    pub key: JobKey,
    pub status: i32,
    /// Hex of the proof bytes (empty unless completed).
    pub proof: String,
    pub error_message: String,
    pub queue_wait_ms: u64,
    pub srs_load_ms: u64,
    pub synthesis_ms: u64,
    pub gpu_compute_ms: u64,
    pub total_ms: u64,
}

impl Record {
    pub(super) fn new(r: &AwaitProofResponse, request_id: &str, key: &JobKey) -> Self {
        Record {
            job_id: r.job_id.clone(),
            request_id: request_id.to_string(),
            key: key.clone(),
            status: r.status,
            proof: r.proof.iter().map(|b| format!("{b:02x}")).collect(),
            error_message: r.error_message.clone(),
            queue_wait_ms: r.queue_wait_ms,
            srs_load_ms: r.srs_load_ms,
            synthesis_ms: r.synthesis_ms,
            gpu_compute_ms: r.gpu_compute_ms,
            total_ms: r.total_ms,
        }
    }

    pub(super) fn response(&self) -> Option<AwaitProofResponse> {
        let hex = self.proof.as_bytes();
        if !hex.len().is_multiple_of(2) {
            return None;
        }
        let proof = hex
            .chunks(2)
            .map(|c| std::str::from_utf8(c).ok().and_then(|s| u8::from_str_radix(s, 16).ok()))
            .collect::<Option<Vec<u8>>>()?;
        Some(AwaitProofResponse {
            job_id: self.job_id.clone(),
            status: self.status,
            proof,
            error_message: self.error_message.clone(),
            queue_wait_ms: self.queue_wait_ms,
            srs_load_ms: self.srs_load_ms,
            synthesis_ms: self.synthesis_ms,
            gpu_compute_ms: self.gpu_compute_ms,
            total_ms: self.total_ms,
        })
    }
}

/// The results directory, and how its writes have gone (a full disk must not be
/// silent: `/metrics`, GetStatus and `cuzk status` show it).
pub(super) struct Results {
    dir: PathBuf,
    /// False after a failed write, true again after a good one.
    healthy: AtomicBool,
    stored: AtomicU64,
    failures: AtomicU64,
    /// The latest failure: when (Unix seconds) and why.
    last_failure: Mutex<Option<(u64, String)>>,
}

/// What GetStatus and `/metrics` say of the results directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct StoreState {
    pub dir: String,
    pub healthy: bool,
    pub stored_total: u64,
    pub write_failures_total: u64,
    /// Unix seconds of the latest failed write, 0 if none.
    pub last_failure_unix: u64,
    pub last_error: String,
    /// Free bytes for this user on the directory's filesystem, if known.
    pub free_bytes: Option<u64>,
}

/// Bytes an unprivileged writer may still use on `dir`'s filesystem.
#[allow(unsafe_code)]
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain data (all-zero is a valid value); `c` is a
    // NUL-terminated path and `st` a valid out-parameter.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    (unsafe { libc::statvfs(c.as_ptr(), &mut st) } == 0).then(|| st.f_bavail as u64 * st.f_frsize as u64)
}

/// The results directory's figures in Prometheus text (nothing without one).
pub(super) fn render(store: Option<&Results>) -> String {
    use std::fmt::Write;
    let Some(s) = store.map(Results::state) else { return String::new() };
    let mut o = String::new();
    let mut one = |name: &str, kind: &str, help: &str, v: u64| {
        crate::metrics::family(&mut o, name, kind, help);
        let _ = writeln!(o, "{name} {v}");
    };
    one(
        "cuzk_results_store_healthy",
        "gauge",
        "0 after a failed result write (full disk?) until a write succeeds.",
        s.healthy as u64,
    );
    one("cuzk_results_stored_total", "counter", "Results written to the results directory.", s.stored_total);
    one(
        "cuzk_results_write_failures_total",
        "counter",
        "Result writes that failed: those proofs were returned but will not survive a restart.",
        s.write_failures_total,
    );
    if let Some(b) = s.free_bytes {
        one("cuzk_results_dir_free_bytes", "gauge", "Free bytes on the results directory's filesystem.", b);
    }
    o
}

/// Job ids are `<16 hex>-<hex>`; anything else never names a file (no path tricks).
fn valid_id(id: &str) -> bool {
    id.parse::<crate::JobId>().is_ok()
}

impl Results {
    /// Opens (creating) `dir` and removes result files older than `retention`.
    pub(super) fn open(dir: PathBuf, retention: Duration) -> std::io::Result<Self> {
        std::fs::create_dir_all(&dir)?;
        let r = Results {
            dir,
            healthy: AtomicBool::new(true),
            stored: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            last_failure: Mutex::new(None),
        };
        r.prune(retention);
        Ok(r)
    }

    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, job_id: &str) -> PathBuf {
        self.dir.join(format!("{job_id}.json"))
    }

    /// Writes `rec` durably: a reader sees the old state or the whole new file.
    /// A failed write (a full disk, say) leaves no temporary file behind, is logged
    /// at error and counted, and marks the store unhealthy until a write succeeds.
    pub(super) fn write(&self, rec: &Record) -> std::io::Result<()> {
        if !valid_id(&rec.job_id) {
            return Err(std::io::Error::other(format!("`{}` is not a job id", rec.job_id)));
        }
        let path = self.path(&rec.job_id);
        let tmp = path.with_extension("json.tmp");
        let write = || -> std::io::Result<()> {
            let bytes = serde_json::to_vec(rec).map_err(std::io::Error::other)?;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            drop(f);
            std::fs::rename(&tmp, &path)?;
            std::fs::File::open(&self.dir)?.sync_all()
        };
        match write() {
            Ok(()) => {
                self.stored.fetch_add(1, Relaxed);
                if !self.healthy.swap(true, Relaxed) {
                    info!(dir = %self.dir.display(), "results directory writable again");
                }
                Ok(())
            }
            Err(e) => {
                // A partial temporary file would fill the disk further and outlive us.
                let _ = std::fs::remove_file(&tmp);
                self.healthy.store(false, Relaxed);
                self.failures.fetch_add(1, Relaxed);
                let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
                *self.last_failure.lock().unwrap_or_else(|p| p.into_inner()) = Some((now, e.to_string()));
                error!(
                    job = %rec.job_id,
                    dir = %self.dir.display(),
                    free_bytes = ?free_bytes(&self.dir),
                    error = %e,
                    "result not stored: the proof is returned to the client but will not survive a restart"
                );
                Err(e)
            }
        }
    }

    /// How writes have gone, and the space left.
    pub(super) fn state(&self) -> StoreState {
        let (last_failure_unix, last_error) =
            self.last_failure.lock().unwrap_or_else(|p| p.into_inner()).clone().unwrap_or_default();
        StoreState {
            dir: self.dir.display().to_string(),
            healthy: self.healthy.load(Relaxed),
            stored_total: self.stored.load(Relaxed),
            write_failures_total: self.failures.load(Relaxed),
            last_failure_unix,
            last_error,
            free_bytes: free_bytes(&self.dir),
        }
    }

    /// The stored result of `job_id`, if any.
    /// Whether a result of `job_id` is stored (without reading it).
    pub(super) fn has(&self, job_id: &str) -> bool {
        self.path(job_id).exists()
    }

    pub(super) fn read(&self, job_id: &str) -> Option<Record> {
        if !valid_id(job_id) {
            return None;
        }
        let bytes = std::fs::read(self.path(job_id)).ok()?;
        match serde_json::from_slice(&bytes) {
            Ok(r) => Some(r),
            Err(e) => {
                warn!(job = job_id, error = %e, "unreadable result file ignored");
                None
            }
        }
    }

    /// Every stored result (at start: to answer request ids across a restart).
    pub(super) fn all(&self) -> Vec<Record> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str()?.strip_suffix(".json").map(str::to_string))
            .filter_map(|id| self.read(&id))
            .collect()
    }

    /// Removes result files (and leftover temporary files) older than `retention`.
    pub(super) fn prune(&self, retention: Duration) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        let now = SystemTime::now();
        let mut removed = 0;
        for e in entries.filter_map(Result::ok) {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            if !(name.ends_with(".json") || name.ends_with(".json.tmp")) {
                continue;
            }
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| now.duration_since(t).ok())
                .is_some_and(|age| age > retention);
            if old && std::fs::remove_file(e.path()).is_ok() {
                removed += 1;
            }
        }
        if removed > 0 {
            info!(removed, dir = %self.dir.display(), "expired results removed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_results_read_back_and_bad_ids_name_no_file() {
        let dir = std::env::temp_dir().join(format!("cuzk-results-{}", std::process::id()));
        let r = Results::open(dir.clone(), Duration::from_secs(3600)).unwrap();
        let key = JobKey { kind: 1, miner_id: 1000, sector_number: 7, registered_proof: 5, inputs: "ab".into() };
        let resp = AwaitProofResponse {
            job_id: "00000000000000ab-3".into(),
            status: 1,
            proof: vec![0, 1, 254, 255],
            total_ms: 9,
            ..Default::default()
        };
        r.write(&Record::new(&resp, "req-1", &key)).unwrap();
        let back = r.read("00000000000000ab-3").unwrap();
        assert_eq!(back.response().unwrap(), resp);
        assert_eq!((back.request_id.as_str(), &back.key), ("req-1", &key));
        assert_eq!(r.all().len(), 1);
        for bad in ["../etc/passwd", "x", "00000000000000ab-3/../../y", ""] {
            assert!(r.read(bad).is_none(), "{bad}");
        }
        let mut evil = Record::new(&resp, "", &key);
        evil.job_id = "../escape".into();
        assert!(r.write(&evil).is_err());
        r.prune(Duration::ZERO);
        assert!(r.read("00000000000000ab-3").is_none());
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A full disk (a temporary file that is /dev/full): the write fails, nothing is
    /// left behind, the store says unhealthy with the reason, and the next good write
    /// makes it healthy again.
    #[test]
    fn a_failed_write_is_counted_cleaned_up_and_recovered_from() {
        let dir = tempfile::tempdir().unwrap();
        let r = Results::open(dir.path().to_path_buf(), Duration::from_secs(3600)).unwrap();
        let key = JobKey { kind: 1, miner_id: 1000, sector_number: 7, registered_proof: 5, inputs: "ab".into() };
        let resp =
            |id: &str| AwaitProofResponse { job_id: id.into(), status: 1, proof: vec![7; 192], ..Default::default() };
        let tmp = dir.path().join("00000000000000ab-4.json.tmp");
        std::os::unix::fs::symlink("/dev/full", &tmp).unwrap();
        let e = r.write(&Record::new(&resp("00000000000000ab-4"), "req", &key)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
        assert!(std::fs::symlink_metadata(&tmp).is_err(), "the temporary file is removed");
        assert!(r.read("00000000000000ab-4").is_none());
        let s = r.state();
        assert!(!s.healthy);
        assert_eq!((s.stored_total, s.write_failures_total), (0, 1));
        assert!(s.last_error.contains("No space left"), "{}", s.last_error);
        assert!(s.last_failure_unix > 0 && s.free_bytes.is_some());
        let text = render(Some(&r));
        assert!(text.contains("cuzk_results_store_healthy 0\n"), "{text}");
        assert!(text.contains("cuzk_results_write_failures_total 1\n"), "{text}");

        r.write(&Record::new(&resp("00000000000000ab-5"), "req2", &key)).unwrap();
        let s = r.state();
        assert!(s.healthy, "a good write after the failure");
        assert_eq!((s.stored_total, s.write_failures_total), (1, 1));
        assert!(render(Some(&r)).contains("cuzk_results_store_healthy 1\n"));
        assert_eq!(render(None), "");
    }

    /// Results files are outside bytes after a crash or a hand edit: any truncation or
    /// flipped byte of a valid file is read as a record or refused, never a panic, and
    /// a record whose proof is not hex is never answered.
    #[test]
    fn damaged_results_files_are_refused_not_panicked_on() {
        let dir = tempfile::tempdir().unwrap();
        let r = Results::open(dir.path().to_path_buf(), Duration::from_secs(3600)).unwrap();
        let key = JobKey { kind: 3, miner_id: 1, sector_number: 2, registered_proof: 9, inputs: "cd".into() };
        let resp = AwaitProofResponse {
            job_id: "00000000000000cd-1".into(),
            status: 1,
            proof: (0..=255).collect(),
            ..Default::default()
        };
        r.write(&Record::new(&resp, "req", &key)).unwrap();
        let path = dir.path().join("00000000000000cd-1.json");
        let good = std::fs::read(&path).unwrap();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut refused, mut read) = (0, 0);
        for case in 0..600 {
            let mut bytes = good.clone();
            match case % 3 {
                0 => bytes.truncate((next() as usize) % good.len()),
                1 => {
                    for _ in 0..1 + next() % 4 {
                        let i = (next() as usize) % bytes.len();
                        bytes[i] = next() as u8;
                    }
                }
                _ => {
                    let i = (next() as usize) % bytes.len();
                    bytes.insert(i, b"{}[]\",:0x\\"[(next() as usize) % 10]);
                }
            }
            std::fs::write(&path, &bytes).unwrap();
            match r.read("00000000000000cd-1") {
                None => refused += 1,
                Some(rec) => {
                    read += 1;
                    if let Some(back) = rec.response() {
                        assert_eq!(back.proof.len() * 2, rec.proof.len());
                    }
                }
            }
            assert!(r.all().len() <= 1);
        }
        assert!(refused > 300 && read > 0, "refused {refused}, read {read}");
    }
}
