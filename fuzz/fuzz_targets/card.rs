//! Fuzz target: `mesh_decide::fuzzing::card` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mesh_decide::fuzzing::card(data));
