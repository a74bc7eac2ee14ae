//! Finished jobs' results on disk, so that a restart loses no proof: one JSON file per
//! job, named by its job id, written atomically (temporary file, fsync, rename, fsync
//! of the directory) before any client is told the job ended.

use std::{
    io::Write,
    path::{Path, PathBuf},
    time::{Duration, SystemTime},
};

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

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

/// The results directory.
pub(super) struct Results {
    dir: PathBuf,
}

/// Job ids are `<16 hex>-<hex>`; anything else never names a file (no path tricks).
fn valid_id(id: &str) -> bool {
    id.parse::<crate::JobId>().is_ok()
}

impl Results {
    /// Opens (creating) `dir` and removes result files older than `retention`.
    pub(super) fn open(dir: PathBuf, retention: Duration) -> std::io::Result<Self> {
        std::fs::create_dir_all(&dir)?;
        let r = Results { dir };
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
    pub(super) fn write(&self, rec: &Record) -> std::io::Result<()> {
        if !valid_id(&rec.job_id) {
            return Err(std::io::Error::other(format!("`{}` is not a job id", rec.job_id)));
        }
        let path = self.path(&rec.job_id);
        let tmp = path.with_extension("json.tmp");
        let bytes = serde_json::to_vec(rec).map_err(std::io::Error::other)?;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, &path)?;
        std::fs::File::open(&self.dir)?.sync_all()
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
}
