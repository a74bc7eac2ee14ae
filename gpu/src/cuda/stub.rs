//! The CUDA backend of a build without nvcc (`cfg(not(cuzk_cuda))`): the same API,
//! whose construction fails with the reason, so callers compile the same either way.

use cuzk_srs::ProvingKey;

use super::{CudaOptions, DeviceInfo};
use crate::{Backend, GpuError, HostPartition, MsmResults, UploadedPartition};

/// Stand-in when built without nvcc: construction fails with the reason.
pub struct CudaBackend {
    _never: std::convert::Infallible,
}

impl CudaBackend {
    /// # Errors
    /// Always: this build has no CUDA code.
    pub fn new(_: CudaOptions) -> Result<Self, GpuError> {
        Err(GpuError::Unavailable(
            "this build has no CUDA backend (nvcc was not found when cuzk-gpu was built; see docs/gpu.md)".into(),
        ))
    }

    /// Devices in use.
    pub fn devices(&self) -> Vec<DeviceInfo> {
        match self._never {}
    }

    /// Test hook: the next `n` executions fail as out of memory.
    pub fn inject_oom(&self, _n: u32) {
        match self._never {}
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }
    fn upload(&self, _: HostPartition) -> Result<UploadedPartition, GpuError> {
        match self._never {}
    }
    fn execute(&self, _: UploadedPartition, _: &ProvingKey, _: bool) -> Result<MsmResults, GpuError> {
        match self._never {}
    }
}

/// Whether this build has CUDA code.
pub const COMPILED: bool = false;

/// A staging buffer held for an uploaded partition (never made without CUDA).
pub struct Lease(std::convert::Infallible);

impl std::fmt::Debug for Lease {
    fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {}
    }
}
