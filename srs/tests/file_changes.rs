//! A parameter file that changes while it loads (an operator re-downloading it in
//! place, a full disk) is an error that names the file, never a crash: a memory map
//! of a file truncated under it would kill the whole process with SIGBUS.

use std::{
    fs::OpenOptions,
    os::unix::fs::FileExt,
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use cuzk_srs::{generate_random, LoadOptions, ProvingKey};
use cuzk_synth::{SyntheticCircuit, SyntheticSpec};
use rand_chacha::{rand_core::SeedableRng, ChaCha20Rng};

#[test]
fn a_file_truncated_while_loading_is_an_error_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("key.params");
    let spec = SyntheticSpec { constraints: 1 << 13, public_inputs: 2, a_density: 1.0, b_density: 1.0 };
    let key = generate_random(SyntheticCircuit::new(spec, 0).unwrap(), &mut ChaCha20Rng::seed_from_u64(1)).unwrap();
    key.write(&path).unwrap();
    let full = std::fs::read(&path).unwrap();
    let stop = AtomicBool::new(false);
    let (mut ok, mut failed) = (0, 0);
    std::thread::scope(|s| {
        // Shrinks the same file (same inode) and writes it back, over and over.
        s.spawn(|| {
            let f = OpenOptions::new().write(true).open(&path).unwrap();
            while !stop.load(Ordering::Relaxed) {
                f.set_len(full.len() as u64 / 3).unwrap();
                std::thread::sleep(Duration::from_micros(200));
                f.write_all_at(&full, 0).unwrap();
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(3) {
            match ProvingKey::load(&path, LoadOptions::default()) {
                Ok(k) => {
                    assert_eq!(k.h.len(), key.h.len());
                    ok += 1;
                }
                Err(e) => {
                    assert!(e.to_string().contains(&path.display().to_string()), "{e}");
                    failed += 1;
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(failed > 0, "the file never changed under a load ({ok} loads)");
    // Whole again: loads.
    ProvingKey::load(&path, LoadOptions::default()).unwrap();
}

#[test]
fn a_files_header_is_its_keys_without_reading_the_points() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("key.params");
    let spec = SyntheticSpec { constraints: 1 << 10, public_inputs: 3, a_density: 1.0, b_density: 0.5 };
    let key = generate_random(SyntheticCircuit::new(spec, 0).unwrap(), &mut ChaCha20Rng::seed_from_u64(2)).unwrap();
    key.write(&path).unwrap();
    let h = ProvingKey::read_header(&path).unwrap();
    let want = key.header();
    assert_eq!(h.lens, want.lens);
    assert_eq!(h.lens, [key.h.len(), key.l.len(), key.a.len(), key.b_g1.len(), key.b_g2.len()]);
    assert_eq!((h.num_inputs(), h.aux(), h.domain_size()), (key.num_inputs(), key.l.len(), key.domain_size()));
    let (mut a, mut b) = (Vec::new(), Vec::new());
    h.vk.write(&mut a).unwrap();
    key.vk.write(&mut b).unwrap();
    assert_eq!(a, b);
    // A file cut short, or with bytes after its points, is refused by name.
    let full = std::fs::read(&path).unwrap();
    for bad in [&full[..full.len() - 1], &[&full[..], &[0u8]].concat()[..]] {
        std::fs::write(&path, bad).unwrap();
        let e = ProvingKey::read_header(&path).err().expect("refused").to_string();
        assert!(e.contains(&path.display().to_string()), "{e}");
    }
}

/// A point that does not decode is an error naming its section, its index and its
/// offset in the file: the first bad one, also when it lies past the loader's first
/// 64 MiB chunk or when a later point in the same chunk is bad too.
#[test]
fn an_invalid_point_is_named_by_section_index_and_offset() {
    use cuzk_srs::{generate_timing, SrsError};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("key.params");
    // h: 2^20 - 1 points, 96 MiB: two chunks.
    let shape =
        cuzk_core::CircuitShape { constraints: 1_000_000, inputs: 2, aux: 999_000, a_query: 1_000, b_query: 100 };
    let key = generate_timing(&shape, 3);
    key.write(&path).unwrap();
    let good = std::fs::read(&path).unwrap();
    // The sections end the file in the order h, l, a, b_g1, b_g2, each after its
    // 4-byte length.
    let (g1, g2) = (96, 192);
    let b_g2 = good.len() - key.b_g2.len() * g2;
    let b_g1 = b_g2 - 4 - key.b_g1.len() * g1;
    let a = b_g1 - 4 - key.a.len() * g1;
    let l = a - 4 - key.l.len() * g1;
    let h = l - 4 - key.h.len() * g1;
    let at = |section: usize, i: usize| section + i * g1;
    assert_eq!(&good[at(h, 900_000)..at(h, 900_001)], &key.h[900_000].to_uncompressed()[..], "layout");
    assert_eq!(&good[at(l, 3)..at(l, 4)], &key.l[3].to_uncompressed()[..], "layout");
    let load = |bytes: &[u8]| {
        std::fs::write(&path, bytes).unwrap();
        match ProvingKey::load(&path, LoadOptions::default()) {
            Err(SrsError::InvalidPoint { section, index, offset, reason, .. }) => (section, index, offset, reason),
            other => panic!("expected an invalid point, got {other:?}"),
        }
    };
    // Off the curve: the last byte of y changed.
    let mut bad = good.clone();
    for (section, i) in [(h, 990_000), (h, 900_000), (l, 3)] {
        bad[at(section, i) + 95] ^= 1;
    }
    assert_eq!(load(&bad), ("h", 900_000, at(h, 900_000), "not on the curve"));
    bad[at(h, 900_000) + 95] ^= 1;
    assert_eq!(load(&bad), ("h", 990_000, at(h, 990_000), "not on the curve"));
    bad[at(h, 990_000) + 95] ^= 1;
    assert_eq!(load(&bad), ("l", 3, at(l, 3), "not on the curve"));
    bad[at(l, 3) + 95] ^= 1;
    assert_eq!(bad, good);
    std::fs::write(&path, &good).unwrap();
    let k = ProvingKey::load(&path, LoadOptions::default()).unwrap();
    assert!(k.h == key.h && k.l == key.l && k.b_g2 == key.b_g2, "the repaired file loads the key");
}
