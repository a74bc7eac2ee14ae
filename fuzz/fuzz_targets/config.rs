//! `Config::parse` (the daemon's `config.toml`) on any UTF-8 text: an answer, never
//! a panic; a refusal names the file and says what is wrong.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Err(e) = cuzk::config::Config::parse(text, "config.toml") {
        assert!(e.path == "config.toml" && !e.msg.trim().is_empty(), "{e}");
    }
});
