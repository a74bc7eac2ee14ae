// cuzk CUDA entry points: the H polynomial by NTT and the Groth16 MSMs, on sppark.
//
// One translation unit (sppark's MSM headers define kernels; several TUs would
// duplicate them). Every entry point is `extern "C"` and lets no exception out:
// nothing unwinds into Rust. The fallible ones return RustError by value (code 0 =
// success, message owned by Rust); cuzk_gpu_count returns a count (0 on any error)
// and the *_free functions return nothing. Every entry point that works on a device
// selects it first (callers run on arbitrary threads).

#include <ff/bls12-381-fp2.hpp>
#include <ec/jacobian_t.hpp>
#include <ec/xyzz_t.hpp>

typedef jacobian_t<fp_t> point_t;
typedef xyzz_t<fp_t> bucket_t;
typedef bucket_t::affine_t affine_t;
typedef jacobian_t<fp2_t> point_fp2_t;
typedef xyzz_t<fp2_t> bucket_fp2_t;
typedef bucket_fp2_t::affine_t affine_fp2_t;
typedef fr_t scalar_t;

#define SPPARK_DONT_INSTANTIATE_TEMPLATES
#include <msm/pippenger.cuh>
#include <ntt/ntt.cuh>
#include "msm_yield.cuh"
#include "ntt_yield.cuh"

#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <thread>

typedef msm_t<bucket_t, point_t, affine_t, scalar_t> msm_g1_t;
typedef msm_t<bucket_fp2_t, point_fp2_t, affine_fp2_t, scalar_t> msm_g2_t;
// MSMs over resident points (H, and the rest of L, A, B): sppark's with yield
// points between batches and, under a gate, between window groups (msm_yield.cuh).
typedef msm_yield_t<bucket_t, point_t, affine_t, scalar_t> msm_h_t;
typedef msm_yield_t<bucket_fp2_t, point_fp2_t, affine_fp2_t, scalar_t> msm_h2_t;

// ~msm_t synchronizes the device and throws when that fails, and an exception out of
// a destructor ends the process (std::terminate). After a sticky error (an illegal
// address, a kernel fault) every synchronize fails, so an MSM object is destroyed
// only while the device still synchronizes, and leaked otherwise: its memory belongs
// to a context nothing uses again. The current device must be the object's.
template<class T> struct sync_or_leak {
    void operator()(T* p) const
    {
        if (cudaDeviceSynchronize() == cudaSuccess) delete p;
    }
};
template<class T> using msm_box = std::unique_ptr<T, sync_or_leak<T>>;

#define CUZK_TRY try {
#define CUZK_CATCH                                                         \
    } catch (const cuda_error& e) {                                         \
        return RustError{e.code(), e.what()};                               \
    } catch (const std::bad_alloc&) {                                       \
        return RustError{cudaErrorMemoryAllocation, "host out of memory"};  \
    } catch (const std::exception& e) {                                     \
        return RustError{-1, e.what()};                                     \
    }                                                                       \
    return RustError{cudaSuccess};

// ---------------------------------------------------------------- yield points

// A device's yield points (gpu/src/gate.rs): bulk work calls back at places where
// its thread has nothing queued on the device, so that a deadline partition can
// run between its kernels. `fn` null: no gate (deadline work itself, warm-up).
// GATE_PENDING answers whether a deadline partition waits (1) or not (0).
typedef int (*cuzk_gate_fn)(const void* gate, int op);
enum { GATE_ENTER = 0, GATE_LEAVE = 1, GATE_CHECKPOINT = 2, GATE_PENDING = 3 };
// Where a bulk thread calls the gate, passed in an operation's upper bits so that
// the longest wait for a yield point names the stretch it waited for. The same
// order as GATE_PLACES in gpu/src/gate.rs (a unit test there checks both).
enum gate_place {
    P_UNNAMED, P_SRS_UPLOAD, P_R1CS_UPLOAD, P_PART_START, P_ABC_RANGE, P_ABC_DONE,
    P_NTT_STEP, P_INTT_DONE, P_COSET_NTT_DONE, P_H_COSET, P_INPUTS, P_H_MSM_STEP,
    P_SUM_RANGE, P_SUMS_DONE, P_REST_MSM_STEP, P_L_DONE, P_A_DONE, P_B1_DONE,
    P_PART_END, P_H_START, P_H_END, P_H_MSM_DIGITS, P_H_MSM_BATCH,
    P_REST_MSM_DIGITS, P_REST_MSM_BATCH, P_H_MSM_SORT, P_REST_MSM_SORT,
};

struct gate_ref {
    cuzk_gate_fn fn;
    const void* ctx;
    int op(int o, int place = P_UNNAMED) const { return fn && ctx ? fn(ctx, o | place << 8) : 0; }
};

// One bulk thread inside the gate, from construction to release(); it must
// release before it waits on another bulk thread (a join), which may be standing
// aside at a yield point until a deadline partition that waits for this one ends.
struct gate_hold {
    gate_ref g;
    bool in;
    int end;    // the place release() reports
    explicit gate_hold(gate_ref g, int start = P_UNNAMED, int end = P_UNNAMED) : g(g), in(true), end(end)
    {
        g.op(GATE_ENTER, start);
    }
    gate_hold(const gate_hold&) = delete;
    gate_hold& operator=(const gate_hold&) = delete;
    void checkpoint(int place) { if (in) g.op(GATE_CHECKPOINT, place); }
    // Cheap (an atomic load on the Rust side): whether to sync and stop now.
    // `place`: the yield point asking; when nothing waits the thread goes on past
    // it, and the gate counts the stretch from there (gate.rs, LAST).
    bool pending(int place = P_UNNAMED) const { return in && g.op(GATE_PENDING, place) != 0; }
    void release() { if (in) { in = false; g.op(GATE_LEAVE, end); } }
    ~gate_hold() { release(); }
    // msm_yield_t::invoke's pair: a yield point (`between`) at batch and window-group
    // ends, taken only while a deadline partition waits (`urgent`). Both empty
    // without a gate (deadline work itself, warm-up): no groups, no yield points.
    struct yields_t { std::function<void()> between; std::function<bool()> urgent; };
    yields_t yields(int place)
    {
        if (!g.fn || !g.ctx) return {};
        return {[this, place] { checkpoint(place); }, [this, place] { return pending(place); }};
    }
    // For msm_yield_t::invoke: its yield point says which it is (msm_yield_at), and
    // each kind has its own name: after a window group, once a batch's digits are
    // sorted, at a batch's end, after a step of the digits' sort.
    yields_t msm_yields(int group, int digits, int batch, int sort)
    {
        if (!g.fn || !g.ctx) return {};
        auto at = [group, digits, batch, sort] {
            switch (msm_yield_at) {
            case MSM_AT_DIGITS: return digits;
            case MSM_AT_BATCH: return batch;
            case MSM_AT_SORT: return sort;
            default: return group;
            }
        };
        return {[this, at] { checkpoint(at()); }, [this, at] { return pending(at()); }};
    }
};

// How an MSM of bulk work accumulates its buckets under a gate, a launch (and a
// yield point) at a time. H with windows of 20 bits or more
// (`backend.msm_h_window_bits`): spans of H_LAUNCH_ROUNDS buckets per thread, ~15 ms
// at 2^27 on an H100, where a window is ~10 rounds and ~40 ms (whole windows a
// launch were the longest steps a deadline partition waited for after the
// sort's). The others: the fewest whole windows that keep the threads evenly
// loaded (balanced_group).
static const uint32_t H_LAUNCH_ROUNDS = 4;
template<class M> static void engine_launches(M& m, bool is_h)
{
    if (is_h && m.window_bits() >= 20)
        m.set_launch_rounds(H_LAUNCH_ROUNDS);
    else
        m.set_window_group(m.balanced_group());
}

// ---------------------------------------------------------------- devices

struct cuzk_gpu_info {
    int cuda_id;
    int sm_count;
    int major, minor;
    size_t total_mem;
    size_t free_mem;
    char name[256];
};

// Number of usable GPUs (compute capability >= 7, cooperative launch); 0 when the
// driver is missing or too old. Never fails.
extern "C" size_t cuzk_gpu_count()
{
    try {
        return ngpus();
    } catch (...) {
        return 0;
    }
}

// Why there is no GPU (driver missing, too old, no device), for the error message.
extern "C" RustError cuzk_gpu_probe()
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess)
        return RustError{err, cudaGetErrorString(err)};
    if (n == 0)
        return RustError{cudaErrorNoDevice, "no CUDA device"};
    return RustError{cudaSuccess};
}

extern "C" RustError cuzk_gpu_info(size_t id, cuzk_gpu_info* out)
{
    CUZK_TRY
    const gpu_t& gpu = select_gpu((int)id);
    const cudaDeviceProp& p = gpu.props();
    out->cuda_id = gpu.cid();
    out->sm_count = p.multiProcessorCount;
    out->major = p.major;
    out->minor = p.minor;
    CUDA_OK(cudaMemGetInfo(&out->free_mem, &out->total_mem));
    strncpy(out->name, p.name, sizeof(out->name) - 1);
    out->name[sizeof(out->name) - 1] = 0;
    CUZK_CATCH
}

// ---------------------------------------------------------------- resident SRS

// Parameter points resident on one device: one MSM object per vector, built once,
// reused for every partition. The points are held here and passed to their MSM
// objects per call: the bit sums (cuzk_execute) address L, A and B's, and H's MSM
// runs as one call with a yield point between its batches (msm_yield.cuh).
typedef affine_t::mem_t affine_h;
typedef affine_fp2_t::mem_t affine_fp2_h;

struct cuzk_srs {
    int dev;
    msm_box<msm_h_t> h, l, a, b1;
    msm_box<msm_h2_t> b2;
    affine_h *ph = nullptr, *pl = nullptr, *pa = nullptr, *pb1 = nullptr;
    affine_fp2_h* pb2 = nullptr;
    // Destroyed with its device current (cuzk_srs_free, cuzk_srs_new).
    ~cuzk_srs()
    {
        for (void* p : {(void*)ph, (void*)pl, (void*)pa, (void*)pb1, (void*)pb2})
            if (p) (void)cudaFree(p);
    }
};

// Points per upload step of a parameter set: ~200 MB of G1 points, the longest a
// deadline partition waits for an upload (a 32GiB set is 44 GiB: ~6 s in one
// piece). Steps of ~400 MB were the second-longest stretch under a 32GiB load on an
// H100 (mean 30 ms, longest 39 ms; 2026-12-07).
static const size_t SRS_UPLOAD_CHUNK = (size_t)1 << 21;

template<class msm_type, class affine_dev, class affine>
static void resident_points(const gpu_t& gpu, int dev, const affine* host, size_t n,
                            msm_box<msm_type>& msm, affine_dev*& d, gate_hold& hold,
                            uint32_t wbits = 0)
{
    if (!n) return;
    CUDA_OK(cudaMalloc(&d, n * sizeof(affine_dev)));
    for (size_t off = 0; off < n; off += SRS_UPLOAD_CHUNK) {
        size_t len = std::min(SRS_UPLOAD_CHUNK, n - off);
        gpu[0].HtoD(d + off, host + off, len, sizeof(affine));
        gpu[0].sync();
        hold.checkpoint(P_SRS_UPLOAD);
    }
    // Sized for n points; holds buckets only. `wbits` 0: sppark's window width.
    msm.reset(new msm_type(nullptr, n, sizeof(affine), dev, wbits));
}

extern "C" RustError cuzk_srs_new(size_t dev,
                                  const affine_t* h, size_t nh,
                                  const affine_t* l, size_t nl,
                                  const affine_t* a, size_t na,
                                  const affine_t* b1, size_t nb1,
                                  const affine_fp2_t* b2, size_t nb2,
                                  uint32_t h_wbits,
                                  cuzk_gate_fn gate_fn, const void* gate,
                                  cuzk_srs** out)
{
    *out = nullptr;
    CUZK_TRY
    const gpu_t& gpu = select_gpu((int)dev);
    std::unique_ptr<cuzk_srs> s{new cuzk_srs};
    s->dev = (int)dev;
    // Uploaded in steps, each synchronized, with a yield point after each.
    gate_hold hold{gate_ref{gate_fn, gate}, P_SRS_UPLOAD, P_SRS_UPLOAD};
    // An empty vector keeps no points; its MSM is skipped (identity).
    resident_points(gpu, (int)dev, h, nh, s->h, s->ph, hold, h_wbits);
    resident_points(gpu, (int)dev, l, nl, s->l, s->pl, hold);
    resident_points(gpu, (int)dev, a, na, s->a, s->pa, hold);
    resident_points(gpu, (int)dev, b1, nb1, s->b1, s->pb1, hold);
    resident_points(gpu, (int)dev, b2, nb2, s->b2, s->pb2, hold);
    // Accumulate launches for the yield points of bulk work (used only under a gate).
    for (auto* m : {s->h.get(), s->l.get(), s->a.get(), s->b1.get()})
        if (m) engine_launches(*m, m == s->h.get());
    if (s->b2) engine_launches(*s->b2, false);
    gpu.sync();
    *out = s.release();
    CUZK_CATCH
}

extern "C" void cuzk_srs_free(cuzk_srs* s)
{
    if (!s) return;
    try {
        select_gpu(s->dev);
        delete s;
    } catch (...) {
    }
}

// ---------------------------------------------------------------- resident R1CS

// A recorded circuit's A and B matrices resident on one device (compressed rows,
// entries {var, coeff}: var >> 1 indexes the inputs when var & 1 is 0, the aux
// variables when 1; coeff indexes the table, 0 = ONE, 1 = -ONE, 2 = TWO), so that a
// partition of that circuit uploads no a, b, c: cuzk_execute evaluates a = A.w and
// b = B.w from the witness, and c = a o b (equal row by row for a satisfied
// witness; an unsatisfied one gives a proof that fails verification either way).
struct r1cs_entry { uint32_t var, coeff; };

struct cuzk_r1cs {
    int dev;
    size_t rows, inputs, aux, ncoeffs;
    uint32_t* row_end[2] = {nullptr, nullptr};
    r1cs_entry* ent[2] = {nullptr, nullptr};
    fr_t* coeffs = nullptr;
    ~cuzk_r1cs()
    {
        for (void* p : {(void*)row_end[0], (void*)row_end[1], (void*)ent[0], (void*)ent[1], (void*)coeffs})
            if (p) (void)cudaFree(p);
    }
};

// Bytes per upload step (as SRS_UPLOAD_CHUNK), a yield point after each.
static const size_t R1CS_UPLOAD_CHUNK = (size_t)200 << 20;

static void upload_steps(const gpu_t& gpu, void* d, const void* h, size_t bytes, gate_hold& hold)
{
    for (size_t off = 0; off < bytes; off += R1CS_UPLOAD_CHUNK) {
        size_t len = std::min(R1CS_UPLOAD_CHUNK, bytes - off);
        CUDA_OK(cudaMemcpyAsync((char*)d + off, (const char*)h + off, len, cudaMemcpyHostToDevice, gpu[0]));
        gpu[0].sync();
        hold.checkpoint(P_R1CS_UPLOAD);
    }
}

extern "C" RustError cuzk_r1cs_new(size_t dev, size_t rows, size_t inputs, size_t aux,
                                   const uint32_t* a_row_end, const r1cs_entry* a_ent, size_t a_nnz,
                                   const uint32_t* b_row_end, const r1cs_entry* b_ent, size_t b_nnz,
                                   const fr_t* coeffs, size_t ncoeffs,
                                   cuzk_gate_fn gate_fn, const void* gate, cuzk_r1cs** out)
{
    *out = nullptr;
    CUZK_TRY
    const gpu_t& gpu = select_gpu((int)dev);
    std::unique_ptr<cuzk_r1cs> r{new cuzk_r1cs};
    r->dev = (int)dev;
    r->rows = rows;
    r->inputs = inputs;
    r->aux = aux;
    r->ncoeffs = ncoeffs;
    gate_hold hold{gate_ref{gate_fn, gate}, P_R1CS_UPLOAD, P_R1CS_UPLOAD};
    const uint32_t* ends[2] = {a_row_end, b_row_end};
    const r1cs_entry* ents[2] = {a_ent, b_ent};
    size_t nnz[2] = {a_nnz, b_nnz};
    for (int k = 0; k < 2; k++) {
        CUDA_OK(cudaMalloc(&r->row_end[k], std::max<size_t>(rows, 1) * sizeof(uint32_t)));
        upload_steps(gpu, r->row_end[k], ends[k], rows * sizeof(uint32_t), hold);
        CUDA_OK(cudaMalloc(&r->ent[k], std::max<size_t>(nnz[k], 1) * sizeof(r1cs_entry)));
        upload_steps(gpu, r->ent[k], ents[k], nnz[k] * sizeof(r1cs_entry), hold);
    }
    CUDA_OK(cudaMalloc(&r->coeffs, std::max<size_t>(ncoeffs, 1) * sizeof(fr_t)));
    upload_steps(gpu, r->coeffs, coeffs, ncoeffs * sizeof(fr_t), hold);
    *out = r.release();
    CUZK_CATCH
}

extern "C" void cuzk_r1cs_free(cuzk_r1cs* r)
{
    if (!r) return;
    try {
        select_gpu(r->dev);
        delete r;
    } catch (...) {
    }
}

// sppark allocates each MSM's temporaries (digits, sort buffers: ~100 MB for a
// 2^22 H) from the device's default stream-ordered pool, whose release threshold is
// 0: the memory goes back to the driver at every synchronize and is mapped again by
// the next MSM. Keeping it in the pool makes that a free-list hit. The pool then
// holds its high-water mark; `cuzk_device_trim` gives it back (out-of-memory retry).
static void keep_pool_memory(const gpu_t& gpu)
{
    cudaMemPool_t pool;
    CUDA_OK(cudaDeviceGetDefaultMemPool(&pool, gpu.cid()));
    uint64_t keep = UINT64_MAX;
    CUDA_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
}

// Waits for the device's work. After a sticky error this fails with it: the
// backend's test of whether an unlisted error code left the device unusable.
extern "C" RustError cuzk_device_synchronize(size_t dev)
{
    CUZK_TRY
    select_gpu((int)dev);
    CUDA_OK(cudaDeviceSynchronize());
    CUZK_CATCH
}

__global__ void write_invalid_address(uint64_t* p)
{
    *p = 1;
}

// Test hook (InjectedFault::IllegalAddress): a kernel stores to an address no
// allocation covers, a real cudaErrorIllegalAddress. The device's context stays
// unusable for the rest of the process.
extern "C" RustError cuzk_test_illegal_address(size_t dev)
{
    CUZK_TRY
    const gpu_t& gpu = select_gpu((int)dev);
    write_invalid_address<<<1, 1, 0, gpu[0]>>>((uint64_t*)(uintptr_t)8);
    CUDA_OK(cudaGetLastError());
    gpu[0].sync();
    CUZK_CATCH
}

extern "C" RustError cuzk_device_trim(size_t dev)
{
    CUZK_TRY
    const gpu_t& gpu = select_gpu((int)dev);
    gpu.sync();
    cudaMemPool_t pool;
    CUDA_OK(cudaDeviceGetDefaultMemPool(&pool, gpu.cid()));
    CUDA_OK(cudaMemPoolTrimTo(pool, 0));
    CUZK_CATCH
}

// ---------------------------------------------------------------- workspace

// What one device needs to run a partition beside its inputs (which are in a
// staging buffer, below): the bit sums' partial sums and the gather buffer of a
// split MSM's rest points. Allocated once per device, used under its lock.
struct cuzk_ws {
    int dev;
    uint32_t lg;
    void* d_sums;               // bit-sum partial sums, one per warp (G2-sized)
    void* d_gather;             // the rest points of one split MSM ((1 << lg) / 8 G2 points)
};

static void ws_release(cuzk_ws* w)
{
    if (w->d_sums) (void)cudaFree(w->d_sums);
    if (w->d_gather) (void)cudaFree(w->d_gather);
}

// One partial sum per warp of a bit-sum launch (sm_count blocks of
// BATCH_ADD_BLOCK_SIZE threads; G2 buckets use two threads per lane and half as
// many lanes per warp, so the count is the same).
static size_t bit_sum_slots(const gpu_t& gpu)
{
    return (size_t)gpu.sm_count() * BATCH_ADD_BLOCK_SIZE / WARP_SZ;
}

extern "C" RustError cuzk_ws_new(size_t dev, uint32_t lg, cuzk_ws** out)
{
    *out = nullptr;
    CUZK_TRY
    const gpu_t& gpu = select_gpu((int)dev);
    std::unique_ptr<cuzk_ws, void (*)(cuzk_ws*)> w{
        new cuzk_ws{(int)dev, lg, nullptr, nullptr},
        [](cuzk_ws* w) { ws_release(w); delete w; }};
    CUDA_OK(cudaMalloc(&w->d_sums, bit_sum_slots(gpu) * sizeof(bucket_fp2_t::mem_t)));
    CUDA_OK(cudaMalloc(&w->d_gather, std::max<size_t>(((size_t)1 << lg) / 8, 1) * sizeof(affine_fp2_t::mem_t)));
    keep_pool_memory(gpu);
    *out = w.release();
    CUZK_CATCH
}

extern "C" void cuzk_ws_free(cuzk_ws* w)
{
    if (!w) return;
    try {
        select_gpu(w->dev);
        ws_release(w);
        delete w;
    } catch (...) {
    }
}

// ---------------------------------------------------------------- staging buffers

// A partition's inputs on the device: a, b, c (padded to the domain), the bit-split
// index lists, and the split rest scalars. StagePcie fills one
// with cuzk_stage_upload on the buffer's own copy stream while the device computes
// an earlier partition from another buffer (double buffering); cuzk_execute's
// kernels wait for its events. A partition that was not staged ahead is uploaded
// into a free buffer by its execution, which then overlaps a's iNTT with b and c's
// transfer as before.
struct cuzk_stage {
    int dev;
    uint32_t lg;
    fr_t* d_abc;                // 3 << lg
    uint32_t* d_idx;            // bit-sum index lists (3 << lg entries)
    fr_t* d_rest;               // split rest scalars, (1 << lg) / 8 per vector
    cudaStream_t copy;          // uploads only, never kernels
    cudaEvent_t arrived[3];     // a, b, c uploaded (and padded)
    cudaEvent_t t0, t1;         // the upload's start and end (t1: everything arrived)
    // What the last upload put here, checked by cuzk_execute against its inputs.
    size_t n;
    uint32_t in_lg;
    bool lists;
    bool device_abc;            // no a, b, c: the inputs went into c's slot (cuzk_execute evaluates them)
    size_t nones[3], nrest[3];
};

static void stage_release(cuzk_stage* s)
{
    if (s->copy) (void)cudaStreamSynchronize(s->copy);
    for (void* p : {(void*)s->d_abc, (void*)s->d_idx, (void*)s->d_rest})
        if (p) (void)cudaFree(p);
    for (auto& e : s->arrived) if (e) (void)cudaEventDestroy(e);
    if (s->t0) (void)cudaEventDestroy(s->t0);
    if (s->t1) (void)cudaEventDestroy(s->t1);
    if (s->copy) (void)cudaStreamDestroy(s->copy);
}

extern "C" RustError cuzk_stage_new(size_t dev, uint32_t lg, cuzk_stage** out)
{
    *out = nullptr;
    CUZK_TRY
    select_gpu((int)dev);
    std::unique_ptr<cuzk_stage, void (*)(cuzk_stage*)> s{
        new cuzk_stage{},
        [](cuzk_stage* s) { stage_release(s); delete s; }};
    s->dev = (int)dev;
    s->lg = lg;
    size_t N = (size_t)1 << lg;
    CUDA_OK(cudaMalloc(&s->d_abc, 3 * sizeof(fr_t) * N));
    CUDA_OK(cudaMalloc(&s->d_idx, 3 * N * sizeof(uint32_t)));
    CUDA_OK(cudaMalloc(&s->d_rest, 3 * std::max<size_t>(N / 8, 1) * sizeof(fr_t)));
    // Non-blocking: the copy stream must not synchronize with the legacy default
    // stream that sppark's MSMs use for their own transfers.
    CUDA_OK(cudaStreamCreateWithFlags(&s->copy, cudaStreamNonBlocking));
    for (auto& e : s->arrived) CUDA_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CUDA_OK(cudaEventCreate(&s->t0));
    CUDA_OK(cudaEventCreate(&s->t1));
    *out = s.release();
    CUZK_CATCH
}

extern "C" void cuzk_stage_free(cuzk_stage* s)
{
    if (!s) return;
    try {
        select_gpu(s->dev);
        stage_release(s);
        delete s;
    } catch (...) {
    }
}

// Waits until the buffer's last upload is done: before the host memory it read
// from is released or reused, and before another partition takes the buffer.
extern "C" RustError cuzk_stage_sync(cuzk_stage* s)
{
    CUZK_TRY
    select_gpu(s->dev);
    CUDA_OK(cudaStreamSynchronize(s->copy));
    CUZK_CATCH
}

struct cuzk_inputs;
static void stage_upload(cuzk_stage* s, const cuzk_inputs* in);

// Queues a partition's upload into `s` (nothing waits for it here; see
// cuzk_stage_sync). The host arrays must stay alive and unchanged until then.
extern "C" RustError cuzk_stage_upload(cuzk_stage* s, const cuzk_inputs* in)
{
    CUZK_TRY
    select_gpu(s->dev);
    try {
        stage_upload(s, in);
    } catch (...) {
        // Nothing half-queued is left behind for the caller to free under.
        (void)cudaStreamSynchronize(s->copy);
        throw;
    }
    CUZK_CATCH
}

// ---------------------------------------------------------------- pinned host memory

// Page-locked host memory that partitions are uploaded from (portable: usable by
// every device). Uploads from it run at full PCIe bandwidth (~55 GB/s on the H200
// host vs ~7 GB/s pageable; docs/gpu.md).
extern "C" RustError cuzk_host_alloc(size_t dev, size_t bytes, void** out)
{
    *out = nullptr;
    CUZK_TRY
    // On a device cuzk uses, so that no context is created on an excluded one.
    select_gpu((int)dev);
    CUDA_OK(cudaHostAlloc(out, bytes, cudaHostAllocPortable));
    CUZK_CATCH
}

extern "C" void cuzk_host_free(void* p)
{
    if (p) (void)cudaFreeHost(p);
}

// ---------------------------------------------------------------- one partition

struct cuzk_inputs {
    const fr_t* a;       // constraint evaluations, Montgomery form, n each
    const fr_t* b;
    const fr_t* c;
    size_t n;
    uint32_t lg;         // domain 2^lg >= n
    fr_t z_inv;          // (g^(2^lg) - 1)^-1, g = 7, Montgomery form
    const fr_t* l_s;  size_t nl;   // MSM scalars, canonical form (mont = false)
    const fr_t* a_s;  size_t na;
    const fr_t* b_s;  size_t nb;
    bool with_b2;
    // Bit split (resident parameters only): for L, A and B, the indices of the
    // scalars equal to 1. When set, that MSM is replaced by the sum of the points at
    // those indices plus the MSM of the remaining scalars (neither 0
    // nor 1) over the same points, gathered. B's lists serve B_G1 and B_G2.
    const uint32_t* ones[3];
    size_t nones[3];
    const uint32_t* rest_idx[3];   // the other scalars' indices (at most (1 << lg) / 8 each)
    const fr_t* rest_s[3];         // and values, canonical form
    size_t nrest[3];
    // Host points, used when no resident SRS is given (streamed per MSM).
    const affine_t* h_pts;
    const affine_t* l_pts;
    const affine_t* a_pts;
    const affine_t* b1_pts;
    const affine_fp2_t* b2_pts;
    // a, b, c evaluated on the device (a, b, c null): the circuit's resident
    // matrices, and the input assignment (Montgomery form, ONE first); the aux
    // values are L's split scalars.
    const cuzk_r1cs* r1cs;
    const fr_t* w_in;
    size_t n_in;
};

struct cuzk_outputs {
    point_t h, l, a, b1;
    point_fp2_t b2;
    double ms[9];        // upload (copy-stream time), ntt_h (the rest of the wall until
                         // H is ready), msm_h, msm_l, msm_a, msm_b_g1, msm_b_g2, the
                         // wait for a staged upload still in flight, and a, b, c's
                         // evaluation on the device (kernel time, inside ntt_h)
};

__global__ void h_on_coset(fr_t* a, const fr_t* b, const fr_t* c, fr_t z_inv, size_t n)
{
    size_t i = threadIdx.x + (size_t)blockIdx.x * blockDim.x;
    size_t stride = (size_t)blockDim.x * gridDim.x;
    for (; i < n; i += stride) {
        fr_t t = a[i] * b[i];
        t -= c[i];
        a[i] = t * z_inv;
    }
}

// The aux assignment from L's split scalars (L has one point per aux variable):
// ones, and the rest converted to Montgomery form; the rest of w_aux is zeroed before.
__global__ void scatter_aux(fr_t* w_aux, const uint32_t* ones, size_t nones,
                            const uint32_t* rest_idx, const fr_t* rest_s, size_t nrest)
{
    size_t i = threadIdx.x + (size_t)blockIdx.x * blockDim.x;
    size_t stride = (size_t)blockDim.x * gridDim.x;
    for (; i < nones + nrest; i += stride) {
        if (i < nones) {
            w_aux[ones[i]] = fr_t::one();
        } else {
            fr_t v = rest_s[i - nones];
            v.to();
            w_aux[rest_idx[i - nones]] = v;
        }
    }
}

// out = M.w for rows < `rows`, 0 up to N: one thread per row. Most coefficients are
// 1, -1 or 2 and need no multiplication (the host's products special-case them too).
// Rows of A or B evaluated per launch by bulk work under a gate (a yield point
// after each).
static const size_t ABC_RANGE = (size_t)1 << 25;

__global__ void r1cs_rows(fr_t* out, const uint32_t* row_end, const r1cs_entry* ent, const fr_t* coeffs,
                          const fr_t* w_in, const fr_t* w_aux, size_t rows, size_t i0, size_t i1)
{
    size_t i = i0 + threadIdx.x + (size_t)blockIdx.x * blockDim.x;
    size_t stride = (size_t)blockDim.x * gridDim.x;
    for (; i < i1; i += stride) {
        fr_t acc;
        acc.zero();
        if (i < rows) {
            uint32_t e = row_end[i];
            for (uint32_t k = i ? row_end[i - 1] : 0; k < e; k++) {
                r1cs_entry x = ent[k];
                fr_t v = ((x.var & 1) ? w_aux : w_in)[x.var >> 1];
                switch (x.coeff) {
                case 0: acc += v; break;
                case 1: acc -= v; break;
                case 2: acc += v; acc += v; break;
                default: v *= coeffs[x.coeff]; acc += v;
                }
            }
        }
        out[i] = acc;
    }
}

__global__ void hadamard(fr_t* c, const fr_t* a, const fr_t* b, size_t n)
{
    size_t i = threadIdx.x + (size_t)blockIdx.x * blockDim.x;
    size_t stride = (size_t)blockDim.x * gridDim.x;
    for (; i < n; i += stride) {
        fr_t t = a[i];
        t *= b[i];
        c[i] = t;
    }
}

// CUZK_CUDA_TRACE=1: synchronize and report after every step (finds a failing or
// hanging kernel; slows everything down).
static bool trace_on()
{
    static const bool on = [] { const char* v = getenv("CUZK_CUDA_TRACE"); return v && *v == '1'; }();
    return on;
}

static void trace(const gpu_t& gpu, const char* step)
{
    if (!trace_on()) return;
    // Per thread: the time since this thread's previous step, all streams drained.
    thread_local auto last = std::chrono::steady_clock::now();
    fprintf(stderr, "cuzk-cuda: %s ...\n", step);
    gpu.sync();
    CUDA_OK(cudaGetLastError());
    auto now = std::chrono::steady_clock::now();
    fprintf(stderr, "cuzk-cuda: %s done %.3f ms\n", step, std::chrono::duration<double, std::milli>(now - last).count());
    last = now;
}

static double ms_since(std::chrono::steady_clock::time_point t)
{
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

template<class msm_type, class point, class affine, class affine_dev>
static void run_msm(const gpu_t& gpu, msm_type* resident, const affine_dev* dev_pts,
                    const affine* host_pts, size_t n, const fr_t* scalars, bool mont, point& out)
{
    out.inf();
    if (n == 0) return;
    RustError err;
    if (resident) {
        // Typed as the host affine so that sppark takes its non-template path with
        // the points as its pre-loaded device points.
        err = resident->invoke(out, dev_ptr_t<affine>((affine*)dev_pts), n, scalars, mont);
    } else {
        msm_box<msm_type> msm{new msm_type(nullptr, n, sizeof(affine), gpu.id())};
        err = msm->invoke(out, host_pts, n, scalars, mont);
    }
    if (err.code != cudaSuccess) {
        std::string m = err.message ? err.message : "MSM failed";
        free(err.message);
        throw cuda_error(err.code, m);
    }
}

template<class affine_dev>
__global__ void gather(affine_dev* out, const affine_dev* pts, const uint32_t* idx, size_t n)
{
    size_t i = threadIdx.x + (size_t)blockIdx.x * blockDim.x;
    if (i < n) out[i] = pts[idx[i]];
}

// Adds up `n` G1 partial sums in place, into sums[0]: one block of a power-of-two
// number of threads (at most n), each adding a strided share, then a tree: 0.26
// ms against 0.7-1 ms on the host (run13-cuda-trace.log, run14-cuda-trace.log in
// docs/bench-logs/h200-2026-11-30/). G1 only: sppark's Fp2 arithmetic on the device
// is shared by pairs of threads (`bucket::degree` 2), which this
// one-bucket-per-thread kernel does not do (a G2 version gave wrong sums; the PoRep
// GPU tests failed on it: run14-test-gpu.log).
template<class bucket>
__global__ void reduce_sums(typename bucket::mem_t* sums, uint32_t n)
{
    const uint32_t t = threadIdx.x, T = blockDim.x;
    bucket acc;
    acc.inf();
    for (uint32_t i = t; i < n; i += T) {
        bucket b;
        b = sums[i];
        acc.add(b);
    }
    __syncthreads(); // every read above happens before any write below
    sums[t] = acc;
    for (uint32_t half = T / 2; half > 0; half /= 2) {
        __syncthreads();
        if (t < half) {
            bucket a, b;
            a = sums[t];
            b = sums[t + half];
            a.add(b);
            sums[t] = a;
        }
    }
}

// sppark's batch_addition over indices (batch_addition.cuh), with the count
// passed by value rather than read from device memory, so that a list can be
// summed in ranges: one partial sum per warp into ret[].
template<class bucket_t, class affine_h,
         class bucket_h = class bucket_t::mem_t,
         class affine_t = class bucket_t::affine_t>
__launch_bounds__(BATCH_ADD_BLOCK_SIZE) __global__
void ones_sum(bucket_h ret[], const affine_h points[], const uint32_t idx[], uint32_t n)
{
    const uint32_t degree = bucket_t::degree;
    const uint32_t warp_sz = WARP_SZ / degree;
    const uint32_t tid = (threadIdx.x + blockDim.x*blockIdx.x) / degree;
    const uint32_t xid = tid % warp_sz;

    bucket_t acc;
    acc.inf();

    for (size_t i = tid; i < n; i += gridDim.x*blockDim.x/degree) {
        uint32_t digit = idx[i];
        affine_t p = points[digit & 0x7fffffff];
        if (degree == 2)
            acc.uadd(p, digit >> 31);
        else
            acc.add(p, digit >> 31);
    }

    for (uint32_t off = 1; off < warp_sz;) {
        auto down = shfl_down(acc, off*degree);

        off <<= 1;
        if ((xid & (off-1)) == 0)
            acc.uadd(down);
    }

    if (xid == 0)
        ret[tid/warp_sz] = acc;
}

// Indices per launch of a 0/1 sum under a gate, a yield point after each: the
// engine's H batch size (an estimate of ~10-20 ms a launch at 2^27 on an H100, not
// yet measured; a 32GiB partition's lists run to tens of millions of indices).
static const size_t ONES_RANGE = (size_t)1 << 24;

// Sum of the resident points at the `n` indices already on the device at
// `d_idx`: one partial sum per warp, added up on the device (G1) or the host
// (G2). Under a gate, in ranges of ONES_RANGE indices, each synchronized, with a
// yield point after each while a deadline partition waits.
template<class bucket, class point, class affine_dev>
static void bit_sum(const gpu_t& gpu, const cuzk_ws* ws, const affine_dev* pts,
                    const uint32_t* d_idx, size_t n, point& out, gate_hold& hold)
{
    const size_t range = hold.g.fn && hold.g.ctx ? ONES_RANGE : std::max<size_t>(n, 1);
    auto* d_sums = (typename bucket::mem_t*)ws->d_sums;
    out.inf();
    for (size_t off = 0; off < n || off == 0; off += range) {
        size_t slots = bit_sum_slots(gpu);
        uint32_t len = (uint32_t)std::min(range, n - off);
        ones_sum<bucket><<<gpu.sm_count(), BATCH_ADD_BLOCK_SIZE, 0, gpu[0]>>>(
            d_sums, pts, d_idx + off, len);
        CUDA_OK(cudaGetLastError());
        trace(gpu, "split: ones batch addition");
        if (bucket::degree == 1) {
            uint32_t threads = 256;
            while (threads > slots) threads /= 2;
            reduce_sums<bucket><<<1, threads, 0, gpu[0]>>>(d_sums, (uint32_t)slots);
            CUDA_OK(cudaGetLastError());
            slots = 1;
        }
        std::vector<bucket> sums(slots);
        gpu[0].DtoH(sums.data(), d_sums, slots);
        gpu[0].sync();
        point p;
        p = sum_up(sums);
        out.add(p);
        trace(gpu, "split: ones partial sums");
        if (off + range < n)
            hold.checkpoint(P_SUM_RANGE);
    }
}

// A split MSM: the sum of the points behind the ones, plus the MSM of the rest
// scalars (already on the device) over their points gathered into the workspace, by the resident MSM
// object (sized for the whole vector, it handles the smaller count). An object
// sized for the rest itself picks narrower windows, hence more of them, and was
// slower: 7.4-10.6 ms against 6-8.8 ms per MSM (run13-cuda-trace.log and
// run14-cuda-trace.log in docs/bench-logs/h200-2026-11-30/; the cost of a
// ~44k-scalar MSM is per window, not per bucket).
template<class bucket, class msm_type, class point, class affine_dev>
static void split_msm(const gpu_t& gpu, const cuzk_ws* ws, msm_type* msm, const affine_dev* pts,
                      const uint32_t* d_ones, size_t nones, const uint32_t* d_rest,
                      const fr_t* d_rest_s, size_t nrest, point& out, gate_hold& hold)
{
    bit_sum<bucket>(gpu, ws, pts, d_ones, nones, out, hold);
    if (nrest == 0) return;
    // bit_sum synchronized: nothing of ours is queued. Bulk work yields here too, so
    // that a deadline partition waits for the ones' sum or the rest's MSM, not both.
    hold.checkpoint(P_SUMS_DONE);
    auto* g = (affine_dev*)ws->d_gather;
    gather<<<(unsigned)((nrest + 255) / 256), 256, 0, gpu[0]>>>(g, pts, d_rest, nrest);
    CUDA_OK(cudaGetLastError());
    gpu[0].sync();
    trace(gpu, "split: gather rest points");
    typedef typename bucket::affine_t affine;
    point rest;
    // Bulk work: yield points between the rest MSM's batches and window groups,
    // taken while a deadline partition waits (msm_yield.cuh).
    auto y = hold.msm_yields(P_REST_MSM_STEP, P_REST_MSM_DIGITS, P_REST_MSM_BATCH, P_REST_MSM_SORT);
    RustError err = msm->invoke(rest, dev_ptr_t<affine>((affine*)g), nrest, dev_ptr_t<fr_t>((fr_t*)d_rest_s), false,
                                sizeof(affine), y.between, y.urgent);
    if (err.code != cudaSuccess) {
        std::string m = err.message ? err.message : "split MSM failed";
        free(err.message);
        throw cuda_error(err.code, m);
    }
    trace(gpu, "split: rest MSM");
    out.add(rest);
}

// Checks the bit-split lists against a buffer of domain 2^lg; whether they are set.
static bool split_lists(const cuzk_inputs* in, uint32_t lg)
{
    if (!in->ones[0]) return false;
    size_t total = 0, cap = ((size_t)1 << lg) / 8;
    for (int k = 0; k < 3; k++) {
        total += in->nones[k] + in->nrest[k];
        if (in->nrest[k] > cap)
            throw cuda_error(cudaErrorInvalidValue, std::string("bit-split rest larger than the staging buffer"));
    }
    if (total > ((size_t)3 << lg))
        throw cuda_error(cudaErrorInvalidValue, std::string("bit-split lists larger than the staging buffer"));
    return true;
}

// A staged upload goes as copies of at most this many bytes (~1-2 ms each over
// PCIe), so that the copy engine can take another stream's copy between them: a
// deadline partition's small upload on the lane's buffer then waits for one piece,
// not for a bulk partition's whole upload (GBs at 32GiB). Not measured apart: the
// deadline run of 2026-12-07 with it kept a ~0.2 s WindowPoSt tail (benchmarks.md).
static const size_t STAGE_COPY_STEP = (size_t)64 << 20;

static void copy_steps(void* d, const void* h, size_t bytes, cudaStream_t stream)
{
    for (size_t off = 0; off < bytes; off += STAGE_COPY_STEP)
        CUDA_OK(cudaMemcpyAsync((char*)d + off, (const char*)h + off, std::min(STAGE_COPY_STEP, bytes - off),
                                cudaMemcpyHostToDevice, stream));
}

// a, b, c, then the split lists and rest scalars, all on the buffer's copy
// stream, an event after each of a, b, c (so that a's iNTT can start while b and c
// are still crossing PCIe) and one after everything (t1).
static void stage_upload(cuzk_stage* s, const cuzk_inputs* in)
{
    if (in->lg > s->lg)
        throw cuda_error(cudaErrorInvalidValue, std::string("staging buffer smaller than the domain"));
    if (in->n > ((size_t)1 << in->lg))
        throw cuda_error(cudaErrorInvalidValue, std::string("more constraint evaluations than the domain"));
    bool lists = split_lists(in, s->lg);
    size_t N = (size_t)1 << in->lg;
    fr_t* dv[3] = {s->d_abc, s->d_abc + N, s->d_abc + 2 * N};
    const fr_t* hv[3] = {in->a, in->b, in->c};
    bool device_abc = !in->a;
    if (device_abc && (!lists || !in->w_in || in->n_in + in->nl > N))
        throw cuda_error(cudaErrorInvalidValue,
                         std::string("a, b, c on the device need the split lists and a witness within the domain"));
    CUDA_OK(cudaEventRecord(s->t0, s->copy));
    if (device_abc) {
        // The inputs at the start of c's slot, the aux values after them (filled
        // by cuzk_execute from L's lists); c is written over them last.
        copy_steps(dv[2], in->w_in, in->n_in * sizeof(fr_t), s->copy);
    } else {
        for (int k = 0; k < 3; k++) {
            copy_steps(dv[k], hv[k], in->n * sizeof(fr_t), s->copy);
            if (N > in->n)
                CUDA_OK(cudaMemsetAsync(dv[k] + in->n, 0, (N - in->n) * sizeof(fr_t), s->copy));
            CUDA_OK(cudaEventRecord(s->arrived[k], s->copy));
        }
    }
    if (lists) {
        size_t off = 0, cap = std::max<size_t>(((size_t)1 << s->lg) / 8, 1);
        auto up = [&](const uint32_t* src, size_t n) {
            copy_steps(s->d_idx + off, src, n * sizeof(uint32_t), s->copy);
            off += n;
        };
        for (int k = 0; k < 3; k++) {
            up(in->ones[k], in->nones[k]);
            up(in->rest_idx[k], in->nrest[k]);
            copy_steps(s->d_rest + k * cap, in->rest_s[k], in->nrest[k] * sizeof(fr_t), s->copy);
            s->nones[k] = in->nones[k];
            s->nrest[k] = in->nrest[k];
        }
    }
    CUDA_OK(cudaEventRecord(s->t1, s->copy));
    if (device_abc)
        for (auto& e : s->arrived) CUDA_OK(cudaEventRecord(e, s->copy));
    s->n = in->n;
    s->in_lg = in->lg;
    s->lists = lists;
    s->device_abc = device_abc;
    trace(select_gpu(s->dev), "upload");
}

// `staged`: the inputs were uploaded into `st` ahead (StagePcie) rather than just
// before, by this partition's execution.

// `gate`: the device's yield points, for bulk work; null for deadline work.
static void execute_partition(const gpu_t& gpu, cuzk_ws* ws, cuzk_stage* st, const cuzk_srs* srs,
                              const cuzk_inputs* in, bool staged, gate_ref gate, cuzk_outputs* out)
{
    if (in->lg > ws->lg)
        throw cuda_error(cudaErrorInvalidValue, std::string("workspace smaller than the domain"));
    if (st->dev != ws->dev)
        throw cuda_error(cudaErrorInvalidValue, std::string("staging buffer of another device"));
    if (st->n != in->n || st->in_lg != in->lg)
        throw cuda_error(cudaErrorInvalidValue, std::string("staging buffer holds another partition's shape"));
    // The device split uses the lists in the buffer; they must be the inputs' own.
    bool split = srs && in->ones[0];
    if (split) {
        if (!st->lists || !split_lists(in, ws->lg))
            throw cuda_error(cudaErrorInvalidValue, std::string("bit-split lists were not staged"));
        for (int k = 0; k < 3; k++)
            if (st->nones[k] != in->nones[k] || st->nrest[k] != in->nrest[k])
                throw cuda_error(cudaErrorInvalidValue, std::string("staged bit-split lists differ from the inputs"));
    }
    bool device_abc = in->r1cs != nullptr;
    if (device_abc != st->device_abc)
        throw cuda_error(cudaErrorInvalidValue, std::string("staging buffer holds a, b, c evaluated elsewhere"));
    if (device_abc) {
        const cuzk_r1cs* r = in->r1cs;
        if (!split || r->dev != ws->dev || r->rows != in->n || r->inputs != in->n_in || r->aux != in->nl)
            throw cuda_error(cudaErrorInvalidValue, std::string("resident matrices do not fit the partition"));
    }
    size_t N = (size_t)1 << in->lg;
    fr_t* d_a = st->d_abc;
    fr_t* d_b = d_a + N;
    fr_t* d_c = d_b + N;
    fr_t* dv[3] = {d_a, d_b, d_c};
    auto t = std::chrono::steady_clock::now();
    // A staged upload normally finished while the previous partition computed; the
    // time still waited for it is what double buffering did not hide.
    double waited = 0;
    if (staged) {
        CUDA_OK(cudaEventSynchronize(st->t1));
        waited = ms_since(t);
        t = std::chrono::steady_clock::now();
    }
    // From here this thread queues work on the device's streams.
    gate_hold hold{gate, P_PART_START, P_PART_END};
    const uint32_t* d_ones[3] = {nullptr, nullptr, nullptr};
    const uint32_t* d_rest[3] = {nullptr, nullptr, nullptr};
    const fr_t* d_rest_s[3] = {nullptr, nullptr, nullptr};
    if (split) {
        size_t off = 0, cap = std::max<size_t>(((size_t)1 << st->lg) / 8, 1);
        for (int k = 0; k < 3; k++) {
            d_ones[k] = st->d_idx + off;
            off += in->nones[k];
            d_rest[k] = st->d_idx + off;
            off += in->nrest[k];
            d_rest_s[k] = st->d_rest + k * cap;
        }
    }

    out->ms[8] = 0;
    if (device_abc) {
        // w = (inputs, aux) in c's slot, a = A.w, b = B.w, then c = a o b over w.
        const cuzk_r1cs* r = in->r1cs;
        stream_t& s0 = gpu[0];
        CUDA_OK(cudaStreamWaitEvent(s0, st->t1, 0));
        cudaEvent_t e0, e1;
        CUDA_OK(cudaEventCreate(&e0));
        CUDA_OK(cudaEventCreate(&e1));
        struct evs { cudaEvent_t a, b; ~evs() { (void)cudaEventDestroy(a); (void)cudaEventDestroy(b); } } own{e0, e1};
        CUDA_OK(cudaEventRecord(e0, s0));
        fr_t* w_in = d_c;
        fr_t* w_aux = d_c + in->n_in;
        CUDA_OK(cudaMemsetAsync(w_aux, 0, in->nl * sizeof(fr_t), s0));
        size_t nl = in->nones[0] + in->nrest[0];
        if (nl) {
            scatter_aux<<<(unsigned)std::min<size_t>((nl + 255) / 256, (size_t)gpu.sm_count() * 8), 256, 0, s0>>>(
                w_aux, d_ones[0], in->nones[0], d_rest[0], d_rest_s[0], in->nrest[0]);
            CUDA_OK(cudaGetLastError());
        }
        unsigned blocks = (unsigned)std::min<size_t>((N + 255) / 256, (size_t)gpu.sm_count() * 16);
        // Bulk work: rows in ranges of ABC_RANGE, a yield point after each (a's
        // rows of a 32GiB partition are ~45 ms at 2^27 on an H100, b's fewer: 8
        // steps of ~11 ms or less instead of two; the time in ms[8] then takes in a
        // deadline partition that ran between them). Deadline work: one launch each.
        const bool gated = gate.fn && gate.ctx;
        const size_t range = gated ? ABC_RANGE : N;
        for (int k = 0; k < 2; k++) {
            for (size_t i0 = 0; i0 < N; i0 += range) {
                size_t i1 = std::min(N, i0 + range);
                unsigned nb = (unsigned)std::min<size_t>((i1 - i0 + 255) / 256, (size_t)gpu.sm_count() * 16);
                r1cs_rows<<<nb, 256, 0, s0>>>(dv[k], r->row_end[k], r->ent[k], r->coeffs, w_in, w_aux, in->n, i0, i1);
                CUDA_OK(cudaGetLastError());
                if (gated && (k == 0 || i1 < N)) {
                    s0.sync();
                    hold.checkpoint(P_ABC_RANGE);
                }
            }
        }
        hadamard<<<blocks, 256, 0, s0>>>(d_c, d_a, d_b, N);
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaEventRecord(e1, s0));
        // Every NTT stream starts from the evaluated arrays.
        for (int k = 1; k < 3; k++) CUDA_OK(cudaStreamWaitEvent(gpu[k], e1, 0));
        CUDA_OK(cudaEventSynchronize(e1));
        float evms = 0;
        CUDA_OK(cudaEventElapsedTime(&evms, e0, e1));
        out->ms[8] = evms;
        trace(gpu, "a, b, c on the device");
        // Nothing of ours is queued (e1 is done; the NTT streams only wait for it).
        hold.checkpoint(P_ABC_DONE);
    }

    // Coefficients (iNTT, natural in, bit-reversed out) and evaluations on the coset
    // g*<w> (NTT, bit-reversed in, natural out); each compute stream waits only for
    // its own array.
    // Bulk work: a yield point after each kernel of each transform (ntt_yield.cuh:
    // three radix steps of ~15 ms at 2^27 on an H100, the coset powers besides)
    // instead of one after the whole phase (~0.33 s, with a, b, c ~0.42 s). The
    // three streams' transforms are memory-bound and do not overlap anyway (`cuzk
    // bench kernels` times the phase at the sum of its transforms), so the syncs
    // should cost next to nothing. Deadline work (no gate) keeps the streams and
    // sppark's own sequence.
    std::function<void()> ntt_point;
    if (gate.fn && gate.ctx) ntt_point = [&] { hold.checkpoint(P_NTT_STEP); };
    for (int k = 0; k < 3; k++) {
        stream_t& s = gpu[k];
        CUDA_OK(cudaStreamWaitEvent(s, st->arrived[k], 0));
        ntt_yield_t::run(s, dv[k], in->lg, NTT::InputOutputOrder::NR, NTT::Direction::inverse, NTT::Type::standard, ntt_point);
        trace(gpu, "intt");
        if (gate.fn && gate.ctx) {
            s.sync();
            hold.checkpoint(P_INTT_DONE);
        }
        ntt_yield_t::run(s, dv[k], in->lg, NTT::InputOutputOrder::RN, NTT::Direction::forward, NTT::Type::coset, ntt_point);
        trace(gpu, "coset ntt");
        if (gate.fn && gate.ctx) {
            s.sync();
            hold.checkpoint(P_COSET_NTT_DONE);
        }
    }

    event_t ev_b, ev_c;
    ev_b.record(gpu[1]);
    ev_c.record(gpu[2]);
    ev_b.wait(gpu[0]);
    ev_c.wait(gpu[0]);
    h_on_coset<<<gpu.sm_count() * 4, 256, 0, gpu[0]>>>(d_a, d_b, d_c, in->z_inv, N);
    CUDA_OK(cudaGetLastError());
    trace(gpu, "h_on_coset");
    if (gate.fn && gate.ctx) {
        gpu.sync();
        hold.checkpoint(P_H_COSET);
    }
    ntt_yield_t::run(gpu[0], d_a, in->lg, NTT::InputOutputOrder::NN, NTT::Direction::inverse, NTT::Type::coset, ntt_point);
    trace(gpu, "coset intt");
    gpu.sync();
    // Every upload into the buffer (the lists too) is done before the MSMs read them.
    CUDA_OK(cudaEventSynchronize(st->t1));
    double wall = ms_since(t);
    hold.checkpoint(P_INPUTS);
    float up = 0;
    CUDA_OK(cudaEventElapsedTime(&up, st->t0, st->t1));
    out->ms[0] = up;
    // Inline, the upload ran inside this wall; staged, it ran before it.
    out->ms[1] = staged ? wall : (wall > up ? wall - up : 0);
    out->ms[7] = waited;

    // H: the first N-1 coefficients, already on the device, Montgomery form.
    auto msm_h = [&](gate_hold& hh) {
        auto t = std::chrono::steady_clock::now();
        out->h.inf();
        if (N > 1) {
            RustError err{cudaSuccess};
            if (srs && srs->h) {
                // One call; bulk work yields between sppark's batches (at 2^27: two
                // of 2^26 points with 20-bit windows, eight of 2^24 with sppark's
                // 18). Calls of 2^25 points, the way
                // before 2026-12-06, cost H 5.2% more (`cuzk bench kernels`).
                // Within a batch, its buckets go in launches (engine_launches:
                // spans of 4 buckets per thread at 20-bit windows), a yield point
                // after each and after each step of its digit sort, taken only
                // while a deadline partition waits.
                auto y = hh.msm_yields(P_H_MSM_STEP, P_H_MSM_DIGITS, P_H_MSM_BATCH, P_H_MSM_SORT);
                err = srs->h->invoke(out->h, dev_ptr_t<affine_t>((affine_t*)srs->ph), N - 1,
                                     dev_ptr_t<fr_t>(d_a), true, sizeof(affine_t), y.between, y.urgent);
            } else {
                msm_box<msm_g1_t> msm{new msm_g1_t(nullptr, N - 1, sizeof(affine_t), gpu.id())};
                err = msm->invoke(out->h, in->h_pts, N - 1, dev_ptr_t<fr_t>(d_a), true);
            }
            if (err.code != cudaSuccess) {
                std::string m = err.message ? err.message : "MSM H failed";
                free(err.message);
                throw cuda_error(err.code, m);
            }
        }
        trace(gpu, "msm h");
        out->ms[2] = ms_since(t);
    };
    // H's MSM runs on a second host thread while this one runs L, A and B: each
    // sppark MSM ends with host work (its window sums, on the CPU, and a sync), and
    // the other thread's kernels fill the device meanwhile. Both queue on the
    // device's shared streams; each MSM object has its own buckets. Traced runs stay
    // sequential so that their per-step times mean something.
    std::exception_ptr h_err;
    std::thread h_thread;
    if (trace_on()) {
        msm_h(hold);
    } else {
        h_thread = std::thread([&] {
            try {
                select_gpu(ws->dev); // per host thread
                gate_hold hh{gate, P_H_START, P_H_END};
                msm_h(hh);
            } catch (...) {
                h_err = std::current_exception();
            }
        });
    }
    // Joined on every path out of here: L/A/B's errors included; this thread
    // leaves the gate first (gate_hold).
    struct joiner {
        std::thread& t;
        gate_hold& hold;
        ~joiner() { hold.release(); if (t.joinable()) t.join(); }
    } join_h{h_thread, hold};

    t = std::chrono::steady_clock::now();
    if (split) split_msm<bucket_t>(gpu, ws, srs->l.get(), srs->pl, d_ones[0], in->nones[0], d_rest[0], d_rest_s[0], in->nrest[0], out->l, hold);
    else run_msm(gpu, srs ? srs->l.get() : nullptr, srs ? srs->pl : nullptr, in->l_pts, in->nl, in->l_s, false, out->l);
    trace(gpu, "msm l");
    out->ms[3] = ms_since(t);
    hold.checkpoint(P_L_DONE);
    t = std::chrono::steady_clock::now();
    if (split) split_msm<bucket_t>(gpu, ws, srs->a.get(), srs->pa, d_ones[1], in->nones[1], d_rest[1], d_rest_s[1], in->nrest[1], out->a, hold);
    else run_msm(gpu, srs ? srs->a.get() : nullptr, srs ? srs->pa : nullptr, in->a_pts, in->na, in->a_s, false, out->a);
    trace(gpu, "msm a");
    out->ms[4] = ms_since(t);
    hold.checkpoint(P_A_DONE);
    t = std::chrono::steady_clock::now();
    if (split) split_msm<bucket_t>(gpu, ws, srs->b1.get(), srs->pb1, d_ones[2], in->nones[2], d_rest[2], d_rest_s[2], in->nrest[2], out->b1, hold);
    else run_msm(gpu, srs ? srs->b1.get() : nullptr, srs ? srs->pb1 : nullptr, in->b1_pts, in->nb, in->b_s, false, out->b1);
    out->ms[5] = ms_since(t);
    out->ms[6] = 0;
    out->b2.inf();
    if (in->with_b2) {
        hold.checkpoint(P_B1_DONE);
        t = std::chrono::steady_clock::now();
        if (split) split_msm<bucket_fp2_t>(gpu, ws, srs->b2.get(), srs->pb2, d_ones[2], in->nones[2], d_rest[2], d_rest_s[2], in->nrest[2], out->b2, hold);
        else run_msm(gpu, srs ? srs->b2.get() : nullptr, srs ? srs->pb2 : nullptr, in->b2_pts, in->nb, in->b_s, false, out->b2);
        out->ms[6] = ms_since(t);
    }
    hold.release();
    if (h_thread.joinable()) h_thread.join();
    if (h_err) std::rethrow_exception(h_err);
}

// Runs one small instance of every kernel family a partition uses (NTTs, H on the
// coset, G1 and G2 MSMs) so that their one-time costs are paid at start, off the
// first partition: kernels load lazily on first launch, and sppark builds its NTT
// twiddle tables on first use (docs/bench-logs/h200-2026-11-30/run15-cuda-trace.log:
// the first iNTT took 155 ms against 1.1 ms after, the first H MSM 148 ms against
// 53 ms).
extern "C" RustError cuzk_warmup(size_t dev)
{
    CUZK_TRY
    const gpu_t& gpu = select_gpu((int)dev);
    keep_pool_memory(gpu);
    const uint32_t lg = 12;
    const size_t n = (size_t)1 << lg;
    dev_ptr_t<fr_t> d{3 * n, gpu[0]};
    CUDA_OK(cudaMemsetAsync(&d[0], 0, 3 * n * sizeof(fr_t), gpu[0]));
    NTT::Base_dev_ptr(gpu[0], &d[0], lg, NTT::InputOutputOrder::NR, NTT::Direction::inverse, NTT::Type::standard);
    NTT::Base_dev_ptr(gpu[0], &d[0], lg, NTT::InputOutputOrder::RN, NTT::Direction::forward, NTT::Type::coset);
    fr_t zero;
    memset((void*)&zero, 0, sizeof(zero));
    h_on_coset<<<gpu.sm_count(), 256, 0, gpu[0]>>>(&d[0], &d[n], &d[2 * n], zero, n);
    CUDA_OK(cudaGetLastError());
    NTT::Base_dev_ptr(gpu[0], &d[0], lg, NTT::InputOutputOrder::NN, NTT::Direction::inverse, NTT::Type::coset);
    gpu[0].sync();
    // MSMs over zero points and zero scalars (the identity): sppark's G1 and G2
    // kernels, through the same entry points a partition uses.
    std::vector<uint8_t> pts(n * sizeof(affine_fp2_t)), sc(n * sizeof(fr_t));
    point_t p1;
    run_msm(gpu, (msm_g1_t*)nullptr, (const affine_h*)nullptr, (const affine_t*)pts.data(), n,
            (const fr_t*)sc.data(), false, p1);
    point_fp2_t p2;
    run_msm(gpu, (msm_g2_t*)nullptr, (const affine_fp2_h*)nullptr, (const affine_fp2_t*)pts.data(), n,
            (const fr_t*)sc.data(), false, p2);
    gpu.sync();
    CUZK_CATCH
}

extern "C" RustError cuzk_execute(cuzk_ws* ws, cuzk_stage* st, const cuzk_srs* srs,
                                  const cuzk_inputs* in, bool staged,
                                  cuzk_gate_fn gate_fn, const void* gate, cuzk_outputs* out)
{
    CUZK_TRY
    const gpu_t& gpu = select_gpu(ws->dev);
    try {
        execute_partition(gpu, ws, st, srs, in, staged, gate_ref{gate_fn, gate}, out);
    } catch (...) {
        // Leave nothing queued: the copy stream does not wait for the kernels, so
        // the next upload into this buffer could race a failed one's NTT, and the
        // caller frees or reuses the host buffers these copies read.
        (void)cudaStreamSynchronize(st->copy);
        try { gpu.sync(); } catch (...) {}
        throw;
    }
    CUZK_CATCH
}

// ---------------------------------------------------------------- kernel benchmark

// `cuzk bench kernels` (gpu/src/kernels.rs): H's MSM and the NTT phase of a
// partition, each alone on the device, timed on the host around calls that return
// synchronized. The MSM runs over device-resident points and Montgomery-form
// scalars, as a partition's H does; once per entry of `chunks`: 0 is the engine's
// H (msm_yield_t, one call; `yields[c]` counts its yield points, no gate here)
// with windows of `wbits[c]` bits (0: sppark's rule; on return, the width used)
// in batches of at most `max_batch[c]` points (0: sppark's rule), each batch's
// windows accumulated in launches of `groups[c]` windows (0: one launch per batch,
// yield points between batches only; UINT32_MAX: the engine's rule,
// engine_launches; GROUP_ROUNDS | r: launches of r buckets per thread; on return,
// what was used), a yield point taken after every launch, as when a deadline
// partition waits all along;
// otherwise sppark's msm_t in calls of that many points each (n or more: one
// call over all points, which is how supraseal-c2's prover runs it for H).
// `ms[c * reps + r]`, `out[c]`: the time of repetition r and the sum, for entry c.
static const uint32_t GROUP_ROUNDS = 0x80000000u;
extern "C" RustError cuzk_bench_msm(size_t dev, const affine_t* pts, const fr_t* scalars, size_t n,
                                    const size_t* chunks, uint32_t* wbits, const size_t* max_batch,
                                    uint32_t* groups, size_t nchunks, uint32_t reps,
                                    double* ms, point_t* out, size_t* yields)
{
    CUZK_TRY
    if (n == 0 || reps == 0)
        throw cuda_error(cudaErrorInvalidValue, std::string("no points or no repetitions"));
    const gpu_t& gpu = select_gpu((int)dev);
    affine_h* d_pts = nullptr;
    CUDA_OK(cudaMalloc(&d_pts, n * sizeof(affine_h)));
    struct freer { void* p; ~freer() { (void)cudaFree(p); } } own{d_pts};
    for (size_t off = 0; off < n; off += SRS_UPLOAD_CHUNK)
        gpu[0].HtoD(d_pts + off, pts + off, std::min(SRS_UPLOAD_CHUNK, n - off), sizeof(affine_t));
    dev_ptr_t<fr_t> d_s{n, gpu[0]};
    gpu[0].HtoD(&d_s[0], scalars, n);
    gpu[0].sync();
    // Sized for all n points, as a resident set's H object is.
    msm_box<msm_g1_t> msm{new msm_g1_t(nullptr, n, sizeof(affine_t), (int)dev)};
    msm_box<msm_h_t> engine;
    for (size_t c = 0; c < nchunks; c++) {
        size_t chunk = std::max<size_t>(std::min(chunks[c], n), 1);
        yields[c] = 0;
        if (chunks[c] == 0) {
            engine.reset(); // its buckets freed before the next object's
            engine.reset(new msm_h_t(nullptr, n, sizeof(affine_t), (int)dev, wbits[c]));
            wbits[c] = engine->window_bits();
            engine->set_max_batch(max_batch[c]);
            if (groups[c] == UINT32_MAX)
                engine_launches(*engine, true);
            else if (groups[c] & GROUP_ROUNDS)
                engine->set_launch_rounds(groups[c] & ~GROUP_ROUNDS);
            else
                engine->set_window_group(groups[c]);
            // What it runs: whole windows, or rounds (a span under a batch's
            // buckets that is not whole windows).
            uint32_t win = 1U << (engine->window_bits() - 1), span = engine->launch_buckets();
            if (span == 0)
                groups[c] = engine->windows();
            else if (span % win == 0)
                groups[c] = span / win;
            else
                groups[c] = GROUP_ROUNDS | (uint32_t)(span / engine->accumulate_threads());
        }
        for (uint32_t r = 0; r < reps; r++) {
            auto t = std::chrono::steady_clock::now();
            point_t acc;
            acc.inf();
            if (chunks[c] == 0) {
                size_t y = 0;
                std::function<bool()> urgent;
                if (engine->launch_buckets() != 0) urgent = [] { return true; };
                RustError err = engine->invoke(acc, dev_ptr_t<affine_t>((affine_t*)d_pts), n,
                                               dev_ptr_t<fr_t>(&d_s[0]), true, sizeof(affine_t),
                                               [&] { y++; }, urgent);
                if (err.code != cudaSuccess) {
                    std::string m = err.message ? err.message : "MSM failed";
                    free(err.message);
                    throw cuda_error(err.code, m);
                }
                yields[c] = y;
                chunk = n;
            }
            for (size_t off = 0; chunks[c] != 0 && off < n; off += chunk) {
                size_t len = std::min(chunk, n - off);
                point_t part;
                RustError err = msm->invoke(part, dev_ptr_t<affine_t>((affine_t*)(d_pts + off)), len,
                                            dev_ptr_t<fr_t>(&d_s[off]), true);
                if (err.code != cudaSuccess) {
                    std::string m = err.message ? err.message : "MSM failed";
                    free(err.message);
                    throw cuda_error(err.code, m);
                }
                acc.add(part);
            }
            ms[c * reps + r] = ms_since(t);
            out[c] = acc;
        }
    }
    CUZK_CATCH
}

// Sets *flag when any word of a and b differ (the bench's check of a kernel copy).
__global__ void words_differ(const uint32_t* a, const uint32_t* b, size_t n, uint32_t* flag)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        if (a[i] != b[i]) {
            *flag = 1;
            return;
        }
}

// The NTT phase of a partition over 2^lg values (a, b and c all start as
// `values`, which holds 2^lg scalars): per repetition r, ms[5r..5r+5] = one iNTT
// (natural in, bit-reversed out), one coset NTT (bit-reversed in, natural out),
// one coset iNTT (natural in and out), each alone on one stream, then the whole
// phase as a partition runs it without a gate (three arrays on three streams, H on
// the coset, the coset iNTT), then the same as bulk work runs it under a gate (ntt_yield.cuh:
// the arrays in turn, a sync after each transform and, from 2^24 values up, after
// each of its kernels), whose result must equal the
// previous one word for word (an error otherwise). The transforms themselves are
// checked by the proof tests.

extern "C" RustError cuzk_bench_ntt(size_t dev, const fr_t* values, uint32_t lg, uint32_t reps, double* ms)
{
    CUZK_TRY
    if (reps == 0)
        throw cuda_error(cudaErrorInvalidValue, std::string("no repetitions"));
    const gpu_t& gpu = select_gpu((int)dev);
    const size_t N = (size_t)1 << lg;
    dev_ptr_t<fr_t> d{4 * N, gpu[0]};
    fr_t* dv[3] = {&d[0], &d[N], &d[2 * N]};
    fr_t* want = &d[3 * N];
    fr_t z;
    memset((void*)&z, 0, sizeof(z));
    dev_ptr_t<uint32_t> differs{1, gpu[0]};
    auto phase = [&](const std::function<void()>& between) {
        for (int k = 0; k < 3; k++) {
            ntt_yield_t::run(gpu[k], dv[k], lg, NTT::InputOutputOrder::NR, NTT::Direction::inverse, NTT::Type::standard, between);
            if (between) gpu[k].sync();
            ntt_yield_t::run(gpu[k], dv[k], lg, NTT::InputOutputOrder::RN, NTT::Direction::forward, NTT::Type::coset, between);
            if (between) gpu[k].sync();
        }
        event_t ev_b, ev_c;
        ev_b.record(gpu[1]);
        ev_c.record(gpu[2]);
        ev_b.wait(gpu[0]);
        ev_c.wait(gpu[0]);
        h_on_coset<<<gpu.sm_count() * 4, 256, 0, gpu[0]>>>(dv[0], dv[1], dv[2], z, N);
        CUDA_OK(cudaGetLastError());
        if (between) gpu.sync();
        ntt_yield_t::run(gpu[0], dv[0], lg, NTT::InputOutputOrder::NN, NTT::Direction::inverse, NTT::Type::coset, between);
        gpu.sync();
    };
    for (uint32_t r = 0; r < reps; r++) {
        for (int k = 0; k < 3; k++) gpu[0].HtoD(dv[k], values, N);
        gpu[0].sync();
        auto t = std::chrono::steady_clock::now();
        NTT::Base_dev_ptr(gpu[0], dv[0], lg, NTT::InputOutputOrder::NR, NTT::Direction::inverse, NTT::Type::standard);
        gpu[0].sync();
        ms[5 * r] = ms_since(t);
        t = std::chrono::steady_clock::now();
        NTT::Base_dev_ptr(gpu[0], dv[0], lg, NTT::InputOutputOrder::RN, NTT::Direction::forward, NTT::Type::coset);
        gpu[0].sync();
        ms[5 * r + 1] = ms_since(t);
        t = std::chrono::steady_clock::now();
        NTT::Base_dev_ptr(gpu[0], dv[0], lg, NTT::InputOutputOrder::NN, NTT::Direction::inverse, NTT::Type::coset);
        gpu[0].sync();
        ms[5 * r + 2] = ms_since(t);
        gpu[0].HtoD(dv[0], values, N);
        gpu[0].sync();
        t = std::chrono::steady_clock::now();
        phase(nullptr); // sppark's own sequence, the three streams at once
        ms[5 * r + 3] = ms_since(t);
        // The phase as bulk work runs it under a gate (ntt_yield.cuh: a sync and a
        // yield point after each kernel, the arrays in turn), checked against sppark's.
        CUDA_OK(cudaMemcpyAsync(want, dv[0], N * sizeof(fr_t), cudaMemcpyDeviceToDevice, gpu[0]));
        for (int k = 0; k < 3; k++) gpu[0].HtoD(dv[k], values, N);
        gpu[0].sync();
        t = std::chrono::steady_clock::now();
        phase([] {});
        ms[5 * r + 4] = ms_since(t);
        CUDA_OK(cudaMemsetAsync(&differs[0], 0, sizeof(uint32_t), gpu[0]));
        words_differ<<<gpu.sm_count() * 4, 256, 0, gpu[0]>>>((const uint32_t*)want, (const uint32_t*)dv[0],
                                                              N * sizeof(fr_t) / 4, &differs[0]);
        CUDA_OK(cudaGetLastError());
        uint32_t bad = 0;
        gpu[0].DtoH(&bad, &differs[0], 1);
        gpu[0].sync();
        if (bad)
            throw cuda_error(cudaErrorUnknown, std::string("the NTT phase with yield points differs from sppark's"));
    }
    CUZK_CATCH
}
