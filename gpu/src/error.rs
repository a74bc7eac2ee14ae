use thiserror::Error;

/// Errors of the proving backends.
#[derive(Debug, Error)]
pub enum GpuError {
    /// Inputs that do not fit the parameters (a bug upstream, reported, not panicked).
    #[error("{op}: {detail}")]
    Shape { op: &'static str, detail: String },
    /// The domain is larger than the field supports (2^32).
    #[error("evaluation domain 2^{0} is larger than BLS12-381's 2^32")]
    DomainTooLarge(u32),
    /// No GPU backend: not built with CUDA, no driver, or no device.
    #[error("GPU backend unavailable: {0}")]
    Unavailable(String),
    /// A CUDA call failed.
    #[error("CUDA error on device {device} during {op} (code {code}): {msg}")]
    Cuda { op: &'static str, device: usize, code: i32, msg: String, out_of_memory: bool },
    /// A partition needs more device memory than the device's VRAM budget.
    #[error(
        "partition needs {need} bytes of device memory on device {device}; its VRAM budget is {budget} \
         (free memory at start minus backend.vram_margin)"
    )]
    VramBudget { device: usize, need: u64, budget: u64 },
    /// An uploaded partition was handed to a backend that did not upload it.
    #[error("partition was uploaded by backend `{uploaded}` but executed on `{executing}`")]
    WrongBackend { uploaded: &'static str, executing: &'static str },
}

/// A failed C ABI call's `(code, message)` as [`GpuError::Cuda`] for `op` on
/// `device` (code 2: out of memory).
#[cfg(cuzk_cuda)]
pub(crate) fn cuda_err(op: &'static str, device: usize) -> impl Fn((i32, String)) -> GpuError {
    move |(code, msg)| GpuError::Cuda { op, device, code, msg, out_of_memory: code.abs() == 2 }
}
