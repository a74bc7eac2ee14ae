//! Device memory of the CUDA backend as a function of sizes alone: what one
//! partition's workspace and staging buffer take at a domain, and what a parameter
//! set takes when resident. The backend reserves these from each device's VRAM
//! budget (`cuda/`, `staging.rs`), and `cuzk size` (cuzk-actors' `sizing`) answers
//! with the same figures before any device or parameter file is touched. Compiled
//! with or without CUDA.

/// Device bytes the CUDA backend needs to run a partition of domain 2^lg, beside
/// any resident parameters: one staging buffer ([`device_staging_bytes`]) and the
/// device's workspace (the gathered rest points of split MSMs, 2^lg / 8 G2 points,
/// and the bit sums' partial sums, under 1 MiB). 19.3 GB at 2^27.
pub fn device_workspace_bytes(lg: u32) -> u64 {
    ((192 / 8) << lg) + (1 << 20) + device_staging_bytes(lg)
}

/// One staging buffer of domain 2^lg: a, b, c, the bit-split index lists
/// (3 << lg u32) and the split rest scalars ((2^lg / 8) × 3).
/// 16.1 GB at 2^27. With `backend.device_buffers = 2` (the default) a device holds
/// two when its VRAM budget has room, so that one partition uploads while another
/// computes.
pub fn device_staging_bytes(lg: u32) -> u64 {
    (3 * 32u64 + 3 * 4 + 3 * 32 / 8) << lg
}

/// Device bytes of a parameter set's points when resident (everything but the
/// verifying key): 47.4 GB for a 32GiB PoRep partition's parameters.
pub fn device_resident_bytes(h: usize, l: usize, a: usize, b_g1: usize, b_g2: usize) -> u64 {
    (h + l + a + b_g1) as u64 * 96 + b_g2 as u64 * 192
}

/// Device bytes of a recorded circuit's A and B matrices when resident (a, b, c
/// evaluated on the device): row ends (u32) and entries (u32 variable, u32
/// coefficient index) of both, and the coefficient table. 4.56 GB for a 32GiB
/// PoRep partition (130.3M rows, 309.4M + 130.3M non-zeros).
pub fn device_matrices_bytes(rows: usize, a_nonzeros: usize, b_nonzeros: usize, coeffs: usize) -> u64 {
    (2 * rows * 4 + (a_nonzeros + b_nonzeros) * 8 + coeffs * 32) as u64
}
