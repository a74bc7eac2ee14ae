//! Fuzzing `parse_c1` with proptest: random bytes, and random mutations of a valid
//! 2KiB C1 output (truncated, bytes flipped, numbers changed, array elements removed
//! or repeated), in both formats. It must never panic, and it may accept only an
//! input whose structure is the valid one's: every array in a C1 output has a
//! length the registered proof fixes, so a removed or repeated element is refused.
//!
//! Deterministic (a fixed seed, no persisted failures) with a fixed case count, so
//! a CI run is reproducible.

mod common;

use base64::Engine as _;
use cuzk_filecoin::{parse_c1, RegisteredSealProof};
use proptest::{
    prelude::*,
    test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner},
};
use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};

const CASES: u32 = 256;

/// The valid input and where its arrays and numbers are (JSON pointers).
struct Base {
    json: Vec<u8>,
    value: Value,
    /// Arrays of arrays or objects: partitions, challenges, paths, columns, parents.
    structure: Vec<String>,
    /// Arrays of numbers: 32-byte values.
    bytes: Vec<String>,
    /// Numbers that are object fields (positions, layers, nodes).
    fields: Vec<String>,
    /// All numbers.
    numbers: Vec<String>,
    /// The structure of what `parse_c1` makes of the valid input.
    skeleton: Value,
}

fn walk(v: &Value, at: &str, b: &mut Base, in_object: bool) {
    match v {
        Value::Array(a) => {
            if a.iter().all(Value::is_number) {
                b.bytes.push(at.to_string());
            } else {
                b.structure.push(at.to_string());
            }
            for (i, x) in a.iter().enumerate() {
                walk(x, &format!("{at}/{i}"), b, false);
            }
        }
        Value::Object(o) => {
            for (k, x) in o {
                walk(x, &format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")), b, true);
            }
        }
        Value::Number(_) => {
            if in_object {
                b.fields.push(at.to_string());
            }
            b.numbers.push(at.to_string());
        }
        _ => {}
    }
}

/// `v` with every number zeroed: object keys, strings and array lengths kept.
fn skeleton(v: &Value) -> Value {
    match v {
        Value::Number(_) => Value::from(0),
        Value::Array(a) => Value::Array(a.iter().map(skeleton).collect()),
        Value::Object(o) => Value::Object(o.iter().map(|(k, x)| (k.clone(), skeleton(x))).collect()),
        x => x.clone(),
    }
}

fn base() -> Base {
    let json = common::c1_json(RegisteredSealProof::StackedDrg2KiBV1_1, 1);
    let value: Value = serde_json::from_slice(&json).unwrap();
    let parsed = parse_c1(&json, usize::MAX).expect("the valid C1 output parses");
    let skeleton = skeleton(&serde_json::to_value(&parsed.output).unwrap());
    let mut b =
        Base { json, value: Value::Null, structure: vec![], bytes: vec![], fields: vec![], numbers: vec![], skeleton };
    walk(&value, "", &mut b, false);
    b.value = value;
    b
}

#[derive(Clone, Debug)]
enum Mutation {
    /// Random bytes after a prefix that steers the format detection.
    Bytes(&'static str, Vec<u8>),
    /// The first `n` bytes (modulo the length).
    Truncate(usize),
    /// Bytes at positions (modulo the length) XORed with non-zero masks.
    Flip(Vec<(usize, u8)>),
    /// A number (an object field's, or any) set to another value.
    Number { field: bool, which: usize, to: u64 },
    /// An element removed from an array (structural, or a 32-byte value).
    Remove { structural: bool, which: usize, at: usize },
    /// An element of an array repeated.
    Repeat { structural: bool, which: usize, at: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let prefixes = vec!["", "{", "{\"SectorNum\":", "{\"Phase1Out\":\"", "{\"registered_proof\":"];
    prop_oneof![
        (prop::sample::select(prefixes), prop::collection::vec(any::<u8>(), 0..256))
            .prop_map(|(p, b)| Mutation::Bytes(p, b)),
        any::<usize>().prop_map(Mutation::Truncate),
        prop::collection::vec((any::<usize>(), 1u8..=255), 1..4).prop_map(Mutation::Flip),
        (any::<bool>(), any::<usize>(), prop_oneof![0u64..300, any::<u64>()])
            .prop_map(|(field, which, to)| Mutation::Number { field, which, to }),
        (any::<bool>(), any::<usize>(), any::<usize>()).prop_map(|(structural, which, at)| Mutation::Remove {
            structural,
            which,
            at
        }),
        (any::<bool>(), any::<usize>(), any::<usize>()).prop_map(|(structural, which, at)| Mutation::Repeat {
            structural,
            which,
            at
        }),
    ]
}

/// What the mutation allows `parse_c1` to do.
#[derive(Debug, PartialEq)]
enum Allowed {
    /// Refuse it.
    ErrOnly,
    /// Accept it only with the valid input's structure.
    SameStructure,
}

fn apply(b: &Base, m: &Mutation) -> (Vec<u8>, Allowed) {
    let pick = |list: &[String], i: usize| list[i % list.len()].clone();
    let edit = |f: &dyn Fn(&mut Value)| {
        let mut v = b.value.clone();
        f(&mut v);
        serde_json::to_vec(&v).unwrap()
    };
    let array_edit = |structural: bool, which: usize, at: usize, repeat: bool| {
        let ptr = pick(if structural { &b.structure } else { &b.bytes }, which);
        edit(&|v| {
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
    match m {
        Mutation::Bytes(prefix, bytes) => ([prefix.as_bytes(), bytes].concat(), Allowed::ErrOnly),
        Mutation::Truncate(n) => (b.json[..n % b.json.len()].to_vec(), Allowed::ErrOnly),
        Mutation::Flip(flips) => {
            let mut j = b.json.clone();
            for (at, mask) in flips {
                let n = j.len();
                j[at % n] ^= mask;
            }
            (j, Allowed::SameStructure)
        }
        Mutation::Number { field, which, to } => {
            let ptr = pick(if *field { &b.fields } else { &b.numbers }, *which);
            (edit(&|v| *v.pointer_mut(&ptr).expect("a number") = Value::from(*to)), Allowed::SameStructure)
        }
        Mutation::Remove { structural, which, at } => (array_edit(*structural, *which, *at, false), Allowed::ErrOnly),
        Mutation::Repeat { structural, which, at } => (array_edit(*structural, *which, *at, true), Allowed::ErrOnly),
    }
}

fn wrap(inner: &[u8]) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "SectorNum": 7,
        "Phase1Out": base64::engine::general_purpose::STANDARD.encode(inner),
        "SectorSize": 2048,
    }))
    .unwrap()
}

#[test]
fn parse_c1_never_panics_and_accepts_only_the_valid_structure() {
    let b = base();
    let config = Config { cases: CASES, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    let (accepted, refused) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let result = runner.run(&(mutation(), any::<bool>()), |(m, wrapped)| {
        let (mut input, allowed) = apply(&b, &m);
        if wrapped && !matches!(m, Mutation::Bytes(..)) {
            input = wrap(&input);
        }
        let r = parse_c1(&input, usize::MAX);
        [&refused, &accepted][usize::from(r.is_ok())].fetch_add(1, Ordering::Relaxed);
        match r {
            Err(_) => Ok(()),
            Ok(_) if allowed == Allowed::ErrOnly => Err(TestCaseError::fail(format!("{m:?} was accepted"))),
            Ok(parsed) => {
                let got = skeleton(&serde_json::to_value(&parsed.output).unwrap());
                prop_assert!(got == b.skeleton, "{m:?} was accepted with another structure");
                Ok(())
            }
        }
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    // Neither half of the check is vacuous: changed numbers that stay in range keep
    // the structure and are accepted; the rest is refused.
    let (accepted, refused) = (accepted.into_inner(), refused.into_inner());
    assert!(accepted > 0 && refused > 0, "{accepted} accepted, {refused} refused");
}
