// Copyright Supranational LLC
// Licensed under the Apache License, Version 2.0, see LICENSE for details.
// SPDX-License-Identifier: Apache-2.0
//
// sppark 0.1.16's NTT::NTT_internal (sppark/ntt/ntt.cuh) with a yield point between
// its kernels: a transform of 2^19..2^30 values is three radix steps (bit reversal
// and the coset powers besides), ~15 ms each at 2^27 on an H100, where the whole
// transform (~45-51 ms) was the longest step of bulk work a deadline partition
// waited for once H's MSM yields between window groups (~29 ms). Stepped from 2^24
// values up (~5 ms a transform there). The kernels and their launchers are
// sppark's (ntt/kernels.cu, which ntt.cuh includes first); only the host sequence
// is copied, with `between()` after each kernel once the stream has drained. Keep
// in step with the sppark version pinned in gpu/Cargo.toml. `cuzk bench kernels`
// checks the stepped phase word for word against sppark's (`ntt phase_yield`).

#ifndef CUZK_NTT_YIELD_CUH
#define CUZK_NTT_YIELD_CUH

#include <functional>
#include <vector>

class ntt_yield_t : public NTT {
    // NTT::LDE_powers, which is private: the coset's powers of the group generator.
    static void lde_powers(fr_t* inout, bool innt, bool bitrev, uint32_t lg_dsz, stream_t& stream)
    {
        size_t domain_size = (size_t)1 << lg_dsz;
        const uint32_t warpSize = gpu_props(stream).warpSize;
        const auto gen_powers = NTTParameters::all(innt)[stream].partial_group_gen_powers;

        if (domain_size < warpSize)
            LDE_distribute_powers<<<1, domain_size, 0, stream>>>(inout, lg_dsz, 0, bitrev, gen_powers);
        else if (lg_dsz < 32)
            LDE_distribute_powers<<<domain_size / warpSize, warpSize, 0, stream>>>(inout, lg_dsz, 0, bitrev, gen_powers);
        else
            LDE_distribute_powers<<<stream.sm_count(), 1024, 0, stream>>>(inout, lg_dsz, 0, bitrev, gen_powers);

        CUDA_OK(cudaGetLastError());
    }

    // The radix steps of NTT::CT_NTT (ct = true) or NTT::GS_NTT, in launch order.
    static std::vector<int> steps(int lg, bool ct)
    {
        std::vector<int> s;
        if (lg <= 10) {
            s = {lg};
        } else if (lg <= 18) {
            int step = lg / 2;
            s = ct ? std::vector<int>{step + lg % 2, step} : std::vector<int>{step, step + lg % 2};
        } else if (lg <= 30) {
            int step = lg / 3, rem = lg % 3;
            int mid = step + (lg == 29 ? 1 : 0), last = step + (lg == 29 ? 1 : rem);
            s = ct ? std::vector<int>{step, mid, last} : std::vector<int>{last, mid, step};
        } else {
            int step = lg / 4, rem = lg % 4;
            s = {step + (rem > 0), step + (rem > 1), step + (rem > 2), step};
            if (ct) s = {s[3], s[2], s[1], s[0]};
        }
        return s;
    }

public:
    // NTT::Base_dev_ptr, with `between` (if any) called after each kernel once
    // `stream` has nothing of the transform queued. Without `between`, or below
    // 2^MIN_LG values (a whole transform is a few ms or less there: steps would add
    // syncs and gain nothing): sppark's own.
    static const uint32_t MIN_LG = 24;
    static void run(stream_t& stream, fr_t* d_inout, uint32_t lg, InputOutputOrder order, Direction direction,
                    Type type, const std::function<void()>& between)
    {
        if (!between || lg < MIN_LG || lg > 40) {
            NTT_internal(d_inout, lg, order, direction, type, stream);
            return;
        }
        auto point = [&] {
            stream.sync();
            between();
        };
        const bool intt = direction == Direction::inverse;
        const auto& params = NTTParameters::all(intt)[stream];
        bool bitrev = true, ct = true;
        switch (order) {
            case InputOutputOrder::NN:
                bit_rev(d_inout, d_inout, lg, stream);
                point();
                break;
            case InputOutputOrder::NR:
                bitrev = false;
                ct = false;
                break;
            case InputOutputOrder::RN:
                break;
            case InputOutputOrder::RR:
                ct = false;
                break;
        }
        if (!intt && type == Type::coset) {
            lde_powers(d_inout, intt, bitrev, lg, stream);
            point();
        }
        auto st = steps((int)lg, ct);
        auto radix = [&](auto&& launcher) {
            for (size_t i = 0; i < st.size(); i++) {
                launcher.step(st[i]);
                if (i + 1 < st.size()) point();
            }
        };
        if (ct)
            radix(CT_launcher{d_inout, (int)lg, intt, params, stream});
        else
            radix(GS_launcher{d_inout, (int)lg, intt, params, stream});
        if (intt && type == Type::coset) {
            point();
            lde_powers(d_inout, intt, !bitrev, lg, stream);
        }
        if (order == InputOutputOrder::RR) {
            point();
            bit_rev(d_inout, d_inout, lg, stream);
        }
    }
};

#endif
