//! `parse_c1` refuses a C1 output whose vanilla proofs do not have the registered
//! proof's shape, before any circuit is built from it: a shortened Merkle path or
//! column keeps the public-input count, so nothing later would notice until a
//! recording made from the malformed circuit was used by every later job.

mod common;

use cuzk_filecoin::{parse_c1, PorepError, RegisteredSealProof};
use serde_json::Value;

const PROOF: RegisteredSealProof = RegisteredSealProof::StackedDrg2KiBV1_1;

fn edit(j: &[u8], f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(j).unwrap();
    f(&mut v);
    serde_json::to_vec(&v).unwrap()
}

/// Challenge `challenge` of partition `partition` (2KiB proofs are under this variant).
fn challenge(v: &mut Value, partition: usize, challenge: usize) -> &mut Value {
    &mut v["vanilla_proofs"]["StackedDrg2KiBV1"][partition][challenge]
}

/// The levels of a (2KiB: single-tree) Merkle proof.
fn path(merkle_proof: &mut Value) -> &mut Vec<Value> {
    merkle_proof["data"]["Single"]["path"]["path"].as_array_mut().expect("a single-tree Merkle proof")
}

fn array(v: &mut Value) -> &mut Vec<Value> {
    v.as_array_mut().expect("an array")
}

fn refused(bytes: &[u8]) -> PorepError {
    match parse_c1(bytes, usize::MAX) {
        Ok(_) => panic!("parse_c1 accepted a malformed C1 output"),
        Err(e) => e,
    }
}

#[test]
fn valid_c1_outputs_of_every_2kib_kind_pass() {
    use RegisteredSealProof::*;
    for proof in
        [StackedDrg2KiBV1_1, StackedDrg2KiBV1_1_Feat_SyntheticPoRep, StackedDrg2KiBV1_2_Feat_NonInteractivePoRep]
    {
        let j = common::c1_json(proof, 1);
        let c1 = parse_c1(&j, usize::MAX).unwrap_or_else(|e| panic!("{proof:?}: {e}"));
        assert_eq!(c1.registered_proof(), proof);
    }
}

#[test]
fn a_missing_or_extra_challenge_proof_is_refused() {
    let j = common::c1_json(PROOF, 1);
    let e = refused(&edit(&j, |v| {
        array(&mut v["vanilla_proofs"]["StackedDrg2KiBV1"][0]).pop();
    }));
    assert!(matches!(e, PorepError::ChallengeCount { partition: 0, got: 1, want: 2, .. }), "{e}");
    assert!(e.to_string().contains("partition 0 has 1 challenge proofs; the proof type has 2"), "{e}");
    let e = refused(&edit(&j, |v| {
        let extra = challenge(v, 0, 0).clone();
        array(&mut v["vanilla_proofs"]["StackedDrg2KiBV1"][0]).push(extra);
    }));
    assert!(matches!(e, PorepError::ChallengeCount { partition: 0, got: 3, want: 2, .. }), "{e}");

    // Non-interactive PoRep: many partitions, each with its own count.
    let ni = RegisteredSealProof::StackedDrg2KiBV1_2_Feat_NonInteractivePoRep;
    let j = common::c1_json(ni, 1);
    let e = refused(&edit(&j, |v| {
        array(&mut v["vanilla_proofs"]["StackedDrg2KiBV1"][5]).remove(0);
    }));
    assert!(matches!(e, PorepError::ChallengeCount { partition: 5, .. }), "{e}");
}

#[test]
fn a_shortened_merkle_path_is_refused() {
    let j = common::c1_json(PROOF, 1);
    // comm_d: binary tree over 64 nodes, 6 levels.
    let e = refused(&edit(&j, |v| {
        path(&mut challenge(v, 0, 1)["comm_d_proofs"]).pop();
    }));
    let s = e.to_string();
    assert!(
        matches!(&e, PorepError::PathLength { partition: 0, challenge: 1, which, got: 5, want: 6 } if which.contains("comm_d")),
        "{e}"
    );
    assert!(s.contains("partition 0, challenge 1: comm_d proof (tree D) has a path of 5 levels; want 6"), "{s}");
    // comm_r_last: Poseidon, arity 8 over 64 nodes, 2 levels.
    let e = refused(&edit(&j, |v| {
        path(&mut challenge(v, 0, 0)["comm_r_last_proof"]).remove(0);
    }));
    assert!(
        matches!(&e, PorepError::PathLength { partition: 0, challenge: 0, which, got: 1, want: 2 } if which.contains("comm_r_last")),
        "{e}"
    );
    // comm_c, of a parent's column: the column proofs' own inclusion paths.
    let e = refused(&edit(&j, |v| {
        path(&mut challenge(v, 0, 1)["replica_column_proofs"]["drg_parents"][3]["inclusion_proof"]).pop();
    }));
    assert!(
        matches!(&e, PorepError::PathLength { challenge: 1, which, got: 1, want: 2, .. }
            if which == "comm_c proof of DRG parent 3's column (tree C)"),
        "{e}"
    );
    // A level with a sibling missing (arity 7 instead of 8), and a position past the arity.
    let e = refused(&edit(&j, |v| {
        array(&mut path(&mut challenge(v, 0, 0)["comm_r_last_proof"])[1]["hashes"]).pop();
    }));
    assert!(matches!(&e, PorepError::PathArity { level: 1, got: 6, want: 7, .. }), "{e}");
    assert!(e.to_string().contains("the tree's arity there is 8"), "{e}");
    let e = refused(&edit(&j, |v| {
        path(&mut challenge(v, 0, 0)["replica_column_proofs"]["c_x"]["inclusion_proof"])[0]["index"] = 8.into();
    }));
    assert!(
        matches!(&e, PorepError::PathIndex { level: 0, got: 8, want: 8, which, .. } if which.contains("challenged node's column")),
        "{e}"
    );
    // A comm_d level with two siblings: a binary tree has one.
    let e = refused(&edit(&j, |v| {
        let level = &mut path(&mut challenge(v, 0, 0)["comm_d_proofs"])[2];
        let h = level["hashes"][0].clone();
        array(&mut level["hashes"]).push(h);
    }));
    assert!(matches!(&e, PorepError::PathArity { level: 2, got: 2, want: 1, .. }), "{e}");
}

#[test]
fn a_dropped_column_layer_is_refused() {
    let j = common::c1_json(PROOF, 1);
    let e = refused(&edit(&j, |v| {
        array(&mut challenge(v, 0, 0)["replica_column_proofs"]["c_x"]["column"]["rows"]).pop();
    }));
    assert!(
        matches!(&e, PorepError::ColumnLayers { partition: 0, challenge: 0, which, got: 1, want: 2 }
            if which == "the challenged node's column"),
        "{e}"
    );
    let e = refused(&edit(&j, |v| {
        array(&mut challenge(v, 0, 1)["replica_column_proofs"]["exp_parents"][5]["column"]["rows"]).remove(0);
    }));
    assert!(
        matches!(&e, PorepError::ColumnLayers { challenge: 1, which, got: 1, want: 2, .. } if which == "expansion parent 5's column"),
        "{e}"
    );
    assert!(e.to_string().contains("expansion parent 5's column has 1 layers; want 2"), "{e}");
    // A labeling proof per layer.
    let e = refused(&edit(&j, |v| {
        array(&mut challenge(v, 0, 1)["labeling_proofs"]).pop();
    }));
    assert!(matches!(&e, PorepError::LabelingLayers { challenge: 1, got: 1, want: 2, .. }), "{e}");
}

#[test]
fn a_dropped_parent_is_refused() {
    let j = common::c1_json(PROOF, 1);
    let e = refused(&edit(&j, |v| {
        array(&mut challenge(v, 0, 1)["replica_column_proofs"]["drg_parents"]).pop();
    }));
    assert!(
        matches!(&e, PorepError::Parents { partition: 0, challenge: 1, which, got: 5, want: 6 } if which == "DRG parent columns"),
        "{e}"
    );
    let e = refused(&edit(&j, |v| {
        array(&mut challenge(v, 0, 0)["replica_column_proofs"]["exp_parents"]).remove(2);
    }));
    assert!(matches!(&e, PorepError::Parents { got: 7, want: 8, .. }), "{e}");
    assert!(e.to_string().contains("expansion parent columns: 7 parents; want 8"), "{e}");
    // Labeling and encoding proofs hash 37 parent labels (the 6 or 14 parents repeated).
    let e = refused(&edit(&j, |v| {
        array(&mut challenge(v, 0, 0)["labeling_proofs"][1]["parents"]).pop();
    }));
    assert!(
        matches!(&e, PorepError::Parents { which, got: 36, want: 37, .. } if which == "labeling proof of layer 2"),
        "{e}"
    );
    let e = refused(&edit(&j, |v| {
        array(&mut challenge(v, 0, 1)["encoding_proof"]["parents"]).pop();
    }));
    assert!(matches!(&e, PorepError::Parents { which, got: 36, .. } if which == "encoding proof"), "{e}");
}

/// The Lotus/Curio wrapper is checked the same way.
#[test]
fn the_wrapper_format_is_checked_too() {
    use base64::Engine as _;
    let j = common::c1_json(PROOF, 1);
    let bad = edit(&j, |v| {
        path(&mut challenge(v, 0, 0)["comm_r_last_proof"]).pop();
    });
    let wrapped = serde_json::to_vec(&serde_json::json!({
        "SectorNum": 1,
        "Phase1Out": base64::engine::general_purpose::STANDARD.encode(&bad),
        "SectorSize": 2048,
    }))
    .unwrap();
    let e = refused(&wrapped);
    assert!(matches!(&e, PorepError::PathLength { got: 1, want: 2, .. }), "{e}");
}

/// The wrapper's base64 is decoded as it is parsed: escaped JSON strings (`\/`, as
/// some JSON writers emit, or `\uXXXX`) still parse; a bad character, bad padding or bad JSON
/// inside each get their own error.
#[test]
fn the_wrapper_is_decoded_as_it_is_parsed() {
    use base64::Engine as _;
    let j = common::c1_json(PROOF, 1);
    let wrap = |b64: &str| format!(r#"{{"SectorNum":1,"Phase1Out":"{b64}","SectorSize":2048}}"#).into_bytes();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&j);
    let plain = parse_c1(&j, usize::MAX).unwrap();
    let wrapped = parse_c1(&wrap(&b64), usize::MAX).unwrap();
    assert_eq!(serde_json::to_vec(&wrapped.output).unwrap(), serde_json::to_vec(&plain.output).unwrap());
    // A string with an escape (`\/`, `\u0041`) cannot be borrowed from the input; it
    // is copied, then decoded the same way.
    let escaped = format!("\\u{:04x}{}", b64.as_bytes()[0], &b64[1..]).replace('/', "\\/");
    let escaped = parse_c1(&wrap(&escaped), usize::MAX).unwrap();
    assert_eq!(serde_json::to_vec(&escaped.output).unwrap(), serde_json::to_vec(&plain.output).unwrap());

    let mut bad_char = b64.clone();
    bad_char.replace_range(100..101, "*");
    assert!(matches!(refused(&wrap(&bad_char)), PorepError::Base64(_)));
    assert!(matches!(refused(&wrap(&b64[..b64.len() - 1])), PorepError::Base64(_) | PorepError::Json { .. }));
    let not_json = base64::engine::general_purpose::STANDARD.encode(b"{\"registered_proof\": 5");
    let e = refused(&wrap(&not_json));
    assert!(matches!(&e, PorepError::Json { what, .. } if what.contains("inside Phase1Out")), "{e}");
}

/// Vanilla proofs of another sector shape (a 32GiB variant in a 2KiB C1) are refused
/// by shape, not by a failed conversion later.
#[test]
fn vanilla_proofs_of_another_shape_are_refused() {
    let j = common::c1_json(PROOF, 1);
    let e = refused(&edit(&j, |v| {
        let p = v["vanilla_proofs"]["StackedDrg2KiBV1"].take();
        v["vanilla_proofs"] = serde_json::json!({ "StackedDrg32GiBV1": p });
    }));
    assert!(matches!(e, PorepError::WrongShape { proof: PROOF }), "{e}");
}
