//! A client of a running `cuzk daemon` (or of Curio's, for `cuzk.v1`): connect over
//! TCP (plain or TLS, with an optional bearer token) or a unix socket, and `cuzk
//! bench batch` — COUNT proofs with CONCURRENCY in
//! flight, one line per proof and a summary, the way Curio's `cuzk-bench batch` reports.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use tonic::{
    metadata::AsciiMetadataValue,
    service::{interceptor::InterceptedService, Interceptor},
    transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity},
    Request, Status,
};

use crate::{
    errors::error_chain,
    proto::{
        ext::{engine_client::EngineClient, SubmitSyntheticRequest},
        v1::{
            await_proof_response::Status as JobStatus, proving_engine_client::ProvingEngineClient, AwaitProofRequest,
            ProofKind, SubmitProofRequest,
        },
    },
};

/// Largest message either way (a 32GiB C1 output is tens of megabytes).
const MAX_MESSAGE: usize = 1 << 30;

/// What a client presents beyond the address, matching the daemon's `[daemon]`
/// access settings: a bearer token (`auth_token_file`) and TLS (`tls_*`).
#[derive(Clone, Debug, Default)]
pub struct Access {
    /// A file holding the daemon's shared secret.
    pub token_file: Option<PathBuf>,
    /// CA certificate(s) (PEM) the daemon's certificate must chain to; set, the
    /// connection uses TLS ("https://" addresses need it).
    pub tls_ca: Option<PathBuf>,
    /// Client certificate and key (PEM), for a daemon with `tls_client_ca_file`.
    pub tls_identity: Option<(PathBuf, PathBuf)>,
    /// The name the daemon's certificate must carry (default: the address's host).
    pub tls_domain: Option<String>,
}

/// Adds `authorization: Bearer <token>` to every call when a token is set.
#[derive(Clone, Debug, Default)]
pub struct Bearer(Option<AsciiMetadataValue>);

impl Interceptor for Bearer {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// A connection to a daemon: the channel and the token its calls carry.
pub type Conn = InterceptedService<Channel, Bearer>;

/// Opens a connection to `addr` ("http://host:port", "https://host:port",
/// "host:port" or "unix:///path") with no token and no TLS.
///
/// # Errors
/// When the address is malformed or nothing answers there.
pub async fn connect(addr: &str) -> Result<Conn> {
    connect_with(addr, &Access::default()).await
}

/// Opens a connection to `addr` presenting `access`.
///
/// # Errors
/// When the address is malformed, a file in `access` cannot be read, the TLS
/// handshake fails, or nothing answers there.
pub async fn connect_with(addr: &str, access: &Access) -> Result<Conn> {
    let bearer = match &access.token_file {
        None => Bearer(None),
        Some(f) => {
            let text = std::fs::read_to_string(f).with_context(|| format!("reading the token file {}", f.display()))?;
            let v = AsciiMetadataValue::try_from(format!("Bearer {}", text.trim()))
                .with_context(|| format!("the token in {} is not printable ASCII", f.display()))?;
            Bearer(Some(v))
        }
    };
    if let Some(path) = addr.strip_prefix("unix://") {
        if access.tls_ca.is_some() {
            bail!("TLS is for TCP addresses, not the unix socket {addr}");
        }
        let path = path.to_string();
        // The URI is required by the API and ignored by the connector.
        let ch = Endpoint::try_from("http://[::]:0")?
            .connect_with_connector(tower::service_fn(move |_| {
                let path = path.clone();
                async move { tokio::net::UnixStream::connect(path).await.map(hyper_util::rt::TokioIo::new) }
            }))
            .await
            .with_context(|| format!("cannot connect to the daemon at {addr}"))?;
        return Ok(InterceptedService::new(ch, bearer));
    }
    let tls = access.tls_ca.is_some() || addr.starts_with("https://");
    let url = match addr.split_once("://") {
        Some(("http", rest)) if tls => format!("https://{rest}"),
        Some(_) => addr.to_string(),
        None => format!("{}://{addr}", if tls { "https" } else { "http" }),
    };
    let mut ep = Endpoint::from_shared(url.clone()).with_context(|| format!("invalid daemon address `{addr}`"))?;
    if tls {
        let ca = access.tls_ca.as_ref().context("an https:// address needs a CA certificate (--tls-ca FILE)")?;
        let read = |p: &PathBuf| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
        let mut cfg = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(ca)?));
        if let Some((cert, key)) = &access.tls_identity {
            cfg = cfg.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        if let Some(d) = &access.tls_domain {
            cfg = cfg.domain_name(d.clone());
        }
        ep = ep.tls_config(cfg).with_context(|| format!("TLS settings for {url}"))?;
    }
    let ch = ep
        .connect()
        .await
        .map_err(|e| anyhow::anyhow!("cannot connect to the daemon at {url}: {}", error_chain(&e)))?;
    Ok(InterceptedService::new(ch, bearer))
}

/// The `cuzk.v1` client with cuzk's message limits.
pub fn v1(c: Conn) -> ProvingEngineClient<Conn> {
    ProvingEngineClient::new(c).max_decoding_message_size(MAX_MESSAGE).max_encoding_message_size(MAX_MESSAGE)
}

/// The `cuzk.ext.v1` client.
pub fn ext(c: Conn) -> EngineClient<Conn> {
    EngineClient::new(c).max_decoding_message_size(MAX_MESSAGE).max_encoding_message_size(MAX_MESSAGE)
}

/// What each proof of a batch is.
#[derive(Clone, Debug)]
pub enum BatchJob {
    /// A PoRep C1 output (JSON or the Lotus/Curio wrapper) through `cuzk.v1`.
    Porep { c1: Vec<u8>, registered_proof: u64, miner_id: u64, sector_num: u64 },
    /// A synthetic circuit through `cuzk.ext.v1` (cuzk daemons only).
    Synthetic { log2: u32, public_inputs: u32, a_density: f64, b_density: f64, partitions: u32 },
}

/// One finished proof of a batch.
#[derive(Clone, Debug)]
pub struct BatchProof {
    pub index: usize,
    /// Submission to result, as the client saw it.
    pub wall: Duration,
    /// The daemon's own total and queue wait.
    pub prove: Duration,
    pub queue: Duration,
    pub proof_bytes: usize,
    pub error: Option<String>,
}

/// A batch's summary.
#[derive(Clone, Debug)]
pub struct BatchSummary {
    pub wall: Duration,
    pub proofs: Vec<BatchProof>,
}

impl BatchSummary {
    pub fn ok(&self) -> usize {
        self.proofs.iter().filter(|p| p.error.is_none()).count()
    }

    /// "wall, avg/min/max, proofs/min, s/proof" as Curio's cuzk-bench prints them.
    pub fn report(&self) -> String {
        let ok: Vec<f64> = self.proofs.iter().filter(|p| p.error.is_none()).map(|p| p.wall.as_secs_f64()).collect();
        let wall = self.wall.as_secs_f64();
        let (avg, min, max) = if ok.is_empty() {
            (0.0, 0.0, 0.0)
        } else {
            (
                ok.iter().sum::<f64>() / ok.len() as f64,
                ok.iter().copied().fold(f64::INFINITY, f64::min),
                ok.iter().copied().fold(0.0, f64::max),
            )
        };
        let head = format!("batch: {}/{} proofs ok in {wall:.2} s", ok.len(), self.proofs.len());
        if ok.is_empty() {
            return head;
        }
        let n = ok.len() as f64;
        format!(
            "{head}; per proof avg {avg:.2} s, min {min:.2} s, max {max:.2} s; {:.1} proofs/min, {:.3} s/proof",
            n * 60.0 / wall,
            wall / n
        )
    }
}

async fn one(ch: Conn, job: &BatchJob, index: usize) -> Result<(String, Instant)> {
    let t = Instant::now();
    let id = match job {
        BatchJob::Porep { c1, registered_proof, miner_id, sector_num } => {
            let req = SubmitProofRequest {
                proof_kind: ProofKind::PorepSealCommit as i32,
                registered_proof: *registered_proof,
                vanilla_proof: c1.clone(),
                miner_id: *miner_id,
                sector_number: *sector_num,
                ..Default::default()
            };
            v1(ch)
                .submit_proof(req)
                .await
                .map_err(|s| anyhow::anyhow!("{}: {}", s.code(), s.message()))?
                .into_inner()
                .job_id
        }
        BatchJob::Synthetic { log2, public_inputs, a_density, b_density, partitions } => {
            let req = SubmitSyntheticRequest {
                log2: *log2,
                public_inputs: *public_inputs,
                a_density: *a_density,
                b_density: *b_density,
                partitions: *partitions,
                seed: index as u64,
                ..Default::default()
            };
            ext(ch)
                .submit_synthetic(req)
                .await
                .map_err(|s| anyhow::anyhow!("{}: {}", s.code(), s.message()))?
                .into_inner()
                .job_id
        }
    };
    Ok((id, t))
}

/// Runs `count` proofs with at most `concurrency` in flight; `on_proof` sees each as
/// it finishes.
///
/// # Errors
/// Only when the daemon cannot be reached; failed proofs are reported in the summary.
pub async fn run_batch(
    addr: &str,
    access: &Access,
    job: BatchJob,
    count: usize,
    concurrency: usize,
    mut on_proof: impl FnMut(&BatchProof),
) -> Result<BatchSummary> {
    if count == 0 || concurrency == 0 {
        bail!("--count and --concurrency must be at least 1");
    }
    let ch = connect_with(addr, access).await?;
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    let mut next = 0;
    let mut proofs = Vec::with_capacity(count);
    let spawn = |set: &mut tokio::task::JoinSet<BatchProof>, i: usize| {
        let (ch, job) = (ch.clone(), job.clone());
        set.spawn(async move {
            let t = Instant::now();
            let fail = |e: String| BatchProof {
                index: i,
                wall: t.elapsed(),
                prove: Duration::ZERO,
                queue: Duration::ZERO,
                proof_bytes: 0,
                error: Some(e),
            };
            let (id, t) = match one(ch.clone(), &job, i).await {
                Ok(x) => x,
                Err(e) => return fail(e.to_string()),
            };
            match v1(ch).await_proof(AwaitProofRequest { job_id: id, timeout_ms: 0 }).await {
                Ok(r) => {
                    let r = r.into_inner();
                    let ok = r.status == JobStatus::Completed as i32;
                    BatchProof {
                        index: i,
                        wall: t.elapsed(),
                        prove: Duration::from_millis(r.total_ms),
                        queue: Duration::from_millis(r.queue_wait_ms),
                        proof_bytes: r.proof.len(),
                        error: (!ok).then(|| {
                            let status = JobStatus::try_from(r.status).map_or("UNKNOWN", |s| s.as_str_name());
                            format!("{status}: {}", r.error_message)
                        }),
                    }
                }
                Err(s) => fail(format!("{}: {}", s.code(), s.message())),
            }
        });
    };
    while next < count.min(concurrency) {
        spawn(&mut set, next);
        next += 1;
    }
    while let Some(done) = set.join_next().await {
        let p = done.context("batch task")?;
        on_proof(&p);
        proofs.push(p);
        if next < count {
            spawn(&mut set, next);
            next += 1;
        }
    }
    proofs.sort_by_key(|p| p.index);
    Ok(BatchSummary { wall: start.elapsed(), proofs })
}
