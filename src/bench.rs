//! Streams of proofs for `cuzk bench` and `cuzk prove`, the per-stage report and
//! its bottleneck verdict, and the bellperson baseline measured the same way.

use std::{
    sync::{mpsc, Arc},
    time::{Duration, Instant},
};

use bellperson::groth16::{prepare_verifying_key, verify_proof, Parameters, Proof};
use blstrs::{Bls12, Scalar};
use serde::Serialize;

use crate::{Engine, EngineSnapshot, JobError, JobSpec, ProvingKey, SubmitError, SyntheticCircuit, SyntheticSpec};

/// One job's proof and the public inputs it verifies against, or its error.
pub type ProofResult = Result<(Proof<Bls12>, Vec<Scalar>), String>;

/// What one stream produced.
pub struct StreamOutcome {
    pub wall: Duration,
    /// Per job, in submission order: the proof and its public inputs, or the error.
    pub results: Vec<ProofResult>,
    /// Backend operations (NTT, MSMs, B_G2 on CPU) summed over all jobs.
    pub ops: Vec<(&'static str, Duration)>,
}

/// Randomness seed of job `i` in a stream seeded with `seed`.
pub fn job_seed(seed: u64, i: usize) -> u64 {
    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(i as u64)
}

/// Proves `count` synthetic circuits (witness seeds `seed + i`), one job each,
/// submitting from a separate thread so that submission can block on backpressure
/// while results are collected. `on_done` is called after each job.
pub fn run_synthetic_stream(
    engine: &Engine,
    srs: Arc<ProvingKey>,
    spec: SyntheticSpec,
    count: usize,
    seed: u64,
    mut on_done: impl FnMut(),
) -> StreamOutcome {
    let start = Instant::now();
    let (tx, rx) = mpsc::channel();
    let submitter = {
        let engine = engine.clone();
        std::thread::spawn(move || {
            for i in 0..count {
                let circuit = SyntheticCircuit { spec, seed: seed.wrapping_add(i as u64) };
                let inputs = circuit.public_inputs();
                let job = JobSpec::circuits(srs.clone(), vec![circuit]).with_seed(job_seed(seed, i));
                let h = engine.submit_blocking(job);
                if tx.send((h, inputs)).is_err() {
                    break;
                }
            }
        })
    };
    let mut results = Vec::with_capacity(count);
    let mut ops = crate::JobTimings::default();
    for (h, inputs) in rx {
        let r = match h {
            Ok(h) => h
                .wait_blocking()
                .map(|mut o| {
                    ops.add_ops(&o.timings.ops);
                    (o.proofs.remove(0), inputs)
                })
                .map_err(|e: JobError| e.to_string()),
            Err(e) => Err::<_, String>((e as SubmitError).to_string()),
        };
        results.push(r);
        on_done();
    }
    let _ = submitter.join();
    StreamOutcome { wall: start.elapsed(), results, ops: ops.ops }
}

/// Verifies every proof of a stream; returns (verified, failures).
pub fn verify_all(vk: &bellperson::groth16::VerifyingKey<Bls12>, outcome: &StreamOutcome) -> (usize, Vec<String>) {
    let pvk = prepare_verifying_key(vk);
    let mut ok = 0;
    let mut bad = Vec::new();
    for (i, r) in outcome.results.iter().enumerate() {
        match r {
            Ok((p, inputs)) => match verify_proof(&pvk, p, inputs) {
                Ok(true) => ok += 1,
                Ok(false) => bad.push(format!("proof {i} does not verify")),
                Err(e) => bad.push(format!("proof {i}: verifier error {e}")),
            },
            Err(e) => bad.push(format!("job {i}: {e}")),
        }
    }
    (ok, bad)
}

/// bellperson's own prover on the same circuits, in one `create_proof_batch` call
/// with the same randomness: the baseline of `cuzk bench --compare`.
///
/// # Errors
/// bellperson's synthesis error.
pub fn run_bellperson_baseline(
    srs: &ProvingKey,
    spec: SyntheticSpec,
    count: usize,
    seed: u64,
) -> Result<(Duration, Vec<Proof<Bls12>>), bellperson::SynthesisError> {
    let params: Parameters<Bls12> = srs.into();
    let circuits: Vec<_> = (0..count).map(|i| SyntheticCircuit { spec, seed: seed.wrapping_add(i as u64) }).collect();
    let (r, s): (Vec<_>, Vec<_>) = (0..count)
        .map(|i| {
            use ff::Field;
            use rand::SeedableRng;
            let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(job_seed(seed, i));
            (Scalar::random(&mut rng), Scalar::random(&mut rng))
        })
        .unzip();
    let start = Instant::now();
    let proofs = bellperson::groth16::create_proof_batch(circuits, &params, r, s)?;
    Ok((start.elapsed(), proofs))
}

/// Peak resident set size of this process (Linux `VmHWM`).
pub fn peak_rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Minor page faults of this process so far (Linux `/proc/self/stat`): each is a
/// first touch of a page the kernel had to find and zero.
pub fn minor_page_faults() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    // After the command name, which is in parentheses: state, ppid, ..., minflt is
    // the 8th field.
    s.rsplit_once(')')?.1.split_whitespace().nth(7)?.parse().ok()
}

/// Which stage limited the run, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    pub stage: crate::StageName,
    pub utilization: f64,
    pub reason: String,
}

/// The stage with the highest utilization (busy time over its worker capacity) is
/// the bottleneck; the reason says how busy it was and what waited on it. Busy time
/// excludes what a stage spent blocked on the stage after it (StagePcie waiting for
/// a free staging buffer), which the reason names when it is significant.
pub fn verdict(snap: &EngineSnapshot, wall: Duration) -> Option<Verdict> {
    let mut active: Vec<_> = snap.stages.iter().filter(|s| s.received > 0).collect();
    active.sort_by(|a, b| b.utilization(wall).total_cmp(&a.utilization(wall)));
    let top = *active.first()?;
    let u = top.utilization(wall);
    let mut reason = format!("{} busy {:.0}% of the time across its {} worker(s)", top.stage, u * 100.0, top.workers);
    // On a short stream the wall time includes filling and draining the pipeline;
    // over the stage's own active window its busy share shows whether it was starved.
    if !top.active_window.is_zero() && top.active_window < wall {
        let active = top.busy.as_secs_f64() / (top.active_window.as_secs_f64() * top.workers.max(1) as f64);
        let idle = wall.saturating_sub(top.active_window).as_secs_f64();
        reason += &format!(
            " ({:.0}% of its active window; it had no work for {idle:.1} s of the run: pipeline fill and drain)",
            active.min(1.0) * 100.0
        );
        if active < 0.9 {
            // Starved while active: name the busiest stage before it.
            if let Some(up) = snap
                .stages
                .iter()
                .filter(|s| s.stage.index() < top.stage.index() && s.received > 0)
                .max_by(|a, b| a.utilization(wall).total_cmp(&b.utilization(wall)))
            {
                reason += &format!("; idle {:.0}% while active: waiting on {}", (1.0 - active) * 100.0, up.stage);
            }
        }
    }
    if let Some(next) = active.get(1) {
        reason += &format!("; next busiest: {} at {:.0}%", next.stage, next.utilization(wall) * 100.0);
    }
    // Time a stage spent blocked on the one after it is not in its busy time; said
    // when it is a tenth of the run or more.
    for s in snap.stages.iter().filter(|s| !s.blocked.is_zero() && s.blocked >= wall / 10) {
        let what = if s.stage == crate::StageName::StagePcie { " for a free device staging buffer" } else { "" };
        let next = crate::StageName::ALL.get(s.stage.index() + 1).map_or("downstream".into(), |n| n.to_string());
        reason += &format!(
            "; {} waited {:.1} s{what} (backpressure from {next}, not counted as busy)",
            s.stage,
            s.blocked.as_secs_f64()
        );
    }
    let budget_wait = snap.stages.iter().map(|s| s.budget_wait).sum::<Duration>();
    if budget_wait > wall / 10 {
        reason += &format!(
            "; partitions waited {:.1} s in total for host memory (budget.host_memory limits synthesis concurrency)",
            budget_wait.as_secs_f64()
        );
    }
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    if snap.backend == "cpu" && cores <= 4 {
        reason += &format!("; note: on the CPU backend every stage shares the same {cores} cores");
    }
    Some(Verdict { stage: top.stage, utilization: u, reason })
}

/// The per-stage table `cuzk bench` prints.
pub fn stage_table(snap: &EngineSnapshot, wall: Duration) -> String {
    let mut out = format!(
        "{:<12} {:>7} {:>6} {:>9} {:>9} {:>12} {:>12} {:>6} {:>10}\n",
        "stage", "workers", "items", "busy s", "blocked s", "queue wait s", "budget wait", "util", "peak queue"
    );
    for s in &snap.stages {
        if s.received == 0 && s.stage == crate::StageName::Verify {
            continue;
        }
        out += &format!(
            "{:<12} {:>7} {:>6} {:>9.2} {:>9.2} {:>12.2} {:>12.2} {:>5.0}% {:>6}/{:<3}\n",
            s.stage.as_str(),
            s.workers,
            s.completed,
            s.busy.as_secs_f64(),
            s.blocked.as_secs_f64(),
            s.queue_wait.as_secs_f64(),
            s.budget_wait.as_secs_f64(),
            s.utilization(wall) * 100.0,
            s.queue_peak,
            s.queue_capacity
        );
    }
    out
}

/// The backend-operation split, one line per operation with its share.
pub fn ops_table(ops: &[(&'static str, Duration)], count: usize) -> String {
    let total: Duration = ops.iter().map(|(_, d)| *d).sum();
    let mut out = format!("{:<14} {:>10} {:>14} {:>6}\n", "operation", "total s", "per proof ms", "share");
    for (name, d) in ops {
        out += &format!(
            "{:<14} {:>10.2} {:>14.1} {:>5.0}%\n",
            name,
            d.as_secs_f64(),
            d.as_secs_f64() * 1e3 / count.max(1) as f64,
            100.0 * d.as_secs_f64() / total.as_secs_f64().max(1e-12)
        );
    }
    out
}

/// Human-readable bytes.
pub fn fmt_bytes(b: u64) -> String {
    cuzk_actors::ByteSize(b).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        actors::{budget::BudgetSnapshot, tracker::JobCounts, StageSnapshot},
        StageName,
    };

    fn stage(stage: StageName, busy: Duration, blocked: Duration, wall: Duration) -> StageSnapshot {
        StageSnapshot {
            stage,
            workers: 1,
            queue_capacity: 4,
            received: 10,
            completed: 10,
            emitted: 10,
            failed: 0,
            cancelled: 0,
            panics: 0,
            abandoned: 0,
            restarts: 0,
            busy,
            blocked,
            queue_wait: Duration::ZERO,
            budget_wait: Duration::ZERO,
            queue_len: 0,
            queue_peak: 1,
            pushed: 10,
            popped: 10,
            reserved_bytes: 0,
            in_flight: 0,
            in_flight_peak: 1,
            active_window: wall,
            longest_running: Duration::ZERO,
        }
    }

    /// StagePcie waiting for staging buffers is not its work: ProveGpu is named, and
    /// the wait is said in the verdict and shown in the table.
    #[test]
    fn blocked_time_is_not_busy_and_is_named() {
        let wall = Duration::from_secs(100);
        let s = |n, busy, blocked| stage(n, Duration::from_secs(busy), Duration::from_secs(blocked), wall);
        let snap = EngineSnapshot {
            backend: "cuda",
            uptime: wall,
            stages: vec![
                s(StageName::Synthesize, 40, 0),
                s(StageName::StagePcie, 20, 75),
                s(StageName::ProveGpu, 90, 0),
            ],
            host_budget: BudgetSnapshot {
                name: "host",
                capacity: 1,
                used: 0,
                peak: 0,
                waiting: 0,
                grants: 0,
                waits: 0,
                deadline_reserve: 0,
                urgent_grants: 0,
                urgent_waits: 0,
            },
            jobs: JobCounts::default(),
            pinned: None,
            devices: Vec::new(),
            precompiled_bytes: 0,
            param_digests: Vec::new(),
        };
        let v = verdict(&snap, wall).unwrap();
        assert_eq!(v.stage, StageName::ProveGpu, "{v:?}");
        assert!(
            v.reason.contains("stage_pcie waited 75.0 s for a free device staging buffer (backpressure from prove_gpu"),
            "{}",
            v.reason
        );
        let table = stage_table(&snap, wall);
        assert!(table.lines().next().unwrap().contains("blocked s"), "{table}");
        let pcie = table.lines().find(|l| l.starts_with("stage_pcie")).unwrap();
        assert!(pcie.contains("20.00") && pcie.contains("75.00"), "{pcie}");
    }
}
