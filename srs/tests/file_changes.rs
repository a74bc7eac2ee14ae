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
