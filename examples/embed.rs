//! Embedding cuzk as a library: start the engine, submit jobs (one with a higher
//! priority), cancel one, read the pipeline's status, await results.
//!
//! `cargo run --release --example embed` (CPU backend unless config says otherwise).

use std::sync::Arc;

use cuzk::{Engine, EngineConfig, JobError, JobSpec, SyntheticCircuit, SyntheticSpec};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. Parameters for the circuit shape. Real deployments load a file:
    //    `cuzk::ProvingKey::load(path, cuzk::LoadOptions::default())`; PoRep jobs find
    //    theirs in the parameter cache by themselves (`JobSpec::porep_c1`).
    let spec = SyntheticSpec::pow2(12);
    let params = Arc::new(cuzk::srs::generate_random(SyntheticCircuit::new(spec, 0)?, &mut rand::thread_rng())?);

    // 2. The engine: every stage actor on its own threads. Config is the same struct
    //    `config.toml` deserializes into; defaults size workers and budgets to the host.
    let engine = Engine::start(EngineConfig::default())?;
    println!("backend: {}", engine.backend());

    // 3. Submit. `submit_blocking` waits while the pipeline's intake is full
    //    (backpressure); `try_submit` returns `SubmitError::Busy` instead; `submit` is
    //    the async form. Each job here has 2 partitions (independent circuits).
    let job = |seed: u64| -> Result<JobSpec, Box<dyn std::error::Error>> {
        let circuits = vec![SyntheticCircuit::new(spec, seed)?, SyntheticCircuit::new(spec, seed + 1)?];
        Ok(JobSpec::circuits(params.clone(), circuits))
    };
    let mut normal = Vec::new();
    for i in 0..4 {
        normal.push(engine.submit_blocking(job(10 * i)?)?);
    }
    // Its partitions overtake the queued normal-priority ones at every stage.
    let urgent = engine.submit_blocking(job(100)?.with_priority(2))?;
    let doomed = engine.submit_blocking(job(200)?)?;

    // 4. Cancel: the job ends with JobError::Cancelled and its memory is released.
    // A `Canceller` can be cloned and handed to another thread or task.
    doomed.canceller().cancel_blocking();

    // 5. Status: per-stage queues and workers, the host budget, job counters.
    let snap = engine.snapshot_blocking();
    for s in &snap.stages {
        println!("{:>12}: queued {:>2}, in flight {:>2}/{}", s.stage.as_str(), s.queue_len, s.in_flight, s.workers);
    }
    println!("host budget: {} of {} bytes", snap.host_budget.used, snap.host_budget.capacity);

    // 6. Await: proofs in partition order plus per-stage timings.
    let out = urgent.wait_blocking()?;
    println!("urgent job: {} proofs in {:?}", out.proofs.len(), out.timings.total);
    for h in normal {
        let out = h.wait_blocking()?;
        println!("job {}: {} proofs in {:?}", out.id, out.proofs.len(), out.timings.total);
    }
    match doomed.wait_blocking() {
        Err(JobError::Cancelled) => println!("cancelled job: cancelled"),
        other => println!("cancelled job ended otherwise: {:?}", other.map(|o| o.id)),
    }
    engine.shutdown();
    Ok(())
}
