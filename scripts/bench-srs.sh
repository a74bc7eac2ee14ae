#!/usr/bin/env bash
# Parameter generation and loading, cuzk vs bellperson, same machine, same run.
# Usage: scripts/bench-srs.sh [LOG2...]   (default: 16 18); needs target/release/cuzk.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=target/release/cuzk
dir=${TMPDIR:-/tmp}/cuzk-bench-srs
mkdir -p "$dir"
export RUST_LOG=warn
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
for k in "${@:-16 18}"; do
    for g in cuzk bellperson; do
        t0=$(date +%s.%N)
        "$bin" srs gen --synthetic "$k" --seed 1 --generator "$g" --out "$dir/p$k-$g.params"
        t1=$(date +%s.%N)
        printf "gen 2^%s %-10s %8.2f s\n" "$k" "$g" "$(echo "$t1 - $t0" | bc)"
    done
done
for k in "${@:-16 18}"; do
    "$bin" srs load-bench "$dir/p$k-cuzk.params"
done
