//! `commitment` (raw 32 bytes, or a Filecoin commitment CID) and `vanilla_json`
//! (the JSON array of base64 vanilla proofs) on any bytes: an answer, never a
//! panic; what is accepted is the input's last 32 bytes; a refusal names the field.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match cuzk_filecoin::commitment("comm_r_new", data) {
        Ok(d) => assert!(data.len() >= 32 && d[..] == data[data.len() - 32..]),
        Err(e) => assert!(e.starts_with("comm_r_new is "), "{e}"),
    }
    if let Err(e) = cuzk_filecoin::vanilla_json(data) {
        assert!(!e.is_empty());
    }
});
