//! Fuzzing the daemon's decoders of outside bytes with proptest: the config file
//! (`Config::parse`, from mutations of the shipped `config.toml`) and the cuzk.v1
//! request messages (prost decoding of `SubmitProofRequest` and `ProveRequest`,
//! then the checks a submission's fields get on receipt: the proof type numbers,
//! the commitments, the vanilla proofs' JSON form, the C1 output).
//!
//! No decoder may panic; every refusal is an error that names what was refused.
//! Mutations whose outcome is known are checked for it: a config line removed
//! leaves the defaults (the shipped file documents exactly them), a key repeated
//! or unknown is refused naming the key; a decoded message encodes back to itself.
//!
//! Deterministic (a fixed seed, no persisted failures) with fixed case counts, so a
//! CI run is reproducible.

use std::sync::atomic::{AtomicUsize, Ordering};

use cuzk::config::Config;
use proptest::{
    prelude::*,
    test_runner::{Config as RunConfig, RngAlgorithm, TestRng, TestRunner},
};

const CASES: u32 = 4096;

fn runner(cases: u32) -> TestRunner {
    let config = RunConfig { cases, failure_persistence: None, ..RunConfig::default() };
    TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha))
}

const SHIPPED: &str = include_str!("../config.toml");

#[derive(Clone, Copy, Debug, PartialEq)]
enum Line {
    /// `[section]`
    Header,
    /// `key = value`
    Key,
    /// A comment or a blank line.
    Other,
}

fn kind(line: &str) -> Line {
    let t = line.trim();
    if t.starts_with('[') {
        Line::Header
    } else if !t.starts_with('#') && t.contains('=') {
        Line::Key
    } else {
        Line::Other
    }
}

#[derive(Clone, Debug)]
enum Edit {
    Delete(usize),
    Duplicate(usize),
    /// The value of a `key = value` line (the next one from here) replaced.
    SetValue(usize, String),
    /// The name of a key or section (the next one from here) given a suffix.
    Rename(usize, String),
    /// A line inserted.
    Insert(usize, String),
    /// Bytes XORed (the text read back lossily as UTF-8).
    Flip(Vec<(usize, u8)>),
    /// The first `n` bytes (at a character boundary).
    Truncate(usize),
    /// Random text.
    Text(String),
}

fn value() -> impl Strategy<Value = String> {
    let sizes = prop::sample::select(vec!["", "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "kb", "G", " GiB"]);
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        (-2i64..70).prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| format!("{f:?}")),
        (any::<u64>(), sizes.clone()).prop_map(|(n, u)| format!("\"{n}{u}\"")),
        (0u64..100, sizes).prop_map(|(n, u)| format!("\"{n}{u}\"")),
        prop::sample::select(vec![
            "true",
            "false",
            "\"\"",
            "\"auto\"",
            "\"-4GiB\"",
            "\"1.5GiB\"",
            "[]",
            "[1, 2]",
            "[\"0\", \"x\"]",
            "{}",
            "{ a = 1 }",
            "-0",
            "inf",
            "nan",
            "1979-05-27",
            "0x7f",
            "\"0.0.0.0:0\"",
            "\"[::]:99999\"",
            "\"/\"",
            "\"777\"",
            "\"9999999999\"",
        ])
        .prop_map(str::to_string),
        "[ -~]{0,16}".prop_map(|s| format!("{s:?}")),
        "[ -~]{0,16}",
    ]
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        any::<usize>().prop_map(Edit::Delete),
        any::<usize>().prop_map(Edit::Duplicate),
        (any::<usize>(), value()).prop_map(|(i, v)| Edit::SetValue(i, v)),
        (any::<usize>(), "[a-z_]{1,4}").prop_map(|(i, s)| Edit::Rename(i, s)),
        (
            any::<usize>(),
            prop_oneof![
                prop::sample::select(vec![
                    "[",
                    "[[log]]",
                    "[log.x]",
                    "[ingest.priority.x]",
                    "x = {",
                    "a.b.c = 1",
                    "[daemon]",
                    "=",
                    "\"",
                    "log = 1",
                    "[engine]",
                ])
                .prop_map(str::to_string),
                "[ -~]{0,24}",
            ]
        )
            .prop_map(|(i, l)| Edit::Insert(i, l)),
        prop::collection::vec((any::<usize>(), 1u8..=255), 1..4).prop_map(Edit::Flip),
        any::<usize>().prop_map(Edit::Truncate),
        "\\PC{0,64}".prop_map(Edit::Text),
    ]
}

/// What `Config::parse` must answer.
#[derive(Debug, PartialEq)]
enum Want {
    /// The defaults (the shipped file's values).
    Default,
    /// A refusal that names this.
    ErrNaming(String),
    /// Anything but a panic.
    Any,
}

/// The next line at or after `i` (cyclically) of one of `kinds`.
fn next_of(lines: &[&str], i: usize, kinds: &[Line]) -> usize {
    (0..lines.len()).map(|k| (i + k) % lines.len()).find(|&k| kinds.contains(&kind(lines[k]))).unwrap()
}

fn apply(e: &Edit) -> (String, Want) {
    let lines: Vec<&str> = SHIPPED.lines().collect();
    let n = lines.len();
    let join = |l: Vec<String>| l.join("\n") + "\n";
    let owned = || lines.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    match e {
        Edit::Delete(i) => {
            let i = i % n;
            let mut l = owned();
            let removed = l.remove(i);
            // A section's keys fall into the section above without its header.
            let want = if kind(&removed) == Line::Header { Want::Any } else { Want::Default };
            (join(l), want)
        }
        Edit::Duplicate(i) => {
            let i = i % n;
            let mut l = owned();
            l.insert(i, lines[i].to_string());
            let want = match kind(lines[i]) {
                Line::Other => Want::Default,
                _ => Want::ErrNaming("duplicate".into()),
            };
            (join(l), want)
        }
        Edit::SetValue(i, v) => {
            let i = next_of(&lines, *i, &[Line::Key]);
            let mut l = owned();
            let key = lines[i].split('=').next().unwrap().trim();
            l[i] = format!("{key} = {v}");
            (join(l), Want::Any)
        }
        Edit::Rename(i, suffix) => {
            let i = next_of(&lines, *i, &[Line::Key, Line::Header]);
            let mut l = owned();
            let name = if kind(lines[i]) == Line::Key {
                let (key, rest) = lines[i].split_once('=').unwrap();
                let name = format!("{}{suffix}", key.trim());
                l[i] = format!("{name} ={rest}");
                name
            } else {
                let inner = lines[i].trim().trim_start_matches('[').trim_end_matches(']');
                let name = format!("{inner}{suffix}");
                l[i] = format!("[{name}]");
                name.rsplit('.').next().unwrap().to_string()
            };
            (join(l), Want::ErrNaming(name))
        }
        Edit::Insert(i, line) => {
            let mut l = owned();
            l.insert(i % (n + 1), line.clone());
            (join(l), Want::Any)
        }
        Edit::Flip(flips) => {
            let mut b = SHIPPED.as_bytes().to_vec();
            for (at, mask) in flips {
                let len = b.len();
                b[at % len] ^= mask;
            }
            (String::from_utf8_lossy(&b).into_owned(), Want::Any)
        }
        Edit::Truncate(k) => {
            let mut k = k % SHIPPED.len();
            while !SHIPPED.is_char_boundary(k) {
                k -= 1;
            }
            (SHIPPED[..k].to_string(), Want::Any)
        }
        Edit::Text(t) => (t.clone(), Want::Any),
    }
}

#[test]
fn config_parse_never_panics_and_names_what_it_refuses() {
    let default = Config::default();
    assert_eq!(Config::parse(SHIPPED, "config.toml").unwrap(), default);
    let (accepted, refused) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let result = runner(CASES).run(&edit(), |e| {
        let (text, want) = apply(&e);
        let r = Config::parse(&text, "config.toml");
        [&refused, &accepted][usize::from(r.is_ok())].fetch_add(1, Ordering::Relaxed);
        match (r, want) {
            (Ok(c), Want::Default) => prop_assert!(c == default, "{e:?} changed the config"),
            (Err(err), Want::Default) => prop_assert!(false, "{e:?} was refused: {err}"),
            (Ok(_), Want::ErrNaming(_)) => prop_assert!(false, "{e:?} was accepted"),
            (Err(err), want) => {
                let msg = err.to_string();
                prop_assert!(err.path == "config.toml" && !err.msg.trim().is_empty(), "{e:?}: {msg:?}");
                if let Want::ErrNaming(name) = want {
                    prop_assert!(msg.contains(&name), "{e:?}: {msg:?} does not name {name:?}");
                }
            }
            (Ok(_), Want::Any) => {}
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let (accepted, refused) = (accepted.into_inner(), refused.into_inner());
    assert!(accepted > 0 && refused > 0, "{accepted} accepted, {refused} refused");
}

#[cfg(feature = "daemon")]
mod requests {
    use super::*;
    use cuzk::{
        filecoin as fil,
        proto::v1::{ProofKind, ProveRequest, SubmitProofRequest},
    };
    use prost::Message;

    /// A request with every field set, as the base of the mutations.
    fn full() -> SubmitProofRequest {
        SubmitProofRequest {
            request_id: "req-1".into(),
            proof_kind: ProofKind::SnapDealsUpdate as i32,
            sector_size: 2048,
            registered_proof: 0,
            priority: 1,
            vanilla_proof: fil::vanilla_to_json(&[vec![1, 2, 3], vec![]]),
            vanilla_proofs: vec![vec![7; 40], vec![8; 3]],
            sector_number: 9,
            miner_id: 1000,
            randomness: vec![5; 32],
            partition_index: 1,
            comm_r_old: [&[0x01, 0x82, 0xe2, 0x03, 0x81, 0xe8, 0x02, 0x20][..], &[3; 32]].concat(),
            comm_r_new: vec![4; 32],
            comm_d_new: [&[0x01, 0x81, 0xe2, 0x03, 0x92, 0x20, 0x20][..], &[6; 32]].concat(),
        }
    }

    /// The receipt checks of a decoded request's fields that need no engine: each
    /// answers, and a refusal names the field.
    fn check_fields(r: &SubmitProofRequest) -> Result<(), TestCaseError> {
        let _ = ProofKind::try_from(r.proof_kind);
        let _ = (
            fil::proof_from_number(r.registered_proof),
            fil::post_from_number(r.registered_proof),
            fil::update_from_number(r.registered_proof),
        );
        for (name, b) in [("comm_r_old", &r.comm_r_old), ("comm_r_new", &r.comm_r_new), ("comm_d_new", &r.comm_d_new)] {
            if let Err(e) = fil::commitment(name, b) {
                prop_assert!(e.starts_with(&format!("{name} is ")), "{e:?}");
            }
        }
        if let Err(e) = fil::vanilla_json(&r.vanilla_proof) {
            prop_assert!(!e.is_empty());
        }
        if let Err(e) = fil::parse_c1(&r.vanilla_proof, 1 << 20) {
            prop_assert!(e.to_string().starts_with("C1 input "), "{e}");
        }
        Ok(())
    }

    #[derive(Clone, Debug)]
    enum Input {
        Bytes(Vec<u8>),
        Truncate(usize),
        Flip(Vec<(usize, u8)>),
        Append(Vec<u8>),
        /// As the `submit` field of a `ProveRequest`.
        Prove(Box<Input>),
    }

    fn input() -> impl Strategy<Value = Input> {
        let leaf = prop_oneof![
            prop::collection::vec(any::<u8>(), 0..256).prop_map(Input::Bytes),
            any::<usize>().prop_map(Input::Truncate),
            prop::collection::vec((any::<usize>(), 1u8..=255), 1..4).prop_map(Input::Flip),
            prop::collection::vec(any::<u8>(), 1..32).prop_map(Input::Append),
        ];
        prop_oneof![3 => leaf.clone(), 1 => leaf.prop_map(|i| Input::Prove(Box::new(i)))]
    }

    fn bytes(i: &Input, base: &[u8]) -> Vec<u8> {
        match i {
            Input::Bytes(b) => b.clone(),
            Input::Truncate(n) => base[..n % base.len()].to_vec(),
            Input::Flip(flips) => {
                let mut b = base.to_vec();
                for (at, mask) in flips {
                    let n = b.len();
                    b[at % n] ^= mask;
                }
                b
            }
            Input::Append(extra) => [base, extra].concat(),
            Input::Prove(inner) => {
                let submit = bytes(inner, base);
                // Field 1, length-delimited, then the (possibly broken) message.
                let mut b = vec![0x0a];
                prost::encoding::encode_varint(submit.len() as u64, &mut b);
                [b, submit].concat()
            }
        }
    }

    #[test]
    fn submit_requests_never_panic_and_decode_to_what_they_encode() {
        let base = full().encode_to_vec();
        assert_eq!(SubmitProofRequest::decode(&base[..]).unwrap(), full());
        check_fields(&full()).unwrap();
        let (decoded, refused) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let result = runner(CASES).run(&input(), |i| {
            let b = bytes(&i, &base);
            let r = match &i {
                Input::Prove(_) => ProveRequest::decode(&b[..]).map(|p| p.submit.unwrap_or_default()),
                _ => SubmitProofRequest::decode(&b[..]),
            };
            match r {
                Err(e) => {
                    refused.fetch_add(1, Ordering::Relaxed);
                    prop_assert!(!e.to_string().is_empty());
                }
                Ok(req) => {
                    decoded.fetch_add(1, Ordering::Relaxed);
                    // What the server decoded is what a client encoding it sends.
                    prop_assert_eq!(&SubmitProofRequest::decode(&req.encode_to_vec()[..]).unwrap(), &req);
                    check_fields(&req)?;
                }
            }
            Ok(())
        });
        if let Err(e) = result {
            panic!("{e}");
        }
        let (decoded, refused) = (decoded.into_inner(), refused.into_inner());
        assert!(decoded > 0 && refused > 0, "{decoded} decoded, {refused} refused");
    }
}
