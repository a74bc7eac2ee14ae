#!/usr/bin/env bash
# Builds, on a build machine, everything a GPU host needs (it needs no Rust
# toolchain) into gpu-dist/: the release `cuzk` binary, the GPU test binary, the
# supraseal baseline (WITH_BASELINE=0 leaves it out) and, when built (or with
# WITH_POREP_BASELINE=1), the PoRep C2 baseline; stripped. Copy gpu-dist/ to the GPU
# host and run `bash gpu-dist/gpu-run.sh` there (docs/gpu.md: variables, phases).
# Needs nvcc (NVCC / PATH); RUSTFLAGS must let rustc find libcudart_static.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nvcc >/dev/null || { echo "nvcc not found: source a CUDA environment first (docs/gpu.md)"; exit 1; }
# Where cargo puts what it builds (CARGO_TARGET_DIR, as cargo reads it).
tgt=${CARGO_TARGET_DIR:-target}
out=gpu-dist
rm -rf "$out" && mkdir -p "$out"

cargo build --release --bin cuzk
cp "$tgt/release/cuzk" "$out/cuzk"
# Synthesis per partition, generic vs native (gpu-run.sh phase "synth").
cargo build --release -p cuzk-filecoin --example synth_bench
cp "$tgt/release/examples/synth_bench" "$out/synth_bench"

# Test binaries: `cargo test --no-run` prints where they are. GPU_TESTS picks some
# (names of: gpu cuda_vs_cpu post_update soak; all but soak by default).
all_tests=("-p cuzk --test gpu" "-p cuzk-gpu --test cuda_vs_cpu" "-p cuzk --test post_update" "-p cuzk --test soak")
for t in "${all_tests[@]}"; do
    name=${t##* }
    [[ " ${GPU_TESTS:-gpu cuda_vs_cpu post_update} " == *" $name "* ]] || continue
    # shellcheck disable=SC2086
    exe=$(cargo test --release $t --no-run --message-format=json 2>/dev/null \
        | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["kind"]==["test"]: print(m["executable"])' | tail -1)
    cp "$exe" "$out/$(basename "${exe%-*}")"
done

if [ "${WITH_BASELINE:-1}" = 1 ]; then
    # The baseline rarely changes and takes long to build: reuse it unless
    # REBUILD_BASELINE=1.
    if [ ! -x bench/supraseal/target/release/supraseal-bench ] || [ "${REBUILD_BASELINE:-0}" = 1 ]; then
        (cd bench/supraseal && cargo build --release)
    fi
    cp bench/supraseal/target/release/supraseal-bench "$out/"
fi

# The PoRep C2 baseline (filecoin-proofs `seal_commit_phase2` with `cuda-supraseal`,
# bench/porep-baseline): shipped when built; WITH_POREP_BASELINE=1 builds it when
# missing (or with REBUILD_BASELINE=1). Its neptune dependency links the CUDA driver
# library, which a build machine without a GPU lacks: it links against a stub
# libcuda.so in CUDA_STUB (default /opt/cuda-stub), a library that defines the
# driver's cu* functions for the linker only; the GPU host's driver is used at run
# time. Without one, scripts/make-libcuda-stub.sh makes it.
pb=bench/porep-baseline/target/release/porep-baseline
if [ "${WITH_POREP_BASELINE:-0}" = 1 ] && { [ ! -x "$pb" ] || [ "${REBUILD_BASELINE:-0}" = 1 ]; }; then
    stub=${CUDA_STUB:-/opt/cuda-stub}
    if [ ! -e "$stub/libcuda.so" ]; then
        scripts/make-libcuda-stub.sh "${CUDA_PATH:?CUDA_PATH is not set: source a CUDA environment first}" "$stub"
    fi
    (cd bench/porep-baseline && RUSTFLAGS="${RUSTFLAGS:-} -L native=$stub" CUDA_LIBRARY_PATH="$stub" cargo build --release)
fi
if [ -x "$pb" ]; then
    # ~12 MB stripped: shipped gzipped (~5 MB) to keep gpu-dist/ small; gpu-run.sh
    # unpacks it.
    strip -o "$out/porep-baseline" "$pb"
    gzip -9 "$out/porep-baseline"
fi
# PREV_CUZK=<an earlier cuzk binary>: shipped gzipped as cuzk-prev.gz for gpu-run.sh's
# "prev" variant (a before/after comparison in one run).
if [ -n "${PREV_CUZK:-}" ]; then
    strip -o /tmp/cuzk-prev-stripped "$PREV_CUZK" && gzip -9 -c /tmp/cuzk-prev-stripped > "$out/cuzk-prev.gz"
fi
cp scripts/gpu-run.sh "$out/"
for f in "$out"/*; do
    case $f in *.gz|*.sh) ;; *) strip "$f" 2>/dev/null || true ;; esac
done
chmod +x "$out"/*
ls -la "$out"
du -sh "$out"
