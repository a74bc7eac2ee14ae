//! StagePcie's wait for a free device staging buffer is ProveGpu's backpressure, not
//! StagePcie's work: with a backend whose `stage` waits 200 ms per partition, the
//! wait shows as StagePcie's blocked time (metrics, the job's timings, the
//! timeline) and not as its busy time, nor in the `stage` operation.

use std::{
    sync::{
        atomic::{AtomicU32, Ordering},
        Arc,
    },
    time::Duration,
};

use cuzk_actors::{services::SelectedBackend, timeline::SpanKind, Config, Engine, JobSpec, StageName};
use cuzk_gpu::{cpu::CpuBackend, Backend, GpuError, HostPartition, MsmResults, Staged, UploadedPartition};
use cuzk_srs::ProvingKey;
use cuzk_synth::{SyntheticCircuit, SyntheticSpec};
use rand::SeedableRng;

const WAIT: Duration = Duration::from_millis(200);

/// The CPU backend, whose `stage` waits [`WAIT`] for a "buffer" when allowed to wait
/// and reports it, as the CUDA backend does while every staging buffer is taken.
struct WaitingBackend {
    waits: AtomicU32,
}

impl Backend for WaitingBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn upload(&self, host: HostPartition) -> Result<UploadedPartition, GpuError> {
        CpuBackend.upload(host)
    }

    fn stage(&self, _uploaded: &mut UploadedPartition, wait: bool) -> Staged {
        if !wait {
            return Staged::default();
        }
        std::thread::sleep(WAIT);
        self.waits.fetch_add(1, Ordering::Relaxed);
        Staged { staged: true, waited: WAIT }
    }

    fn execute(&self, uploaded: UploadedPartition, srs: &ProvingKey, with_b_g2: bool) -> Result<MsmResults, GpuError> {
        CpuBackend.execute(uploaded, srs, with_b_g2)
    }
}

#[test]
fn staging_buffer_wait_is_blocked_not_busy() {
    const PARTITIONS: u32 = 2;
    let spec = SyntheticSpec { constraints: 500, public_inputs: 2, a_density: 0.7, b_density: 0.3 };
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(3);
    let srs = Arc::new(cuzk_srs::generate_random(SyntheticCircuit::new(spec, 0).unwrap(), &mut rng).unwrap());
    let backend = Arc::new(WaitingBackend { waits: AtomicU32::new(0) });
    let mut cfg = Config::default();
    cfg.timeline.enabled = true;
    let selected = SelectedBackend { backend: backend.clone(), devices: 1, on_device: false, pinned_bytes: 0 };
    let engine = Engine::start_with_backend(cfg, selected).unwrap();
    let circuits: Vec<_> = (0..PARTITIONS).map(|i| SyntheticCircuit::new(spec, u64::from(i)).unwrap()).collect();
    let out = engine.submit_blocking(JobSpec::circuits(srs, circuits)).unwrap().wait_blocking().unwrap();
    assert_eq!(backend.waits.load(Ordering::Relaxed), PARTITIONS, "bulk partitions may wait");
    let waited = WAIT * PARTITIONS;

    // The engine's counters.
    let s = engine.stage_snapshots().into_iter().find(|s| s.stage == StageName::StagePcie).unwrap();
    assert!(s.blocked >= waited, "blocked {:?} < {waited:?}", s.blocked);
    assert!(s.busy < WAIT, "busy {:?} includes the wait", s.busy);

    // The job's timings.
    let t = out.timings.stage(StageName::StagePcie);
    assert!(t.blocked >= waited, "{t:?}");
    assert!(t.busy < WAIT, "{t:?}");
    let stage_op = out.timings.ops.iter().find(|(op, _)| *op == "stage").map(|(_, d)| *d).unwrap_or_default();
    assert!(stage_op < WAIT, "the stage op includes the wait: {stage_op:?}");

    // The timeline: short busy spans, each followed by its blocked span.
    let spans = engine.timeline().spans();
    let mine = |kind: SpanKind| {
        spans.iter().filter(move |s| s.stage == Some(StageName::StagePcie) && s.kind == kind).collect::<Vec<_>>()
    };
    let (busy, blocked) = (mine(SpanKind::Busy), mine(SpanKind::Blocked));
    assert_eq!((busy.len(), blocked.len()), (PARTITIONS as usize, PARTITIONS as usize));
    assert!(busy.iter().all(|s| s.dur < WAIT), "{busy:?}");
    assert!(blocked.iter().all(|s| s.dur >= WAIT), "{blocked:?}");
    engine.shutdown();
}
