//! Sizing a host for a circuit before any parameter exists (`cuzk size`): what the
//! engine will reserve for the parameters, the circuit recording and each partition,
//! how many partitions its host budget admits at once, and where the parameters
//! live on each device. The figures are the ones the stages reserve with
//! (`synthesize::partition_bytes`, the recordings' estimate, the CUDA backend's
//! workspace and resident sizes), computed from the circuit's shape alone, so the
//! answer is the engine's own rather than a separate model.

use std::fmt;

use cuzk_core::CircuitShape;
use cuzk_gpu::sizing::{
    device_matrices_bytes, device_resident_bytes, device_staging_bytes, device_workspace_bytes,
    msm_h_window_extra_bytes,
};
use cuzk_srs::ProvingKey;

use crate::{
    ground::{ByteSize, MemoryLimit},
    services::recordings::recording_estimate,
    services::SelectedBackend,
    synthesize::partition_bytes_for_shape,
    Config,
};

/// The host [`size`] answers for: this one, with the backend it would use
/// ([`Target::this_host`]), or a GPU host being planned ([`Target::planned`]:
/// `cuzk size --gpus`), sized with the same figures.
#[derive(Clone, Debug)]
pub struct Target {
    pub backend: &'static str,
    /// The backend's NTT runs on the host (the CPU backend): a partition holds its
    /// NTT buffers there.
    pub ntt_on_host: bool,
    /// The backend evaluates a, b, c itself from the recorded matrices.
    pub abc_on_device: bool,
    /// Each device's VRAM budget, in device order; empty without a GPU.
    pub devices: Vec<u64>,
    pub host_budget: u64,
    /// A planned host's cores: the synthesis workers when `synthesize.max_concurrency`
    /// is 0 ("the cores"); `None`: this machine's.
    pub cores: Option<usize>,
    /// Said beside the sizing: what the figures assume.
    pub planned: Option<String>,
}

impl Target {
    /// This host, with `selected` (its devices' budgets as the backend found them).
    ///
    /// # Errors
    /// When the host budget cannot be computed (the machine's memory is unreadable).
    pub fn this_host(selected: &SelectedBackend, cfg: &Config) -> Result<Self, String> {
        let devices = if selected.on_device {
            selected.backend.device_stats().iter().map(|d| d.vram_budget).collect()
        } else {
            Vec::new()
        };
        Ok(Self {
            backend: selected.backend.name(),
            ntt_on_host: selected.backend.ntt_on_host(),
            abc_on_device: selected.backend.abc_on_device(),
            devices,
            host_budget: selected.host_budget(&cfg.budget)?,
            cores: None,
            planned: None,
        })
    }

    /// A host with `gpus` GPUs of `vram` bytes each, `host_memory` bytes of RAM and
    /// `cores` cores (this machine's when `None`), under `cfg` as the CUDA backend
    /// would apply it there: each device's budget its memory less
    /// `backend.vram_margin`, an "auto" host budget the RAM less
    /// `budget.host_safety_margin` and the pinned pool.
    ///
    /// # Errors
    /// When `gpus` or `cores` is 0, or an "auto" budget leaves nothing.
    pub fn planned(
        cfg: &Config,
        gpus: usize,
        vram: u64,
        host_memory: Option<u64>,
        cores: Option<usize>,
    ) -> Result<Self, String> {
        if gpus == 0 {
            return Err("a planned host needs at least one GPU (--gpus 1 or more)".into());
        }
        if cores == Some(0) {
            return Err("a planned host needs at least one core (--cores 1 or more)".into());
        }
        let budget = &cfg.budget;
        let pinned = cfg.backend.pinned_memory.0;
        let host_budget = match host_memory {
            None => budget.less_pinned(budget.host_bytes()?, pinned),
            Some(ram) => {
                let bytes = match budget.host_memory {
                    MemoryLimit::Bytes(b) => Some(b.0),
                    MemoryLimit::Auto => budget.auto_bytes_of(ram),
                };
                bytes.map(|b| budget.less_pinned(b, pinned)).filter(|b| *b > 0).ok_or_else(|| {
                    format!(
                        "a planned host of {} leaves nothing after budget.host_safety_margin {} and backend.pinned_memory {}",
                        ByteSize(ram),
                        budget.host_safety_margin,
                        cfg.backend.pinned_memory
                    )
                })?
            }
        };
        let ram = host_memory.map_or_else(|| "this machine's RAM".to_string(), |b| ByteSize(b).to_string());
        let cpus = cores.map_or_else(|| "this machine's cores".to_string(), |n| format!("{n} cores"));
        Ok(Self {
            backend: "cuda",
            ntt_on_host: false,
            abc_on_device: cfg.backend.abc_on_device,
            devices: vec![vram.saturating_sub(cfg.backend.vram_margin.0); gpus],
            host_budget,
            cores,
            planned: Some(format!("planned host: {gpus} GPU(s) of {}, {ram}, {cpus}", ByteSize(vram))),
        })
    }
}

/// Where a parameter set lives on one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Points and a partition's workspace fit the device's VRAM budget together.
    Resident,
    /// Only the workspace fits (or `backend.srs_resident` is off): points are
    /// streamed from host memory for every MSM.
    Streamed,
    /// Not even one partition's workspace fits.
    TooSmall,
}

/// One device's side of a [`Sizing`].
#[derive(Clone, Debug)]
pub struct DeviceSizing {
    pub device: usize,
    pub vram_budget: u64,
    /// A partition's device buffers (`cuzk_gpu::sizing::device_workspace_bytes`).
    pub workspace: u64,
    /// The parameter points when resident.
    pub resident: u64,
    /// The recording's A and B matrices, where the backend evaluates a, b, c on
    /// the device (`cuzk_gpu::sizing::device_matrices_bytes`), and whether they fit
    /// beside the workspace and the resident points (else a, b, c are evaluated
    /// on the host).
    pub matrices: Option<(u64, bool)>,
    /// H's MSM at `backend.msm_h_window_bits` (sets of 2^26 H points or more, when
    /// resident): what it takes beyond sppark's width, and whether that fits after
    /// the matrices (else H runs at sppark's width).
    pub h_windows: Option<(u32, u64, bool)>,
    /// Staging buffers beyond the workspace's one that fit beside it (and the
    /// resident points when resident), up to `backend.device_buffers` − 1: with one
    /// or more, the next partition uploads while one computes.
    pub extra_buffers: usize,
    /// One staging buffer (`cuzk_gpu::sizing::device_staging_bytes`).
    pub buffer: u64,
    pub placement: Placement,
}

/// What one circuit needs of this host, as the engine will reserve it.
#[derive(Clone, Debug)]
pub struct Sizing {
    pub shape: CircuitShape,
    /// Partitions per proof.
    pub partitions: usize,
    pub backend: &'static str,
    /// What a planned host's figures assume ([`Target::planned`]); `None`: this host.
    pub planned: Option<String>,
    /// Decoded parameter points, held in host memory and charged to its budget.
    pub params: u64,
    /// The recording's upper estimate, reserved while the first partition records
    /// (trimmed to its real size after); 0 when `synthesize.precompile` is off.
    pub recording: u64,
    /// One partition in flight (`synthesize::partition_bytes` for this backend).
    pub partition: u64,
    /// One partition once the circuit is recorded, where the backend evaluates a,
    /// b, c itself (`backend.abc_on_device`): the witness and MSM scalars alone.
    pub witness_partition: Option<u64>,
    /// Partitions synthesized at once with `witness_partition` each (the steady
    /// state after the recording).
    pub at_once_recorded: Option<usize>,
    pub host_budget: u64,
    /// `synthesize.max_concurrency` as the engine applies it (0 = the cores).
    pub max_concurrency: usize,
    /// Partitions synthesized at once: what the budget admits beside the parameters
    /// and the recording, capped by `max_concurrency`. 0: none fits.
    pub at_once: usize,
    pub devices: Vec<DeviceSizing>,
}

/// Sizes `shape` (a circuit proved in `partitions` partitions) for the host
/// `target` under `cfg`. `nonzeros`: A's and B's non-zero entries
/// (`cuzk_synth::shape_and_nonzeros`), what the device keeps to evaluate a, b, c.
pub fn size(shape: &CircuitShape, nonzeros: [usize; 2], partitions: usize, cfg: &Config, target: &Target) -> Sizing {
    let host_budget = target.host_budget;
    let m = 1usize << shape.domain_log2();
    let params = ProvingKey::bytes_for_shape(shape);
    let recording = if cfg.synthesize.precompile { recording_estimate(m as u64) } else { 0 };
    let partition = partition_bytes_for_shape(shape, target.ntt_on_host);
    let max_concurrency = match (cfg.synthesize.max_concurrency, target.cores) {
        (0, Some(cores)) => cores,
        _ => cfg.synthesize.limits().workers,
    };
    // Bulk work may not touch the deadline reserve.
    let room = host_budget.saturating_sub(params + recording + cfg.budget.deadline_reserve_bytes(host_budget));
    let at_once = usize::try_from(room / partition.max(1)).unwrap_or(usize::MAX).min(max_concurrency);
    // a, b, c never on the host once the circuit is recorded (Synthesize reserves
    // the rest: `held_when_lent`).
    let witness_partition =
        (cfg.synthesize.precompile && target.abc_on_device).then(|| partition.saturating_sub(3 * 32 * m as u64));
    let at_once_recorded =
        witness_partition.map(|w| usize::try_from(room / w.max(1)).unwrap_or(usize::MAX).min(max_concurrency));
    let workspace = device_workspace_bytes(shape.domain_log2());
    let resident = device_resident_bytes(m - 1, shape.aux, shape.a_query, shape.b_query, shape.b_query);
    let devices = target
        .devices
        .iter()
        .enumerate()
        .map(|(device, &vram_budget)| {
            let placement = if workspace > vram_budget {
                Placement::TooSmall
            } else if cfg.backend.srs_resident && workspace + resident <= vram_budget {
                Placement::Resident
            } else {
                Placement::Streamed
            };
            let mut held = workspace + if placement == Placement::Resident { resident } else { 0 };
            // The matrices take precedence over a second staging buffer, not over
            // the resident points (`CudaBackend::ensure_matrices`).
            let matrices = witness_partition.map(|_| {
                let bytes = device_matrices_bytes(shape.constraints, nonzeros[0], nonzeros[1], 0);
                let fits = placement != Placement::TooSmall && held + bytes <= vram_budget;
                if fits {
                    held += bytes;
                }
                (bytes, fits)
            });
            let wbits = cfg.backend.msm_h_window_bits;
            let wide = placement == Placement::Resident
                && wbits != 0
                && m > cuzk_gpu::cuda::CudaOptions::default().msm_h_window_min_points;
            let h_windows = wide.then(|| {
                let bytes = msm_h_window_extra_bytes(m - 1, wbits);
                let fits = held + bytes <= vram_budget;
                if fits {
                    held += bytes;
                }
                (wbits, bytes, fits)
            });
            let buffer = device_staging_bytes(shape.domain_log2());
            let room = vram_budget.saturating_sub(held) / buffer.max(1);
            let extra_buffers = if placement == Placement::TooSmall {
                0
            } else {
                usize::try_from(room).unwrap_or(usize::MAX).min(cfg.backend.device_buffers.saturating_sub(1))
            };
            DeviceSizing {
                device,
                vram_budget,
                workspace,
                resident,
                matrices,
                h_windows,
                extra_buffers,
                buffer,
                placement,
            }
        })
        .collect();
    Sizing {
        shape: *shape,
        partitions,
        backend: target.backend,
        planned: target.planned.clone(),
        params,
        recording,
        partition,
        witness_partition,
        at_once_recorded,
        host_budget,
        max_concurrency,
        at_once,
        devices,
    }
}

impl Sizing {
    /// `Err` naming the budget this circuit exceeds on this host and by how much:
    /// the host budget (parameters and one partition; the recording is skipped when
    /// there is no room for it, at the price of plain synthesis), or a device too
    /// small for one partition's workspace.
    pub fn check(&self) -> Result<(), String> {
        let need = self.params + self.partition;
        if need > self.host_budget {
            return Err(format!(
                "does not fit the host budget: parameters {} + one partition {} = {} exceed budget.host_memory's {} \
                 by {} (a host with more memory, or a larger budget.host_memory if the machine has it)",
                ByteSize(self.params),
                ByteSize(self.partition),
                ByteSize(need),
                ByteSize(self.host_budget),
                ByteSize(need - self.host_budget)
            ));
        }
        if let Some(d) = self.devices.iter().find(|d| d.placement == Placement::TooSmall) {
            return Err(format!(
                "does not fit device {}: one partition's workspace {} exceeds its VRAM budget {} by {}",
                d.device,
                ByteSize(d.workspace),
                ByteSize(d.vram_budget),
                ByteSize(d.workspace - d.vram_budget)
            ));
        }
        Ok(())
    }
}

impl fmt::Display for Sizing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.shape;
        writeln!(
            f,
            "circuit: {} partition(s) of {} constraints (domain 2^{}), {} inputs, {} aux, A {} / B {} points",
            self.partitions,
            s.constraints,
            s.domain_log2(),
            s.inputs,
            s.aux,
            s.a_query,
            s.b_query
        )?;
        if let Some(p) = &self.planned {
            writeln!(f, "{p}")?;
        }
        writeln!(f, "backend: {} ({} device(s))", self.backend, self.devices.len())?;
        writeln!(f, "host budget: {}", ByteSize(self.host_budget))?;
        writeln!(f, "  parameters     {} (decoded points, in host memory)", ByteSize(self.params))?;
        writeln!(
            f,
            "  recording      {} (upper estimate while the first partition records; trimmed after)",
            ByteSize(self.recording)
        )?;
        writeln!(f, "  per partition  {} (from synthesis until its MSMs are done)", ByteSize(self.partition))?;
        if let Some(w) = self.witness_partition {
            writeln!(
                f,
                "                 {} once the circuit is recorded (witness only: a, b, c evaluated on the GPU)",
                ByteSize(w)
            )?;
        }
        let with = self.params + self.recording + self.at_once as u64 * self.partition;
        if self.at_once > 0 {
            writeln!(
                f,
                "partitions synthesized at once: {} ({} of the budget with the parameters and the recording{})",
                self.at_once,
                ByteSize(with),
                if self.at_once == self.max_concurrency { "; capped by synthesize.max_concurrency" } else { "" }
            )?;
            if let Some(n) = self.at_once_recorded {
                writeln!(f, "  once the circuit is recorded: {n} at once")?;
            }
            if self.devices.len() > 1 {
                // One host budget and one set of cores feed every device.
                let n = self.devices.len();
                let per = self.at_once_recorded.unwrap_or(self.at_once) as f64 / n as f64;
                writeln!(
                    f,
                    "  {per:.1} partition(s) synthesizing per device: the {n} devices share the host budget and cores"
                )?;
            }
        } else if self.check().is_ok() {
            writeln!(f, "partitions synthesized at once: 1, without the recording (no room for it: plain synthesis)")?;
        } else {
            writeln!(f, "partitions synthesized at once: none")?;
        }
        for d in &self.devices {
            let what = match d.placement {
                Placement::Resident => format!(
                    "parameters resident ({}) + one partition's workspace ({}) = {}",
                    ByteSize(d.resident),
                    ByteSize(d.workspace),
                    ByteSize(d.resident + d.workspace)
                ),
                Placement::Streamed => format!(
                    "parameters streamed from host memory for every MSM (resident would need {} + {}); workspace {}",
                    ByteSize(d.resident),
                    ByteSize(d.workspace),
                    ByteSize(d.workspace)
                ),
                Placement::TooSmall => format!("one partition's workspace ({}) does not fit", ByteSize(d.workspace)),
            };
            let what = match d.matrices {
                Some((bytes, true)) => {
                    format!("{what}; + the recording's A and B matrices ({}) for a, b, c on the GPU", ByteSize(bytes))
                }
                Some((bytes, false)) => {
                    format!(
                        "{what}; no room for the recording's A and B matrices ({}): a, b, c on the host",
                        ByteSize(bytes)
                    )
                }
                None => what,
            };
            let what = match d.h_windows {
                Some((w, bytes, true)) => format!("{what}; + H's MSM at {w}-bit windows ({})", ByteSize(bytes)),
                Some((w, bytes, false)) => {
                    format!("{what}; no room for H's MSM at {w}-bit windows ({}): sppark's width", ByteSize(bytes))
                }
                None => what,
            };
            let extra = if d.extra_buffers > 0 {
                format!(
                    "; + {} more staging buffer(s) of {} (uploads beside compute)",
                    d.extra_buffers,
                    ByteSize(d.buffer * d.extra_buffers as u64)
                )
            } else if d.placement != Placement::TooSmall {
                "; no room for a second staging buffer (uploads in line)".to_string()
            } else {
                String::new()
            };
            writeln!(f, "device {}: VRAM budget {}: {what}{extra}", d.device, ByteSize(d.vram_budget))?;
        }
        match self.check() {
            Ok(()) => write!(f, "fits"),
            Err(e) => write!(f, "{e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::{select_backend, BackendKind};

    /// The 32GiB PoRep circuit's shape (`synth::shape_of`, measured on the H200 host).
    fn porep_32gib() -> CircuitShape {
        CircuitShape {
            constraints: 130_278_869,
            inputs: 328,
            aux: 130_169_893,
            a_query: 129_753_620,
            b_query: 33_112_282,
        }
    }

    /// A and B's non-zeros in a 32GiB PoRep partition's recording (`synth_bench`
    /// with `RECORD_ONLY=1` on a shape-only C1, build machine).
    const NONZEROS_32GIB: [usize; 2] = [309_405_051, 130_327_340];

    /// The CPU backend (no device) with a host budget of `host` bytes.
    fn cfg(host: u64, max_concurrency: usize) -> (Config, Target) {
        let mut cfg = Config::default();
        cfg.backend.kind = BackendKind::Cpu;
        cfg.budget.host_memory = MemoryLimit::Bytes(ByteSize(host));
        cfg.synthesize.max_concurrency = max_concurrency;
        let cpu = Target::this_host(&select_backend(&cfg.backend).unwrap(), &cfg).unwrap();
        (cfg, cpu)
    }

    #[test]
    fn a_32gib_partition_on_the_cpu_backend_is_sized_as_the_stages_reserve_it() {
        let shape = porep_32gib();
        let (c, cpu) = cfg(200 << 30, 64);
        let s = size(&shape, NONZEROS_32GIB, 10, &c, &cpu);
        assert_eq!(s.params, 47_373_927_744, "the decoded size the engine reported at 32GiB");
        assert_eq!(s.partition, partition_bytes_for_shape(&shape, true));
        assert_eq!(s.recording, 64 << 27);
        let room = (200u64 << 30) - s.params - s.recording;
        assert_eq!(s.at_once as u64, room / s.partition);
        assert!(s.devices.is_empty());
        assert!(s.check().is_ok());
        assert!(s.to_string().ends_with("fits"), "{s}");
        // Capped by the configuration.
        let (c, cpu) = cfg(200 << 30, 1);
        let s = size(&shape, NONZEROS_32GIB, 10, &c, &cpu);
        assert_eq!(s.at_once, 1);
        assert!(s.to_string().contains("capped by synthesize.max_concurrency"), "{s}");
    }

    /// The CPU backend, claiming to evaluate a, b, c itself (as the CUDA backend
    /// does), on one device with this VRAM budget.
    struct Deferring(u64);

    impl cuzk_gpu::Backend for Deferring {
        fn name(&self) -> &'static str {
            "cpu"
        }
        fn upload(&self, host: cuzk_gpu::HostPartition) -> Result<cuzk_gpu::UploadedPartition, cuzk_gpu::GpuError> {
            cuzk_gpu::Backend::upload(&cuzk_gpu::cpu::CpuBackend, host)
        }
        fn execute(
            &self,
            uploaded: cuzk_gpu::UploadedPartition,
            srs: &ProvingKey,
            with_b_g2: bool,
        ) -> Result<cuzk_gpu::MsmResults, cuzk_gpu::GpuError> {
            cuzk_gpu::Backend::execute(&cuzk_gpu::cpu::CpuBackend, uploaded, srs, with_b_g2)
        }
        fn abc_on_device(&self) -> bool {
            true
        }
        fn device_stats(&self) -> Vec<cuzk_gpu::DeviceStats> {
            vec![cuzk_gpu::DeviceStats { device: 0, vram_budget: self.0, ..Default::default() }]
        }
    }

    #[test]
    fn a_backend_that_evaluates_a_b_c_admits_more_partitions_once_recorded() {
        let shape = porep_32gib();
        let (c, _) = cfg(125 << 30, 64);
        let deferring = SelectedBackend {
            backend: std::sync::Arc::new(Deferring(0)),
            devices: 1,
            on_device: false,
            pinned_bytes: 0,
        };
        let s = size(&shape, NONZEROS_32GIB, 10, &c, &Target::this_host(&deferring, &c).unwrap());
        let m = 1u64 << shape.domain_log2();
        assert_eq!(s.witness_partition, Some(s.partition - 3 * 32 * m));
        let room = (125u64 << 30) - s.params - s.recording - c.budget.deadline_reserve_bytes(125 << 30);
        assert_eq!(s.at_once_recorded, Some((room / s.witness_partition.unwrap()) as usize));
        assert!(s.at_once_recorded.unwrap() > s.at_once, "{s}");
        assert!(s.to_string().contains("once the circuit is recorded"), "{s}");
        // The CPU backend computes them on the host: no such line.
        let (c, cpu) = cfg(125 << 30, 64);
        let s = size(&shape, NONZEROS_32GIB, 10, &c, &cpu);
        assert_eq!(s.witness_partition, None);
        assert!(!s.to_string().contains("once the circuit is recorded"), "{s}");
    }

    #[test]
    fn the_device_holds_the_recordings_matrices_where_they_fit_beside_the_points() {
        let shape = porep_32gib();
        let (c, _) = cfg(125 << 30, 64);
        let on = |vram: u64| {
            let b = SelectedBackend {
                backend: std::sync::Arc::new(Deferring(vram)),
                devices: 1,
                on_device: true,
                pinned_bytes: 0,
            };
            size(&shape, NONZEROS_32GIB, 10, &c, &Target::this_host(&b, &c).unwrap())
        };
        // 130.3M rows and 439.7M non-zeros: the 4.56 GB the H100 run logged.
        let bytes = device_matrices_bytes(shape.constraints, NONZEROS_32GIB[0], NONZEROS_32GIB[1], 0);
        assert_eq!(bytes / 10_000_000, 456, "{bytes}");
        let s = on(80_000_000_000);
        let d = &s.devices[0];
        assert_eq!(d.placement, Placement::Resident);
        assert_eq!(d.matrices, Some((bytes, true)));
        assert!(d.workspace + d.resident + bytes <= d.vram_budget);
        // What is left after them is less than a second staging buffer.
        assert_eq!(d.extra_buffers, 0, "{s}");
        assert!(s.to_string().contains("A and B matrices (4.25 GiB) for a, b, c on the GPU"), "{s}");
        // H at 20-bit windows (the default) after the matrices: 4.2 GB more.
        let wide = msm_h_window_extra_bytes((1 << 27) - 1, 20);
        assert_eq!(d.h_windows, Some((20, wide, true)), "{s}");
        assert!(s.to_string().contains("+ H's MSM at 20-bit windows"), "{s}");
        let s = on(d.workspace + d.resident + bytes + wide - 1);
        assert_eq!(s.devices[0].matrices, Some((bytes, true)));
        assert_eq!(s.devices[0].h_windows, Some((20, wide, false)), "the matrices come first");
        assert!(s.to_string().contains("no room for H's MSM at 20-bit windows"), "{s}");
        // Room for the points but not the matrices as well: a, b, c on the host.
        let s = on(d.workspace + d.resident + bytes - 1);
        assert_eq!(s.devices[0].placement, Placement::Resident);
        assert_eq!(s.devices[0].matrices, Some((bytes, false)));
        assert!(s.to_string().contains("no room for the recording's A and B matrices"), "{s}");
        // The CPU backend: no matrices on any device.
        let (c, cpu) = cfg(125 << 30, 64);
        assert!(size(&shape, NONZEROS_32GIB, 10, &c, &cpu).devices.iter().all(|d| d.matrices.is_none()));
    }

    /// `cuzk size --gpus 2 --vram … --host-memory …`: a host that is not this one,
    /// sized with the engine's figures; its devices share one host budget.
    #[test]
    fn a_planned_two_gpu_host_is_sized_per_device_from_one_host_budget() {
        let shape = porep_32gib();
        let mut c = Config::default();
        c.synthesize.max_concurrency = 64;
        let (ram, vram) = (251u64 << 30, 143_771u64 << 20);
        let two = Target::planned(&c, 2, vram, Some(ram), None).unwrap();
        assert_eq!(two.host_budget, ram - c.budget.host_safety_margin.0 - c.backend.pinned_memory.0);
        let s = size(&shape, NONZEROS_32GIB, 10, &c, &two);
        assert_eq!(s.devices.len(), 2);
        for (i, d) in s.devices.iter().enumerate() {
            assert_eq!((d.device, d.vram_budget), (i, vram - c.backend.vram_margin.0));
            assert_eq!(d.placement, Placement::Resident, "{s}");
            assert_eq!(d.matrices.map(|m| m.1), Some(true), "{s}");
        }
        let one = size(&shape, NONZEROS_32GIB, 10, &c, &Target::planned(&c, 1, vram, Some(ram), None).unwrap());
        assert_eq!((one.at_once, one.at_once_recorded), (s.at_once, s.at_once_recorded), "one host budget either way");
        let text = s.to_string();
        assert!(text.contains("planned host: 2 GPU(s) of 140.40 GiB, 251.00 GiB, this machine's cores"), "{text}");
        assert!(text.contains("partition(s) synthesizing per device: the 2 devices share"), "{text}");
        assert!(!one.to_string().contains("per device"), "{one}");

        // Its cores are the synthesis workers where max_concurrency is "the cores".
        c.synthesize.max_concurrency = 0;
        let few = size(&shape, NONZEROS_32GIB, 10, &c, &Target::planned(&c, 2, vram, Some(ram), Some(1)).unwrap());
        assert_eq!((few.max_concurrency, few.at_once), (1, 1), "{few}");
        assert!(few.to_string().contains("1 cores"), "{few}");
        assert!(Target::planned(&c, 2, vram, Some(ram), Some(0)).unwrap_err().contains("at least one core"));
        assert!(Target::planned(&c, 0, vram, Some(ram), None).unwrap_err().contains("at least one GPU"));
        let e = Target::planned(&c, 1, vram, Some(2 << 30), None).unwrap_err();
        assert!(e.contains("leaves nothing after budget.host_safety_margin"), "{e}");
        // A configured budget is taken as it is.
        c.budget.host_memory = MemoryLimit::Bytes(ByteSize(100 << 30));
        assert_eq!(Target::planned(&c, 2, vram, Some(ram), None).unwrap().host_budget, 100 << 30);
    }

    #[test]
    fn a_host_too_small_gets_an_error_naming_the_budget_and_the_shortfall() {
        let shape = porep_32gib();
        let (c, cpu) = cfg(60 << 30, 0);
        let s = size(&shape, NONZEROS_32GIB, 10, &c, &cpu);
        assert_eq!(s.at_once, 0);
        let e = s.check().unwrap_err();
        let short = s.params + s.partition - (60u64 << 30);
        assert!(e.contains("host budget") && e.contains(&ByteSize(short).to_string()), "{e}");
        assert!(s.to_string().contains("partitions synthesized at once: none"), "{s}");
        // Room for parameters and a partition but not the recording: plain synthesis.
        let (c, cpu) = cfg(s.params + s.partition + (1 << 30), 0);
        let s = size(&shape, NONZEROS_32GIB, 10, &c, &cpu);
        assert_eq!(s.at_once, 0);
        assert!(s.check().is_ok());
        assert!(s.to_string().contains("without the recording"), "{s}");
    }
}
