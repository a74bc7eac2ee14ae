//! `parse_c1` on any bytes (a C1 output's JSON, or the Lotus/Curio wrapper around
//! it): an answer, never a panic; a refusal says what it refuses.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = cuzk_filecoin::parse_c1(data, 64 << 20) {
        assert!(!e.to_string().is_empty());
    }
});
