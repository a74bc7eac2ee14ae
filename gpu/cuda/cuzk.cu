// cuzk CUDA entry points: the H polynomial by NTT and the Groth16 MSMs, on sppark.
//
// One translation unit (sppark's MSM headers define kernels; several TUs would
// duplicate them). Every entry point is `extern "C"`, returns RustError by value
// (code 0 = success, message owned by Rust), selects its device first (callers run
// on arbitrary threads) and catches every exception: nothing unwinds into Rust.

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

#include <chrono>
#include <memory>
#include <string>

typedef msm_t<bucket_t, point_t, affine_t, scalar_t> msm_g1_t;
typedef msm_t<bucket_fp2_t, point_fp2_t, affine_fp2_t, scalar_t> msm_g2_t;

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
// reused for every partition (sppark keeps the points next to its buckets).
struct cuzk_srs {
    int dev;
    std::unique_ptr<msm_g1_t> h, l, a, b1;
    std::unique_ptr<msm_g2_t> b2;
};

extern "C" RustError cuzk_srs_new(size_t dev,
                                  const affine_t* h, size_t nh,
                                  const affine_t* l, size_t nl,
                                  const affine_t* a, size_t na,
                                  const affine_t* b1, size_t nb1,
                                  const affine_fp2_t* b2, size_t nb2,
                                  cuzk_srs** out)
{
    *out = nullptr;
    CUZK_TRY
    const gpu_t& gpu = select_gpu((int)dev);
    std::unique_ptr<cuzk_srs> s{new cuzk_srs};
    s->dev = (int)dev;
    // An empty vector keeps no points; its MSM is skipped (identity).
    if (nh)  s->h.reset(new msm_g1_t(h, nh, sizeof(affine_t), (int)dev));
    if (nl)  s->l.reset(new msm_g1_t(l, nl, sizeof(affine_t), (int)dev));
    if (na)  s->a.reset(new msm_g1_t(a, na, sizeof(affine_t), (int)dev));
    if (nb1) s->b1.reset(new msm_g1_t(b1, nb1, sizeof(affine_t), (int)dev));
    if (nb2) s->b2.reset(new msm_g2_t(b2, nb2, sizeof(affine_fp2_t), (int)dev));
    // The uploads run on the device's zero stream without a sync.
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

// ---------------------------------------------------------------- workspace

// Device buffers for a, b, c of one domain size, and the device's copy stream with
// its events; allocated once per device (see cuzk_execute for how they are used).
struct cuzk_ws {
    int dev;
    uint32_t lg;
    fr_t* d_abc;
    cudaStream_t copy;          // uploads only, never kernels
    cudaEvent_t arrived[3];     // a, b, c uploaded (and padded)
    cudaEvent_t t0, t1;         // timing: the copy stream's start and end
};

static void ws_release(cuzk_ws* w)
{
    if (w->d_abc) (void)cudaFree(w->d_abc);
    for (auto& e : w->arrived) if (e) (void)cudaEventDestroy(e);
    if (w->t0) (void)cudaEventDestroy(w->t0);
    if (w->t1) (void)cudaEventDestroy(w->t1);
    if (w->copy) (void)cudaStreamDestroy(w->copy);
}

extern "C" RustError cuzk_ws_new(size_t dev, uint32_t lg, cuzk_ws** out)
{
    *out = nullptr;
    CUZK_TRY
    select_gpu((int)dev);
    std::unique_ptr<cuzk_ws, void (*)(cuzk_ws*)> w{new cuzk_ws{(int)dev, lg, nullptr, nullptr, {}, nullptr, nullptr},
                                                   [](cuzk_ws* w) { ws_release(w); delete w; }};
    CUDA_OK(cudaMalloc(&w->d_abc, 3 * sizeof(fr_t) << lg));
    // Non-blocking: the copy stream must not synchronize with the legacy default
    // stream that sppark's MSMs use for their own transfers.
    CUDA_OK(cudaStreamCreateWithFlags(&w->copy, cudaStreamNonBlocking));
    for (auto& e : w->arrived) CUDA_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CUDA_OK(cudaEventCreate(&w->t0));
    CUDA_OK(cudaEventCreate(&w->t1));
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

// ---------------------------------------------------------------- pinned host memory

// Page-locked host memory for staging (portable: usable by every device). Uploads
// from it run at full PCIe bandwidth (~55 GB/s on the H200 host vs ~7 GB/s pageable).
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
    // Host points, used when no resident SRS is given (streamed per MSM).
    const affine_t* h_pts;
    const affine_t* l_pts;
    const affine_t* a_pts;
    const affine_t* b1_pts;
    const affine_fp2_t* b2_pts;
};

struct cuzk_outputs {
    point_t h, l, a, b1;
    point_fp2_t b2;
    double ms[8];        // upload (copy-stream time), ntt_h (the rest of the wall until
                         // H is ready), msm_h, msm_l, msm_a, msm_b_g1, msm_b_g2
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
    fprintf(stderr, "cuzk-cuda: %s ...\n", step);
    gpu.sync();
    CUDA_OK(cudaGetLastError());
    fprintf(stderr, "cuzk-cuda: %s done\n", step);
}

static double ms_since(std::chrono::steady_clock::time_point t)
{
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

template<class msm_type, class point, class affine>
static void run_msm(const gpu_t& gpu, msm_type* resident, const affine* host_pts,
                    size_t n, const fr_t* scalars, bool mont, point& out)
{
    out.inf();
    if (n == 0) return;
    RustError err;
    if (resident) {
        err = resident->invoke(out, (const affine*)nullptr, n, scalars, mont);
    } else {
        msm_type msm{nullptr, n, sizeof(affine), gpu.id()};
        err = msm.invoke(out, host_pts, n, scalars, mont);
    }
    if (err.code != cudaSuccess) {
        std::string m = err.message ? err.message : "MSM failed";
        free(err.message);
        throw cuda_error(err.code, m);
    }
}

extern "C" RustError cuzk_execute(cuzk_ws* ws, const cuzk_srs* srs,
                                  const cuzk_inputs* in, cuzk_outputs* out)
{
    CUZK_TRY
    const gpu_t& gpu = select_gpu(ws->dev);
    if (in->lg > ws->lg)
        throw cuda_error(cudaErrorInvalidValue, std::string("workspace smaller than the domain"));
    size_t N = (size_t)1 << in->lg;
    fr_t* d_a = ws->d_abc;
    fr_t* d_b = d_a + N;
    fr_t* d_c = d_b + N;
    auto t = std::chrono::steady_clock::now();

    // a, b, c: uploaded on the copy stream, one event each, with no host wait; each
    // compute stream waits only for its own array, so a's iNTT starts while b and c
    // are still crossing PCIe. Then coefficients (iNTT, natural in, bit-reversed
    // out) and evaluations on the coset g*<w> (NTT, bit-reversed in, natural out).
    fr_t* dv[3] = {d_a, d_b, d_c};
    const fr_t* hv[3] = {in->a, in->b, in->c};
    CUDA_OK(cudaEventRecord(ws->t0, ws->copy));
    for (int k = 0; k < 3; k++) {
        CUDA_OK(cudaMemcpyAsync(dv[k], hv[k], in->n * sizeof(fr_t), cudaMemcpyHostToDevice, ws->copy));
        if (N > in->n)
            CUDA_OK(cudaMemsetAsync(dv[k] + in->n, 0, (N - in->n) * sizeof(fr_t), ws->copy));
        CUDA_OK(cudaEventRecord(ws->arrived[k], ws->copy));
    }
    CUDA_OK(cudaEventRecord(ws->t1, ws->copy));
    trace(gpu, "upload");
    for (int k = 0; k < 3; k++) {
        stream_t& s = gpu[k];
        CUDA_OK(cudaStreamWaitEvent(s, ws->arrived[k], 0));
        NTT::Base_dev_ptr(s, dv[k], in->lg, NTT::InputOutputOrder::NR, NTT::Direction::inverse, NTT::Type::standard);
        trace(gpu, "intt");
        NTT::Base_dev_ptr(s, dv[k], in->lg, NTT::InputOutputOrder::RN, NTT::Direction::forward, NTT::Type::coset);
        trace(gpu, "coset ntt");
    }
    event_t ev_b, ev_c;
    ev_b.record(gpu[1]);
    ev_c.record(gpu[2]);
    ev_b.wait(gpu[0]);
    ev_c.wait(gpu[0]);
    h_on_coset<<<gpu.sm_count() * 4, 256, 0, gpu[0]>>>(d_a, d_b, d_c, in->z_inv, N);
    CUDA_OK(cudaGetLastError());
    trace(gpu, "h_on_coset");
    NTT::Base_dev_ptr(gpu[0], d_a, in->lg, NTT::InputOutputOrder::NN, NTT::Direction::inverse, NTT::Type::coset);
    trace(gpu, "coset intt");
    gpu.sync();
    // Upload + NTT/H wall on the host; the upload's own time from its events.
    double wall = ms_since(t);
    float up = 0;
    CUDA_OK(cudaEventSynchronize(ws->t1));
    CUDA_OK(cudaEventElapsedTime(&up, ws->t0, ws->t1));
    out->ms[0] = up;
    out->ms[1] = wall > up ? wall - up : 0;

    // H: the first N-1 coefficients, already on the device, Montgomery form.
    t = std::chrono::steady_clock::now();
    out->h.inf();
    if (N > 1) {
        if (srs && srs->h) {
            RustError err = srs->h->invoke(out->h, (const affine_t*)nullptr, N - 1,
                                           dev_ptr_t<fr_t>(d_a), true);
            if (err.code != cudaSuccess) {
                std::string m = err.message ? err.message : "MSM H failed";
                free(err.message);
                throw cuda_error(err.code, m);
            }
        } else {
            msm_g1_t msm{nullptr, N - 1, sizeof(affine_t), gpu.id()};
            RustError err = msm.invoke(out->h, in->h_pts, N - 1, dev_ptr_t<fr_t>(d_a), true);
            if (err.code != cudaSuccess) {
                std::string m = err.message ? err.message : "MSM H failed";
                free(err.message);
                throw cuda_error(err.code, m);
            }
        }
    }
    trace(gpu, "msm h");
    out->ms[2] = ms_since(t);

    t = std::chrono::steady_clock::now();
    run_msm(gpu, srs ? srs->l.get() : nullptr, in->l_pts, in->nl, in->l_s, false, out->l);
    trace(gpu, "msm l");
    out->ms[3] = ms_since(t);
    t = std::chrono::steady_clock::now();
    run_msm(gpu, srs ? srs->a.get() : nullptr, in->a_pts, in->na, in->a_s, false, out->a);
    trace(gpu, "msm a");
    out->ms[4] = ms_since(t);
    t = std::chrono::steady_clock::now();
    run_msm(gpu, srs ? srs->b1.get() : nullptr, in->b1_pts, in->nb, in->b_s, false, out->b1);
    out->ms[5] = ms_since(t);
    out->ms[6] = 0;
    out->b2.inf();
    if (in->with_b2) {
        t = std::chrono::steady_clock::now();
        run_msm(gpu, srs ? srs->b2.get() : nullptr, in->b2_pts, in->nb, in->b_s, false, out->b2);
        out->ms[6] = ms_since(t);
    }
    CUZK_CATCH
}
