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
    /// A staged partition was handed to a backend that did not stage it.
    #[error("partition was staged by backend `{staged}` but executed on `{executing}`")]
    WrongBackend { staged: &'static str, executing: &'static str },
}
