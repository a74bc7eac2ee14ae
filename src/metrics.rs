//! The Prometheus text rendering of an engine snapshot; the names and meanings are
//! specified in docs/metrics.md.

use std::fmt::Write;

use crate::EngineSnapshot;

pub(crate) fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// One GPU as NVML reports it now; fields the device does not report are `None`.
#[derive(Clone, Debug, Default)]
pub struct GpuSample {
    pub index: u32,
    pub name: String,
    pub utilization: Option<f64>,
    pub memory_used: Option<u64>,
    pub memory_total: Option<u64>,
    pub pcie_rx_bytes_per_second: Option<u64>,
    pub pcie_tx_bytes_per_second: Option<u64>,
    pub temperature_celsius: Option<u32>,
    pub power_watts: Option<f64>,
}

fn nvml() -> Option<&'static nvml_wrapper::Nvml> {
    static NVML: std::sync::OnceLock<Option<nvml_wrapper::Nvml>> = std::sync::OnceLock::new();
    NVML.get_or_init(|| match nvml_wrapper::Nvml::init() {
        Ok(n) => Some(n),
        Err(e) => {
            tracing::debug!(error = %e, "NVML not available: no GPU metrics");
            None
        }
    })
    .as_ref()
}

/// The latest GPU readings, never waiting on NVML: a thread of its own samples every
/// [`SAMPLE_EVERY`] and this returns what it last read (the first call waits up to
/// a second for a first reading). A wedged GPU or driver can hang an NVML call for
/// good; then the readings stop changing, `/metrics` and GetStatus still answer at
/// once, and [`gpu_sample_age`] grows (the metric `cuzk_gpu_sample_age_seconds`).
pub fn gpus() -> Vec<GpuSample> {
    let s = sampler();
    let (lock, cv) = &s.state;
    let g = lock.lock().unwrap_or_else(|p| p.into_inner());
    let (g, _) = cv
        .wait_timeout_while(g, std::time::Duration::from_secs(1), |st| st.at.is_none())
        .unwrap_or_else(|p| p.into_inner());
    g.gpus.clone()
}

/// Seconds since the GPU readings were taken (`None` before the first, or without
/// NVML).
pub fn gpu_sample_age() -> Option<f64> {
    nvml()?;
    let s = sampler();
    let g = s.state.0.lock().unwrap_or_else(|p| p.into_inner());
    g.at.map(|t| t.elapsed().as_secs_f64())
}

/// How often the sampler reads NVML.
const SAMPLE_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

#[derive(Default)]
struct Readings {
    gpus: Vec<GpuSample>,
    at: Option<std::time::Instant>,
}

struct Sampler {
    state: (std::sync::Mutex<Readings>, std::sync::Condvar),
}

fn sampler() -> &'static Sampler {
    static S: std::sync::OnceLock<&'static Sampler> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        let s: &'static Sampler = Box::leak(Box::new(Sampler { state: Default::default() }));
        if nvml().is_none() {
            // Nothing to sample: readings are empty, at once.
            s.state.0.lock().unwrap_or_else(|p| p.into_inner()).at = Some(std::time::Instant::now());
            return s;
        }
        let spawned = std::thread::Builder::new().name("cuzk-nvml".into()).spawn(move || loop {
            let gpus = sample_gpus();
            let (lock, cv) = &s.state;
            *lock.lock().unwrap_or_else(|p| p.into_inner()) = Readings { gpus, at: Some(std::time::Instant::now()) };
            cv.notify_all();
            std::thread::sleep(SAMPLE_EVERY);
        });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "no GPU sampler thread: no GPU metrics");
            s.state.0.lock().unwrap_or_else(|p| p.into_inner()).at = Some(std::time::Instant::now());
        }
        s
    })
}

/// Samples every GPU through NVML (empty without the NVIDIA driver). Blocks for
/// NVML's PCIe sample (20 ms per direction and device).
fn sample_gpus() -> Vec<GpuSample> {
    use nvml_wrapper::enum_wrappers::device::{PcieUtilCounter, TemperatureSensor};
    let Some(nvml) = nvml() else { return Vec::new() };
    let n = nvml.device_count().unwrap_or(0);
    (0..n)
        .filter_map(|i| {
            let d = nvml.device_by_index(i).ok()?;
            let mem = d.memory_info().ok();
            Some(GpuSample {
                index: i,
                name: d.name().unwrap_or_default(),
                utilization: d.utilization_rates().ok().map(|u| f64::from(u.gpu) / 100.0),
                memory_used: mem.as_ref().map(|m| m.used),
                memory_total: mem.as_ref().map(|m| m.total),
                // NVML reports KB/s.
                pcie_rx_bytes_per_second: d.pcie_throughput(PcieUtilCounter::Receive).ok().map(|k| u64::from(k) * 1024),
                pcie_tx_bytes_per_second: d.pcie_throughput(PcieUtilCounter::Send).ok().map(|k| u64::from(k) * 1024),
                temperature_celsius: d.temperature(TemperatureSensor::Gpu).ok(),
                power_watts: d.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
            })
        })
        .collect()
}

/// One series per parameter file the engine has checked, labelled with the file's
/// name and what its digest check found (`checked`, `unknown`, `mismatch`, `off`).
fn render_param_digests(o: &mut String, files: &[(std::path::PathBuf, cuzk_filecoin::DigestStatus)]) {
    if files.is_empty() {
        return;
    }
    family(
        o,
        "cuzk_parameter_file_digest",
        "gauge",
        "1 per parameter, verifying-key or SRS file read, by what its check against Filecoin's published digests found.",
    );
    for (path, status) in files {
        let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
        let name = name.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
        let _ = writeln!(o, "cuzk_parameter_file_digest{{file=\"{name}\",status=\"{}\"}} 1", status.as_str());
    }
}

fn render_gpus(o: &mut String, gpus: &[GpuSample]) {
    if let Some(age) = gpu_sample_age() {
        family(
            o,
            "cuzk_gpu_sample_age_seconds",
            "gauge",
            "Seconds since NVML was last read (grows if a GPU or the driver hangs).",
        );
        let _ = writeln!(o, "cuzk_gpu_sample_age_seconds {age}");
    }
    if gpus.is_empty() {
        return;
    }
    family(o, "cuzk_gpu_info", "gauge", "1 per GPU, with its name.");
    for g in gpus {
        let name = g.name.replace(['"', '\\', '\n'], " ");
        let _ = writeln!(o, "cuzk_gpu_info{{gpu=\"{}\",name=\"{name}\"}} 1", g.index);
    }
    type Get = fn(&GpuSample) -> Option<f64>;
    let fams: [(&str, &str, Get); 7] = [
        ("cuzk_gpu_utilization_ratio", "Fraction of the last sample period a kernel ran.", |g| g.utilization),
        ("cuzk_gpu_memory_used_bytes", "Device memory in use.", |g| g.memory_used.map(|v| v as f64)),
        ("cuzk_gpu_memory_total_bytes", "Device memory installed.", |g| g.memory_total.map(|v| v as f64)),
        ("cuzk_gpu_pcie_rx_bytes_per_second", "Host to device PCIe throughput.", |g| {
            g.pcie_rx_bytes_per_second.map(|v| v as f64)
        }),
        ("cuzk_gpu_pcie_tx_bytes_per_second", "Device to host PCIe throughput.", |g| {
            g.pcie_tx_bytes_per_second.map(|v| v as f64)
        }),
        ("cuzk_gpu_temperature_celsius", "GPU temperature.", |g| g.temperature_celsius.map(f64::from)),
        ("cuzk_gpu_power_watts", "Board power draw.", |g| g.power_watts),
    ];
    for (name, help, get) in fams {
        if gpus.iter().all(|g| get(g).is_none()) {
            continue;
        }
        family(o, name, "gauge", help);
        for g in gpus {
            if let Some(v) = get(g) {
                let _ = writeln!(o, "{name}{{gpu=\"{}\"}} {v}", g.index);
            }
        }
    }
}

fn host_memory() -> Option<(u64, u64)> {
    let mut sys = sysinfo::System::new().ok()?;
    sys.refresh_memory();
    Some((sys.total_memory(), sys.available_memory()))
}

fn rss() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

/// Renders `snap` (plus process, host and GPU figures read now) in Prometheus text
/// format. Blocks for the GPU sample (see [`gpus`]).
pub fn render(snap: &EngineSnapshot) -> String {
    let mut o = String::with_capacity(8 << 10);
    type Get = fn(&crate::actors::StageSnapshot) -> f64;
    let stage_metrics: [(&str, &str, &str, Get); 21] = [
        ("cuzk_stage_received_total", "counter", "Items taken from the stage's mailbox.", |s| s.received as f64),
        ("cuzk_stage_completed_total", "counter", "Items processed successfully.", |s| s.completed as f64),
        ("cuzk_stage_emitted_total", "counter", "Items sent downstream.", |s| s.emitted as f64),
        ("cuzk_stage_failed_total", "counter", "Items whose processing failed.", |s| s.failed as f64),
        ("cuzk_stage_cancelled_total", "counter", "Items dropped because their job had ended.", |s| s.cancelled as f64),
        ("cuzk_stage_panics_total", "counter", "Panics caught in the stage's code.", |s| s.panics as f64),
        ("cuzk_stage_abandoned_total", "counter", "Items given up because their device call hung.", |s| {
            s.abandoned as f64
        }),
        ("cuzk_stage_restarts_total", "counter", "Actor restarts by the supervisor.", |s| s.restarts as f64),
        ("cuzk_stage_busy_seconds_total", "counter", "Processing time summed over workers, less blocked time.", |s| {
            s.busy.as_secs_f64()
        }),
        (
            "cuzk_stage_blocked_seconds_total",
            "counter",
            "Time inside processing blocked on downstream backpressure (StagePcie: a free staging buffer).",
            |s| s.blocked.as_secs_f64(),
        ),
        ("cuzk_stage_queue_wait_seconds_total", "counter", "Time items waited in the queue.", |s| {
            s.queue_wait.as_secs_f64()
        }),
        ("cuzk_stage_budget_wait_seconds_total", "counter", "Time workers waited for memory.", |s| {
            s.budget_wait.as_secs_f64()
        }),
        ("cuzk_stage_queue_pushed_total", "counter", "Items pushed into the stage queue.", |s| s.pushed as f64),
        ("cuzk_stage_queue_popped_total", "counter", "Items taken from the queue by a worker.", |s| s.popped as f64),
        ("cuzk_stage_reserved_bytes_total", "counter", "Host memory the stage reserved from the budget.", |s| {
            s.reserved_bytes as f64
        }),
        ("cuzk_stage_queue_length", "gauge", "Items queued now.", |s| s.queue_len as f64),
        ("cuzk_stage_queue_peak", "gauge", "Highest queue length seen.", |s| s.queue_peak as f64),
        ("cuzk_stage_queue_capacity", "gauge", "Configured queue bound.", |s| s.queue_capacity as f64),
        ("cuzk_stage_in_flight", "gauge", "Items being processed now.", |s| s.in_flight as f64),
        ("cuzk_stage_workers", "gauge", "Configured workers.", |s| s.workers as f64),
        (
            "cuzk_stage_longest_item_seconds",
            "gauge",
            "How long the item processed longest right now has been at it (a wedged stage grows without bound).",
            |s| s.longest_running.as_secs_f64(),
        ),
    ];
    for (name, kind, help, get) in stage_metrics {
        family(&mut o, name, kind, help);
        for s in &snap.stages {
            let _ = writeln!(o, "{name}{{stage=\"{}\"}} {}", s.stage.as_str(), get(s));
        }
    }
    let b = &snap.host_budget;
    let budget: [(&str, &str, &str, f64); 9] = [
        ("cuzk_budget_capacity_bytes", "gauge", "The budget.", b.capacity as f64),
        ("cuzk_budget_used_bytes", "gauge", "Reserved now.", b.used as f64),
        ("cuzk_budget_peak_bytes", "gauge", "Highest reservation total seen.", b.peak as f64),
        ("cuzk_budget_waiting", "gauge", "Reservation requests waiting now.", b.waiting as f64),
        ("cuzk_budget_grants_total", "counter", "Reservations granted.", b.grants as f64),
        ("cuzk_budget_waits_total", "counter", "Reservations that had to wait.", b.waits as f64),
        (
            "cuzk_budget_deadline_reserve_bytes",
            "gauge",
            "Kept for deadline work (WinningPoSt, WindowPoSt): bulk work may use the budget less this.",
            b.deadline_reserve as f64,
        ),
        (
            "cuzk_budget_urgent_grants_total",
            "counter",
            "Reservations of deadline work granted.",
            b.urgent_grants as f64,
        ),
        (
            "cuzk_budget_urgent_waits_total",
            "counter",
            "Reservations of deadline work that had to wait (the reserve was not enough).",
            b.urgent_waits as f64,
        ),
    ];
    for (name, kind, help, v) in budget {
        family(&mut o, name, kind, help);
        let _ = writeln!(o, "{name}{{budget=\"{}\"}} {v}", b.name);
    }
    let j = &snap.jobs;
    let jobs: [(&str, &str, &str, u64); 5] = [
        ("cuzk_jobs_submitted_total", "counter", "Jobs accepted.", j.submitted),
        ("cuzk_jobs_succeeded_total", "counter", "Jobs that ended with a proof.", j.succeeded),
        ("cuzk_jobs_failed_total", "counter", "Jobs that ended with an error.", j.failed),
        ("cuzk_jobs_cancelled_total", "counter", "Jobs cancelled.", j.cancelled),
        ("cuzk_jobs_in_flight", "gauge", "Jobs not yet ended.", j.in_flight),
    ];
    for (name, kind, help, v) in jobs {
        family(&mut o, name, kind, help);
        let _ = writeln!(o, "{name} {v}");
    }
    family(
        &mut o,
        "cuzk_job_duration_seconds",
        "histogram",
        "Submission to result of ended jobs, by kind and outcome (cancelled jobs are not timed).",
    );
    for l in &j.latency {
        let labels = format!("kind=\"{}\",outcome=\"{}\"", l.kind, l.outcome);
        for (n, le) in l.buckets.iter().zip(cuzk_actors::tracker::LATENCY_BUCKETS) {
            let _ = writeln!(o, "cuzk_job_duration_seconds_bucket{{{labels},le=\"{le}\"}} {n}");
        }
        let _ = writeln!(o, "cuzk_job_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}", l.count);
        let _ = writeln!(o, "cuzk_job_duration_seconds_sum{{{labels}}} {}", l.sum_secs);
        let _ = writeln!(o, "cuzk_job_duration_seconds_count{{{labels}}} {}", l.count);
    }
    if let Some(r) = rss() {
        family(&mut o, "cuzk_process_resident_memory_bytes", "gauge", "This process's resident set size.");
        let _ = writeln!(o, "cuzk_process_resident_memory_bytes {r}");
    }
    if let Some(p) = crate::bench::peak_rss_bytes() {
        family(&mut o, "cuzk_process_peak_resident_memory_bytes", "gauge", "Peak resident set size.");
        let _ = writeln!(o, "cuzk_process_peak_resident_memory_bytes {p}");
    }
    if let Some((total, avail)) = host_memory() {
        family(&mut o, "cuzk_host_available_memory_bytes", "gauge", "Memory available on the host.");
        let _ = writeln!(o, "cuzk_host_available_memory_bytes {avail}");
        family(&mut o, "cuzk_host_total_memory_bytes", "gauge", "Memory installed on the host.");
        let _ = writeln!(o, "cuzk_host_total_memory_bytes {total}");
    }
    family(
        &mut o,
        "cuzk_precompiled_circuit_bytes",
        "gauge",
        "Host memory held by recorded circuit structures (charged to the host budget).",
    );
    let _ = writeln!(o, "cuzk_precompiled_circuit_bytes {}", snap.precompiled_bytes);
    render_param_digests(&mut o, &snap.param_digests);
    if let Some(p) = &snap.pinned {
        let pinned: [(&str, &str, &str, u64); 5] = [
            ("cuzk_pinned_capacity_bytes", "gauge", "Bound of the pinned host pool.", p.capacity),
            ("cuzk_pinned_allocated_bytes", "gauge", "Pinned memory allocated (in use or idle).", p.allocated),
            (
                "cuzk_pinned_used_bytes",
                "gauge",
                "Pinned memory held by partitions (lent to synthesis or holding an uploaded partition).",
                p.in_use,
            ),
            ("cuzk_pinned_lent_total", "counter", "a/b/c buffers lent to synthesis.", p.lent),
            (
                "cuzk_pinned_fallbacks_total",
                "counter",
                "Pool requests not served: uploaded from pageable memory, or no idle buffer for synthesis.",
                p.fallbacks,
            ),
        ];
        for (name, kind, help, v) in pinned {
            family(&mut o, name, kind, help);
            let _ = writeln!(o, "{name} {v}");
        }
    }
    if !snap.devices.is_empty() {
        type Get = fn(&cuzk_gpu::DeviceStats) -> u64;
        let per_device: [(&str, &str, &str, Get); 9] = [
            (
                "cuzk_device_vram_budget_bytes",
                "gauge",
                "Device memory cuzk may reserve (free at start minus backend.vram_margin).",
                |d| d.vram_budget,
            ),
            ("cuzk_device_vram_reserved_bytes", "gauge", "Reserved: a/b/c workspace and resident parameters.", |d| {
                d.vram_reserved
            }),
            ("cuzk_device_resident_parameter_sets", "gauge", "Parameter sets resident on the device.", |d| {
                d.resident_sets as u64
            }),
            ("cuzk_device_cuda_errors_total", "counter", "Failed CUDA operations (each attempt).", |d| d.cuda_errors),
            ("cuzk_device_oom_retries_total", "counter", "Partitions retried after an out-of-memory error.", |d| {
                d.oom_retries
            }),
            ("cuzk_device_oom_recovered_total", "counter", "Retries after out-of-memory that succeeded.", |d| {
                d.oom_recovered
            }),
            (
                "cuzk_device_healthy",
                "gauge",
                "1 while the device takes work; 0 once a sticky CUDA error retired it (a restart recovers it).",
                |d| u64::from(d.health == cuzk_gpu::DeviceHealth::Healthy),
            ),
            (
                "cuzk_device_partitions_moved_total",
                "counter",
                "Partitions that hit a sticky CUDA error here and ran again elsewhere (another device or the CPU).",
                |d| d.partitions_moved,
            ),
            ("cuzk_device_calls_total", "counter", "Calls that held the device: partitions, parameter uploads.", |d| {
                d.calls
            }),
        ];
        for (name, kind, help, get) in per_device {
            family(&mut o, name, kind, help);
            for d in &snap.devices {
                let _ = writeln!(o, "{name}{{device=\"{}\"}} {}", d.device, get(d));
            }
        }
        family(&mut o, "cuzk_device_oom_errors_total", "counter", "Out-of-memory CUDA failures (each attempt).");
        for d in &snap.devices {
            let _ = writeln!(o, "cuzk_device_oom_errors_total{{device=\"{}\"}} {}", d.device, d.oom_errors);
        }
        family(
            &mut o,
            "cuzk_device_held_seconds_total",
            "counter",
            "Time calls held the device; its rate is the share of the wall the device was kept busy.",
        );
        for d in &snap.devices {
            let _ = writeln!(o, "cuzk_device_held_seconds_total{{device=\"{}\"}} {}", d.device, d.held.as_secs_f64());
        }
        type GetDeadline = fn(&cuzk_gpu::gate::GateStats) -> String;
        let deadline: [(&str, &str, GetDeadline); 4] = [
            (
                "cuzk_device_deadline_beside_total",
                "Deadline partitions run between the kernels of the bulk partition on the device.",
                |g| g.turns.to_string(),
            ),
            (
                "cuzk_device_deadline_beside_wait_seconds_total",
                "Their wait for the bulk partition to reach a yield point.",
                |g| g.turn_wait.as_secs_f64().to_string(),
            ),
            ("cuzk_device_bulk_yields_total", "Stops of bulk work at a yield point for a deadline partition.", |g| {
                g.yields.to_string()
            }),
            ("cuzk_device_bulk_yielded_seconds_total", "Time bulk work stood at yield points.", |g| {
                g.yielded.as_secs_f64().to_string()
            }),
        ];
        for (name, help, get) in deadline {
            family(&mut o, name, "counter", help);
            for d in &snap.devices {
                let _ = writeln!(o, "{name}{{device=\"{}\"}} {}", d.device, get(&d.deadline));
            }
        }
        family(
            &mut o,
            "cuzk_device_deadline_beside_wait_max_seconds",
            "gauge",
            "The longest wait of a deadline partition for the bulk partition's next yield point, since the start; \
             from and to: the yield points the bulk work it waited for ran between.",
        );
        for d in &snap.devices {
            let (from, to) = d.deadline.turn_wait_max_at;
            let _ = writeln!(
                o,
                "cuzk_device_deadline_beside_wait_max_seconds{{device=\"{}\",from=\"{from}\",to=\"{to}\"}} {}",
                d.device,
                d.deadline.turn_wait_max.as_secs_f64()
            );
        }
    }
    family(&mut o, "cuzk_uptime_seconds", "gauge", "Seconds since the engine started.");
    let _ = writeln!(o, "cuzk_uptime_seconds {}", snap.uptime.as_secs_f64());
    family(&mut o, "cuzk_backend_info", "gauge", "The proving backend in use.");
    let _ = writeln!(o, "cuzk_backend_info{{backend=\"{}\"}} 1", snap.backend);
    render_gpus(&mut o, &gpus());
    o
}
