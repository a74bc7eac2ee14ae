//! WinningPoSt, WindowPoSt (one partition as Curio sends it, and the whole
//! multi-partition form) and SnapDeals end to end on the CPU backend: vanilla proofs
//! made with filecoin-proofs from sealed 2KiB sectors → cuzk → proofs that
//! filecoin-proofs' own verifiers accept (and reject for other inputs); bad vanilla
//! input refused with a clear error while other jobs finish; the same through the
//! cuzk.v1 gRPC API as Curio sends it.

mod common;

use std::sync::OnceLock;

use common::{
    porep::{ensure_params, param_cache, work_dir},
    small_config,
};
use cuzk::{
    filecoin::{self as fil, PostFixture, RegisteredPoStProof, RegisteredUpdateProof, UpdateFixture},
    Engine, EngineConfig, JobSpec,
};

const WINNING: RegisteredPoStProof = RegisteredPoStProof::StackedDrgWinning2KiBV1;
const WINDOW: RegisteredPoStProof = RegisteredPoStProof::StackedDrgWindow2KiBV1_2;
const UPDATE: RegisteredUpdateProof = RegisteredUpdateProof::StackedDrg2KiBV1;

/// The test parameters of every kind, beside the PoRep ones.
fn params() -> std::path::PathBuf {
    static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = param_cache();
        ensure_params(&dir, WINNING);
        ensure_params(&dir, WINDOW);
        ensure_params(&dir, UPDATE);
        dir
    })
    .clone()
}

fn winning() -> &'static PostFixture {
    static F: OnceLock<PostFixture> = OnceLock::new();
    F.get_or_init(|| {
        let _ = params();
        fil::generate_post_vanilla(WINNING, 1, 3, &work_dir("winning")).unwrap()
    })
}

/// Three sectors: two WindowPoSt partitions at 2KiB (two sectors each, the second
/// padded).
fn window() -> &'static PostFixture {
    static F: OnceLock<PostFixture> = OnceLock::new();
    F.get_or_init(|| {
        let _ = params();
        fil::generate_post_vanilla(WINDOW, 3, 4, &work_dir("window")).unwrap()
    })
}

fn update() -> &'static UpdateFixture {
    static F: OnceLock<UpdateFixture> = OnceLock::new();
    F.get_or_init(|| {
        let _ = params();
        fil::generate_update_vanilla(UPDATE, 5, &work_dir("update")).unwrap()
    })
}

fn engine() -> Engine {
    let mut cfg: EngineConfig = small_config();
    cfg.ingest.param_cache = params();
    cfg.verify.enabled = true;
    Engine::start(cfg).unwrap()
}

fn post_request(f: &PostFixture, vanilla: Vec<Vec<u8>>, partition: Option<usize>) -> fil::PostRequest {
    fil::PostRequest {
        proof: f.proof,
        randomness: f.randomness,
        prover_id: f.prover_id,
        vanilla_proofs: vanilla,
        partition,
    }
}

fn prove(engine: &Engine, spec: JobSpec) -> Result<Vec<u8>, cuzk::JobError> {
    engine.submit_blocking(spec).unwrap().wait_blocking().map(|o| o.proof_bytes())
}

#[test]
fn winning_post_proves_and_verifies() {
    let f = winning();
    let engine = engine();
    let proof = prove(&engine, JobSpec::post(post_request(f, f.vanilla_proofs.clone(), None))).unwrap();
    assert_eq!(proof.len(), 192, "WinningPoSt has one partition");
    let ok = |randomness: [u8; 32], bytes: &[u8]| {
        fil::verify_winning_post(WINNING, randomness, f.prover_id, &f.challenged, bytes).unwrap()
    };
    assert!(ok(f.randomness, &proof), "verify_winning_post rejected cuzk's WinningPoSt");
    let mut other = f.randomness;
    other[0] ^= 1;
    assert!(!ok(other, &proof), "a WinningPoSt must not verify for other randomness");
    engine.shutdown();
}

#[test]
fn window_post_by_partition_and_whole() {
    let f = window();
    assert_eq!(f.partitions.len(), 2, "three 2KiB sectors make two WindowPoSt partitions");
    let engine = engine();
    // As Curio sends it: one request per partition with that partition's sectors.
    let mut merged = Vec::new();
    for (k, part) in f.partitions.iter().enumerate() {
        let p = prove(&engine, JobSpec::post(post_request(f, part.clone(), Some(k)))).unwrap();
        assert_eq!(p.len(), 192, "one partition, one proof");
        merged.extend_from_slice(&p);
    }
    let ok = |bytes: &[u8], sectors: &[(u64, [u8; 32])]| {
        fil::verify_window_post(WINDOW, f.randomness, f.prover_id, sectors, bytes).unwrap()
    };
    assert!(ok(&merged, &f.sectors), "verify_window_post rejected the merged partition proofs");
    // The whole multi-partition form in one job.
    let whole = prove(&engine, JobSpec::post(post_request(f, f.vanilla_proofs.clone(), None))).unwrap();
    assert_eq!(whole.len(), 2 * 192);
    assert!(ok(&whole, &f.sectors), "verify_window_post rejected the whole WindowPoSt");
    let mut swapped = whole[192..].to_vec();
    swapped.extend_from_slice(&whole[..192]);
    assert!(!ok(&swapped, &f.sectors), "partition proofs out of order must not verify");
    engine.shutdown();
}

#[test]
fn snap_deals_update_proves_and_verifies() {
    let f = update();
    assert_eq!(f.vanilla_proofs.len(), 1, "a 2KiB update has one partition");
    let engine = engine();
    let req = fil::UpdateRequest {
        proof: UPDATE,
        vanilla_proofs: f.vanilla_proofs.clone(),
        comm_r_old: f.comm_r_old,
        comm_r_new: f.comm_r_new,
        comm_d_new: f.comm_d_new,
    };
    let proof = prove(&engine, JobSpec::update(req)).unwrap();
    assert_eq!(proof.len(), 192);
    let ok = |r_old: [u8; 32], bytes: &[u8]| {
        fil::verify_empty_sector_update(UPDATE, bytes, r_old, f.comm_r_new, f.comm_d_new).unwrap()
    };
    assert!(ok(f.comm_r_old, &proof), "verify_empty_sector_update_proof rejected cuzk's update proof");
    assert!(!ok(f.comm_r_new, &proof), "an update proof must not verify for another sector key");
    engine.shutdown();
}

/// Each bad vanilla input fails its job with an error naming the problem; a good
/// job submitted among them still proves.
#[test]
fn bad_vanilla_input_is_named_and_other_jobs_finish() {
    let (w, win, u) = (winning(), window(), update());
    let engine = engine();
    let good = engine.submit_blocking(JobSpec::post(post_request(w, w.vanilla_proofs.clone(), None))).unwrap();
    // The last 32 bytes are the sector's comm_r_last; its low byte changed keeps it a
    // field element, so the proof decodes and the Merkle check must catch it.
    let mut corrupted = w.vanilla_proofs[0].clone();
    let at = corrupted.len() - 32;
    corrupted[at] ^= 0x55;
    let truncated = w.vanilla_proofs[0][..w.vanilla_proofs[0].len() - 7].to_vec();
    let mut appended = w.vanilla_proofs[0].clone();
    appended.push(0);
    let upd = |vanilla: Vec<Vec<u8>>, comm_r_old: [u8; 32]| fil::UpdateRequest {
        proof: UPDATE,
        vanilla_proofs: vanilla,
        comm_r_old,
        comm_r_new: u.comm_r_new,
        comm_d_new: u.comm_d_new,
    };
    let cases: Vec<(&str, JobSpec, &str)> = vec![
        ("no vanilla proofs", JobSpec::post(post_request(w, vec![], None)), "0 vanilla proofs"),
        (
            "two sectors for WinningPoSt",
            JobSpec::post(post_request(w, vec![w.vanilla_proofs[0].clone(); 2], None)),
            "2 vanilla proofs; want 1",
        ),
        ("truncated", JobSpec::post(post_request(w, vec![truncated], None)), "is not a FallbackPoStSectorProof"),
        ("bytes appended", JobSpec::post(post_request(w, vec![appended], None)), "is not a FallbackPoStSectorProof"),
        ("corrupted", JobSpec::post(post_request(w, vec![corrupted], None)), "winning_post: "),
        (
            "other randomness",
            JobSpec::post(fil::PostRequest { randomness: [1; 32], ..post_request(w, w.vanilla_proofs.clone(), None) }),
            "failed to verify",
        ),
        (
            "too many sectors for one WindowPoSt partition",
            JobSpec::post(post_request(win, win.vanilla_proofs.clone(), Some(0))),
            "at most 2 for one WindowPoSt partition",
        ),
        (
            "a WindowPoSt vanilla proof for an update",
            JobSpec::update(upd(vec![win.vanilla_proofs[0].clone()], u.comm_r_old)),
            "is not a PartitionProof",
        ),
        ("update: wrong count", JobSpec::update(upd(vec![], u.comm_r_old)), "0 vanilla proofs; want 1"),
        (
            "update: another sector key",
            JobSpec::update(upd(u.vanilla_proofs.clone(), u.comm_r_new)),
            "do not verify against comm_r_old",
        ),
    ];
    let handles: Vec<_> =
        cases.into_iter().map(|(name, spec, needle)| (name, needle, engine.submit_blocking(spec).unwrap())).collect();
    for (name, needle, h) in handles {
        let e = h.wait_blocking().expect_err(name).to_string();
        assert!(e.contains(needle), "{name}: `{e}` lacks `{needle}`");
    }
    let p = good.wait_blocking().unwrap().proof_bytes();
    assert!(fil::verify_winning_post(WINNING, w.randomness, w.prover_id, &w.challenged, &p).unwrap());
    engine.shutdown();
}

/// Deadlines: a WinningPoSt submitted behind a queue of PoRep jobs (two synthesized
/// at a time, the rest waiting in full queues and mailboxes) overtakes them at every
/// stage — express lane, express workers — and is proved before the PoRep jobs
/// queued ahead of it, which are then cancelled (their proofs show nothing more).
#[test]
fn winning_post_overtakes_queued_porep() {
    let p = cuzk::actors::ingest::KindPriority::default();
    assert!(p.of("winning_post") > p.of("window_post") && p.of("window_post") > p.of("porep"));
    assert!(p.of("window_post") >= p.express && p.of("porep") < p.express);
    let w = winning();
    let c1 = common::porep::fixture(21);
    let mut cfg: EngineConfig = small_config();
    cfg.ingest.param_cache = params();
    cfg.verify.enabled = true;
    // Small buffers, so the PoRep jobs fill every queue and mailbox.
    cfg.synthesize.queue_capacity = 1;
    cfg.synthesize.mailbox_capacity = 1;
    let engine = Engine::start(cfg).unwrap();
    let started = std::time::Instant::now();
    let (cancellers, submitted) = std::sync::mpsc::channel();
    let porep: Vec<_> = (0..4)
        .map(|_| {
            let (e, json, prover, sector) = (engine.clone(), c1.c1_json.clone(), c1.prover_id, c1.sector_id);
            let cancellers = cancellers.clone();
            std::thread::spawn(move || {
                let h = e.submit_blocking(JobSpec::porep_c1(json, prover, sector)).unwrap();
                cancellers.send(h.canceller()).unwrap();
                // When it completed; None: cancelled once the WinningPoSt was done.
                match h.wait_blocking() {
                    Ok(_) => Some(started.elapsed()),
                    Err(cuzk::JobError::Cancelled) => None,
                    Err(e) => panic!("a PoRep job failed: {e}"),
                }
            })
        })
        .collect();
    // Let them fill the pipeline, then submit the WinningPoSt.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let proof = prove(&engine, JobSpec::post(post_request(w, w.vanilla_proofs.clone(), None))).unwrap();
    let winning_done = started.elapsed();
    assert!(fil::verify_winning_post(WINNING, w.randomness, w.prover_id, &w.challenged, &proof).unwrap());
    // What was ahead of it need not be proved to the end to show the order.
    for c in submitted.iter().take(4) {
        c.cancel_blocking();
    }
    let done: Vec<_> = porep.into_iter().map(|h| h.join().unwrap()).collect();
    let after = done.iter().filter(|d| d.is_none_or(|d| d > winning_done)).count();
    eprintln!("WinningPoSt done at {winning_done:?}; PoRep jobs done at {done:?} (None: cancelled after it)");
    assert!(
        after >= 3,
        "the WinningPoSt must finish before most of the PoRep jobs queued ahead of it: {after} of 4 after"
    );
    engine.shutdown();
}

mod grpc {
    use super::*;
    use cuzk::daemon::{
        proto::{
            await_proof_response::Status as JobStatus, proving_engine_client::ProvingEngineClient, ProofKind,
            ProveRequest, SubmitProofRequest,
        },
        Daemon, Listen,
    };
    use tonic::Code;

    fn daemon() -> Daemon {
        let mut engine = small_config();
        engine.ingest.param_cache = params();
        common::daemon_with(engine)
    }

    /// A CID as Go's `cid.Bytes()` gives it: v1, codec, multihash, 32-byte digest.
    fn cid(sealed: bool, d: &[u8; 32]) -> Vec<u8> {
        let mut b = if sealed {
            vec![0x01, 0x82, 0xe2, 0x03, 0x81, 0xe8, 0x02, 0x20]
        } else {
            vec![0x01, 0x81, 0xe2, 0x03, 0x92, 0x20, 0x20]
        };
        b.extend_from_slice(d);
        b
    }

    /// Each kind as Curio sends it (filecoin-ffi numbering, commitments as CID bytes
    /// like `ProveUpdateCuzk`), the proofs checked with filecoin-proofs; bad requests
    /// get INVALID_ARGUMENT naming the problem; a retried request id whose job
    /// succeeded returns the same proof.
    #[test]
    fn every_kind_through_the_v1_api() {
        let (w, win, u) = (winning(), window(), update());
        let d = daemon();
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let Listen::Tcp(addr) = d.listen else { panic!("tcp expected") };
            let mut c = ProvingEngineClient::connect(format!("http://{addr}")).await.unwrap();
            let winning_req = SubmitProofRequest {
                request_id: "winning-1".into(),
                proof_kind: ProofKind::WinningPost as i32,
                registered_proof: 0, // abi.RegisteredPoStProof_StackedDrgWinning2KiBV1
                sector_size: 2048,
                vanilla_proofs: w.vanilla_proofs.clone(),
                miner_id: w.miner_id,
                randomness: w.randomness.to_vec(),
                ..Default::default()
            };
            let pc = c.clone();
            let prove = move |req: SubmitProofRequest| {
                let mut c = pc.clone();
                async move { c.prove(ProveRequest { submit: Some(req) }).await.map(|r| r.into_inner().result.unwrap()) }
            };
            let r = prove(winning_req.clone()).await.unwrap();
            assert_eq!(r.status, JobStatus::Completed as i32, "{}", r.error_message);
            assert!(fil::verify_winning_post(WINNING, w.randomness, w.prover_id, &w.challenged, &r.proof).unwrap());
            let again = prove(winning_req.clone()).await.unwrap();
            assert_eq!(again.proof, r.proof, "a request id whose job succeeded returns its proof");
            // Curio's cuzk-bench sends a 32GiB sector_size whatever the proof: the
            // registered proof decides; the size is logged.
            let bench = SubmitProofRequest { request_id: String::new(), sector_size: 32 << 30, ..winning_req.clone() };
            let r = prove(bench).await.unwrap();
            assert_eq!(r.status, JobStatus::Completed as i32, "{}", r.error_message);
            assert!(fil::verify_winning_post(WINNING, w.randomness, w.prover_id, &w.challenged, &r.proof).unwrap());

            let mut merged = Vec::new();
            for (k, part) in win.partitions.iter().enumerate() {
                let req = SubmitProofRequest {
                    proof_kind: ProofKind::WindowPostPartition as i32,
                    registered_proof: 10, // abi.RegisteredPoStProof_StackedDrgWindow2KiBV1_1
                    vanilla_proofs: part.clone(),
                    miner_id: win.miner_id,
                    randomness: win.randomness.to_vec(),
                    partition_index: k as u32,
                    ..Default::default()
                };
                let r = prove(req).await.unwrap();
                assert_eq!(r.status, JobStatus::Completed as i32, "{}", r.error_message);
                merged.extend_from_slice(&r.proof);
            }
            assert!(fil::verify_window_post(WINDOW, win.randomness, win.prover_id, &win.sectors, &merged).unwrap());

            let snap = SubmitProofRequest {
                request_id: format!("snap-{}-{}", u.miner_id, u.sector_id),
                proof_kind: ProofKind::SnapDealsUpdate as i32,
                registered_proof: 0, // abi.RegisteredUpdateProof_StackedDrg2KiBV1
                sector_size: 2048,
                vanilla_proofs: u.vanilla_proofs.clone(),
                miner_id: u.miner_id,
                sector_number: u.sector_id,
                comm_r_old: cid(true, &u.comm_r_old),
                comm_r_new: cid(true, &u.comm_r_new),
                comm_d_new: cid(false, &u.comm_d_new),
                ..Default::default()
            };
            let r = prove(snap.clone()).await.unwrap();
            assert_eq!(r.status, JobStatus::Completed as i32, "{}", r.error_message);
            assert!(
                fil::verify_empty_sector_update(UPDATE, &r.proof, u.comm_r_old, u.comm_r_new, u.comm_d_new).unwrap()
            );

            let fresh = |r: SubmitProofRequest| SubmitProofRequest { request_id: String::new(), ..r };
            let cases: Vec<(&str, SubmitProofRequest, &str)> = vec![
                (
                    "window proof number for WINNING_POST",
                    SubmitProofRequest { registered_proof: 10, ..fresh(winning_req.clone()) },
                    "not a WinningPoSt proof",
                ),
                (
                    "unknown PoSt number",
                    SubmitProofRequest { registered_proof: 15, ..fresh(winning_req.clone()) },
                    "is not a PoSt proof",
                ),
                (
                    "short randomness",
                    SubmitProofRequest { randomness: vec![1; 31], ..fresh(winning_req.clone()) },
                    "randomness is 31 bytes",
                ),
                (
                    "no vanilla proofs",
                    SubmitProofRequest { vanilla_proofs: vec![], ..fresh(winning_req.clone()) },
                    "vanilla_proofs is empty",
                ),
                (
                    "truncated vanilla proof",
                    SubmitProofRequest {
                        vanilla_proofs: vec![w.vanilla_proofs[0][..100].to_vec()],
                        ..fresh(winning_req.clone())
                    },
                    "vanilla proof 0 (100 bytes) is not a FallbackPoStSectorProof",
                ),
                (
                    "missing commitment",
                    SubmitProofRequest { comm_d_new: vec![], ..fresh(snap.clone()) },
                    "comm_d_new is missing",
                ),
                (
                    "commitment of another sector",
                    SubmitProofRequest { comm_r_old: u.comm_r_new.to_vec(), ..fresh(snap.clone()) },
                    "do not verify against comm_r_old",
                ),
                (
                    "update proof number out of range",
                    SubmitProofRequest { registered_proof: 7, ..fresh(snap.clone()) },
                    "is not an update proof",
                ),
            ];
            for (name, req, needle) in cases {
                let e = c.submit_proof(req).await.expect_err(name);
                assert_eq!(e.code(), Code::InvalidArgument, "{name}: {e}");
                assert!(e.message().contains(needle), "{name}: `{}` lacks `{needle}`", e.message());
            }
            // A request id whose job failed proves again (Curio retries a failed task
            // with the same id): here the update's parameters are evicted and their
            // files moved away, so the job fails; back in place, the retry proves.
            let (pfile, vkfile) = fil::parameter_files(&params(), UPDATE).unwrap();
            let parked = pfile.with_extension("parked");
            c.evict_srs(cuzk::daemon::proto::EvictSrsRequest { circuit_id: "snap-2k".into() }).await.unwrap();
            std::fs::rename(&pfile, &parked).unwrap();
            let retry = SubmitProofRequest { request_id: "snap-retry".into(), ..snap.clone() };
            let r = prove(retry.clone()).await.unwrap();
            std::fs::rename(&parked, &pfile).unwrap();
            assert_eq!(r.status, JobStatus::Failed as i32);
            assert!(r.error_message.contains("not found"), "{}", r.error_message);
            let r = prove(retry).await.unwrap();
            assert_eq!(r.status, JobStatus::Completed as i32, "the retry proves: {}", r.error_message);
            assert!(
                fil::verify_empty_sector_update(UPDATE, &r.proof, u.comm_r_old, u.comm_r_new, u.comm_d_new).unwrap()
            );
            assert!(vkfile.exists());

            let s = c.get_status(cuzk::daemon::proto::GetStatusRequest {}).await.unwrap().into_inner();
            let mut ids: Vec<String> = s.loaded_srs.iter().map(|l| l.circuit_id.clone()).collect();
            ids.sort();
            assert_eq!(ids, ["snap-2k", "winning-2k", "wpost-2k"]);
            assert_eq!(s.total_proofs_completed, 6);
            assert_eq!(s.total_proofs_failed, 1);
        });
        d.shutdown();
    }
}
