//! Fuzz target: `mesh::fuzzing::card` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mesh::fuzzing::card(data));
