//! Times one PoRep partition's synthesis four ways: plain (bellperson semantics),
//! recording the structure, pre-compiled with the circuit's own witness (witness +
//! sparse products), and pre-compiled with the native witness generator.
//!
//! `cargo run --release -p cuzk-filecoin --example synth_bench -- <c1.json> [repeats]`
//! (`ONLY_PRECOMPILED=1`: time only the pre-compiled path, for a profiler, native
//! unless `GENERIC=1`;
//! `WITNESS_ONLY=1`: the first partition's witness alone, native then generic, no
//! recording (for 32GiB-class partitions); `RECORD_ONLY=1`: the first partition's
//! recording alone, a, b, c not computed (fits a 32GiB-class partition in ~14 GB;
//! `HINT=1`: its vectors reserved as the engine reserves them from the parameters;
//! `SAVE=FILE`: then written to FILE and loaded back, as a restarted process does;
//! `LOAD=FILE`: only that load; `BLANK=1`: the proof type's blank circuit recorded
//! instead, no value computed, as the engine records it beside the parameters' load;
//! with `REPLICATED=1` PoRep's way, two challenges recorded and copied to the rest;
//! `COMPARE=1`: then the sequential blank recording too, which must be equal);
//! `BITS=1`: count the aux values that are 0 and 1, what the MSM bit split exploits;
//! `THREADS=N`: N threads each time `repeats` pre-compiled partitions at once, the
//! contention of a stream).
//!
//! Each timed line also gives the process's CPU time over that call (core-seconds:
//! the sparse products of a 32GiB-class partition run on several threads), the
//! minor page faults (first touches of fresh memory) and the heap traffic it caused:
//! allocations and bytes requested, counted by a wrapper around mimalloc (the `cuzk`
//! binary's allocator). The /proc parsing mirrors `cuzk::bench::minor_page_faults`,
//! which this crate cannot depend on.

use std::{
    alloc::{GlobalAlloc, Layout},
    sync::atomic::{AtomicU64, Ordering::Relaxed},
    time::Instant,
};

/// The `cuzk` binary's allocator (mimalloc), counting what is asked of it.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to mimalloc; the counters have no effect on the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        BYTES.fetch_add(l.size() as u64, Relaxed);
        mimalloc::MiMalloc.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        mimalloc::MiMalloc.dealloc(p, l)
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        BYTES.fetch_add(l.size() as u64, Relaxed);
        mimalloc::MiMalloc.alloc_zeroed(l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        BYTES.fetch_add(new as u64, Relaxed);
        mimalloc::MiMalloc.realloc(p, l, new)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The process's user + system CPU seconds and minor page faults so far
/// (/proc/self/stat; CPU in 100 Hz ticks).
fn cpu_seconds_and_faults() -> (f64, u64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses): minflt is the 8th,
    // utime the 12th, stime the 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest.split_whitespace().map(|x| x.parse().unwrap_or(0.0)).collect();
    let cpu = f.get(11).zip(f.get(12)).map_or(0.0, |(u, s)| (u + s) / 100.0);
    (cpu, f.get(7).copied().unwrap_or(0.0) as u64)
}

/// Wall, CPU and heap traffic of one call.
struct Meter {
    wall: Instant,
    cpu: f64,
    faults: u64,
    allocs: u64,
    bytes: u64,
}

impl Meter {
    fn start() -> Self {
        let (cpu, faults) = cpu_seconds_and_faults();
        Meter { wall: Instant::now(), cpu, faults, allocs: ALLOCS.load(Relaxed), bytes: BYTES.load(Relaxed) }
    }
    fn wall(&self) -> f64 {
        self.wall.elapsed().as_secs_f64()
    }
    fn report(&self) -> String {
        let (cpu, faults) = cpu_seconds_and_faults();
        format!(
            "cpu {:>7.2} core-s  page faults {:>8}  heap {:>9} allocations {:>9.1} MiB",
            cpu - self.cpu,
            faults - self.faults,
            ALLOCS.load(Relaxed) - self.allocs,
            (BYTES.load(Relaxed) - self.bytes) as f64 / (1 << 20) as f64
        )
    }
}

use cuzk_filecoin::{parse_c1, partition_circuits};
use cuzk_synth::SynthMode;

/// The pre-compiled mode timed alone: native unless `GENERIC` is set.
fn mode(pre: &cuzk_synth::Precompiled) -> SynthMode<'_> {
    if std::env::var_os("GENERIC").is_some() {
        SynthMode::PrecompiledGeneric(pre, None)
    } else {
        SynthMode::Precompiled(pre)
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: synth_bench <c1.json> [repeats]");
    let repeats: usize = args.next().map_or(3, |r| r.parse().expect("repeats is a number"));
    if let Some(saved) = std::env::var_os("LOAD") {
        // A recording saved with SAVE, loaded as a restarted process loads it.
        let t = Meter::start();
        let back =
            cuzk_synth::Precompiled::read_from(std::fs::File::open(saved).expect("open"), &[7u8; 32]).expect("load");
        println!("loaded:      {:>8.3} s  constraints {}  {}", t.wall(), back.constraints(), t.report());
        return;
    }
    let bytes = std::fs::read(&path).expect("read C1");
    let parts = || partition_circuits(parse_c1(&bytes, usize::MAX).unwrap()).unwrap();
    if std::env::var_os("WITNESS_ONLY").is_some() {
        // The witness alone, no recording (a 32GiB partition's would be ~25 GB).
        for native in [true, false] {
            let p = parts().remove(0);
            let t = Meter::start();
            let (w, _) = p.synthesize_with(SynthMode::WitnessOnly { native }).unwrap();
            let name = if native { "native" } else { "generic" };
            println!("witness {name}: {:>8.3} s  aux {}  {}", t.wall(), w.aux.len(), t.report());
        }
        return;
    }

    if std::env::var_os("RECORD_ONLY").is_some() {
        // The recording alone, a, b, c not computed (a 32GiB partition's recording
        // and witness fit in about 14 GB; with a, b, c beside them, about 26).
        let hint = if std::env::var_os("HINT").is_some() {
            // As the engine gives it from the parameters: inputs and aux exact (here
            // from the witness), constraints bounded by the domain (here the next
            // power of two above the variables, which a PoRep partition's is).
            let (w, _) = parts().remove(0).synthesize_with(SynthMode::WitnessOnly { native: true }).unwrap();
            let (inputs, aux) = (w.input.len(), w.aux.len());
            cuzk_synth::RecordHint { inputs, aux, max_constraints: (inputs + aux).next_power_of_two() }
        } else {
            cuzk_synth::RecordHint::default()
        };
        let t = Meter::start();
        let pre = if std::env::var_os("BLANK").is_some() {
            let proof = parse_c1(&bytes, usize::MAX).unwrap().registered_proof();
            if std::env::var_os("REPLICATED").is_some() {
                print!("blank, one challenge copied ");
                cuzk_filecoin::record_blank_porep(proof, hint).unwrap()
            } else {
                let blank = cuzk_filecoin::blank_circuit_of(cuzk_filecoin::CircuitId::Seal(proof)).unwrap();
                print!("blank ");
                cuzk_synth::record_blank(blank, hint).unwrap()
            }
        } else {
            parts().remove(0).synthesize_with(SynthMode::RecordOnly(hint)).unwrap().1
        };
        let pre = pre.expect("recorded");
        println!(
            "record only: {:>8.3} s  constraints {} non-zeros {:?} recording {:.1} MiB  {}",
            t.wall(),
            pre.constraints(),
            pre.nonzeros_per_matrix(),
            pre.heap_bytes() as f64 / (1 << 20) as f64,
            t.report()
        );
        if std::env::var_os("COMPARE").is_some() {
            // The sequential blank recording beside it: the two must be equal.
            let proof = parse_c1(&bytes, usize::MAX).unwrap().registered_proof();
            let blank = cuzk_filecoin::blank_circuit_of(cuzk_filecoin::CircuitId::Seal(proof)).unwrap();
            let t = Meter::start();
            let seq = cuzk_synth::record_blank(blank, hint).unwrap().expect("recorded");
            println!("sequential:  {:>8.3} s  equal to the one above: {}  {}", t.wall(), seq == pre, t.report());
            assert!(seq == pre, "the recordings differ");
        }
        if let Some(path) = std::env::var_os("SAVE") {
            // What a restarted process does with a saved recording: write, then load.
            let id = [7u8; 32];
            let t = Meter::start();
            pre.write_to(std::fs::File::create(&path).expect("create"), &id).expect("write");
            println!("saved:       {:>8.3} s  {}", t.wall(), t.report());
            drop(pre);
            let t = Meter::start();
            let back =
                cuzk_synth::Precompiled::read_from(std::fs::File::open(&path).expect("open"), &id).expect("load");
            println!("loaded:      {:>8.3} s  constraints {}  {}", t.wall(), back.constraints(), t.report());
        }
        return;
    }
    let t = Instant::now();
    let (recorded, pre) = parts().remove(0).synthesize_with(SynthMode::Record).unwrap();
    let pre = pre.expect("recorded");
    println!(
        "record:      {:>8.3} s  constraints {} nonzeros {} coefficients {} recording {:.1} MiB",
        t.elapsed().as_secs_f64(),
        pre.constraints(),
        pre.nonzeros(),
        pre.distinct_coefficients(),
        pre.heap_bytes() as f64 / (1 << 20) as f64
    );
    println!("non-zeros per matrix (A, B, C): {:?}", pre.nonzeros_per_matrix());
    if std::env::var_os("BITS").is_some() {
        use ff::Field;
        let z = recorded.aux.iter().filter(|v| **v == blstrs::Scalar::ZERO).count();
        let o = recorded.aux.iter().filter(|v| **v == blstrs::Scalar::ONE).count();
        println!("aux {} zero {z} one {o}", recorded.aux.len());
        let ad = recorded.a_aux_density.count();
        let bd = recorded.b_aux_density.count();
        println!("a density {ad} b density {bd}");
        return;
    }
    if let Some(t) = std::env::var("THREADS").ok().and_then(|t| t.parse::<usize>().ok()) {
        let start = Meter::start();
        std::thread::scope(|s| {
            for _ in 0..t {
                s.spawn(|| {
                    for _ in 0..repeats {
                        parts().remove(0).synthesize_with(mode(&pre)).unwrap();
                    }
                });
            }
        });
        println!("{t} threads x {repeats} pre-compiled: {:.3} s  {}", start.wall(), start.report());
        return;
    }
    if std::env::var_os("ONLY_PRECOMPILED").is_some() {
        for _ in 0..repeats {
            let p = parts().remove(0);
            let t = Meter::start();
            p.synthesize_with(mode(&pre)).unwrap();
            println!("precompiled: {:>8.3} s  {}", t.wall(), t.report());
        }
        return;
    }
    for _ in 0..repeats {
        let p = parts().remove(0);
        let t = Meter::start();
        let plain = p.synthesize().unwrap();
        let (tp, rp) = (t.wall(), t.report());
        let p = parts().remove(0);
        let t = Meter::start();
        let (fast, _) = p.synthesize_with(SynthMode::PrecompiledGeneric(&pre, None)).unwrap();
        let (tf, rf) = (t.wall(), t.report());
        let p = parts().remove(0);
        let t = Meter::start();
        let (native, _) = p.synthesize_with(SynthMode::Precompiled(&pre)).unwrap();
        let (tn, rn) = (t.wall(), t.report());
        assert!(fast == plain && plain == recorded && native == plain, "assignments differ");
        println!(
            "plain:       {tp:>8.3} s  {rp}\nprecompiled: {tf:>8.3} s  {rf}  ({:.2}x)\nnative:      {tn:>8.3} s  {rn}  ({:.2}x plain, {:.2}x precompiled)",
            tp / tf,
            tp / tn,
            tf / tn
        );
    }
}
