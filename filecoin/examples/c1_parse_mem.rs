//! Peak heap and time of `parse_c1` on one C1 output, plain and in the Lotus/Curio
//! wrapper (base64 inside JSON), counted by a global allocator: what parsing holds
//! besides the input it was given; and the JSON alone, without the shape check.
//!
//! `cargo run --release -p cuzk-filecoin --example c1_parse_mem -- <c1.json>`
//! (the plain JSON `cuzk gen-c1` writes; the wrapper is made from it in memory).

#![deny(unsafe_code)]

use std::{
    alloc::{GlobalAlloc, Layout, System},
    sync::atomic::{AtomicUsize, Ordering::Relaxed},
    time::Instant,
};

use base64::Engine as _;
use cuzk_filecoin::parse_c1;

struct Counting;
static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let n = NOW.fetch_add(l.size(), Relaxed) + l.size();
        PEAK.fetch_max(n, Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        NOW.fetch_sub(l.size(), Relaxed);
        System.dealloc(p, l)
    }
}

#[global_allocator]
static A: Counting = Counting;

fn measure(name: &str, input: &[u8]) {
    let before = NOW.load(Relaxed);
    PEAK.store(before, Relaxed);
    let t = Instant::now();
    let parsed = parse_c1(input, usize::MAX).expect("a valid C1");
    let took = t.elapsed();
    let kept = NOW.load(Relaxed) - before;
    let peak = PEAK.load(Relaxed) - before;
    drop(parsed);
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    println!(
        "{name:<8} input {:>8.2} MiB  parse {:>7.1} ms  peak above input {:>8.2} MiB ({:.2}x input)  parsed {:>8.2} MiB",
        mib(input.len()),
        took.as_secs_f64() * 1e3,
        mib(peak),
        peak as f64 / input.len() as f64,
        mib(kept),
    );
}

fn main() {
    let path = std::env::args().nth(1).expect("usage: c1_parse_mem <c1.json>");
    let plain = std::fs::read(&path).expect("reading the C1 output");
    let size = parse_c1(&plain, usize::MAX).expect("a valid C1").output.registered_proof.sector_size();
    let wrapper = serde_json::to_vec(&serde_json::json!({
        "SectorNum": 1,
        "Phase1Out": base64::engine::general_purpose::STANDARD.encode(&plain),
        "SectorSize": u64::from(size),
    }))
    .unwrap();
    for _ in 0..2 {
        measure("plain", &plain);
        measure("wrapper", &wrapper);
        // The JSON alone, without parse_c1's checks: what the shape check costs is
        // the difference.
        let t = Instant::now();
        let o: filecoin_proofs_api::seal::SealCommitPhase1Output = serde_json::from_slice(&plain).unwrap();
        println!("json only (plain, no checks): {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
        drop(o);
    }
}
