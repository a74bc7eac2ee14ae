#!/usr/bin/env bash
# Runs on the GPU host from gpu-dist/ (built by scripts/gpu-dist.sh): GPU tests and
# benchmarks, logs under $OUT. Phases and sizes from the environment:
#   PHASES  "tests bench"      TEST_LOG2 "10,14,18,20"   BIG_LOG2 "20"
#   BENCH   "20:10 22:10"      (log2:count pairs)        DENSITY "1.0:1.0"
#   BASELINE 1                 (run supraseal beside cuzk)  BATCH 10
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/cuzk-out}
mkdir -p "$OUT" /tmp/cuzk-params
export RUST_LOG=${RUST_LOG:-warn} XDG_CACHE_HOME=/tmp/cuzk-cache CUZK_TEST_TMPDIR=/tmp/cuzk-test
# The benches must run on the CUDA backend ("gpu" refuses to fall back to the CPU).
GPUCFG="$OUT/gpu.toml"
printf '[backend]\nkind = "gpu"\n' > "$GPUCFG"
PHASES=${PHASES:-tests bench}
summary="$OUT/summary.txt"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
say "gpu: $(cat "$OUT/gpu.txt" | head -2 | tr '\n' ';') cores: $(nproc)"

if [[ " $PHASES " == *" tests "* ]]; then
    t=$(date +%s)
    CUZK_GPU_TEST_LOG2=${TEST_LOG2:-10,14,18,20} CUZK_GPU_TEST_BIG_LOG2=${BIG_LOG2:-20} \
        timeout "${TEST_TIMEOUT:-400}" "$D/gpu" --nocapture --test-threads 1 ${TEST_FILTER:-} > "$OUT/test-gpu.log" 2>&1
    say "test gpu rc=$? ($(( $(date +%s) - t )) s) $(grep -c '^ok ' "$OUT/test-gpu.log") cases ok; $(grep -E '^test result' "$OUT/test-gpu.log")"
fi

if [[ " $PHASES " == *" bench "* ]]; then
    IFS=: read -r AD BD <<< "${DENSITY:-1.0:1.0}"
    for pair in ${BENCH:-20:10 22:10}; do
        IFS=: read -r K N <<< "$pair"
        P=/tmp/cuzk-params/syn-$K-$AD-$BD.params
        if [ ! -f "$P" ]; then
            t=$(date +%s%N)
            "$D/cuzk" srs gen --synthetic "$K" --a-density "$AD" --b-density "$BD" --seed 7 --out "$P" > "$OUT/gen-$K.log" 2>&1
            say "srs gen 2^$K: $(( ($(date +%s%N) - t) / 1000000 )) ms rc=$?"
        fi
        timeout "${BENCH_TIMEOUT:-300}" "$D/cuzk" bench --config "$GPUCFG" --log2 "$K" --count "$N" --a-density "$AD" --b-density "$BD" --params "$P" --seed 1 \
            > "$OUT/bench-cuzk-$K.log" 2>&1
        say "cuzk 2^$K x$N: $(grep -E '^cuzk' "$OUT/bench-cuzk-$K.log")"
        grep -E "^bottleneck" "$OUT/bench-cuzk-$K.log" | tee -a "$summary"
        if [ "${BASELINE:-1}" = 1 ] && [ -x "$D/supraseal-bench" ]; then
            "$D/supraseal-bench" "$P" $((1 << K)) 2 "$AD" "$BD" "$N" "${BATCH:-10}" 1 > "$OUT/bench-supraseal-$K.log" 2>&1
            say "$(grep -E '^supraseal' "$OUT/bench-supraseal-$K.log" || tail -3 "$OUT/bench-supraseal-$K.log")"
        fi
    done
fi
echo "== summary =="
cat "$summary"
