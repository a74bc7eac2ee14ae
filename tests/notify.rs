//! systemd's notify protocol against a test NOTIFY_SOCKET: READY=1 once serving,
//! WATCHDOG=1 while healthy, none while a hung backend holds a stage past
//! `stall_timeout_secs`, WATCHDOG=1 again once it lets go, STOPPING=1 at shutdown
//! (src/daemon/notify.rs).
//!
//! One test in this file: NOTIFY_SOCKET and WATCHDOG_USEC are process-wide.

mod common;

use std::{
    os::unix::net::UnixDatagram,
    sync::{Arc, Condvar, Mutex},
    time::{Duration, Instant},
};

use cuzk::{
    actors::services::SelectedBackend,
    daemon::{Daemon, DaemonConfig},
    gpu::{cpu::CpuBackend, Backend, GpuError, HostPartition, MsmResults, Staged, UploadedPartition},
    Engine, JobSpec, ProvingKey, SyntheticCircuit,
};

/// The CPU backend, whose `execute` hangs until the gate opens.
struct HungBackend {
    gate: Arc<(Mutex<bool>, Condvar)>,
}

impl Backend for HungBackend {
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
        let (lock, cv) = &*self.gate;
        let _open = cv.wait_while(lock.lock().unwrap(), |open| !*open).unwrap();
        CpuBackend.execute(uploaded, srs, with_b_g2)
    }
}

/// The datagrams systemd would receive, with their arrival times.
struct Systemd {
    sock: UnixDatagram,
    seen: Vec<(Instant, String)>,
}

impl Systemd {
    /// Reads datagrams until one satisfies `pred` or `limit` passes.
    fn until(&mut self, limit: Duration, pred: impl Fn(&str) -> bool) -> Option<Instant> {
        let t = Instant::now();
        let mut buf = [0u8; 4096];
        while t.elapsed() < limit {
            self.sock.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
            if let Ok(n) = self.sock.recv(&mut buf) {
                let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
                let now = Instant::now();
                let hit = pred(&msg);
                self.seen.push((now, msg));
                if hit {
                    return Some(now);
                }
            }
        }
        None
    }

    fn pings_since(&self, t: Instant) -> usize {
        self.seen.iter().filter(|(at, m)| *at >= t && m.lines().any(|l| l == "WATCHDOG=1")).count()
    }
}

fn has(line: &'static str) -> impl Fn(&str) -> bool {
    move |m: &str| m.lines().any(|l| l == line)
}

#[test]
fn notify_ready_watchdog_only_while_healthy_and_stopping() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("notify-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("notify.sock");
    let mut systemd = Systemd { sock: UnixDatagram::bind(&path).unwrap(), seen: Vec::new() };
    // Before any thread of this test process reads the environment.
    std::env::set_var("NOTIFY_SOCKET", &path);
    std::env::set_var("WATCHDOG_USEC", "400000");

    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let backend: Arc<dyn Backend> = Arc::new(HungBackend { gate: gate.clone() });
    let selected = SelectedBackend { backend, devices: 1, on_device: false, pinned_bytes: 0 };
    let engine = Engine::start_with_backend(common::small_config(), selected).unwrap();
    let cfg = DaemonConfig {
        listen: "127.0.0.1:0".into(),
        metrics_listen: "127.0.0.1:0".into(),
        shutdown_timeout_secs: 0,
        results_dir: "none".into(),
        stall_timeout_secs: 1,
        ..Default::default()
    };
    let d = Daemon::start_with_engine(cfg, engine, 1 << 30).unwrap();

    systemd.until(Duration::from_secs(10), has("READY=1")).expect("READY=1 once serving");
    let healthy = Instant::now();
    for _ in 0..3 {
        systemd.until(Duration::from_secs(5), has("WATCHDOG=1")).expect("WATCHDOG=1 while healthy");
    }
    assert!(systemd.pings_since(healthy) >= 3);

    // A job whose partition the backend holds: ProveGpu is wedged.
    let spec = common::spec(256, 2, 1.0, 1.0);
    let job = d
        .engine()
        .submit_blocking(JobSpec::circuits(common::params(spec), vec![SyntheticCircuit::new(spec, 0).unwrap()]))
        .unwrap();
    let unhealthy = systemd
        .until(Duration::from_secs(30), |m| m.contains("STATUS=unhealthy") && m.contains("prove_gpu"))
        .expect("the stall is reported in STATUS=");
    // Then no ping for as long as it lasts.
    systemd.until(Duration::from_secs(3), |_| false);
    assert_eq!(systemd.pings_since(unhealthy), 0, "WATCHDOG=1 while wedged: {:?}", systemd.seen);

    // Let go: the job completes and the pings come back.
    *gate.0.lock().unwrap() = true;
    gate.1.notify_all();
    job.wait_blocking().unwrap();
    systemd.until(Duration::from_secs(10), has("WATCHDOG=1")).expect("WATCHDOG=1 once healthy again");

    d.shutdown();
    systemd.until(Duration::from_secs(10), has("STOPPING=1")).expect("STOPPING=1 at shutdown");
}
