//! Times one PoRep partition's synthesis four ways: plain (bellperson semantics),
//! recording the structure, pre-compiled with the circuit's own witness (witness +
//! sparse products), and pre-compiled with the native witness generator.
//!
//! `cargo run --release -p cuzk-filecoin --example synth_bench -- <c1.json> [repeats]`
//! (`ONLY_PRECOMPILED=1`: time only the pre-compiled path, for a profiler, native
//! unless `GENERIC=1`;
//! `WITNESS_ONLY=1`: the first partition's witness alone, native then generic, no
//! recording (for 32GiB-class partitions); `BITS=1`: count the aux values that are 0 and 1, what the MSM bit split exploits;
//! `THREADS=N`: N threads each time `repeats` pre-compiled partitions at once, the
//! contention of a stream).

use std::time::Instant;

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
    let bytes = std::fs::read(&path).expect("read C1");
    let parts = || partition_circuits(parse_c1(&bytes, usize::MAX).unwrap()).unwrap();
    if std::env::var_os("WITNESS_ONLY").is_some() {
        // The witness alone, no recording (a 32GiB partition's would be ~25 GB).
        for native in [true, false] {
            let p = parts().remove(0);
            let t = Instant::now();
            let (w, _) = p.synthesize_with(SynthMode::WitnessOnly { native }).unwrap();
            let name = if native { "native" } else { "generic" };
            println!("witness {name}: {:>8.3} s  aux {}", t.elapsed().as_secs_f64(), w.aux.len());
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
        let start = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..t {
                s.spawn(|| {
                    for _ in 0..repeats {
                        parts().remove(0).synthesize_with(mode(&pre)).unwrap();
                    }
                });
            }
        });
        println!("{t} threads x {repeats} pre-compiled: {:.3} s", start.elapsed().as_secs_f64());
        return;
    }
    if std::env::var_os("ONLY_PRECOMPILED").is_some() {
        for _ in 0..repeats {
            let p = parts().remove(0);
            let t = Instant::now();
            p.synthesize_with(mode(&pre)).unwrap();
            println!("precompiled: {:>8.3} s", t.elapsed().as_secs_f64());
        }
        return;
    }
    for _ in 0..repeats {
        let p = parts().remove(0);
        let t = Instant::now();
        let plain = p.synthesize().unwrap();
        let tp = t.elapsed().as_secs_f64();
        let p = parts().remove(0);
        let t = Instant::now();
        let (fast, _) = p.synthesize_with(SynthMode::PrecompiledGeneric(&pre, None)).unwrap();
        let tf = t.elapsed().as_secs_f64();
        let p = parts().remove(0);
        let t = Instant::now();
        let (native, _) = p.synthesize_with(SynthMode::Precompiled(&pre)).unwrap();
        let tn = t.elapsed().as_secs_f64();
        assert!(fast == plain && plain == recorded && native == plain, "assignments differ");
        println!(
            "plain:       {tp:>8.3} s\nprecompiled: {tf:>8.3} s  ({:.2}x)\nnative:      {tn:>8.3} s  ({:.2}x plain, {:.2}x precompiled)",
            tp / tf,
            tp / tn,
            tf / tn
        );
    }
}
