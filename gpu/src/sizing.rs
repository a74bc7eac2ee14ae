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

/// Room to keep for a recorded circuit's A and B matrices before the recording
/// exists (decisions made when parameters become resident): 36 bytes a domain
/// element, above a 32GiB PoRep partition's 4.56 GB at 2^27 (34 bytes a row).
pub fn device_matrices_allowance(lg: u32) -> u64 {
    36u64 << lg
}

/// The window width sppark's Pippenger picks for `n` points (`msm_yield_t`'s
/// constructor): 18 bits at 2^26 and 2^27, 17 at 2^25.
pub fn msm_default_window_bits(n: usize) -> u32 {
    let np = n.next_multiple_of(32);
    match np {
        0 => 17,
        1..=192 => 10,
        _ => (floor_log2(np + np / 2) - 8).clamp(10, 18),
    }
}

/// Device bytes of an MSM over `n` G1 points and scalars already on the device at
/// windows of `wbits` bits, as `msm_yield_t` allocates them: each window's buckets
/// (XYZZ, 192 bytes) and histogram (u32), held with the parameters, and a call's
/// temporaries from the driver's pool, sized for its largest batch (sppark's rule:
/// batches of ~2^(wbits+6) points): sort space (16 bytes a point) and digits (4
/// bytes a point and window). At 2^27: 1.6 GB at 18 bits, 5.9 GB at 20.
pub fn msm_g1_bytes(n: usize, wbits: u32) -> u64 {
    let nwins = (254 / wbits + 1) as u64;
    let buckets = nwins * (1u64 << (wbits - 1)) * (192 + 4);
    let lg = floor_log2(n + n / 2).max(wbits);
    let batch = ((1usize << (lg - wbits)) >> 6).max(1);
    let stride = n.div_ceil(batch).next_multiple_of(32) as u64;
    buckets + stride * 16 + nwins * stride * 4
}

/// What H's MSM over `n` points takes beyond sppark's width at `wbits` bits
/// (`backend.msm_h_window_bits`): the resident set is charged it, since
/// `backend.vram_margin` is sized for sppark's. 4.2 GB at 2^27 and 20 bits.
pub fn msm_h_window_extra_bytes(n: usize, wbits: u32) -> u64 {
    msm_g1_bytes(n, wbits).saturating_sub(msm_g1_bytes(n, msm_default_window_bits(n)))
}

fn floor_log2(n: usize) -> u32 {
    usize::BITS - 1 - n.max(1).leading_zeros()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msm_sizes_follow_sppark_at_2_27() {
        let n = (1usize << 27) - 1; // H's points at a 32GiB partition
        assert_eq!(msm_default_window_bits(n), 18);
        assert_eq!(msm_default_window_bits((1 << 25) - 1), 17);
        assert_eq!(msm_default_window_bits(1000), 10);
        // 18 bits: 15 windows of 2^17 buckets, 8 batches of 2^24 points.
        let b18 = 15 * (1u64 << 17) * 196 + (1 << 24) * (16 + 15 * 4);
        assert_eq!(msm_g1_bytes(n, 18), b18);
        // 20 bits: 13 windows of 2^19 buckets, 2 batches of 2^26 points.
        let b20 = 13 * (1u64 << 19) * 196 + (1 << 26) * (16 + 13 * 4);
        assert_eq!(msm_g1_bytes(n, 20), b20);
        assert_eq!(msm_h_window_extra_bytes(n, 20), b20 - b18);
        assert_eq!(msm_h_window_extra_bytes(n, 18), 0);
        // Narrower than sppark's costs nothing beyond the margin.
        assert_eq!(msm_h_window_extra_bytes(n, 16), 0);
    }
}
