#!/usr/bin/env bash
# Builds everything a GPU host run needs (it has no Rust toolchain) into gpu-dist/:
# the release `cuzk` binary, the GPU test binaries, and the supraseal baseline;
# stripped. Then: device run with `carry: ["gpu-dist"]` and command
# `bash gpu-dist/gpu-run.sh` (see docs/gpu.md).
# Needs nvcc (NVCC / PATH); RUSTFLAGS must let rustc find libcudart_static.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nvcc >/dev/null || { echo "nvcc not found: source a CUDA environment first (docs/gpu.md)"; exit 1; }
out=gpu-dist
rm -rf "$out" && mkdir -p "$out"

cargo build --release --bin cuzk
cp target/release/cuzk "$out/cuzk"

# Test binaries: `cargo test --no-run` prints where they are.
for t in "-p cuzk --test gpu"; do
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
cp scripts/gpu-run.sh "$out/"
strip "$out"/* 2>/dev/null || true
chmod +x "$out"/*
ls -la "$out"
du -sh "$out"
