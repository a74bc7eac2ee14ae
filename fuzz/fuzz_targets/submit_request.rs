//! A cuzk.v1 `SubmitProofRequest` decoded from any bytes (what the gRPC server's
//! prost decoding gets), then the receipt checks of its fields that need no engine:
//! the proof type numbers, the commitments, the vanilla proofs' JSON form, the C1
//! output. An answer, never a panic; a decoded message encodes back to itself.
#![no_main]

use cuzk::{filecoin as fil, proto::v1::SubmitProofRequest};
use libfuzzer_sys::fuzz_target;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let Ok(r) = SubmitProofRequest::decode(data) else { return };
    assert_eq!(SubmitProofRequest::decode(&r.encode_to_vec()[..]).unwrap(), r);
    let _ = (
        fil::proof_from_number(r.registered_proof),
        fil::post_from_number(r.registered_proof),
        fil::update_from_number(r.registered_proof),
    );
    for (name, b) in [("comm_r_old", &r.comm_r_old), ("comm_r_new", &r.comm_r_new), ("comm_d_new", &r.comm_d_new)] {
        if let Err(e) = fil::commitment(name, b) {
            assert!(e.starts_with(name), "{e}");
        }
    }
    if let Err(e) = fil::vanilla_json(&r.vanilla_proof) {
        assert!(!e.is_empty());
    }
    if let Err(e) = fil::parse_c1(&r.vanilla_proof, 64 << 20) {
        assert!(!e.to_string().is_empty());
    }
});
