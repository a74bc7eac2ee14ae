//! cuzk-gpu: the proving kernels behind one interface, [`Backend`].
//!
//! Use it for the two stages that move data to an accelerator and run the heavy
//! mathematics: [`Backend::upload`] (the StagePcie stage: host buffers to where the
//! kernels read them) and [`Backend::execute`] (the ProveGpu stage: the H polynomial
//! by NTT, then the MSMs H, L, A, B_G1 and optionally B_G2).
//!
//! [`cpu::CpuBackend`] implements it on the CPU (rayon NTT, blst's Pippenger MSM);
//! [`cuda::CudaBackend`] on NVIDIA GPUs (sppark's NTT and Pippenger, `cuda/cuzk.cu`),
//! when nvcc was available at build time.
//! It is the reference the CUDA backend is tested against, and the backend used
//! when there is no GPU. Both produce the same group elements, hence byte-identical
//! proofs.
//!
//! [`fake`] holds backends that misbehave on purpose (a device call that hangs), for
//! tests of the stages, the daemon and what embeds them.
//!
//! [`sizing`] gives the device memory the CUDA backend reserves, from sizes alone
//! (what `cuzk size` reports before any device is touched).
//!
//! This crate does not depend on actix.

mod backend;
pub mod cpu;
pub mod cuda;
mod error;
pub mod fake;
mod ffi;
pub mod gate;
mod health;
pub mod kernels;
pub mod pinned;
pub mod sizing;
mod split;
#[cfg(any(cuzk_cuda, test))]
mod staging;
pub mod watchdog;

pub use backend::{
    Backend, DeviceStats, Evals, HostCharge, HostPartition, MsmResults, OpTimings, Staged, UploadedPartition,
};
pub use error::GpuError;
pub use health::{classify, no_device_left, with_injected_fault, DeviceHealth, ErrorClass, InjectedFault};
pub use split::{MsmScalars, SplitScalars};

/// A scalar in canonical (non-Montgomery) little-endian form, as MSMs consume them.
pub type ScalarBytes = [u8; 32];
