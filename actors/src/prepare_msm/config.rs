use serde::Deserialize;

/// Where the B_G2 MSM runs.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum BG2Placement {
    /// On the GPU when the backend is a GPU, else in PrepareMsm on the CPU.
    #[default]
    Auto,
    /// In PrepareMsm, on the CPU, concurrently with the backend's G1 MSMs.
    Cpu,
    /// In ProveGpu, on the backend.
    Backend,
}

use crate::runtime::StageLimits;

/// `[prepare_msm]`: CPU preparation of MSM inputs.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PrepareMsmConfig {
    pub mailbox_capacity: usize,
    pub queue_capacity: usize,
    pub workers: usize,
    /// Where the B_G2 MSM runs: "auto" (GPU backend: on the GPU; CPU backend: here,
    /// beside ProveGpu's G1 MSMs), "cpu" (here) or "backend" (in ProveGpu).
    pub b_g2: BG2Placement,
    /// Split each MSM's scalars by value when at most 1/8 of them are neither 0 nor
    /// 1 (a PoRep witness: under 2%): the backend sums the points behind the ones,
    /// skips the zeros and runs an MSM over the rest alone. Only the rest is
    /// converted from Montgomery form. The same group elements, so the same proof
    /// bytes; random scalars (synthetic circuits) stay dense. `gpu/src/split.rs`.
    pub bit_split: bool,
}

impl PrepareMsmConfig {
    /// Whether PrepareMsm computes B_G2 on the CPU, for a backend that runs on a
    /// device (`on_device`) or not.
    pub fn b_g2_on_cpu(&self, on_device: bool) -> bool {
        match self.b_g2 {
            BG2Placement::Cpu => true,
            BG2Placement::Backend => false,
            BG2Placement::Auto => !on_device,
        }
    }
}

impl Default for PrepareMsmConfig {
    fn default() -> Self {
        PrepareMsmConfig {
            mailbox_capacity: 4,
            queue_capacity: 2,
            workers: 1,
            b_g2: BG2Placement::Auto,
            bit_split: true,
        }
    }
}

impl PrepareMsmConfig {
    pub(crate) fn limits(&self) -> StageLimits {
        StageLimits {
            mailbox_capacity: self.mailbox_capacity,
            queue_capacity: self.queue_capacity,
            workers: self.workers,
        }
    }
}
