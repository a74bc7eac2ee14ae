//! Fuzzing the decoders of what schedulers send beside a C1 output, with proptest:
//! the vanilla PoSt proofs (`post_circuits`: bincode `FallbackPoStSectorProof`s),
//! the SnapDeals vanilla partition proofs (`update_circuits`: bincode
//! `PartitionProof`s and the three commitments), the JSON array of base64 vanilla
//! proofs (`vanilla_json`) and commitment CIDs (`commitment`).
//!
//! Inputs: random bytes, and mutations of valid 2KiB inputs made with filecoin-proofs
//! (truncated, bytes appended or flipped, and, through the proofs' serde form,
//! numbers changed and array elements removed or repeated). No decoder may panic;
//! every refusal is an error whose message names what was refused; an input that
//! cannot be valid (random bytes, truncated, trailing bytes, a Merkle path or proof
//! list of another length, a changed commitment) must be refused.
//!
//! Deterministic (a fixed seed, no persisted failures) with fixed case counts, so a
//! CI run is reproducible.

use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicUsize, Ordering},
        OnceLock,
    },
};

use cuzk_filecoin::{
    commitment, generate_post_vanilla, generate_update_vanilla, post_circuits, update_circuits, vanilla_json,
    vanilla_to_json, PostFixture, PostRequest, RegisteredPoStProof, RegisteredUpdateProof, UpdateFixture,
    UpdateRequest,
};
use filecoin_proofs::{FallbackPoStSectorProof, SectorShapeBase};
use proptest::{
    prelude::*,
    test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner},
};
use serde::{de::DeserializeOwned, Serialize};
use serde_json::Value;
use storage_proofs_update::PartitionProof;

/// Cases of the PoSt and SnapDeals runs (each builds the circuits of what it
/// accepts); the cheap decoders run more.
const CASES: u32 = 1024;
const CHEAP_CASES: u32 = 4096;

const WINNING: RegisteredPoStProof = RegisteredPoStProof::StackedDrgWinning2KiBV1;
const WINDOW: RegisteredPoStProof = RegisteredPoStProof::StackedDrgWindow2KiBV1_2;
const UPDATE: RegisteredUpdateProof = RegisteredUpdateProof::StackedDrg2KiBV1;

fn work_dir(name: &str) -> PathBuf {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuzk-filecoin-vanilla-fuzz");
    // Read by filecoin-proofs once, on its first call: every fixture sets it first.
    std::env::set_var("FIL_PROOFS_PARENT_CACHE", base.join("parents"));
    let dir = base.join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Fixtures are made one at a time (the parent cache is shared).
fn made<T>(name: &str, f: impl FnOnce(&std::path::Path) -> T) -> T {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = work_dir(name);
    let made = f(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    made
}

fn winning() -> &'static PostFixture {
    static F: OnceLock<PostFixture> = OnceLock::new();
    F.get_or_init(|| made("winning", |d| generate_post_vanilla(WINNING, 1, 3, d).unwrap()))
}

/// Two sectors: one WindowPoSt partition at 2KiB.
fn window() -> &'static PostFixture {
    static F: OnceLock<PostFixture> = OnceLock::new();
    F.get_or_init(|| made("window", |d| generate_post_vanilla(WINDOW, 2, 4, d).unwrap()))
}

fn update() -> &'static UpdateFixture {
    static F: OnceLock<UpdateFixture> = OnceLock::new();
    F.get_or_init(|| made("update", |d| generate_update_vanilla(UPDATE, 5, d).unwrap()))
}

/// filecoin-proofs-api's bincode options (what `vanilla::decode` reads).
fn bincode_options() -> impl bincode::Options {
    use bincode::Options;
    bincode::options().with_fixint_encoding().with_little_endian()
}

/// Where the arrays and numbers of a proof's serde form are (JSON pointers).
#[derive(Default)]
struct Places {
    /// Arrays whose elements are not all numbers: paths, sibling hashes, proofs.
    structure: Vec<String>,
    /// Numbers that are not bytes of a 32-byte value (indices, sector ids, tags).
    fields: Vec<String>,
    /// Bytes of 32-byte values.
    bytes: Vec<String>,
}

fn walk(v: &Value, at: &str, p: &mut Places) {
    match v {
        Value::Array(a) => {
            let numbers = a.iter().all(Value::is_number);
            if !numbers {
                p.structure.push(at.to_string());
            }
            for (i, x) in a.iter().enumerate() {
                let here = format!("{at}/{i}");
                if numbers && a.len() == 32 {
                    p.bytes.push(here);
                } else {
                    walk(x, &here, p);
                }
            }
        }
        Value::Object(o) => {
            for (k, x) in o {
                walk(x, &format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")), p);
            }
        }
        Value::Number(_) => p.fields.push(at.to_string()),
        _ => {}
    }
}

/// A valid proof's bytes, its serde form and where that form's parts are.
struct Base {
    bytes: Vec<u8>,
    value: Value,
    places: Places,
}

fn base<T: Serialize + DeserializeOwned>(bytes: &[u8]) -> Base {
    use bincode::Options;
    let typed: T = bincode_options().deserialize(bytes).expect("the fixture's vanilla proof decodes");
    let value = serde_json::to_value(&typed).unwrap();
    let mut places = Places::default();
    walk(&value, "", &mut places);
    assert!(!places.structure.is_empty() && !places.fields.is_empty() && !places.bytes.is_empty());
    Base { bytes: bytes.to_vec(), value, places }
}

#[derive(Clone, Debug)]
enum Mutation {
    /// Random bytes instead of the proof.
    Bytes(Vec<u8>),
    /// The first `n` bytes (modulo the length).
    Truncate(usize),
    /// Bytes appended.
    Append(Vec<u8>),
    /// Bytes at positions (modulo the length) XORed with non-zero masks.
    Flip(Vec<(usize, u8)>),
    /// A number that is not part of a 32-byte value (an index, a sector id) set to
    /// another value.
    Field { which: usize, to: u64 },
    /// A byte of a 32-byte value (a hash, a commitment) set to another value.
    Byte { which: usize, to: u8 },
    /// An element removed from an array of hashes, path elements or proofs.
    Remove { which: usize, at: usize },
    /// An element of such an array repeated.
    Repeat { which: usize, at: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..512).prop_map(Mutation::Bytes),
        any::<usize>().prop_map(Mutation::Truncate),
        prop::collection::vec(any::<u8>(), 1..16).prop_map(Mutation::Append),
        prop::collection::vec((any::<usize>(), 1u8..=255), 1..4).prop_map(Mutation::Flip),
        (any::<usize>(), prop_oneof![0u64..64, any::<u64>()]).prop_map(|(which, to)| Mutation::Field { which, to }),
        (any::<usize>(), any::<u8>()).prop_map(|(which, to)| Mutation::Byte { which, to }),
        (any::<usize>(), any::<usize>()).prop_map(|(which, at)| Mutation::Remove { which, at }),
        (any::<usize>(), any::<usize>()).prop_map(|(which, at)| Mutation::Repeat { which, at }),
    ]
}

/// What the decoder may do with a mutated input.
#[derive(Debug, PartialEq)]
enum Allowed {
    /// Refuse it.
    ErrOnly,
    /// Refuse or accept it (a changed value may be one the proof does not bind).
    Either,
}

/// The mutated proof's bytes, and what the decoder may do with it; `None` when the
/// serde form after the mutation is not a `T` (a number out of its type's range).
fn apply<T: Serialize + DeserializeOwned>(b: &Base, m: &Mutation) -> Option<(Vec<u8>, Allowed)> {
    use bincode::Options;
    let pick = |list: &[String], i: usize| list[i % list.len()].clone();
    let typed = |f: &dyn Fn(&mut Value)| {
        let mut v = b.value.clone();
        f(&mut v);
        let t: T = serde_json::from_value(v).ok()?;
        Some(bincode_options().serialize(&t).unwrap())
    };
    let array_edit = |which: usize, at: usize, repeat: bool| {
        let ptr = pick(&b.places.structure, which);
        typed(&|v| {
            let a = v.pointer_mut(&ptr).and_then(Value::as_array_mut).expect("an array");
            let i = at % a.len();
            if repeat {
                let x = a[i].clone();
                a.insert(i, x);
            } else {
                a.remove(i);
            }
        })
    };
    let n = b.bytes.len();
    Some(match m {
        Mutation::Bytes(bytes) => (bytes.clone(), Allowed::ErrOnly),
        Mutation::Truncate(k) => (b.bytes[..k % n].to_vec(), Allowed::ErrOnly),
        Mutation::Append(extra) => ([&b.bytes[..], extra].concat(), Allowed::ErrOnly),
        Mutation::Flip(flips) => {
            let mut p = b.bytes.clone();
            for (at, mask) in flips {
                p[at % n] ^= mask;
            }
            (p, Allowed::Either)
        }
        Mutation::Field { which, to } => {
            let ptr = pick(&b.places.fields, *which);
            (typed(&|v| *v.pointer_mut(&ptr).unwrap() = Value::from(*to))?, Allowed::Either)
        }
        Mutation::Byte { which, to } => {
            let ptr = pick(&b.places.bytes, *which);
            (typed(&|v| *v.pointer_mut(&ptr).unwrap() = Value::from(*to))?, Allowed::Either)
        }
        Mutation::Remove { which, at } => (array_edit(*which, *at, false)?, Allowed::ErrOnly),
        Mutation::Repeat { which, at } => (array_edit(*which, *at, true)?, Allowed::ErrOnly),
    })
}

fn runner(cases: u32) -> TestRunner {
    let config = Config { cases, failure_persistence: None, ..Config::default() };
    TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha))
}

/// Counts of accepted, refused and skipped (not a `T` after the mutation) cases.
#[derive(Default)]
struct Tally([AtomicUsize; 3]);

impl Tally {
    fn add(&self, i: usize) {
        self.0[i].fetch_add(1, Ordering::Relaxed);
    }
    fn get(&self) -> [usize; 3] {
        [0, 1, 2].map(|i| self.0[i].load(Ordering::Relaxed))
    }
}

/// Checks a decoder's answer to a mutated input: an error names the proof kind and
/// says something; an input that cannot be valid is refused.
fn judge<T>(
    r: Result<T, cuzk_filecoin::VanillaError>,
    kind: &str,
    allowed: Allowed,
    m: &dyn std::fmt::Debug,
    tally: &Tally,
) -> Result<(), TestCaseError> {
    match r {
        Err(e) => {
            tally.add(1);
            let msg = e.to_string();
            prop_assert!(msg.starts_with(&format!("{kind}: ")) && msg.len() > kind.len() + 10, "{m:?}: {msg:?}");
            Ok(())
        }
        Ok(_) => {
            tally.add(0);
            prop_assert!(allowed == Allowed::Either, "{m:?} was accepted");
            Ok(())
        }
    }
}

#[test]
fn post_vanilla_proofs_never_panic_and_refusals_are_named() {
    let (win, window) = (winning(), window());
    let request = |f: &PostFixture, vanilla: Vec<Vec<u8>>| PostRequest {
        proof: f.proof,
        randomness: f.randomness,
        prover_id: f.prover_id,
        vanilla_proofs: vanilla,
        partition: (!cuzk_filecoin::post::is_winning(f.proof)).then_some(0),
    };
    // The valid inputs are accepted: the mutations start from something that passes.
    assert_eq!(post_circuits(request(win, win.vanilla_proofs.clone())).unwrap().len(), 1);
    assert_eq!(window.vanilla_proofs.len(), 2);
    assert_eq!(post_circuits(request(window, window.vanilla_proofs.clone())).unwrap().len(), 1);
    let bases: Vec<Vec<Base>> = [win, window]
        .iter()
        .map(|f| f.vanilla_proofs.iter().map(|p| base::<FallbackPoStSectorProof<SectorShapeBase>>(p)).collect())
        .collect();
    let tally = Tally::default();
    let result = runner(CASES).run(&(mutation(), any::<bool>(), any::<bool>()), |(m, on_window, second)| {
        let (f, bases) = if on_window { (window, &bases[1]) } else { (win, &bases[0]) };
        let at = usize::from(second) % bases.len();
        let Some((bytes, allowed)) = apply::<FallbackPoStSectorProof<SectorShapeBase>>(&bases[at], &m) else {
            tally.add(2);
            return Ok(());
        };
        let mut vanilla = f.vanilla_proofs.clone();
        vanilla[at] = bytes;
        let kind = cuzk_filecoin::post::post_kind(f.proof);
        judge(post_circuits(request(f, vanilla)), kind, allowed, &(f.proof, at, &m), &tally)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let [accepted, refused, skipped] = tally.get();
    eprintln!("PoSt vanilla proofs: {accepted} accepted, {refused} refused, {skipped} not a proof after the mutation");
    assert!(refused > CASES as usize / 2, "{accepted} accepted, {refused} refused, {skipped} skipped");
}

#[test]
fn update_vanilla_proofs_never_panic_and_refusals_are_named() {
    let u = update();
    let request = |vanilla: Vec<Vec<u8>>, comms: [[u8; 32]; 3]| UpdateRequest {
        proof: u.proof,
        vanilla_proofs: vanilla,
        comm_r_old: comms[0],
        comm_r_new: comms[1],
        comm_d_new: comms[2],
    };
    let comms = [u.comm_r_old, u.comm_r_new, u.comm_d_new];
    assert_eq!(u.vanilla_proofs.len(), 1, "a 2KiB update has one partition");
    assert_eq!(update_circuits(request(u.vanilla_proofs.clone(), comms)).unwrap().len(), 1);
    let b = base::<PartitionProof<SectorShapeBase>>(&u.vanilla_proofs[0]);
    let tally = Tally::default();
    // A mutation of the proof, or bits of one commitment flipped.
    let input = prop_oneof![
        3 => mutation().prop_map(Ok),
        1 => (0usize..3, any::<usize>(), 1u8..=255).prop_map(Err),
    ];
    let result = runner(CASES).run(&input, |input| match input {
        Ok(m) => {
            let Some((bytes, allowed)) = apply::<PartitionProof<SectorShapeBase>>(&b, &m) else {
                tally.add(2);
                return Ok(());
            };
            judge(update_circuits(request(vec![bytes], comms)), "snap_deals", allowed, &m, &tally)
        }
        Err((which, at, mask)) => {
            let mut c = comms;
            c[which][at % 32] ^= mask;
            let what = (["comm_r_old", "comm_r_new", "comm_d_new"][which], at % 32, mask);
            judge(update_circuits(request(u.vanilla_proofs.clone(), c)), "snap_deals", Allowed::ErrOnly, &what, &tally)
        }
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let [accepted, refused, skipped] = tally.get();
    eprintln!(
        "SnapDeals vanilla proofs: {accepted} accepted, {refused} refused, {skipped} not a proof after the mutation"
    );
    assert!(refused > CASES as usize / 2, "{accepted} accepted, {refused} refused, {skipped} skipped");
}

#[test]
fn vanilla_json_never_panics_and_reads_what_vanilla_to_json_writes() {
    let valid = vanilla_to_json(&window().vanilla_proofs);
    assert_eq!(vanilla_json(&valid).unwrap(), window().vanilla_proofs);
    let input = prop_oneof![
        // Any list of byte strings round-trips.
        prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..4).prop_map(Ok),
        // Random bytes after a prefix that reaches the base64 decoding, or the valid
        // file truncated or with bytes flipped.
        (prop::sample::select(vec!["", "[", "[\"", "[\"AAAA\",\""]), prop::collection::vec(any::<u8>(), 0..64))
            .prop_map(|(p, b)| Err([p.as_bytes(), &b].concat())),
        any::<usize>().prop_map({
            let valid = valid.clone();
            move |n| Err(valid[..n % valid.len()].to_vec())
        }),
        prop::collection::vec((any::<usize>(), 1u8..=255), 1..4).prop_map({
            let valid = valid.clone();
            move |flips| {
                let mut v = valid.clone();
                for (at, mask) in flips {
                    let n = v.len();
                    v[at % n] ^= mask;
                }
                Err(v)
            }
        }),
    ];
    let refused = AtomicUsize::new(0);
    let result = runner(CHEAP_CASES).run(&input, |input| {
        match input {
            Ok(list) => prop_assert_eq!(vanilla_json(&vanilla_to_json(&list)).unwrap(), list),
            Err(bytes) => {
                if let Err(e) = vanilla_json(&bytes) {
                    refused.fetch_add(1, Ordering::Relaxed);
                    prop_assert!(
                        e.starts_with("not a JSON array of base64 vanilla proofs: ") || e.contains("is not base64: "),
                        "{e:?}"
                    );
                }
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(refused.into_inner() > 0);
}

/// The CID prefixes of the two Filecoin commitment codecs.
const SEALED: [u8; 8] = [0x01, 0x82, 0xe2, 0x03, 0x81, 0xe8, 0x02, 0x20];
const UNSEALED: [u8; 7] = [0x01, 0x81, 0xe2, 0x03, 0x92, 0x20, 0x20];

#[test]
fn commitments_never_panic_and_give_only_the_digest() {
    let input = prop_oneof![
        // Random bytes after no prefix, the start of a CID, or a whole CID prefix.
        (
            prop::sample::select(vec![&[][..], &[0x01], &SEALED[..4], &SEALED[..], &UNSEALED[..]]),
            prop::collection::vec(any::<u8>(), 0..48)
        )
            .prop_map(|(p, b)| (false, [p, &b].concat())),
        // A valid CID (or raw commitment), truncated, extended or with bytes flipped.
        (
            prop::sample::select(vec![&[][..], &SEALED[..], &UNSEALED[..]]),
            any::<[u8; 32]>(),
            prop::collection::vec((any::<usize>(), 1u8..=255), 0..3),
            prop_oneof![Just(None), (0usize..40).prop_map(Some)],
            prop::collection::vec(any::<u8>(), 0..3),
        )
            .prop_map(|(p, d, flips, cut, extra)| {
                let mut b = [p, &d[..], &extra].concat();
                for (at, mask) in &flips {
                    let n = b.len();
                    b[at % n] ^= mask;
                }
                if let Some(c) = cut {
                    b.truncate(c);
                }
                let unchanged = flips.is_empty() && cut.is_none() && extra.is_empty();
                (unchanged, b)
            }),
    ];
    let (accepted, refused) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let result = runner(CHEAP_CASES).run(&input, |(valid, b)| {
        match commitment("comm_r_new", &b) {
            Ok(d) => {
                accepted.fetch_add(1, Ordering::Relaxed);
                // Only the raw bytes or a CID's trailing 32-byte digest.
                prop_assert!(b.len() >= 32 && d[..] == b[b.len() - 32..], "{b:02x?} gave {d:02x?}");
                prop_assert!(b.len() == 32 || b.len() > 32 && b[0] == 0x01, "{b:02x?} is not a CIDv1");
            }
            Err(e) => {
                refused.fetch_add(1, Ordering::Relaxed);
                prop_assert!(!valid, "a valid commitment {b:02x?} was refused: {e}");
                prop_assert!(e.starts_with("comm_r_new is "), "{e:?}");
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let (accepted, refused) = (accepted.into_inner(), refused.into_inner());
    assert!(accepted > 0 && refused > 0, "{accepted} accepted, {refused} refused");
}

// Regression tests: the inputs this fuzzing found that made filecoin-proofs panic
// (before the vanilla proofs' shapes and field elements were checked on decoding).

/// The JSON pointer of the first Merkle path element (`{hashes, index}`) in `v`.
fn first_path_element(v: &Value, at: &str) -> Option<String> {
    match v {
        Value::Object(o) if o.contains_key("hashes") && o.contains_key("index") => Some(at.to_string()),
        Value::Object(o) => o.iter().find_map(|(k, x)| first_path_element(x, &format!("{at}/{k}"))),
        Value::Array(a) => a.iter().enumerate().find_map(|(i, x)| first_path_element(x, &format!("{at}/{i}"))),
        _ => None,
    }
}

/// A vanilla proof with its first Merkle path element edited through its serde form.
fn edited<T: Serialize + DeserializeOwned>(bytes: &[u8], f: impl Fn(&mut Value)) -> Vec<u8> {
    use bincode::Options;
    let b = base::<T>(bytes);
    let mut v = b.value;
    let ptr = first_path_element(&v, "").expect("a Merkle path");
    f(v.pointer_mut(&ptr).unwrap());
    let t: T = serde_json::from_value(v).unwrap();
    bincode_options().serialize(&t).unwrap()
}

fn post_err(f: &PostFixture, vanilla: Vec<Vec<u8>>) -> String {
    let req = PostRequest {
        proof: f.proof,
        randomness: f.randomness,
        prover_id: f.prover_id,
        vanilla_proofs: vanilla,
        partition: Some(0),
    };
    post_circuits(req).err().expect("refused").to_string()
}

fn update_err(vanilla: Vec<Vec<u8>>, comms: [[u8; 32]; 3]) -> String {
    let u = update();
    let req = UpdateRequest {
        proof: u.proof,
        vanilla_proofs: vanilla,
        comm_r_old: comms[0],
        comm_r_new: comms[1],
        comm_d_new: comms[2],
    };
    update_circuits(req).err().expect("refused").to_string()
}

type PostProof = FallbackPoStSectorProof<SectorShapeBase>;

/// A Merkle path level with a sibling hash missing: Poseidon of another arity
/// ("unsupported arity 7").
#[test]
fn post_path_level_missing_a_hash_is_refused() {
    let f = winning();
    let p = edited::<PostProof>(&f.vanilla_proofs[0], |e| {
        e["hashes"].as_array_mut().unwrap().pop();
    });
    let e = post_err(f, vec![p]);
    assert!(e.starts_with("winning_post: vanilla proof 0 ") && e.contains("6 sibling hashes; want 7"), "{e}");
}

/// A Merkle path position beyond the arity: "attempt to multiply with overflow" in
/// `path_index`, or an insertion out of bounds.
#[test]
fn path_position_beyond_the_arity_is_refused() {
    let u = update();
    let p = edited::<PartitionProof<SectorShapeBase>>(&u.vanilla_proofs[0], |e| e["index"] = Value::from(u64::MAX));
    let e = update_err(vec![p], [u.comm_r_old, u.comm_r_new, u.comm_d_new]);
    // serde_json orders keys: the first path is proof_d_new's, in binary tree D.
    assert!(
        e.starts_with("snap_deals: vanilla proof 0, challenge 0, proof_d_new") && e.contains("want below 2"),
        "{e}"
    );
    let f = window();
    let p = edited::<PostProof>(&f.vanilla_proofs[1], |e| e["index"] = Value::from(9));
    let e = post_err(f, vec![f.vanilla_proofs[0].clone(), p]);
    assert!(e.starts_with("window_post: vanilla proof 1 ") && e.contains("position 9; want below 8"), "{e}");
}

/// A hash at or above the scalar field's modulus (its top bit set): "from_repr
/// failure" when filecoin-proofs hashes it.
#[test]
fn hashes_and_commitments_that_are_not_field_elements_are_refused() {
    let f = winning();
    let p = edited::<PostProof>(&f.vanilla_proofs[0], |e| e["hashes"][0][31] = Value::from(0xff));
    let e = post_err(f, vec![p]);
    assert!(e.contains("sibling hash 0 is not a field element"), "{e}");
    let u = update();
    let mut comm_r_old = u.comm_r_old;
    comm_r_old[31] |= 0x80;
    let e = update_err(u.vanilla_proofs.clone(), [comm_r_old, u.comm_r_new, u.comm_d_new]);
    assert!(e.contains("comm_r_old is not a field element"), "{e}");
}

/// A finding of the `vanilla_post` cargo-fuzz target (fuzz/), kept as a regular
/// test: a 32GiB WindowPoSt vanilla proof holding no sector proof made
/// filecoin-proofs' padding index an empty list (a panic in `post_util.rs`). It is
/// refused before, naming the kind and the count.
#[test]
fn fuzz_finding_a_vanilla_proof_without_sector_proofs_is_refused() {
    const CRASH: [u8; 48] = [
        0xd0, 0x02, 0x00, 0xe0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x40, 0x40, 0x40, 0xe8, 0xea, 0x00, 0x00, 0x40, 0x40, 0x40, 0x40, 0x40,
        0x60, 0x40, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];
    let req = PostRequest {
        proof: RegisteredPoStProof::StackedDrgWindow32GiBV1_2,
        randomness: [1; 32],
        prover_id: [2; 32],
        vanilla_proofs: vec![CRASH.to_vec()],
        partition: Some(0),
    };
    let msg = post_circuits(req).err().expect("refused").to_string();
    assert!(msg.starts_with("window_post") && msg.contains("0 sector proofs inside; want 1"), "{msg}");
}
