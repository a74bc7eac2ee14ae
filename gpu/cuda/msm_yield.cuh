// Copyright Supranational LLC
// Licensed under the Apache License, Version 2.0, see LICENSE for details.
// SPDX-License-Identifier: Apache-2.0
//
// sppark 0.1.16's msm_t (sppark/msm/pippenger.cuh), renamed msm_yield_t, with one
// change: invoke() takes `between`, called between two of its batches (2^24 points
// each at 2^27) once nothing of the call is queued on the device. The engine's H-MSM
// runs as one call with a yield point there, instead of several calls (each paying
// its own first batch's digits, bucket integration and window sums: +5.2% at 2^27 in
// 2^25-point calls on an H100, `cuzk bench kernels`; docs/gpu.md). The kernels are
// sppark's own, from pippenger.cuh, which must be included first (accumulate_wins
// is a copy of its accumulate). Keep in step with
// the sppark version pinned in gpu/Cargo.toml. Also: the constructor takes a window
// width to use instead of sppark's rule (`cuzk bench kernels --wbits`),
// window_bits() says which one an object uses, and set_max_batch() caps the points
// per batch (sppark's rule gives 2^24 at 2^27 with 18-bit windows, and fewer,
// larger batches with wider ones: longer steps between yield points). Given
// `urgent` as well, invoke() runs each batch's accumulation in launches of
// set_window_group() windows or of set_launch_rounds() spans of buckets across
// windows (accumulate_wins, below), each synchronized, with a yield point after
// each, one after each launch of a batch's digit sort and one once its digits are
// sorted, and stops at its yield points (calls `between`) only while urgent() is
// true: the wait of a deadline partition is then a launch's, not a batch's.
// balanced_group() picks a group size.

#ifndef CUZK_MSM_YIELD_CUH
#define CUZK_MSM_YIELD_CUH

#include <cmath>
#include <functional>

// Which of invoke()'s yield points asks `urgent` and calls `between` now, for the
// gate's names of the stretches between them (cuzk.cu, gate_hold::msm_yields): set
// just before the yield point's `stop()`.
enum { MSM_AT_GROUP = 0, MSM_AT_DIGITS = 1, MSM_AT_BATCH = 2, MSM_AT_SORT = 3 };
static thread_local int msm_yield_at = MSM_AT_GROUP;

// sppark's accumulate (pippenger.cuh) over the buckets [first, first+count) of a
// batch, counted across its windows (window y's bucket x is y*2^(wbits-1) + x),
// instead of all of them: the engine launches a batch's buckets in spans, so that
// the longest kernel of H's MSM is a span's and a deadline partition can go between
// two spans. `first` and `count` are multiples of 32 (a warp's lanes share one
// window: the histogram lookup below reads the lane before's count) and count
// within a window, or whole windows. Each instantiation keeps its own work
// counters, per stream as sppark's (launches on one stream run in turn).
template<class bucket_t,
         class affine_h,
         class bucket_h = class bucket_t::mem_t,
         class affine_t = class bucket_t::affine_t>
__launch_bounds__(ACCUMULATE_NTHREADS) __global__
void accumulate_wins(bucket_h buckets_[], uint32_t first, uint32_t count, uint32_t wbits,
                     /*const*/ affine_h points_[], const vec2d_t<uint32_t> digits,
                     const vec2d_t<uint32_t> histogram, uint32_t sid = 0)
{
    vec2d_t<bucket_h> buckets{buckets_, 1U<<--wbits};
    const affine_h* points = points_;

    static __device__ uint32_t streams[MSM_NSTREAMS];
    uint32_t& current = streams[sid % MSM_NSTREAMS];
    uint32_t laneid;
    asm volatile("mov.u32 %0, %laneid;" : "=r"(laneid));
    const uint32_t degree = bucket_t::degree;
    const uint32_t warp_sz = WARP_SZ / degree;
    const uint32_t lane_id = laneid / degree;

    uint32_t x, y;
    __shared__ uint32_t xchg;

    if (threadIdx.x == 0)
        xchg = atomicAdd(&current, blockDim.x/degree);
    __syncthreads();
    x = xchg + threadIdx.x/degree;

    while (x < count) {
        x += first;
        y = x >> wbits;
        x &= (1U << wbits) - 1;
        const uint32_t* h = &histogram[y][x];

        uint32_t idx, len = h[0];

        asm volatile("{ .reg.pred %did;"
            "  shfl.sync.up.b32 %0|%did, %1, %2, 0, 0xffffffff;"
            "  @!%did mov.b32 %0, 0;"
            "}" : "=r"(idx) : "r"(len), "r"(degree));

        if (lane_id == 0 && x != 0)
            idx = h[-1];

        if ((len -= idx) && !(x == 0 && y == 0)) {
            const uint32_t* digs_ptr = &digits[y][idx];
            uint32_t digit = *digs_ptr++;

            affine_t p = points[digit & 0x7fffffff];
            bucket_t bucket = p;
            bucket.cneg(digit >> 31);

            while (--len) {
                digit = *digs_ptr++;
                p = points[digit & 0x7fffffff];
                if (sizeof(bucket) <= 128 || LARGE_L1_CODE_CACHE)
                    bucket.add(p, digit >> 31);
                else
                    bucket.uadd(p, digit >> 31);
            }

            buckets[y][x] = bucket;
        } else {
            buckets[y][x].inf();
        }

        x = laneid == 0 ? atomicAdd(&current, warp_sz) : 0;
        x = __shfl_sync(0xffffffff, x, 0) + lane_id;
    }

    cooperative_groups::this_grid().sync();

    if (threadIdx.x + blockIdx.x == 0)
        current = 0;
}

template<class bucket_t, class point_t, class affine_t, class scalar_t,
         class affine_h = class affine_t::mem_t,
         class bucket_h = class bucket_t::mem_t>
class msm_yield_t {
    const gpu_t& gpu;
    size_t npoints;
    uint32_t wbits, nwins;
    size_t max_batch = 0;
    // Buckets per accumulate launch under a gate (0: a batch's in one launch).
    uint32_t span = 0;
    bucket_h *d_buckets;
    affine_h *d_points;
    scalar_t *d_scalars;
    vec2d_t<uint32_t> d_hist;

    template<typename T> using vec_t = slice_t<T>;

    class result_t {
        bucket_t ret[MSM_NTHREADS/bucket_t::degree][2];
    public:
        result_t() {}
        inline operator decltype(ret)&()                    { return ret;    }
        inline const bucket_t* operator[](size_t i) const   { return ret[i]; }
    };

    constexpr static int lg2(size_t n)
    {   int ret=0; while (n>>=1) ret++; return ret;   }

public:
    msm_yield_t(const affine_t points[], size_t np,
          size_t ffi_affine_sz = sizeof(affine_t), int device_id = -1,
          uint32_t force_wbits = 0)
        : gpu(select_gpu(device_id)), d_points(nullptr), d_scalars(nullptr)
    {
        npoints = (np+WARP_SZ-1) & ((size_t)0-WARP_SZ);

        wbits = 17;
        if (npoints > 192) {
            wbits = std::min(lg2(npoints + npoints/2) - 8, 18);
            if (wbits < 10)
                wbits = 10;
        } else if (npoints > 0) {
            wbits = 10;
        }
        // cuzk: sppark's sort takes up to 2*DIGIT_BITS bits, its kernels need more
        // than NTHRBITS + 1.
        if (force_wbits) {
            if (force_wbits < 10 || force_wbits > 2*DIGIT_BITS)
                throw cuda_error(cudaErrorInvalidValue, std::string("MSM window width outside 10..=26"));
            wbits = force_wbits;
        }
        nwins = (scalar_t::bit_length() - 1) / wbits + 1;

        uint32_t row_sz = 1U << (wbits-1);

        size_t d_buckets_sz = (nwins * row_sz)
                            + (gpu.sm_count() * BATCH_ADD_BLOCK_SIZE / WARP_SZ);
        size_t d_blob_sz = (d_buckets_sz * sizeof(d_buckets[0]))
                         + (nwins * row_sz * sizeof(uint32_t))
                         + (points ? npoints * sizeof(d_points[0]) : 0);

        d_buckets = reinterpret_cast<decltype(d_buckets)>(gpu.Dmalloc(d_blob_sz));
        d_hist = vec2d_t<uint32_t>(&d_buckets[d_buckets_sz], row_sz);
        if (points) {
            d_points = reinterpret_cast<decltype(d_points)>(d_hist[nwins]);
            gpu.HtoD(d_points, points, np, ffi_affine_sz);
            npoints = np;
        } else {
            npoints = 0;
        }

    }
    inline msm_yield_t(vec_t<affine_t> points, size_t ffi_affine_sz = sizeof(affine_t),
                 int device_id = -1)
        : msm_yield_t(points, points.size(), ffi_affine_sz, device_id) {};
    inline msm_yield_t(int device_id = -1)
        : msm_yield_t(nullptr, 0, 0, device_id) {};
    uint32_t window_bits() const { return wbits; }
    void set_max_batch(size_t n) { max_batch = n; }
    // Windows per accumulate launch when invoke() is given `urgent` (0: all of a
    // batch's in one launch, as sppark).
    void set_window_group(uint32_t g) { span = g >= nwins ? 0 : g << (wbits-1); }
    // Launches of `rounds` buckets per accumulate thread instead (rounded to whole
    // warps, or to whole windows where a window is under 1,024 buckets): a launch
    // takes as long as its busiest thread, so a whole number of rounds keeps every
    // thread busy to its end whatever the windows' size, and the step a deadline
    // partition waits for can be shorter than a window (~40 ms at 2^27 with H's
    // 20-bit windows on an H100: ~10 rounds).
    void set_launch_rounds(uint32_t rounds)
    {
        size_t unit = std::min<size_t>(1024, size_t(1) << (wbits-1));
        size_t n = (size_t)rounds * accumulate_threads();
        n = (n + unit - 1) / unit * unit;
        span = n >= ((size_t)nwins << (wbits-1)) ? 0 : (uint32_t)n;
    }
    // Buckets per accumulate launch, for `cuzk bench kernels` (a batch's all: 0).
    uint32_t launch_buckets() const { return span; }
    uint32_t windows() const { return nwins; }
    // The fewest windows per launch that keep the device's accumulate threads
    // evenly loaded: every launch ends when its longest thread ends, and a thread
    // sums a bucket at a time (2^(wbits-1) per window), so a launch of g windows
    // takes ceil(g*B/T) bucket rounds for g*B/T of work (T threads). At 132 SMs x
    // 384 threads and 18-bit windows: 1 window 86% busy, 3 windows 97%, 5 99.5%.
    uint32_t balanced_group(double min_busy = 0.96) const
    {
        double per_win = (double)(1U << (wbits-1)) / accumulate_threads();
        for (uint32_t g = 1; g < nwins; g++) {
            double work = g * per_win;
            if (work / std::ceil(work) >= min_busy)
                return g;
        }
        return nwins;
    }
    // Threads of an accumulate launch, each summing a bucket at a time: the block
    // size the launch gets (launch_coop: the kernel's maximum), not
    // ACCUMULATE_NTHREADS, which the host pass sees for pre-Ampere devices.
    size_t accumulate_threads() const
    {
        cudaFuncAttributes attr;
        CUDA_OK(cudaFuncGetAttributes(&attr, accumulate_wins<bucket_t, affine_h>));
        return (size_t)gpu.sm_count() * attr.maxThreadsPerBlock / bucket_t::degree;
    }
    ~msm_yield_t()
    {
        gpu.sync();
        if (d_buckets) gpu.Dfree(d_buckets);
    }

private:
    // cuzk: `step`, when given, is called after each launch but the last (the
    // breakdown, then each sort of a pair of windows), so that the caller can
    // wait for it and stop there: sorting a batch's digits is one of the longest
    // stretches of an MSM otherwise (all 13 windows of a 2^26-point batch).
    void digits(const scalar_t d_scalars[], size_t len,
                vec2d_t<uint32_t>& d_digits, vec2d_t<uint2>&d_temps, bool mont,
                const std::function<void()>& step = {})
    {
        // Using larger grid size doesn't make 'sort' run faster, actually
        // quite contrary. Arguably because global memory bus gets
        // thrashed... Stepping far outside the sweet spot has significant
        // impact, 30-40% degradation was observed. It's assumed that all
        // GPUs are "balanced" in an approximately the same manner. The
        // coefficient was observed to deliver optimal performance on
        // Turing and Ampere...
        uint32_t grid_size = gpu.sm_count() / 3;
        while (grid_size & (grid_size - 1))
            grid_size -= (grid_size & (0 - grid_size));

        breakdown<<<2*grid_size, 1024, sizeof(scalar_t)*1024, gpu[2]>>>(
            d_digits, d_scalars, len, nwins, wbits, mont
        );
        CUDA_OK(cudaGetLastError());
        if (step) step();

        const size_t shared_sz = sizeof(uint32_t) << DIGIT_BITS;
#if 0
        uint32_t win;
        for (win = 0; win < nwins-1; win++) {
            gpu[2].launch_coop(sort, {grid_size, SORT_BLOCKDIM, shared_sz},
                            d_digits, len, win, d_temps, d_hist,
                            wbits-1, wbits-1, 0u);
        }
        uint32_t top = scalar_t::bit_length() - wbits * win;
        gpu[2].launch_coop(sort, {grid_size, SORT_BLOCKDIM, shared_sz},
                            d_digits, len, win, d_temps, d_hist,
                            wbits-1, top-1, 0u);
#else
        // On the other hand a pair of kernels launched in parallel run
        // ~50% slower but sort twice as much data...
        uint32_t top = scalar_t::bit_length() - wbits * (nwins-1);
        uint32_t win;
        for (win = 0; win < nwins-1; win += 2) {
            gpu[2].launch_coop(sort, {{grid_size, 2}, SORT_BLOCKDIM, shared_sz},
                            d_digits, len, win, d_temps, d_hist,
                            wbits-1, wbits-1, win == nwins-2 ? top-1 : wbits-1);
            if (step && win + 2 < nwins) step();
        }
        if (win < nwins) {
            gpu[2].launch_coop(sort, {{grid_size, 1}, SORT_BLOCKDIM, shared_sz},
                            d_digits, len, win, d_temps, d_hist,
                            wbits-1, top-1, 0u);
        }
#endif
    }

public:
    RustError invoke(point_t& out, const affine_t* points_, size_t npoints,
                                   const scalar_t* scalars, bool mont = true,
                                   size_t ffi_affine_sz = sizeof(affine_t),
                                   const std::function<void()>& between = {},
                                   const std::function<bool()>& urgent = {})
    {
        assert(this->npoints == 0 || npoints <= this->npoints);
        // With `urgent`: a batch's buckets in spans of `span` per launch, and
        // `between` called at a span's end or a batch's only when `urgent()`
        // says a deadline partition waits (at a batch's end, the next batch's
        // digits are then drained first; otherwise they run on).
        const uint32_t all = nwins << (wbits-1);
        const uint32_t group = urgent && span && span < all ? span : all;
        auto stop = [&] { return between && (!urgent || urgent()); };

        uint32_t lg_npoints = lg2(npoints + npoints/2);
        size_t batch = 1 << (std::max(lg_npoints, wbits) - wbits);
        batch >>= 6;
        batch = batch ? batch : 1;
        if (max_batch && npoints > max_batch)
            batch = std::max(batch, (npoints + max_batch - 1) / max_batch);
        uint32_t stride = (npoints + batch - 1) / batch;
        stride = (stride+WARP_SZ-1) & ((size_t)0-WARP_SZ);

        std::vector<result_t> res(nwins);
        std::vector<bucket_t> ones(gpu.sm_count() * BATCH_ADD_BLOCK_SIZE / WARP_SZ);

        out.inf();
        point_t p;

        try {
            // |scalars| being nullptr means the scalars are pre-loaded to
            // |d_scalars|, otherwise allocate stride.
            size_t temp_sz = scalars ? sizeof(scalar_t) : 0;
            temp_sz = stride * std::max(2*sizeof(uint2), temp_sz);

            // |points| being nullptr means the points are pre-loaded to
            // |d_points|, otherwise allocate double-stride.
            const char* points = reinterpret_cast<const char*>(points_);
            size_t d_point_sz = points ? (batch > 1 ? 2*stride : stride) : 0;
            d_point_sz *= sizeof(affine_h);

            size_t digits_sz = nwins * stride * sizeof(uint32_t);

            dev_ptr_t<uint8_t> d_temp{temp_sz + digits_sz + d_point_sz, gpu[2]};

            vec2d_t<uint2> d_temps{&d_temp[0], stride};
            vec2d_t<uint32_t> d_digits{&d_temp[temp_sz], stride};

            scalar_t* d_scalars = scalars ? (scalar_t*)&d_temp[0]
                                          : this->d_scalars;
            affine_h* d_points = points ? (affine_h*)&d_temp[temp_sz + digits_sz]
                                        : this->d_points;

            size_t d_off = 0;   // device offset
            size_t h_off = 0;   // host offset
            size_t num = stride > npoints ? npoints : stride;
            event_t ev;

            // cuzk: with window groups, the sort of a batch's digits goes a
            // launch at a time, each waited for, with a yield point after it
            // (taken, as the others, only while a deadline partition waits).
            // `cur`: the stream of the batch before, whose bucket integration
            // and window sums may still run beside the sort.
            int cur = 0;
            std::function<void()> sort_step;
            if (group != all)
                sort_step = [&] {
                    gpu[2].sync();
                    msm_yield_at = MSM_AT_SORT;
                    if (stop()) {
                        gpu[cur].sync();
                        between();
                    }
                };

            if (scalars)
                gpu[2].HtoD(&d_scalars[d_off], &scalars[h_off], num);
            digits(&d_scalars[0], num, d_digits, d_temps, mont, sort_step);
            gpu[2].record(ev);

            if (points)
                gpu[0].HtoD(&d_points[d_off], &points[h_off],
                            num,              ffi_affine_sz);

            for (uint32_t i = 0; i < batch; i++) {
                if (group != all) {
                    // cuzk: a yield point once the batch's digits are sorted,
                    // before its first accumulate. Without it the sort (all
                    // windows of a 2^26-point batch: H at 2^27 with 20-bit
                    // windows) and the first group ran as one stretch, the
                    // longest a deadline partition waited for (105-114 ms on an
                    // H100). Only this call's digits are waited for here.
                    CUDA_OK(cudaEventSynchronize(ev));
                    msm_yield_at = MSM_AT_DIGITS;
                    if (stop()) {
                        gpu[2].sync();
                        between();
                    }
                }
                gpu[i&1].wait(ev);

                batch_addition<bucket_t><<<gpu.sm_count(), BATCH_ADD_BLOCK_SIZE,
                                           0, gpu[i&1]>>>(
                    &d_buckets[nwins << (wbits-1)], &d_points[d_off], num,
                    &d_digits[0][0], d_hist[0][0]
                );
                CUDA_OK(cudaGetLastError());

                if (group == all) {
                    gpu[i&1].launch_coop(accumulate<bucket_t, affine_h>,
                        {gpu.sm_count(), 0},
                        d_buckets, nwins, wbits, &d_points[d_off], d_digits, d_hist, i&1
                    );
                } else {
                    for (uint32_t b0 = 0; b0 < all; b0 += group) {
                        uint32_t nb = std::min(group, all - b0);
                        gpu[i&1].launch_coop(accumulate_wins<bucket_t, affine_h>,
                            {gpu.sm_count(), 0},
                            d_buckets, b0, nb, wbits, &d_points[d_off], d_digits, d_hist, i&1
                        );
                        if (b0 + nb >= all)
                            break;
                        // Each group synchronized (a gap of a host wake-up, which
                        // the other MSM thread's kernels fill), so that a deadline
                        // partition waits for at most the group running when it
                        // came. Nothing else of this call is queued then: the
                        // batch's digits are done (its first launch waited for
                        // them), the next batch's not queued yet, the previous
                        // batch synchronized.
                        gpu[i&1].sync();
                        msm_yield_at = MSM_AT_GROUP;
                        if (stop()) {
                            gpu[2].sync();
                            between();
                        }
                    }
                }
                gpu[i&1].record(ev);

                integrate<bucket_t><<<nwins, MSM_NTHREADS,
                                      sizeof(bucket_t)*MSM_NTHREADS/bucket_t::degree,
                                      gpu[i&1]>>>(
                    d_buckets, nwins, wbits, scalar_t::bit_length()
                );
                CUDA_OK(cudaGetLastError());

                if (i < batch-1) {
                    h_off += stride;
                    num = h_off + stride <= npoints ? stride : npoints - h_off;

                    if (scalars)
                        gpu[2].HtoD(&d_scalars[0], &scalars[h_off], num);
                    gpu[2].wait(ev);
                    cur = i&1;
                    digits(&d_scalars[scalars ? 0 : h_off], num,
                           d_digits, d_temps, mont, sort_step);
                    gpu[2].record(ev);

                    if (points) {
                        size_t j = (i + 1) & 1;
                        d_off = j ? stride : 0;
                        gpu[j].HtoD(&d_points[d_off], &points[h_off*ffi_affine_sz],
                                    num,              ffi_affine_sz);
                    } else {
                        d_off = h_off;
                    }
                }

                if (i > 0) {
                    collect(p, res, ones);
                    out.add(p);
                }

                gpu[i&1].DtoH(ones, d_buckets + (nwins << (wbits-1)));
                gpu[i&1].DtoH(res, d_buckets, sizeof(bucket_h)<<(wbits-1));
                gpu[i&1].sync();

                // cuzk: between two batches, with nothing of this call's queued
                // (the next batch's digits drained), the caller's yield point.
                msm_yield_at = MSM_AT_BATCH;
                if (i < batch-1 && stop()) {
                    gpu[2].sync();
                    between();
                }
            }
        } catch (const cuda_error& e) {
            gpu.sync();
#ifdef TAKE_RESPONSIBILITY_FOR_ERROR_MESSAGE
            return RustError{e.code(), e.what()};
#else
            return RustError{e.code()};
#endif
        }

        collect(p, res, ones);
        out.add(p);

        return RustError{cudaSuccess};
    }

    template<typename affine_ptr_t = const affine_h*,
             typename scalar_ptr_t = const scalar_t*>
    RustError invoke(point_t& out, affine_ptr_t points, size_t npoints,
                                   scalar_ptr_t scalars, bool mont = true,
                                   size_t ffi_affine_sz = sizeof(affine_t),
                                   const std::function<void()>& between = {},
                                   const std::function<bool()>& urgent = {})
    {
        const auto* p_ptr = &points[0];
        if (is_device_ptr<affine_ptr_t>::value) {
            d_points = (decltype(d_points))p_ptr;
            p_ptr = nullptr;
        }

        const auto* s_ptr = &scalars[0];
        if (is_device_ptr<scalar_ptr_t>::value) {
            d_scalars = const_cast<decltype(d_scalars)>(s_ptr);
            s_ptr = nullptr;
        }

        return invoke(out, p_ptr, npoints, s_ptr, mont, ffi_affine_sz, between, urgent);
    }

    RustError invoke(point_t& out, vec_t<scalar_t> scalars, bool mont = true)
    {   return invoke(out, nullptr, scalars.size(), scalars, mont);   }

    RustError invoke(point_t& out, vec_t<affine_t> points,
                                   const scalar_t* scalars, bool mont = true,
                                   size_t ffi_affine_sz = sizeof(affine_t))
    {   return invoke(out, points, points.size(), scalars, mont, ffi_affine_sz);   }

    RustError invoke(point_t& out, vec_t<affine_t> points,
                                   vec_t<scalar_t> scalars, bool mont = true,
                                   size_t ffi_affine_sz = sizeof(affine_t))
    {   return invoke(out, points, points.size(), scalars, mont, ffi_affine_sz);   }

    RustError invoke(point_t& out, const std::vector<affine_t>& points,
                                   const std::vector<scalar_t>& scalars, bool mont = true,
                                   size_t ffi_affine_sz = sizeof(affine_t))
    {
        return invoke(out, points.data(),
                           std::min(points.size(), scalars.size()),
                           scalars.data(), mont, ffi_affine_sz);
    }

private:
    point_t integrate_row(const result_t& row, uint32_t lsbits)
    {
        const int NTHRBITS = lg2(MSM_NTHREADS/bucket_t::degree);

        assert(wbits-1 > NTHRBITS);

        size_t i = MSM_NTHREADS/bucket_t::degree - 1;

        if (lsbits-1 <= NTHRBITS) {
            size_t mask = (1U << (NTHRBITS-(lsbits-1))) - 1;
            bucket_t res, acc = row[i][1];

            if (mask)   res.inf();
            else        res = acc;

            while (i--) {
                acc.add(row[i][1]);
                if ((i & mask) == 0)
                    res.add(acc);
            }

            return res;
        }

        point_t  res = row[i][0];
        bucket_t acc = row[i][1];

        while (i--) {
            point_t raise = acc;
            for (size_t j = 0; j < lsbits-1-NTHRBITS; j++)
                raise.dbl();
            res.add(raise);
            res.add(point_t{row[i][0]});
            if (i)
                acc.add(row[i][1]);
        }

        return res;
    }

    void collect(point_t& out, const std::vector<result_t>& res,
                               const std::vector<bucket_t>& ones)
    {
        struct tile_t {
            uint32_t x, y, dy;
            point_t p;
            tile_t() {}
        };
        std::vector<tile_t> grid(nwins);

        uint32_t y = nwins-1, total = 0;

        grid[0].x  = 0;
        grid[0].y  = y;
        grid[0].dy = scalar_t::bit_length() - y*wbits;
        total++;

        while (y--) {
            grid[total].x  = grid[0].x;
            grid[total].y  = y;
            grid[total].dy = wbits;
            total++;
        }

        std::vector<std::atomic<size_t>> row_sync(nwins); /* zeroed */
        counter_t<size_t> counter(0);
        channel_t<size_t> ch;

        auto n_workers = min((uint32_t)gpu.ncpus(), total);
        while (n_workers--) {
            gpu.spawn([&, this, total, counter]() {
                for (size_t work; (work = counter++) < total;) {
                    auto item = &grid[work];
                    auto y = item->y;
                    item->p = integrate_row(res[y], item->dy);
                    if (++row_sync[y] == 1)
                        ch.send(y);
                }
            });
        }

        point_t one = sum_up(ones);

        out.inf();
        size_t row = 0, ny = nwins;
        while (ny--) {
            auto y = ch.recv();
            row_sync[y] = -1U;
            while (grid[row].y == y) {
                while (row < total && grid[row].y == y)
                    out.add(grid[row++].p);
                if (y == 0)
                    break;
                for (size_t i = 0; i < wbits; i++)
                    out.dbl();
                if (row_sync[--y] != -1U)
                    break;
            }
        }
        out.add(one);
    }
};

#endif
