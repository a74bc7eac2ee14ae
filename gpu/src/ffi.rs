//! The foreign code this crate calls. With `pinned.rs`, the only `unsafe` of the
//! crate (cuzk-gpu is the one crate that does not deny `unsafe_code`; every block
//! has a `// SAFETY:` comment, docs/style.md):
//! - blstrs types viewed as the blst types they wrap (`#[repr(transparent)]`): the
//!   CPU backend's blst MSMs and batch additions (`g1_sum`, `g2_sum`), and the CUDA
//!   backend's results, which come back as blst points;
//! - `cuda` (only with `cfg(cuzk_cuda)`): the C ABI of `cuda/cuzk.cu` and safe
//!   wrappers around it, which `cuda/` calls. `pinned.rs` calls `cuzk_host_alloc`
//!   and `cuzk_host_free` itself.

use blst::{blst_p1, blst_p1_affine, blst_p2, blst_p2_affine};
use blstrs::{G1Affine, G1Projective, G2Affine, G2Projective};

pub(crate) fn g1_affines(p: &[G1Affine]) -> &[blst_p1_affine] {
    // SAFETY: blstrs::G1Affine is #[repr(transparent)] over blst_p1_affine.
    unsafe { std::slice::from_raw_parts(p.as_ptr().cast(), p.len()) }
}

pub(crate) fn g2_affines(p: &[G2Affine]) -> &[blst_p2_affine] {
    // SAFETY: blstrs::G2Affine is #[repr(transparent)] over blst_p2_affine.
    unsafe { std::slice::from_raw_parts(p.as_ptr().cast(), p.len()) }
}

/// `sum points[i]` over `idx`, by blst's batch addition (affine additions sharing one
/// inversion per batch).
///
/// # Panics
/// If an index is out of range (checked before any pointer is formed).
pub(crate) fn g1_sum(points: &[G1Affine], idx: &[u32]) -> G1Projective {
    let p = g1_affines(points);
    let ptrs: Vec<*const blst_p1_affine> = idx.iter().map(|&i| &p[i as usize] as *const _).collect();
    let mut out = blst_p1::default();
    if !ptrs.is_empty() {
        // SAFETY: every pointer refers to an element of `points`, alive for the call.
        unsafe { blst::blst_p1s_add(&mut out, ptrs.as_ptr(), ptrs.len()) }
    }
    g1_projective(out)
}

/// [`g1_sum`] in G2.
pub(crate) fn g2_sum(points: &[G2Affine], idx: &[u32]) -> G2Projective {
    let p = g2_affines(points);
    let ptrs: Vec<*const blst_p2_affine> = idx.iter().map(|&i| &p[i as usize] as *const _).collect();
    let mut out = blst_p2::default();
    if !ptrs.is_empty() {
        // SAFETY: every pointer refers to an element of `points`, alive for the call.
        unsafe { blst::blst_p2s_add(&mut out, ptrs.as_ptr(), ptrs.len()) }
    }
    g2_projective(out)
}

/// The callback the C side is handed with a `*const Gate` (`cuzk_gate_fn` in
/// `cuda/cuzk.cu`): a device's yield points (`gate.rs`); its answer to
/// `GATE_PENDING`, 0 otherwise. Nothing unwinds into C.
#[cfg_attr(not(any(cuzk_cuda, test)), allow(dead_code))]
pub(crate) extern "C" fn gate_op(gate: *const std::ffi::c_void, op: i32) -> i32 {
    if gate.is_null() {
        return 0;
    }
    // SAFETY: the C side passes back the pointer it was given with this callback:
    // a device's `Gate`, owned by the backend, which is borrowed across the call.
    let g = unsafe { &*gate.cast::<crate::gate::Gate>() };
    // The gate does not panic (poisoned locks are taken over); if it ever did,
    // unwinding into C is undefined, so the process ends.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| g.op(op))) {
        Ok(r) => r,
        Err(_) => std::process::abort(),
    }
}

pub(crate) fn g1_projective(p: blst_p1) -> G1Projective {
    // SAFETY: blstrs::G1Projective is #[repr(transparent)] over blst_p1.
    unsafe { std::mem::transmute::<blst_p1, G1Projective>(p) }
}

pub(crate) fn g2_projective(p: blst_p2) -> G2Projective {
    // SAFETY: blstrs::G2Projective is #[repr(transparent)] over blst_p2.
    unsafe { std::mem::transmute::<blst_p2, G2Projective>(p) }
}

/// The C ABI of `cuda/cuzk.cu`. The fallible calls return sppark's `Error` by value
/// (code 0 = success); `cuzk_gpu_count` returns a count and the `*_free` calls return
/// nothing. No call lets a C++ exception reach Rust.
#[cfg(cuzk_cuda)]
pub(crate) mod cuda {
    use std::ffi::c_void;

    use blst::{blst_p1, blst_p2};
    use blstrs::{G1Affine, G2Affine, Scalar};

    use crate::gate::Gate;

    #[repr(C)]
    pub struct GpuInfo {
        pub cuda_id: i32,
        pub sm_count: i32,
        pub major: i32,
        pub minor: i32,
        pub total_mem: usize,
        pub free_mem: usize,
        pub name: [u8; 256],
    }

    #[repr(C)]
    pub struct Srs {
        _opaque: [u8; 0],
    }

    #[repr(C)]
    pub struct Ws {
        _opaque: [u8; 0],
    }

    #[repr(C)]
    pub struct StageBuf {
        _opaque: [u8; 0],
    }

    #[repr(C)]
    pub struct R1cs {
        _opaque: [u8; 0],
    }

    /// Mirrors `cuzk_inputs`. Scalars: `Scalar` is `#[repr(transparent)]` over
    /// blst_fr, the same bytes as sppark's host `fr_t` (Montgomery form).
    #[repr(C)]
    pub struct Inputs {
        pub a: *const Scalar,
        pub b: *const Scalar,
        pub c: *const Scalar,
        pub n: usize,
        pub lg: u32,
        pub z_inv: Scalar,
        pub l_s: *const [u8; 32],
        pub nl: usize,
        pub a_s: *const [u8; 32],
        pub na: usize,
        pub b_s: *const [u8; 32],
        pub nb: usize,
        pub with_b2: bool,
        pub ones: [*const u32; 3],
        pub nones: [usize; 3],
        pub rest_idx: [*const u32; 3],
        pub rest_s: [*const [u8; 32]; 3],
        pub nrest: [usize; 3],
        pub h_pts: *const G1Affine,
        pub l_pts: *const G1Affine,
        pub a_pts: *const G1Affine,
        pub b1_pts: *const G1Affine,
        pub b2_pts: *const G2Affine,
        pub r1cs: *const R1cs,
        pub w_in: *const Scalar,
        pub n_in: usize,
    }

    /// Mirrors `cuzk_outputs`: sppark's host `jacobian_t` has blst_p1/blst_p2's layout.
    #[repr(C)]
    pub struct Outputs {
        pub h: blst_p1,
        pub l: blst_p1,
        pub a: blst_p1,
        pub b1: blst_p1,
        pub b2: blst_p2,
        pub ms: [f64; 9],
    }

    /// `cuzk_gate_fn`: a device's yield points (`gate.rs`).
    pub type GateFn = extern "C" fn(*const c_void, i32) -> i32;

    /// The callback and context the C side is handed for `gate` (none: no yield
    /// points, for deadline work itself).
    fn gate_args(gate: Option<&Gate>) -> (Option<GateFn>, *const c_void) {
        match gate {
            Some(g) => (Some(super::gate_op as GateFn), (g as *const Gate).cast()),
            None => (None, std::ptr::null()),
        }
    }

    extern "C" {
        pub fn cuzk_gpu_count() -> usize;
        pub fn cuzk_gpu_probe() -> sppark::Error;
        pub fn cuzk_gpu_info(id: usize, out: *mut GpuInfo) -> sppark::Error;
        #[allow(clippy::too_many_arguments)]
        pub fn cuzk_srs_new(
            dev: usize,
            h: *const G1Affine,
            nh: usize,
            l: *const G1Affine,
            nl: usize,
            a: *const G1Affine,
            na: usize,
            b1: *const G1Affine,
            nb1: usize,
            b2: *const G2Affine,
            nb2: usize,
            h_wbits: u32,
            gate_fn: Option<GateFn>,
            gate: *const c_void,
            out: *mut *mut Srs,
        ) -> sppark::Error;
        pub fn cuzk_srs_free(s: *mut Srs);
        #[allow(clippy::too_many_arguments)]
        pub fn cuzk_r1cs_new(
            dev: usize,
            rows: usize,
            inputs: usize,
            aux: usize,
            a_row_end: *const u32,
            a_ent: *const cuzk_core::R1csEntry,
            a_nnz: usize,
            b_row_end: *const u32,
            b_ent: *const cuzk_core::R1csEntry,
            b_nnz: usize,
            coeffs: *const Scalar,
            ncoeffs: usize,
            gate_fn: Option<GateFn>,
            gate: *const c_void,
            out: *mut *mut R1cs,
        ) -> sppark::Error;
        pub fn cuzk_r1cs_free(r: *mut R1cs);
        pub fn cuzk_ws_new(dev: usize, lg: u32, out: *mut *mut Ws) -> sppark::Error;
        pub fn cuzk_ws_free(w: *mut Ws);
        pub fn cuzk_stage_new(dev: usize, lg: u32, out: *mut *mut StageBuf) -> sppark::Error;
        pub fn cuzk_stage_free(s: *mut StageBuf);
        pub fn cuzk_stage_sync(s: *mut StageBuf) -> sppark::Error;
        pub fn cuzk_stage_upload(s: *mut StageBuf, inputs: *const Inputs) -> sppark::Error;
        pub fn cuzk_execute(
            ws: *mut Ws,
            stage: *mut StageBuf,
            srs: *const Srs,
            inputs: *const Inputs,
            staged: bool,
            gate_fn: Option<GateFn>,
            gate: *const c_void,
            out: *mut Outputs,
        ) -> sppark::Error;
        pub fn cuzk_host_alloc(dev: usize, bytes: usize, out: *mut *mut u8) -> sppark::Error;
        pub fn cuzk_host_free(p: *mut u8);
        pub fn cuzk_warmup(dev: usize) -> sppark::Error;
        pub fn cuzk_device_trim(dev: usize) -> sppark::Error;
        pub fn cuzk_device_synchronize(dev: usize) -> sppark::Error;
        pub fn cuzk_test_illegal_address(dev: usize) -> sppark::Error;
        #[allow(clippy::too_many_arguments)]
        pub fn cuzk_bench_msm(
            dev: usize,
            pts: *const G1Affine,
            scalars: *const Scalar,
            n: usize,
            chunks: *const usize,
            wbits: *mut u32,
            max_batch: *const usize,
            groups: *mut u32,
            nchunks: usize,
            reps: u32,
            ms: *mut f64,
            out: *mut blst_p1,
            yields: *mut usize,
        ) -> sppark::Error;
        pub fn cuzk_bench_ntt(dev: usize, values: *const Scalar, lg: u32, reps: u32, ms: *mut f64) -> sppark::Error;
    }

    pub fn check(e: sppark::Error) -> Result<(), (i32, String)> {
        if e.code == 0 {
            Ok(())
        } else {
            Err((e.code, String::from(&e)))
        }
    }

    pub fn count() -> usize {
        // SAFETY: takes no arguments, catches every exception on the C++ side.
        unsafe { cuzk_gpu_count() }
    }

    pub fn probe() -> Result<(), (i32, String)> {
        // SAFETY: as above.
        check(unsafe { cuzk_gpu_probe() })
    }

    /// Pays the device's one-time costs (kernel loading, NTT tables) now, and makes
    /// its stream-ordered memory pool keep what it frees.
    pub fn warmup(dev: usize) -> Result<(), (i32, String)> {
        // SAFETY: no pointers; `dev` is below `count()` (callers pass the devices
        // `CudaBackend::new` validated).
        check(unsafe { cuzk_warmup(dev) })
    }

    /// Returns the memory the device's stream-ordered pool keeps to the driver.
    pub fn trim(dev: usize) -> Result<(), (i32, String)> {
        // SAFETY: as for `warmup`.
        check(unsafe { cuzk_device_trim(dev) })
    }

    /// Waits for the device's work; fails with the context's error when a sticky
    /// one has made it unusable.
    pub fn synchronize(dev: usize) -> Result<(), (i32, String)> {
        // SAFETY: as for `warmup`.
        check(unsafe { cuzk_device_synchronize(dev) })
    }

    /// Test hook: a kernel writes to an invalid address, a real sticky error that
    /// leaves the device's context unusable for the rest of the process.
    pub fn illegal_address(dev: usize) -> Result<(), (i32, String)> {
        // SAFETY: as for `warmup`; the invalid access happens on the device, where
        // it is caught and reported as an error, not in this process's memory.
        check(unsafe { cuzk_test_illegal_address(dev) })
    }

    /// One entry of `cuzk_bench_msm`'s: each repetition's time (ms), the sum, the
    /// yield points the engine's H passed, its window width and its windows per
    /// accumulate launch (0 for sppark's).
    pub struct BenchMsm {
        pub ms: Vec<f64>,
        pub sum: blst_p1,
        pub yields: usize,
        pub wbits: u32,
        pub group: u32,
    }

    /// `cuzk_bench_msm`, per entry of `ways` (the bench's [`crate::kernels::MsmWay`]).
    pub fn bench_msm(
        dev: usize,
        pts: &[G1Affine],
        scalars: &[Scalar],
        ways: &[crate::kernels::MsmWay],
        reps: u32,
    ) -> Result<Vec<BenchMsm>, (i32, String)> {
        assert_eq!(pts.len(), scalars.len(), "one scalar per point");
        let chunks: Vec<usize> = ways.iter().map(|w| w.chunk).collect();
        let mut wbits: Vec<u32> = ways.iter().map(|w| w.wbits).collect();
        let max_batch: Vec<usize> = ways.iter().map(|w| w.max_batch).collect();
        let mut groups: Vec<u32> = ways.iter().map(|w| w.group).collect();
        let mut ms = vec![0f64; chunks.len() * reps as usize];
        let mut out = vec![blst_p1::default(); chunks.len()];
        let mut yields = vec![0usize; chunks.len()];
        // SAFETY: the slices are valid for their lengths for the call; `ms`, `out`,
        // `yields`, `wbits`, `max_batch` and `groups` have the lengths the C side uses
        // (chunks × reps, then chunks each). G1Affine and
        // Scalar are #[repr(transparent)] over blst's types, sppark's host layout.
        check(unsafe {
            cuzk_bench_msm(
                dev,
                pts.as_ptr(),
                scalars.as_ptr(),
                pts.len(),
                chunks.as_ptr(),
                wbits.as_mut_ptr(),
                max_batch.as_ptr(),
                groups.as_mut_ptr(),
                chunks.len(),
                reps,
                ms.as_mut_ptr(),
                out.as_mut_ptr(),
                yields.as_mut_ptr(),
            )
        })?;
        Ok(ms
            .chunks(reps as usize)
            .zip(out)
            .zip(yields)
            .zip(wbits)
            .zip(groups)
            .map(|((((ms, sum), yields), wbits), group)| BenchMsm { ms: ms.to_vec(), sum, yields, wbits, group })
            .collect())
    }

    /// `cuzk_bench_ntt`: per repetition, the iNTT, coset NTT, coset iNTT, whole NTT
    /// phase and whole phase with a yield point after every kernel (its result
    /// checked against the phase's: an error when they differ) times (ms) over
    /// 2^lg values.
    pub fn bench_ntt(dev: usize, values: &[Scalar], reps: u32) -> Result<Vec<[f64; 5]>, (i32, String)> {
        assert!(values.len().is_power_of_two(), "a power of two of values");
        let mut ms = vec![0f64; 5 * reps as usize];
        // SAFETY: `values` holds 2^lg scalars, `ms` 5 × reps slots, for the call.
        check(unsafe { cuzk_bench_ntt(dev, values.as_ptr(), values.len().trailing_zeros(), reps, ms.as_mut_ptr()) })?;
        Ok(ms.chunks(5).map(|c| [c[0], c[1], c[2], c[3], c[4]]).collect())
    }

    pub fn info(id: usize) -> Result<GpuInfo, (i32, String)> {
        let mut out =
            GpuInfo { cuda_id: 0, sm_count: 0, major: 0, minor: 0, total_mem: 0, free_mem: 0, name: [0; 256] };
        // SAFETY: `out` is a valid, writable GpuInfo.
        check(unsafe { cuzk_gpu_info(id, &mut out) })?;
        Ok(out)
    }

    /// Points resident on a device; freed on drop.
    pub struct ResidentSrs(*mut Srs);
    // SAFETY: the handle is only used under the owning device's lock.
    unsafe impl Send for ResidentSrs {}

    impl ResidentSrs {
        #[allow(clippy::too_many_arguments)]
        pub fn new(
            dev: usize,
            h: &[G1Affine],
            l: &[G1Affine],
            a: &[G1Affine],
            b1: &[G1Affine],
            b2: &[G2Affine],
            h_wbits: u32,
            gate: Option<&Gate>,
        ) -> Result<Self, (i32, String)> {
            let mut out = std::ptr::null_mut();
            let (gate_fn, gate) = gate_args(gate);
            // SAFETY: the slices are valid for their lengths for the duration of the
            // call (the points are copied to the device); G1Affine/G2Affine are
            // #[repr(transparent)] over blst affine points, which is sppark's layout.
            check(unsafe {
                cuzk_srs_new(
                    dev,
                    h.as_ptr(),
                    h.len(),
                    l.as_ptr(),
                    l.len(),
                    a.as_ptr(),
                    a.len(),
                    b1.as_ptr(),
                    b1.len(),
                    b2.as_ptr(),
                    b2.len(),
                    h_wbits,
                    gate_fn,
                    gate,
                    &mut out,
                )
            })?;
            Ok(ResidentSrs(out))
        }

        pub fn ptr(&self) -> *const Srs {
            self.0
        }
    }

    impl Drop for ResidentSrs {
        fn drop(&mut self) {
            // SAFETY: created by cuzk_srs_new, freed once.
            unsafe { cuzk_srs_free(self.0) }
        }
    }

    /// A recorded circuit's A and B matrices resident on a device (a, b, c
    /// evaluated there); freed on drop.
    pub struct ResidentR1cs(*mut R1cs);
    // SAFETY: the handle is only used under the owning device's lock.
    unsafe impl Send for ResidentR1cs {}

    impl ResidentR1cs {
        pub fn new(dev: usize, v: &cuzk_core::R1csView<'_>, gate: Option<&Gate>) -> Result<Self, (i32, String)> {
            let rows = v.a.row_end.len();
            if v.b.row_end.len() != rows {
                return Err((-1, format!("A has {rows} rows, B {}", v.b.row_end.len())));
            }
            let mut out = std::ptr::null_mut();
            let (gate_fn, gate) = gate_args(gate);
            // SAFETY: the slices are valid for their lengths for the duration of the
            // call (copied to the device); R1csEntry is #[repr(C)] {u32, u32} as
            // `r1cs_entry`, Scalar the Montgomery bytes of `fr_t`. The kernels index
            // the entries by `row_end` and the witness by `var`: a recording's
            // (cuzk-synth) are within bounds by construction and checked against
            // the partition's inputs and aux count before every use.
            check(unsafe {
                cuzk_r1cs_new(
                    dev,
                    rows,
                    v.inputs,
                    v.aux,
                    v.a.row_end.as_ptr(),
                    v.a.entries.as_ptr(),
                    v.a.entries.len(),
                    v.b.row_end.as_ptr(),
                    v.b.entries.as_ptr(),
                    v.b.entries.len(),
                    v.coeffs.as_ptr(),
                    v.coeffs.len(),
                    gate_fn,
                    gate,
                    &mut out,
                )
            })?;
            Ok(ResidentR1cs(out))
        }

        pub fn ptr(&self) -> *const R1cs {
            self.0
        }

        /// Device bytes the matrices of `v` take.
        pub fn bytes(v: &cuzk_core::R1csView<'_>) -> u64 {
            crate::sizing::device_matrices_bytes(
                v.a.row_end.len(),
                v.a.entries.len(),
                v.b.entries.len(),
                v.coeffs.len(),
            )
        }
    }

    impl Drop for ResidentR1cs {
        fn drop(&mut self) {
            // SAFETY: created by cuzk_r1cs_new, freed once.
            unsafe { cuzk_r1cs_free(self.0) }
        }
    }

    /// What a device needs beside a partition's staged inputs (the bit sums' partial
    /// sums, the gather buffer of split MSMs); freed on drop.
    pub struct Workspace {
        ptr: *mut Ws,
        pub lg: u32,
    }
    // SAFETY: only used under the owning device's lock.
    unsafe impl Send for Workspace {}

    impl Workspace {
        pub fn new(dev: usize, lg: u32) -> Result<Self, (i32, String)> {
            let mut ptr = std::ptr::null_mut();
            // SAFETY: `ptr` is a valid out-pointer.
            check(unsafe { cuzk_ws_new(dev, lg, &mut ptr) })?;
            Ok(Workspace { ptr, lg })
        }

        /// Runs one partition whose inputs are in `stage` (uploaded ahead when
        /// `staged`, else just before by [`Stage::upload`]).
        pub fn execute(
            &mut self,
            stage: &Stage,
            srs: Option<&ResidentSrs>,
            inputs: &Inputs,
            staged: bool,
            gate: Option<&Gate>,
        ) -> Result<Outputs, (i32, String)> {
            let (gate_fn, gate) = gate_args(gate);
            // SAFETY: Outputs is plain data; zero is a valid bit pattern for it.
            let mut out: Outputs = unsafe { std::mem::zeroed() };
            let srs = srs.map_or(std::ptr::null(), |s| s.ptr());
            // SAFETY: every pointer in `inputs` is valid for its length for the whole
            // call (the caller borrows the vectors across it); the workspace, the
            // staging buffer and the resident SRS belong to the same device (checked
            // on the C side for the buffer) and are used under its lock, the buffer
            // by this caller alone (its slot is marked executing).
            check(unsafe { cuzk_execute(self.ptr, stage.ptr, srs, inputs, staged, gate_fn, gate, &mut out) })?;
            Ok(out)
        }
    }

    impl Drop for Workspace {
        fn drop(&mut self) {
            // SAFETY: created by cuzk_ws_new, freed once.
            unsafe { cuzk_ws_free(self.ptr) }
        }
    }

    /// A staging buffer on a device: one partition's a, b, c, bit-split lists and
    /// rest scalars, and its copy stream; freed on drop (after its copies finish).
    pub struct Stage {
        ptr: *mut StageBuf,
        pub lg: u32,
    }
    // SAFETY: the C side keeps no thread affinity (it selects the device on every
    // call); the backend's slot states give one holder at a time the right to
    // upload into or execute from a buffer (`Staging` in staging.rs), and `sync` only
    // waits on the buffer's own stream.
    unsafe impl Send for Stage {}
    // SAFETY: as above.
    unsafe impl Sync for Stage {}

    impl Stage {
        pub fn new(dev: usize, lg: u32) -> Result<Self, (i32, String)> {
            let mut ptr = std::ptr::null_mut();
            // SAFETY: `ptr` is a valid out-pointer.
            check(unsafe { cuzk_stage_new(dev, lg, &mut ptr) })?;
            Ok(Stage { ptr, lg })
        }

        /// Queues the upload of `inputs`' a, b, c and split lists into this buffer
        /// and returns without waiting for it.
        ///
        /// # Safety
        /// The host arrays `inputs` points to must stay alive and unchanged until
        /// [`Stage::sync`] returns or an execution from this buffer has finished, and
        /// the caller must be the buffer's only user until then.
        pub unsafe fn upload(&self, inputs: &Inputs) -> Result<(), (i32, String)> {
            // SAFETY: the caller upholds the contract above; pointers are valid for
            // their lengths now.
            check(unsafe { cuzk_stage_upload(self.ptr, inputs) })
        }

        /// Waits until the last upload into this buffer has finished.
        pub fn sync(&self) -> Result<(), (i32, String)> {
            // SAFETY: a live buffer; waiting on its stream touches no host memory.
            check(unsafe { cuzk_stage_sync(self.ptr) })
        }
    }

    impl Drop for Stage {
        fn drop(&mut self) {
            // SAFETY: created by cuzk_stage_new, freed once (the C side waits for
            // its copies first).
            unsafe { cuzk_stage_free(self.ptr) }
        }
    }
}
