#!/usr/bin/env bash
# Runs on the GPU host from a copy of gpu-dist/ (built by scripts/gpu-dist.sh on a
# build machine): GPU tests and benchmarks. Logs, generated configs and summary.txt
# go to $OUT (default /tmp/cuzk-out); generated parameters and C1 outputs stay in
# /tmp and are reused by later invocations on the same host. docs/gpu.md lists
# every variable. Phases and sizes from the environment (defaults shown):
#   PHASES  "tests bench"      TEST_LOG2 "10,14,18,20"   BIG_LOG2 "20"   AT_SIZE_LOG2 "20"
#   BENCH   "20:10 22:10"      (log2:count pairs)        DENSITY "1.0:1.0"
#   BENCH_VARIANTS "default"   (or e.g. "default buffers1 default buffers1")
#   BASELINE 1                 (run supraseal beside cuzk)  BATCH 10
#   PHASES may add "porep" (C1 stream per size in POREP_SIZES="2KiB" (or "2KiB 8MiB"):
#   POREP_COUNT=20 proofs after POREP_WARMUP=0 untimed ones in the same process (both
#   sides), verify_seal unless POREP_VERIFY="", config variants
#   POREP_VARIANTS="default", see below), "porepbase" (the filecoin-proofs/supraseal-c2
#   C2 baseline on the same sizes and C1, once per thread count in POREP_THREADS="1 4"),
#   "multi" (MULTI="22:30": the synthetic stream on device 0 only, then on all devices;
#   MULTI_CONFIGS="0:1 all:1" as devices:stage_pcie-workers entries),
#   "daemon" (cuzk daemon with GPU metrics: scrape /metrics during a bench batch)
#   "bg2cpu" (BENCH again with prepare_msm.b_g2 = "cpu", to compare B_G2 placement)
#   "full" (32GiB/64GiB shape-only C1s against in-memory timing parameters, below),
#   "fullbase" (supraseal-c2 on the first partitions of that circuit, then cuzk, on
#   the same timing-parameter file and C1, below), "restart" (first-ever proof and
#   first proofs after a restart, parameters on local disk, below),
#   "kinds" (tests/post_update.rs on this host's backend: WinningPoSt, WindowPoSt and
#   SnapDeals proofs checked by filecoin-proofs' verifiers) and "deadline" (`cuzk
#   bench deadline`: WinningPoSt / WindowPoSt-partition latency alone and under a
#   2KiB PoRep stream; DEADLINE_COUNT=20, DEADLINE_LOAD=32 PoRep jobs in flight),
#   "kernels" (`cuzk bench kernels`: H-MSM and NTT timings, KERNELS_LOG2, below),
#   "synth" (examples/synth_bench: synthesis CPU per partition, generic vs native,
#   below), "soak" (tests/soak.rs on this host's backend, SOAK_JOBS=1000 jobs; built
#   with GPU_TESTS="... soak" in gpu-dist.sh)
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
# sample FILE PID: until PID exits, every 500 ms, seconds since the start, the
# VmHWM/VmRSS of PID's child (PID is `timeout`) or of PID, and the host's free memory.
sample() {
    local t0 c; t0=$(date +%s)
    while kill -0 "$2" 2>/dev/null; do
        c=$(pgrep -P "$2" | head -1)
        echo "$(( $(date +%s) - t0 )) $(grep -E 'VmHWM|VmRSS' "/proc/${c:-$2}/status" 2>/dev/null | tr -s ' \n' ' ') $(free -g | awk '/Mem:/{print "used_g", $3, "avail_g", $7}')" >> "$1"
        sleep 0.5
    done
}
# meta_ids C1DIR: PID and SID from the meta.json `cuzk gen-c1` wrote.
meta_ids() {
    PID=$(python3 -c "import json;print(json.load(open('$1/meta.json'))['prover_id'])")
    SID=$(python3 -c "import json;print(json.load(open('$1/meta.json'))['sector_id'])")
}
# PB: the PoRep baseline binary (gpu-dist.sh ships it gzipped, for its size).
PB="$D/porep-baseline"
if [ ! -x "$PB" ] && [ -f "$PB.gz" ]; then
    gzip -dc "$PB.gz" > /tmp/porep-baseline && chmod +x /tmp/porep-baseline
    PB=/tmp/porep-baseline
fi

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
say "gpu: $(cat "$OUT/gpu.txt" | head -2 | tr '\n' ';') cores: $(nproc)"

if [[ " $PHASES " == *" tests "* ]]; then
    t=$(date +%s)
    CUZK_GPU_TEST_LOG2=${TEST_LOG2:-10,14,18,20} CUZK_GPU_TEST_BIG_LOG2=${BIG_LOG2:-20} \
        timeout "${TEST_TIMEOUT:-400}" "$D/gpu" --include-ignored --nocapture --test-threads 1 ${TEST_FILTER:-} > "$OUT/test-gpu.log" 2>&1
    say "test gpu rc=$? ($(( $(date +%s) - t )) s) $(grep -c '^ok ' "$OUT/test-gpu.log") cases ok; $(grep -E '^test result' "$OUT/test-gpu.log")"
    if [ -x "$D/cuda_vs_cpu" ]; then
        # The CUDA backend against the CPU backend (gpu/tests/cuda_vs_cpu.rs).
        t=$(date +%s)
        # AT_SIZE_LOG2: domains of the at-size check (timing parameters, discrete
        # logarithms); "26,27" is the full-size one (~100 GB of host memory, minutes).
        CUZK_GPU_AT_SIZE_LOG2=${AT_SIZE_LOG2:-20} \
            timeout "${TEST_TIMEOUT:-400}" "$D/cuda_vs_cpu" --include-ignored --nocapture --test-threads 1 > "$OUT/test-cuda-vs-cpu.log" 2>&1
        say "test cuda_vs_cpu rc=$? ($(( $(date +%s) - t )) s): $(grep -E '^test result' "$OUT/test-cuda-vs-cpu.log")"
    fi
fi

if [[ " $PHASES " == *" soak "* ]] && [ -x "$D/soak" ]; then
    # tests/soak.rs on this host's backend (CUDA): SOAK_JOBS mixed jobs with faults
    # through one engine, then the daemon runs (dropped clients; promises with results
    # storage: idle connections, retries, cancels, a full disk).
    t=$(date +%s)
    CUZK_SOAK_JOBS=${SOAK_JOBS:-1000} timeout "${SOAK_TIMEOUT:-500}" "$D/soak" --nocapture --test-threads 1 > "$OUT/test-soak.log" 2>&1
    say "test soak rc=$? ($(( $(date +%s) - t )) s): $(grep -E '^test result' "$OUT/test-soak.log")"
fi
if [[ " $PHASES " == *" kinds "* ]] && [ -x "$D/post_update" ]; then
    t=$(date +%s)
    FIL_PROOFS_PARENT_CACHE=/tmp/cuzk-parents timeout "${TEST_TIMEOUT:-400}" "$D/post_update" --nocapture --test-threads 1 > "$OUT/test-kinds.log" 2>&1
    say "test post_update rc=$? ($(( $(date +%s) - t )) s): $(grep -E '^test result' "$OUT/test-kinds.log")"
fi
if [[ " $PHASES " == *" deadline "* ]]; then
    # The test parameters of the kinds phase, when it ran (same generator, same seed).
    printf '[backend]\nkind = "gpu"\n[ingest]\nparam_cache = "%s"\n' "${DEADLINE_PARAMS:-/tmp/cuzk-test/cuzk-porep/params-2kib-seed1}" > "$OUT/deadline.toml"
    t=$(date +%s)
    FIL_PROOFS_PARENT_CACHE=/tmp/cuzk-parents timeout "${DEADLINE_TIMEOUT:-900}" "$D/cuzk" --config "$OUT/deadline.toml" bench deadline \
        --count "${DEADLINE_COUNT:-20}" --load-inflight "${DEADLINE_LOAD:-32}" > "$OUT/deadline.log" 2>&1
    say "bench deadline rc=$? ($(( $(date +%s) - t )) s)"
    grep -E '^(backend|phase|alone|under|WinningPoSt|WindowPoSt partition)' "$OUT/deadline.log" | tee -a "$summary"
fi
if [[ " $PHASES " == *" kernels "* ]]; then
    # `cuzk bench kernels`: H's MSM (one call, as supraseal-c2 runs it, and calls of
    # 2^C points for C in KERNELS_CHUNKS, as the engine's yield points cut it) and
    # the NTT phase at KERNELS_LOG2, each alone on device 0, every MSM sum checked.
    t=$(date +%s)
    timeout "${KERNELS_TIMEOUT:-500}" "$D/cuzk" bench kernels --on cuda --log2 "${KERNELS_LOG2:-20,22,24,26,27}" \
        --chunk-log2 "${KERNELS_CHUNKS:-22,23,24,25}" --reps "${KERNELS_REPS:-3}" > "$OUT/kernels.log" 2>&1
    say "bench kernels rc=$? ($(( $(date +%s) - t )) s)"
    grep -v ' INFO ' "$OUT/kernels.log" | tee -a "$summary"
fi

if [[ " $PHASES " == *" deadlinefull "* ]]; then
    # Deadline proofs under a full-size PoRep load from a cold engine (`cuzk bench
    # deadline --load-sector-size`): DLF_SIZE=32GiB, DLF_PROOFS=5 load proofs of which
    # DLF_QUIET=1 without deadline work, DLF_EVERY=1500 ms between deadline proofs,
    # DLF_COUNT=10 alone per kind, DLF_LANE=true (backend.deadline_lane), DLF_BACKEND
    # more [backend] lines (e.g. 'msm_h_window_bits = 20\n'), DLF_EXTRA appended to
    # the config, DLF_STOP=N: issue nothing new after N s (`--stop-after`), so a run
    # that would outlast DLF_TIMEOUT still ends with its summary.
    printf '[backend]\nkind = "gpu"\ndeadline_lane = %s\n%b[ingest]\nparam_cache = "/tmp/cuzk-dlf-params"\n%b' "${DLF_LANE:-true}" "${DLF_BACKEND:-}" "${DLF_EXTRA:-}" > "$OUT/deadlinefull.toml"
    t=$(date +%s)
    L="$OUT/deadlinefull-${DLF_SIZE:-32GiB}.log"
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -lms 1000 > "$OUT/deadlinefull-nvml.csv" 2>/dev/null &
    NV=$!
    FIL_PROOFS_PARENT_CACHE=/tmp/cuzk-parents timeout "${DLF_TIMEOUT:-560}" "$D/cuzk" --config "$OUT/deadlinefull.toml" bench deadline \
        --load-sector-size "${DLF_SIZE:-32GiB}" --load-proofs "${DLF_PROOFS:-5}" --quiet-proofs "${DLF_QUIET:-1}" \
        --post-every-ms "${DLF_EVERY:-1500}" --count "${DLF_COUNT:-10}" ${DLF_STOP:+--stop-after "$DLF_STOP"} --work /tmp/cuzk-dlf-work > "$L" 2>&1 &
    P=$!
    sample "$OUT/deadlinefull-mem.txt" $P
    wait $P; rc=$?
    kill $NV 2>/dev/null
    say "bench deadline --load-sector-size ${DLF_SIZE:-32GiB} rc=$rc ($(( $(date +%s) - t )) s)"
    grep -E '^(backend|fixtures|timing|load|stopped|PoRep|phase|alone|recording|steady|device|FAILED)' "$L" | tee -a "$summary"
fi

if [[ " $PHASES " == *" bench "* ]]; then
    IFS=: read -r AD BD <<< "${DENSITY:-1.0:1.0}"
    for pair in ${BENCH:-20:10 22:10}; do
        IFS=: read -r K N <<< "$pair"
        # TIMING=1: TEST-ONLY timing parameters (minutes at 2^27 instead of hours;
        # nothing verifies, the two sides' digests are the check) and Verify off.
        TS=""; [ "${TIMING:-0}" = 1 ] && TS="-timing"
        P=/tmp/cuzk-params/syn-$K-$AD-$BD$TS.params
        if [ ! -f "$P" ]; then
            t=$(date +%s%N)
            # shellcheck disable=SC2046
            "$D/cuzk" srs gen --synthetic "$K" --a-density "$AD" --b-density "$BD" --seed 7 --out "$P" \
                $([ -n "$TS" ] && echo --timing) > "$OUT/gen-$K.log" 2>&1
            grc=$?
            say "srs gen 2^$K$TS: $(( ($(date +%s%N) - t) / 1000000 )) ms rc=$grc $(grep -E '^TIMING' "$OUT/gen-$K.log")"
        fi
        # BENCH_VARIANTS: "default", "buffers1" (one staging buffer per device: upload
        # and compute in turn), "streamed" (backend.srs_resident = false), run in the
        # order given, each in its own process.
        k=0
        for V in ${BENCH_VARIANTS:-default}; do
            k=$((k + 1))
            CFGV="$OUT/bench-$V.toml"
            case "$V" in
                buffers1) printf '[backend]\nkind = "gpu"\ndevice_buffers = 1\n' > "$CFGV" ;;
                # Parameters streamed from host memory for every MSM, not resident.
                streamed) printf '[backend]\nkind = "gpu"\nsrs_resident = false\n' > "$CFGV" ;;
                *) cp "$GPUCFG" "$CFGV" ;;
            esac
            [ -n "$TS" ] && printf '[verify]\nenabled = false\n' >> "$CFGV"
            TAG="$K-x$N"; [ "${BENCH_VARIANTS:-default}" = default ] || TAG="$K-x$N-$V-$k"
            timeout "${BENCH_TIMEOUT:-300}" "$D/cuzk" bench --config "$CFGV" --log2 "$K" --count "$N" --a-density "$AD" --b-density "$BD" --params "$P" --seed 1 \
                --trace "$OUT/trace-$TAG.json" --plot "$OUT/utilization-$TAG.svg" > "$OUT/bench-cuzk-$TAG.log" 2>&1
            say "cuzk 2^$K x$N $V: $(grep -E '^cuzk' "$OUT/bench-cuzk-$TAG.log")"
            grep -E "^bottleneck|^(h2d|ntt_h|msm_|stage |upload )" "$OUT/bench-cuzk-$TAG.log" | tee -a "$summary"
        done
        if [ "${BASELINE:-1}" = 1 ] && [ -x "$D/supraseal-bench" ]; then
            # BASELINE_N: the baseline's proof count where it must be smaller than
            # cuzk's (a 2^27 proof takes it over a minute); the digests compare only
            # when the counts are equal.
            BN=${BASELINE_N:-$N}
            timeout "${BENCH_TIMEOUT:-300}" "$D/supraseal-bench" "$P" $((1 << K)) 2 "$AD" "$BD" "$BN" "${BATCH:-10}" 1 > "$OUT/bench-supraseal-$K-x$BN.log" 2>&1
            say "$(grep -E '^supraseal' "$OUT/bench-supraseal-$K-x$BN.log" | tr '\n' ' ' || tail -3 "$OUT/bench-supraseal-$K-x$BN.log")"
        fi
    done
fi
if [[ " $PHASES " == *" bg2cpu "* ]]; then
    printf '[backend]\nkind = "gpu"\n[prepare_msm]\nb_g2 = "cpu"\n' > "$OUT/bg2cpu.toml"
    for pair in ${BENCH:-22:10}; do
        IFS=: read -r K N <<< "$pair"
        P=/tmp/cuzk-params/syn-$K-1.0-1.0.params
        [ -f "$P" ] || "$D/cuzk" srs gen --synthetic "$K" --seed 7 --out "$P" > "$OUT/gen-$K.log" 2>&1
        timeout "${BENCH_TIMEOUT:-300}" "$D/cuzk" bench --config "$OUT/bg2cpu.toml" --log2 "$K" --count "$N" --params "$P" --seed 1 \
            > "$OUT/bg2cpu-$K-x$N.log" 2>&1
        say "b_g2=cpu 2^$K x$N: $(grep -E '^cuzk' "$OUT/bg2cpu-$K-x$N.log")"
        grep -E "^bottleneck" "$OUT/bg2cpu-$K-x$N.log" | tee -a "$summary"
    done
fi

# PoRep inputs for sector size $1 (once per host): random parameters in $FP and a C1
# output in $C1 (with meta.json: prover id $PID, sector id $SID).
FP=/tmp/cuzk-fparams
porep_inputs() {
    C1=/tmp/cuzk-c1-$1
    if [ ! -f "$FP/.done-$1" ]; then
        local t rc
        t=$(date +%s)
        "$D/cuzk" srs gen --porep "$1" --cache "$FP" --seed 1 > "$OUT/porep-gen-$1.log" 2>&1
        rc=$?
        [ $rc = 0 ] && touch "$FP/.done-$1"
        say "porep srs gen $1 rc=$rc ($(( $(date +%s) - t )) s)"
    fi
    if [ ! -f "$C1/meta.json" ]; then
        "$D/cuzk" gen-c1 --sector-size "$1" --seed 1 --out "$C1" > "$OUT/porep-c1-$1.log" 2>&1
    fi
    meta_ids "$C1"
}

if [[ " $PHASES " == *" porep "* ]]; then
    # POREP_VARIANTS: configs run one after the other on the same inputs: "default",
    # "plain" (no pre-compiled synthesis), "nonice" (synthesis at normal priority),
    # "old" (both: plain synthesis at normal priority, as before commit 8ea02ce),
    # "prep2", "prep2pcie2", "gpu2", "all2" (2 workers in PrepareMsm / StagePcie /
    # ProveGpu), "nosplit" (no bit split of the MSMs), "nolend" (a/b/c not written
    # into pinned memory by synthesis), "s5" (the defaults as of commit 88235ef: no
    # split, no lending, no saved recording), "cold" (default, but no saved recording
    # is loaded or saved),
    # "warm" (default; named for the run after one that saved the recording),
    # "generic" (pre-compiled, the witness from the circuit's own synthesize instead
    # of the native generator: the before/after of native witness generation),
    # "noverify" (default without the Verify stage: what verification costs),
    # "keepmem" / "purge1s" (default, with the allocator keeping freed memory
    # committed for ever / for 1 s: MIMALLOC_PURGE_DELAY=-1 / 1000; mimalloc's own
    # default purges after 10 ms, and a reused page is then touched fresh again),
    # "prep4" (4 PrepareMsm and 2 StagePcie workers), "prev" (an earlier binary,
    # cuzk-prev.gz, default config). The default saves the circuit recording in the
    # parameter cache, so every later variant starts warm; a variant listed twice
    # runs twice.
    for SZ in ${POREP_SIZES:-2KiB}; do
        porep_inputs "$SZ"
        for V in ${POREP_VARIANTS:-default}; do
            CFG=$OUT/porep-$V.toml
            envs=""
            case $V in
                default) extra="" ;;
                keepmem) extra=""; envs="MIMALLOC_PURGE_DELAY=-1" ;;
                purge1s) extra=""; envs="MIMALLOC_PURGE_DELAY=1000" ;;
                plain) extra='[synthesize]\nprecompile = false\n' ;;
                nonice) extra='[synthesize]\nnice = 0\n' ;;
                generic) extra='[synthesize]\nnative = false\n' ;;
                old) extra='[synthesize]\nprecompile = false\nnice = 0\n' ;;
                prep2) extra='[prepare_msm]\nworkers = 2\n' ;;
                prep2pcie2) extra='[prepare_msm]\nworkers = 2\n[stage_pcie]\nworkers = 2\n' ;;
                gpu2) extra='[prove_gpu]\nworkers_per_device = 2\n' ;;
                nosplit) extra='[prepare_msm]\nbit_split = false\n' ;;
                nolend) extra='[synthesize]\nwrite_pinned = false\n' ;;
                s5) extra='[prepare_msm]\nbit_split = false\n[synthesize]\nwrite_pinned = false\nsave_recordings = false\n' ;;
                cold) extra='[synthesize]\nsave_recordings = false\n' ;;
                warm) extra="" ;;
                noverify) extra='[verify]\nenabled = false\n' ;;
                prep4) extra='[prepare_msm]\nworkers = 4\n[stage_pcie]\nworkers = 2\n' ;;
                all2) extra='[prepare_msm]\nworkers = 2\n[stage_pcie]\nworkers = 2\n[prove_gpu]\nworkers_per_device = 2\n' ;;
                # An earlier binary (cuzk-prev.gz beside this script, shipped with
                # PREV_CUZK=<binary> scripts/gpu-dist.sh) with its default config: a
                # before/after in the same run.
                prev) extra="" ;;
                *) say "unknown variant $V"; continue ;;
            esac
            printf "[backend]\nkind = \"gpu\"\n$extra" > "$CFG"
            L="$OUT/porep-cuzk-$SZ-$V.log"
            # A variant listed twice (to see the noise) keeps both logs.
            [ -f "$L" ] && L="$OUT/porep-cuzk-$SZ-$V-2.log"
            BIN="$D/cuzk"
            if [ "$V" = prev ]; then
                [ -f "$D/cuzk-prev.gz" ] || { say "variant prev: no cuzk-prev.gz in $D"; continue; }
                [ -x /tmp/cuzk-prev ] || { gzip -dc "$D/cuzk-prev.gz" > /tmp/cuzk-prev && chmod +x /tmp/cuzk-prev; }
                BIN=/tmp/cuzk-prev
            fi
            env $envs timeout "${BENCH_TIMEOUT:-300}" "$BIN" prove --config "$CFG" --c1 "$C1/c1.json" --prover-id "$PID" --sector-id "$SID" \
                --param-cache "$FP" --count "${POREP_COUNT:-20}" --warmup "${POREP_WARMUP:-0}" --seed 1 ${POREP_VERIFY---verify} > "$L" 2>&1
            say "porep $SZ x${POREP_COUNT:-20} $V rc=$?: $(grep -E '^warm-up|^cuzk|^stage busy|^ops|^pinned|^wall|^verify' "$L" | tr '\n' ' ')"
        done
    done
fi

if [[ " $PHASES " == *" synth "* ]]; then
    # Synthesis CPU per partition (examples/synth_bench): plain, pre-compiled with the
    # circuit's witness, pre-compiled with the native witness, one partition at a time
    # (SYNTH_REPEATS=3), then SYNTH_THREADS (16) threads each synthesizing 4 partitions
    # at once, generic then native (core-seconds per partition = wall / 4 with every
    # core busy). SYNTH_SIZES="2KiB 8MiB" use the sealed C1s of "porep"; "512MiB" a
    # shape-only C1. SYNTH_WITNESS="32GiB 64GiB": the first partition's witness alone,
    # native then generic (no recording: it would take ~25 GB and minutes).
    SB="$D/synth_bench"
    for SZ in ${SYNTH_SIZES:-2KiB 8MiB 512MiB}; do
        case $SZ in
            2KiB|8MiB) porep_inputs "$SZ" ;;
            *) C1=/tmp/cuzk-c1-shape-$SZ
               [ -f "$C1/meta.json" ] || "$D/cuzk" gen-c1 --shape-only --sector-size "$SZ" --seed 1 --out "$C1" > "$OUT/synth-c1-$SZ.log" 2>&1 ;;
        esac
        L="$OUT/synth-$SZ.log"
        "$SB" "$C1/c1.json" "${SYNTH_REPEATS:-3}" > "$L" 2>&1
        GENERIC=1 THREADS=${SYNTH_THREADS:-16} "$SB" "$C1/c1.json" 4 >> "$L" 2>&1
        sed -i '$s/^/generic /' "$L"
        THREADS=${SYNTH_THREADS:-16} "$SB" "$C1/c1.json" 4 >> "$L" 2>&1
        sed -i '$s/^/native /' "$L"
        say "synth $SZ: $(grep -E '^(record|plain|precompiled|native|generic)' "$L" | tr -s ' ' | tr '\n' ';')"
    done
    for SZ in ${SYNTH_WITNESS:-32GiB}; do
        C1=/tmp/cuzk-c1-shape-$SZ
        [ -f "$C1/meta.json" ] || "$D/cuzk" gen-c1 --shape-only --sector-size "$SZ" --seed 1 --out "$C1" > "$OUT/synth-c1-$SZ.log" 2>&1
        L="$OUT/synth-witness-$SZ.log"
        WITNESS_ONLY=1 "$SB" "$C1/c1.json" 1 > "$L" 2>&1
        say "synth witness $SZ: $(tr -s ' ' < "$L" | tr '\n' ';')"
    done
fi

if [[ " $PHASES " == *" full "* ]]; then
    # Full-size PoRep (32GiB/64GiB) without sealing or a parameter file: a shape-only
    # C1 (the real circuit at its real size, fabricated values) proved against TEST-ONLY
    # timing parameters generated in memory (`prove --timing-params`: Verify off, its
    # proofs never verify). FULL_SIZES="32GiB", FULL_COUNT=2, FULL_EXTRA (config lines,
    # e.g. '[synthesize]\nworkers = 2\n'), FULL_ENV (variables, e.g. MIMALLOC_PURGE_DELAY=1000). Samples the process's peak RSS (VmHWM) and
    # NVML's utilization and memory every 500 ms. FULL_GRID="SYNTH:JOBS:SECS" (e.g.
    # "1,2,4:1,2,3,4:20") runs the budget grid (`prove --grid-synth SYNTH --grid-jobs
    # JOBS --grid-window SECS`) instead of FULL_COUNT proofs; give it a recording_dir in
    # FULL_EXTRA so each setting's engine loads the recording instead of making it.
    for SZ in ${FULL_SIZES:-32GiB}; do
        C1=/tmp/cuzk-c1-shape-$SZ
        if [ ! -f "$C1/meta.json" ]; then
            t=$(date +%s)
            "$D/cuzk" gen-c1 --shape-only --sector-size "$SZ" --seed 1 --out "$C1" > "$OUT/full-c1-$SZ.log" 2>&1
            say "gen-c1 --shape-only $SZ rc=$? ($(( $(date +%s) - t )) s)"
        fi
        meta_ids "$C1"
        CFG=$OUT/full-$SZ.toml
        # No saved recording: at 32GiB it is a 7.4 GB file on a 64 GiB disk.
        printf "[backend]\nkind = \"gpu\"\n${FULL_EXTRA:-[synthesize]\nsave_recordings = false\n}" > "$CFG"
        L="$OUT/full-$SZ.log"
        RUNARGS=(--count "${FULL_COUNT:-2}")
        if [ -n "${FULL_GRID:-}" ]; then
            IFS=: read -r GS GJ GW <<< "$FULL_GRID"
            RUNARGS=(--grid-synth "$GS" --grid-jobs "$GJ" --grid-window "${GW:-30}")
            L="$OUT/full-$SZ-grid.log"
        fi
        nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv,noheader -lms 500 \
            > "$OUT/full-$SZ-nvml.csv" 2>/dev/null &
        SMI=$!
        t=$(date +%s)
        # shellcheck disable=SC2086
        env RUST_LOG="${FULL_LOG:-info}" ${FULL_ENV:-} timeout "${FULL_TIMEOUT:-3000}" "$D/cuzk" prove --config "$CFG" --c1 "$C1/c1.json" \
            --prover-id "$PID" --sector-id "$SID" --timing-params --seed 1 "${RUNARGS[@]}" > "$L" 2>&1 &
        P=$!
        sample "$OUT/full-$SZ-mem.txt" $P
        wait $P; rc=$?
        kill "$SMI" 2>/dev/null; wait "$SMI" 2>/dev/null
        say "full $SZ x${FULL_COUNT:-2} rc=$rc ($(( $(date +%s) - t )) s): $(grep -E '^TIMING|^cuzk|^stage busy|^ops|^pinned|^wall|^budget grid|^synth' "$L" | tr '\n' ' ')"
        say "full $SZ peak: $(tail -2 "$OUT/full-$SZ-mem.txt" | head -1); VRAM max $(cut -d, -f4 "$OUT/full-$SZ-nvml.csv" | sort -n | tail -1)"
    done
fi

if [[ " $PHASES " == *" fullbase "* ]]; then
    # The baseline on the real 32GiB/64GiB circuit, where filecoin-proofs'
    # seal_commit_phase2 cannot run here (its vanilla sanity check refuses a shape-only
    # C1; ten partitions at once do not fit 128 GiB): timing parameters written as a
    # file (`srs gen --porep SZ --timing`), the shape-only C1 of "full", then
    # porep-baseline --partitions K (the first K partitions in one supraseal-c2 batch,
    # unchecked) for K in FULLBASE_K="1" ("" runs none), then cuzk on the same file and C1
    # (FULLBASE_COUNT=1 proofs, Verify off, timeout FULL_TIMEOUT). Samples RSS and NVML
    # as "full" does.
    for SZ in ${FULL_SIZES:-32GiB}; do
        TP=/tmp/cuzk-params/timing-$SZ
        if [ ! -f "$TP/.done" ]; then
            t=$(date +%s)
            "$D/cuzk" srs gen --porep "$SZ" --timing --seed 1 --cache "$TP" > "$OUT/fullbase-gen-$SZ.log" 2>&1 && touch "$TP/.done"
            say "srs gen --porep $SZ --timing rc=$? ($(( $(date +%s) - t )) s): $(tr '\n' ' ' < "$OUT/fullbase-gen-$SZ.log")"
        fi
        C1=/tmp/cuzk-c1-shape-$SZ
        [ -f "$C1/meta.json" ] || "$D/cuzk" gen-c1 --shape-only --sector-size "$SZ" --seed 1 --out "$C1" > "$OUT/full-c1-$SZ.log" 2>&1
        nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv,noheader -lms 500 \
            > "$OUT/fullbase-$SZ-nvml.csv" 2>/dev/null &
        SMI=$!
        for K in ${FULLBASE_K-1}; do
            [ -x "$PB" ] || { say "porep-baseline: not in $D (WITH_POREP_BASELINE=1 scripts/gpu-dist.sh)"; break; }
            L="$OUT/fullbase-$SZ-baseline-k$K.log"
            t=$(date +%s)
            echo "baseline k=$K starts at $(date +%s.%N)" >> "$OUT/fullbase-$SZ-events.txt"
            timeout "${BENCH_TIMEOUT:-300}" "$PB" --c1 "$C1/c1.json" --param-cache "$TP" --partitions "$K" --count 1 > "$L" 2>&1 &
            sample "$OUT/fullbase-$SZ-baseline-k$K-mem.txt" $!
            wait $!; rc=$?
            say "fullbase $SZ porep-baseline --partitions $K rc=$rc ($(( $(date +%s) - t )) s): $(grep -E '^baseline|^proof|error' "$L" | tr '\n' ' ')"
        done
        if [ "${FULLBASE_CUZK:-1}" = 1 ]; then
            CFG=$OUT/fullbase-$SZ.toml
            printf '[backend]\nkind = "gpu"\n[verify]\nenabled = false\n[synthesize]\nsave_recordings = false\n' > "$CFG"
            meta_ids "$C1"
            L="$OUT/fullbase-$SZ-cuzk.log"
            t=$(date +%s)
            echo "cuzk starts at $(date +%s.%N)" >> "$OUT/fullbase-$SZ-events.txt"
            RUST_LOG=info timeout "${FULL_TIMEOUT:-3000}" "$D/cuzk" prove --config "$CFG" --c1 "$C1/c1.json" --prover-id "$PID" \
                --sector-id "$SID" --param-cache "$TP" --count "${FULLBASE_COUNT:-1}" --seed 1 > "$L" 2>&1 &
            sample "$OUT/fullbase-$SZ-cuzk-mem.txt" $!
            wait $!; rc=$?
            say "fullbase $SZ cuzk x${FULLBASE_COUNT:-1} rc=$rc ($(( $(date +%s) - t )) s): $(grep -E '^cuzk|^stage busy|^ops|^pinned|^wall' "$L" | tr '\n' ' ')"
        fi
        kill "$SMI" 2>/dev/null; wait "$SMI" 2>/dev/null
    done
fi

if [[ " $PHASES " == *" restart "* ]]; then
    # Cold starts at full size with the parameters on local disk (the timing-parameter
    # file of "fullbase"): one new `cuzk prove` process per entry of
    # RESTART_RUNS="first warm cold", each submitting at its start, Verify off.
    # "first" deletes any saved recording (the first-ever proof: parameters read from
    # a page cache dropped first, the circuit recorded, then saved beside them);
    # "warm" reuses the saved recording with the page cache as the last process left
    # it (a daemon restart); "cold" drops the page cache first (a host reboot);
    # "firstoff" is "first" with `synthesize.record_beside_load = false` (the first
    # partition records, after the load), the same run's baseline for "first".
    # RESTART_COUNT=2 proofs each (the first run RESTART_FIRST_COUNT, default the same:
    # 8 or more make it a stream with a steady state), RESTART_TIMEOUT=300 s each.
    SZ=${FULL_SIZES:-32GiB}; SZ=${SZ%% *}
    TP=/tmp/cuzk-params/timing-$SZ
    if [ ! -f "$TP/.done" ]; then
        t=$(date +%s)
        "$D/cuzk" srs gen --porep "$SZ" --timing --seed 1 --cache "$TP" > "$OUT/restart-gen-$SZ.log" 2>&1 && touch "$TP/.done"
        say "srs gen --porep $SZ --timing rc=$? ($(( $(date +%s) - t )) s)"
    fi
    C1=/tmp/cuzk-c1-shape-$SZ
    [ -f "$C1/meta.json" ] || "$D/cuzk" gen-c1 --shape-only --sector-size "$SZ" --seed 1 --out "$C1" > "$OUT/full-c1-$SZ.log" 2>&1
    meta_ids "$C1"
    CFG=$OUT/restart-$SZ.toml
    printf '[backend]\nkind = "gpu"\n[verify]\nenabled = false\n%b' "${RESTART_EXTRA:-}" > "$CFG"
    printf '[backend]\nkind = "gpu"\n[verify]\nenabled = false\n[synthesize]\nrecord_beside_load = false\n' > "$OUT/restart-$SZ-off.toml"
    for R in ${RESTART_RUNS:-first warm cold}; do
        C=$CFG
        case $R in
            first*) rm -f "$TP"/cuzk-recording-* ;;
            *) ls "$TP"/cuzk-recording-*.bin > /dev/null 2>&1 || say "restart $R: no saved recording in $TP" ;;
        esac
        [ "$R" = firstoff ] && C=$OUT/restart-$SZ-off.toml
        if [ "$R" != warm ]; then
            sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || say "restart $R: could not drop the page cache"
        fi
        L="$OUT/restart-$SZ-$R.log"
        N=${RESTART_COUNT:-2}; [ "$R" = first ] && N=${RESTART_FIRST_COUNT:-$N}
        echo "restart $R starts at $(date +%s.%N)" >> "$OUT/restart-events.txt"
        nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv,noheader -lms 500 \
            > "$OUT/restart-$SZ-$R-nvml.csv" 2>/dev/null &
        SMI=$!
        t=$(date +%s)
        RUST_LOG=info timeout "${RESTART_TIMEOUT:-300}" "$D/cuzk" prove --config "$C" --c1 "$C1/c1.json" --prover-id "$PID" \
            --sector-id "$SID" --param-cache "$TP" --count "$N" --seed 1 > "$L" 2>&1 &
        P=$!
        sample "$OUT/restart-$SZ-$R-mem.txt" $P
        wait $P; rc=$?
        kill "$SMI" 2>/dev/null; wait "$SMI" 2>/dev/null
        say "restart $SZ $R rc=$rc ($(( $(date +%s) - t )) s): $(grep -E '^cuzk|^ops|^wall' "$L" | tr '\n' ' ')"
        say "restart $SZ $R log: $(grep -E 'parameters loaded|circuit record|read while' "$L" | sed 's/\x1b\[[0-9;]*m//g' | cut -c1-260 | tr '\n' ';')"
        # The first run's recording is saved in the background: let it finish.
        for _ in $(seq 60); do ls "$TP"/cuzk-recording-*.tmp* > /dev/null 2>&1 || break; sleep 1; done
    done
fi

if [[ " $PHASES " == *" porepbase "* ]]; then
    # The baseline on the same parameters and C1: filecoin-proofs seal_commit_phase2
    # with supraseal-c2, sequential, then from POREP_THREADS threads in one process.
    for SZ in ${POREP_SIZES:-2KiB}; do
        [ -x "$PB" ] || { say "porep-baseline: not in $D (WITH_POREP_BASELINE=1 scripts/gpu-dist.sh)"; break; }
        porep_inputs "$SZ"
        for T in ${POREP_THREADS:-1 4}; do
            L="$OUT/porep-baseline-$SZ-t$T.log"
            timeout "${BENCH_TIMEOUT:-300}" "$PB" --c1 "$C1/c1.json" --param-cache "$FP" \
                --count "${POREP_COUNT:-20}" --threads "$T" --warmup "${POREP_WARMUP:-0}" > "$L" 2>&1
            say "porep-baseline $SZ x${POREP_COUNT:-20} rc=$?: $(grep -E '^warm-up|^baseline' "$L" | tr '\n' ' ' || tail -2 "$L" | tr '\n' ' ')"
        done
    done
fi

if [[ " $PHASES " == *" multi "* ]]; then
    # MULTI_CONFIGS: "devices:stage_pcie_workers" entries; devices "0" (device 0
    # only) or "all". Log and NVML file names carry the entry.
    for pair in ${MULTI:-22:30}; do
        IFS=: read -r K N <<< "$pair"
        P=/tmp/cuzk-params/syn-$K-1.0-1.0.params
        [ -f "$P" ] || "$D/cuzk" srs gen --synthetic "$K" --seed 7 --out "$P" > "$OUT/gen-$K.log" 2>&1
        for mc in ${MULTI_CONFIGS:-0:1 all:1}; do
            IFS=: read -r dv pw <<< "$mc"
            devs="[]"; [ "$dv" = 0 ] && devs="[0]"
            tag="$K-dev$dv-pcie$pw"
            C="$OUT/multi-$tag.toml"
            printf '[backend]\nkind = "gpu"\ndevices = %s\n[prepare_msm]\nworkers = 4\nqueue_capacity = 4\n[stage_pcie]\nworkers = %s\n' "$devs" "$pw" > "$C"
            # NVML's utilization (share of time a kernel ran), sampled every 250 ms
            # through the stream: the GPU-busy figure, next to the op timings.
            nvidia-smi --query-gpu=timestamp,index,utilization.gpu --format=csv,noheader -lms 250 \
                > "$OUT/multi-$tag-nvml.csv" 2>/dev/null &
            SMI=$!
            timeout "${BENCH_TIMEOUT:-300}" "$D/cuzk" bench --config "$C" --log2 "$K" --count "$N" --params "$P" --seed 1 \
                > "$OUT/multi-$tag.log" 2>&1
            kill "$SMI" 2>/dev/null; wait "$SMI" 2>/dev/null
            say "devices=$devs stage_pcie=$pw 2^$K x$N: $(grep -E '^cuzk' "$OUT/multi-$tag.log")"
            grep -E "^bottleneck" "$OUT/multi-$tag.log" | tee -a "$summary"
        done
    done
fi

if [[ " $PHASES " == *" daemon "* ]]; then
    printf '[backend]\nkind = "gpu"\n[daemon]\nlisten = "127.0.0.1:9820"\nmetrics_listen = "127.0.0.1:9821"\nallow_synthetic = true\nresults_dir = "none"\n[timeline]\nenabled = true\n' > "$OUT/daemon.toml"
    RUST_LOG=info "$D/cuzk" daemon --config "$OUT/daemon.toml" > "$OUT/daemon.log" 2>&1 & DPID=$!
    sleep 3
    "$D/cuzk" bench batch -t synthetic --log2 "${DAEMON_LOG2:-20}" -c "${DAEMON_COUNT:-20}" -j 8 > "$OUT/daemon-batch.log" 2>&1 &
    BPID=$!
    sleep "${DAEMON_SCRAPE_AFTER:-15}"
    python3 -c "import urllib.request as u;print(u.urlopen('http://127.0.0.1:9821/metrics').read().decode())" > "$OUT/daemon-metrics.txt" 2>&1
    wait $BPID
    say "daemon batch: $(tail -1 "$OUT/daemon-batch.log")"
    say "daemon gpu metrics: $(grep -E '^cuzk_gpu_(utilization|memory_used|pcie_rx|power)' "$OUT/daemon-metrics.txt" | tr '\n' ' ')"
    python3 -c "import urllib.request as u;open('$OUT/daemon-timeline.json','wb').write(u.urlopen('http://127.0.0.1:9821/debug/timeline').read())"
    kill -TERM $DPID; wait $DPID; say "daemon exit rc=$? after SIGTERM"
fi

echo "== summary =="
cat "$summary"
