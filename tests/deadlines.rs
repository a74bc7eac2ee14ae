//! Deadline work is never behind full-size work: a WinningPoSt-priority job finishes
//! while bulk work holds the host budget, waits for more of it, and holds the device.
//! Deterministic: the bulk work is held by a backend that does not let it finish, so
//! without the deadline path the urgent job could not finish at all. No timing is
//! asserted; every wait is bounded.

mod common;

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        mpsc, Arc, Condvar, Mutex,
    },
    time::{Duration, Instant},
};

use cuzk::{
    actors::{services::SelectedBackend, ByteSize, MemoryLimit},
    gpu::{cpu::CpuBackend, Backend, GpuError, HostPartition, MsmResults, Staged, UploadedPartition},
    Engine, JobSpec, ProvingKey, SyntheticCircuit,
};

/// The CPU backend, holding every bulk partition in `execute` until the gate opens
/// (a device busy with PoRep for as long as the test needs); deadline partitions
/// pass.
struct GatedBackend {
    gate: Arc<(Mutex<bool>, Condvar)>,
    bulk_held: AtomicUsize,
}

impl Backend for GatedBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }
    fn upload(&self, host: HostPartition) -> Result<UploadedPartition, GpuError> {
        CpuBackend.upload(host)
    }
    fn stage(&self, _: &mut UploadedPartition, _: bool) -> Staged {
        Staged::default()
    }
    fn execute(&self, uploaded: UploadedPartition, srs: &ProvingKey, with_b_g2: bool) -> Result<MsmResults, GpuError> {
        if !uploaded.is_urgent() {
            self.bulk_held.fetch_add(1, Ordering::SeqCst);
            let (lock, cv) = &*self.gate;
            let _open = cv.wait_while(lock.lock().unwrap(), |open| !*open).unwrap();
        }
        CpuBackend.execute(uploaded, srs, with_b_g2)
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(120), "{what}: not within 120 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_deadline_job_overtakes_bulk_work_that_fills_and_waits_for_the_host_budget() {
    let bulk_spec = common::spec(1 << 12, 2, 1.0, 1.0);
    let small = common::spec(256, 2, 1.0, 1.0);
    let (bulk_params, small_params) = (common::params(bulk_spec), common::params(small));
    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let backend = Arc::new(GatedBackend { gate: gate.clone(), bulk_held: AtomicUsize::new(0) });
    let mut cfg = common::small_config();
    // A few bulk partitions fill it, as two 32GiB partitions, the parameters and a
    // recording fill a 125 GiB host.
    cfg.budget.host_memory = MemoryLimit::Bytes(ByteSize(8 << 20));
    let selected = SelectedBackend { backend: backend.clone(), devices: 1, on_device: false, pinned_bytes: 0 };
    let engine = Engine::start_with_backend(cfg, selected).unwrap();
    let budget = engine.host_budget();
    assert!(budget.deadline_reserve > 0, "[budget] deadline_reserve = \"auto\" keeps room for deadline work");

    let circuits = (0..24).map(|i| SyntheticCircuit::new(bulk_spec, i).unwrap()).collect();
    let bulk = engine.submit_blocking(JobSpec::circuits(bulk_params, circuits)).unwrap();
    // Bulk work holds the device and the budget, and more of it waits for memory.
    wait_until("bulk partitions waiting for the host budget", || {
        backend.bulk_held.load(Ordering::SeqCst) >= 1 && engine.host_budget().waiting > 0
    });

    // A WinningPoSt-priority job.
    let circuit = SyntheticCircuit::new(small, 7).unwrap();
    let inputs = circuit.public_inputs();
    let urgent =
        engine.submit_blocking(JobSpec::circuits(small_params.clone(), vec![circuit]).with_priority(200)).unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(urgent.wait_blocking());
    });
    let out = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the deadline job waited behind bulk work (budget, queue or device)")
        .unwrap();
    assert!(common::verifies(&small_params, &out.proofs[0], &inputs));
    assert!(!*gate.0.lock().unwrap(), "the bulk work was still held when the deadline job finished");
    let b = engine.host_budget();
    assert!(b.urgent_grants >= 1, "{b:?}");
    assert!(b.used <= b.capacity - b.deadline_reserve, "bulk work stayed out of the reserve: {b:?}");

    *gate.0.lock().unwrap() = true;
    gate.1.notify_all();
    let out = bulk.wait_blocking().unwrap();
    assert_eq!(out.proofs.len(), 24);
    engine.shutdown();
}
